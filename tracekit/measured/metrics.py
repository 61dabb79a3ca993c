"""The serving metrics of a measured or simulated run, with their definitions stated once.

Every metric is over the run's **successful** requests (a failed request has no latency), in
seconds except the throughputs:

- ``ttft``: time to first token, from the client sending the request to its first token
  (queueing in the server included);
- ``tpot``: time per output token **without the first token**, ``(e2e - ttft) / (output - 1)``,
  per request with at least two output tokens (vLLM bench's TPOT, AIPerf's inter-token latency,
  GuideLLM's ``inter_token_latency_ms``; AIConfigurator's TPOT is the same quantity of one
  decode step). GuideLLM's own ``time_per_output_token_ms`` is ``e2e / output``, the first token
  included: not this one;
- ``itl``: the gaps between consecutive output tokens, pooled over all requests (vLLM bench's
  ITL). A client that streams several tokens in one chunk records one gap per chunk (AIPerf's
  ``inter_chunk_latency``), and GuideLLM records none: then ``itl`` is missing;
- ``e2e``: end to end, from sending to the last token;
- ``output_throughput``: output tokens of the successful requests over the run's span, first
  send to last token (tokens/s); ``request_throughput``: successful requests over the same span.

Each latency has ``mean``, ``p50``, ``p90`` and ``p99`` (linear interpolation between order
statistics, as numpy's default percentile, which vLLM bench uses).
"""

from __future__ import annotations

from typing import Any

import polars as pl

__all__ = ["LATENCIES", "METRIC_NAMES", "STATS", "latency_metrics", "run_metrics"]

#: The latency metrics and the statistics of each.
LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
#: Every metric name :func:`run_metrics` returns, in report order.
METRIC_NAMES = (
    *(f"{m}_{s}" for m in LATENCIES for s in STATS),
    "output_throughput",
    "request_throughput",
)


def _stats(series: pl.Series, prefix: str) -> dict[str, float | None]:
    series = series.drop_nulls()
    if series.len() == 0:
        return {f"{prefix}_{s}": None for s in STATS}
    return {
        f"{prefix}_mean": float(series.mean()),  # type: ignore[arg-type]
        f"{prefix}_p50": float(series.quantile(0.5, "linear")),  # type: ignore[arg-type]
        f"{prefix}_p90": float(series.quantile(0.9, "linear")),  # type: ignore[arg-type]
        f"{prefix}_p99": float(series.quantile(0.99, "linear")),  # type: ignore[arg-type]
    }


def latency_metrics(frame: pl.DataFrame) -> dict[str, float | None]:
    """The latency statistics (``ttft_*``, ``tpot_*``, ``itl_*``, ``e2e_*``) of served rows.

    ``frame``: rows of successful requests (``ttft_s``, ``e2e_s``, ``output_tokens``,
    ``itl_s``), or any sample of their latencies (``tracekit.measured.spread.spread_requests``).
    """
    tpot = frame.filter(pl.col("output_tokens") > 1).select(
        ((pl.col("e2e_s") - pl.col("ttft_s")) / (pl.col("output_tokens") - 1)).alias("tpot")
    )
    itl = frame.select(pl.col("itl_s").explode()).to_series()
    return (
        _stats(frame["ttft_s"], "ttft")
        | _stats(tpot["tpot"], "tpot")
        | _stats(itl, "itl")
        | _stats(frame["e2e_s"], "e2e")
    )


def run_metrics(frame: pl.DataFrame, *, start: str = "start_s") -> dict[str, Any]:
    """The metrics of the module docstring for one run.

    Parameters
    ----------
    frame
        Per-request rows with ``ok``, ``ttft_s``, ``e2e_s``, ``output_tokens``, ``itl_s`` and a
        send-time column.
    start
        The send-time column (``start_s`` for a measured run, ``arrival_s`` for a simulation).
    """
    ok = frame.filter(pl.col("ok"))
    out: dict[str, Any] = latency_metrics(ok)
    if ok.height:
        first = float(frame[start].min())  # type: ignore[arg-type]
        last = float(ok.select((pl.col(start) + pl.col("e2e_s")).max()).item())
        span = last - first
        out["output_throughput"] = float(ok["output_tokens"].sum()) / span if span > 0 else None
        out["request_throughput"] = ok.height / span if span > 0 else None
    else:
        out["output_throughput"] = out["request_throughput"] = None
    out["num_ok"] = ok.height
    out["num_requests"] = frame.height
    return out
