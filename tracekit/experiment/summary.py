"""The original runner's summary figures, computed from recorded experiment bundles.

Per run (docs/experiments.md, "Summary figures", with two measurement defects fixed):

- **latencies from the scheduled arrival time**: TTFT = first token - arrival, E2E = finish -
  arrival, where arrival is the trace's arrival time. The original measured from when a client
  worker thread started the request, which left out client-side queueing;
- **exact token counts**: TPOT = (E2E - TTFT) / (output tokens - 1) with the engine's output
  token count (the original counted whitespace-separated words); undefined for one token;
- throughput = finished requests / run duration, the run starting at time 0 (the original's
  ``epoch_start``) and ending with the last finish;
- percentiles as the original computed them: ``sorted(v)[max(0, int(n * p) - 1)]`` over the
  positive values of finished requests (:func:`original_percentile`);
- SLO attainment: share of finished requests with TTFT <= the target and, when a TPOT target is
  set, TPOT <= it (a one-token request passes the TPOT part, as its TPOT was 0 in the original);
- preemptions and tokens freed: every preemption (native, proactive, SRPT) and the computed
  tokens it discarded (the adapter's ``total_all_preemptions`` / ``total_all_tokens_freed``).

Per cell (strategy, rate): mean and 95% half-width ``t * s / sqrt(n)`` over the runs with the
original's t-table (:func:`original_t`: 12.706, 4.303, ... for n = 2..8, 1.96 beyond; n = 1 gives
a half-width of 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from tracekit.analysis.serving import check_slo_target
from tracekit.analysis.stats import t_critical_95

__all__ = [
    "METRICS",
    "ORIGINAL_T95",
    "SloSpec",
    "aggregate_runs",
    "ci95",
    "original_percentile",
    "original_t",
    "run_metrics",
]

#: The original analysis' two-sided 95% t values by number of runs: Student's t for 2 to 8 runs,
#: 1.96 otherwise (docs/experiments.md, "Summary figures").
ORIGINAL_T95: dict[int, float] = {n: t_critical_95(n - 1) for n in range(2, 9)}

#: The per-run figures that :func:`aggregate_runs` summarises, in report order.
METRICS: tuple[str, ...] = (
    "throughput_rps",
    "slo_attainment_pct",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "e2e_p50_ms",
    "e2e_p95_ms",
    "e2e_p99_ms",
    "normalized_latency_ms_per_token",
    "preemptions",
    "tokens_freed",
    "native_preemptions",
    "proactive_preemptions",
    "srpt_preemptions",
)


@dataclass(frozen=True, slots=True)
class SloSpec:
    """SLO targets in milliseconds; the paper's tables use TTFT <= 300 ms alone.

    Parameters
    ----------
    ttft_ms
        TTFT target.
    tpot_ms
        TPOT target, or None to check TTFT only (the original's ``tpot_target_ms = 0``).
    """

    ttft_ms: float = 300.0
    tpot_ms: float | None = None

    def __post_init__(self) -> None:
        # The command line refuses these already; library callers get the same one-line error.
        check_slo_target("ttft_ms", self.ttft_ms, example=300)
        if self.tpot_ms is not None:
            check_slo_target("tpot_ms", self.tpot_ms, example=100)

    def label(self) -> str:
        """``TTFT<=300ms`` or ``TTFT<=2000ms & TPOT<=100ms``."""
        text = f"TTFT<={self.ttft_ms:g}ms"
        return text if self.tpot_ms is None else f"{text} & TPOT<={self.tpot_ms:g}ms"


def original_t(n: int) -> float:
    """The original analysis' t value for ``n`` runs."""
    return ORIGINAL_T95.get(n, 1.96)


def original_percentile(column: str, p: float) -> pl.Expr:
    """``sorted(v)[max(0, int(n * p) - 1)]`` over the column's positive values (null if none).

    Examples
    --------
    >>> frame = pl.DataFrame({"v": [5.0, 1.0, 4.0, 2.0, 3.0, 0.0]})
    >>> frame.select(original_percentile("v", 0.5)).item()  # 5 positive values: int(2.5)-1 = 1
    2.0
    """
    values = pl.col(column).filter(pl.col(column) > 0).sort()
    index = ((values.len() * p).floor().cast(pl.Int64) - 1).clip(lower_bound=0)
    return values.slice(index, 1).first()


def run_metrics(
    requests: pl.LazyFrame,
    decisions: pl.LazyFrame,
    slo: SloSpec | None = None,
    *,
    sent: pl.LazyFrame | None = None,
) -> pl.DataFrame:
    """One row of summary figures per ``run_id`` (see the module docstring).

    Parameters
    ----------
    requests
        The ``requests`` table of one or more bundles.
    decisions
        Their ``decisions`` table.
    slo
        SLO targets (TTFT <= 300 ms by default).
    sent
        ``run_id, request_id, sent_s``: measure TTFT and E2E from when the emulated client sent
        each request instead of from its scheduled arrival. This reproduces the original
        runner's measurement (client-side queueing left out), for comparison only.

    Returns
    -------
    pl.DataFrame
        ``run_id``, ``requests``, ``finished``, ``duration_s`` and every name in
        :data:`METRICS`.
    """
    slo = slo or SloSpec()
    meets = pl.col("ttft_ms") <= slo.ttft_ms
    if slo.tpot_ms is not None:
        meets = meets & (pl.col("tpot_ms").is_null() | (pl.col("tpot_ms") <= slo.tpot_ms))
    finished = requests.filter(pl.col("status") == "finished")
    if sent is None:
        finished = finished.with_columns(pl.col("arrival_s").alias("_origin"))
    else:
        finished = finished.join(
            sent.select("run_id", "request_id", pl.col("sent_s").alias("_origin")),
            on=["run_id", "request_id"],
            how="left",
        ).with_columns(pl.col("_origin").fill_null(pl.col("arrival_s")))
    finished = finished.with_columns(
        ((pl.col("first_token_s") - pl.col("_origin")) * 1000).alias("ttft_ms"),
        ((pl.col("finish_s") - pl.col("_origin")) * 1000).alias("e2e_ms"),
        pl.when(pl.col("output_tokens") > 1)
        .then((pl.col("finish_s") - pl.col("first_token_s")) * 1000 / (pl.col("output_tokens") - 1))
        .alias("tpot_ms"),
    )
    percentiles = [
        original_percentile(f"{metric}_ms", p / 100).alias(f"{metric}_p{p}_ms")
        for metric in ("ttft", "tpot", "e2e")
        for p in (50, 95, 99)
    ]
    per_run = finished.group_by("run_id").agg(
        pl.len().alias("finished"),
        pl.col("finish_s").max().alias("duration_s"),
        *percentiles,
        (meets.mean() * 100).alias("slo_attainment_pct"),
        (pl.col("e2e_ms").mean() / pl.col("output_tokens").mean()).alias(
            "normalized_latency_ms_per_token"
        ),
    )
    totals = requests.group_by("run_id").agg(
        pl.len().alias("requests"),
        pl.col("num_preemptions").sum().alias("preemptions"),
        pl.col("recomputed_tokens").sum().alias("tokens_freed"),
    )
    reason = pl.col("decision_reason")
    kinds = decisions.group_by("run_id").agg(
        (pl.col("outcome") == "builtin").sum().alias("native_preemptions"),
        (reason == "proactive").sum().alias("proactive_preemptions"),
        (reason == "srpt").sum().alias("srpt_preemptions"),
    )
    frame = (
        totals.join(per_run, on="run_id", how="left")
        .join(kinds, on="run_id", how="left")
        .with_columns(
            pl.col("finished").fill_null(0),
            (pl.col("finished").fill_null(0) / pl.col("duration_s")).alias("throughput_rps"),
            *(
                pl.col(c).fill_null(0).cast(pl.Int64)
                for c in ("native_preemptions", "proactive_preemptions", "srpt_preemptions")
            ),
        )
        .collect()
    )
    return frame.select("run_id", "requests", "finished", "duration_s", *METRICS).sort("run_id")


def aggregate_runs(
    runs: pl.DataFrame,
    by: Sequence[str] = ("strategy", "rate"),
    metrics: Sequence[str] = METRICS,
) -> pl.DataFrame:
    """Mean and 95% half-width of each metric over the runs of each group.

    Parameters
    ----------
    runs
        One row per run with the ``by`` columns and the metrics.
    by
        Group columns (a cell).
    metrics
        Metric columns to summarise.

    Returns
    -------
    pl.DataFrame
        ``by``, ``num_runs``, then ``<metric>_mean`` and ``<metric>_ci95`` for each metric,
        sorted by ``by``.
    """
    n = pl.len()
    t = n.replace_strict(ORIGINAL_T95, default=1.96, return_dtype=pl.Float64)
    aggregations = [n.alias("num_runs")]
    for metric in metrics:
        value = pl.col(metric).cast(pl.Float64)
        half = (t * value.std(ddof=1) / n.cast(pl.Float64).sqrt()).fill_null(0.0).fill_nan(0.0)
        aggregations += [value.mean().alias(f"{metric}_mean"), half.alias(f"{metric}_ci95")]
    return runs.group_by(list(by), maintain_order=True).agg(aggregations).sort(list(by))


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of ``values`` by the original's formula (for checks and docs)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, original_t(n) * sd / math.sqrt(n)
