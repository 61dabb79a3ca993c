"""A calibrated model's residual spread, convolved with simulated latencies.

The step model and constant overheads give each request's expected latencies; a live request's
TTFT scatters around them (the client's and the API server's share of a shared CPU changes
request by request), so a constant overhead fits the mean TTFT and misses its percentiles: it
over-predicts the median and under-predicts the tail (docs/latency.md, "The spread"). A model
fitted to measured runs therefore keeps its **spread**, the TTFT residuals of the requests it
was fitted on (:class:`LatencySpread`), and :func:`spread_requests` gives the distribution of
simulated latencies with that scatter: every simulated request with every residual (their
convolution), centred so that the means stay the model's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.measured.metrics import latency_metrics, run_metrics

__all__ = ["LatencySpread", "simulated_metrics", "spread_requests"]


@dataclass(frozen=True, slots=True)
class LatencySpread:
    """The TTFT residuals of a calibrated model on the runs it was fitted on.

    Attributes
    ----------
    ttft_s
        Per measured request served on both sides, in the order of the fitted runs' requests:
        its measured TTFT minus its simulated TTFT (overheads included), seconds, less their
        mean. The scatter of the time before the first token around the model's: the client's
        and the API server's share of the CPU, request by request.

    Only the time before the first token is spread. A ratio of measured to simulated decode
    time, spread the same way, over-predicted the TPOT and E2E P99 by 27 to 85 %: a slow
    stretch of a shared machine slows every request decoding in it together, which the
    independent draw of the convolution does not know, and the ratio carries the schedule's
    own misfit (0.0 to 4.2 on one fitted run; docs/latency.md, "The spread").
    """

    ttft_s: tuple[float, ...]

    @classmethod
    def from_residuals(cls, ttft_residual_s: Sequence[float]) -> LatencySpread:
        """Centred residuals: each less their mean."""
        n = len(ttft_residual_s)
        mean = sum(ttft_residual_s) / n if n else 0.0
        return cls(tuple(r - mean for r in ttft_residual_s))

    @classmethod
    def from_dict(cls, doc: Any) -> LatencySpread | None:
        """From :meth:`as_dict`'s mapping; None for an empty one."""
        if not doc:
            return None
        return cls(tuple(map(float, doc["ttft_s"])))

    def as_dict(self) -> dict[str, list[float]]:
        """The residuals, ``{"ttft_s": [...]}``."""
        return {"ttft_s": list(self.ttft_s)}

    def __len__(self) -> int:
        return len(self.ttft_s)


def spread_requests(requests: pl.DataFrame, spread: LatencySpread) -> pl.DataFrame:
    """Every served simulated request with every residual of ``spread`` (their convolution).

    Row ``(i, j)``: request ``i`` with its TTFT plus residual ``j`` (at least 0) and every
    later token as much later (its E2E moves with it; its TPOT and gaps stay). The latency
    percentiles of the result are those of the simulated latencies with the measured scatter,
    the residuals drawn independently of the request; the means are the simulation's (the
    residuals are centred), up to the clip at 0. The schedule, and so the throughput, is the
    simulation's: compute it on ``requests``.

    Parameters
    ----------
    requests
        :attr:`SimulatedRun.requests` (``ok``, ``arrival_s``, ``output_tokens``, ``ttft_s``,
        ``e2e_s``, ``itl_s``).
    spread
        The model's residuals.
    """
    residuals = pl.DataFrame({"_r": list(spread.ttft_s)}, schema={"_r": pl.Float64})
    served = requests.filter(pl.col("ok")).select(
        "ok", "arrival_s", "output_tokens", "ttft_s", "e2e_s", "itl_s"
    )
    shift = pl.max_horizontal(pl.col("_r"), -pl.col("ttft_s"))
    return (
        served.join(residuals, how="cross")
        .with_columns(
            (pl.col("ttft_s") + shift).alias("ttft_s"), (pl.col("e2e_s") + shift).alias("e2e_s")
        )
        .drop("_r")
    )


def simulated_metrics(
    requests: pl.DataFrame, spread: LatencySpread | None = None
) -> dict[str, Any]:
    """:func:`~tracekit.measured.metrics.run_metrics` of a simulation's requests.

    With a ``spread``, the latency statistics are those of :func:`spread_requests`; the
    throughputs and counts stay the simulation's own.
    """
    metrics = run_metrics(requests, start="arrival_s")
    if spread and metrics["num_ok"]:
        metrics |= latency_metrics(spread_requests(requests, spread))
    return metrics
