"""Serving metrics of recorded runs, as polars expressions over the ``requests`` table.

Definitions (times in seconds, per run):

- makespan: last finish minus first arrival;
- throughput: finished requests per second of makespan; output throughput: output tokens per
  second of makespan;
- TTFT: first token time minus arrival (queueing included: the engine sees the request at its
  arrival, unlike the original client-side measurement, docs/experiments.md, "Summary figures");
- TPOT: (finish - first token) / (output tokens - 1), for requests with at least two tokens;
- end-to-end latency: finish minus arrival;
- SLO attainment: share of finished requests with TTFT <= the TTFT target and (when a TPOT target
  is set) TPOT <= the TPOT target;
- goodput: finished requests that met the SLO, per second of makespan;
- percentiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.defaults import DEFAULT_TPOT_S, DEFAULT_TTFT_S, check_slo_target

__all__ = ["PERCENTILES", "SloTargets", "check_slo_target", "serving_metrics"]

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class SloTargets:
    """Latency targets of SLO attainment (seconds); ``tpot_s=None`` checks TTFT only."""

    ttft_s: float = DEFAULT_TTFT_S
    tpot_s: float | None = DEFAULT_TPOT_S

    def __post_init__(self) -> None:
        check_slo_target("the TTFT target (slo ttft_s)", self.ttft_s, example=2.0)
        if self.tpot_s is not None:
            check_slo_target("the TPOT target (slo tpot_s)", self.tpot_s, example=0.1)


def _latencies(requests: pl.LazyFrame) -> pl.LazyFrame:
    return requests.filter(pl.col("status") == "finished").with_columns(
        (pl.col("first_token_s") - pl.col("arrival_s")).alias("ttft_s"),
        (pl.col("finish_s") - pl.col("arrival_s")).alias("e2e_s"),
        pl.when(pl.col("output_tokens") > 1)
        .then((pl.col("finish_s") - pl.col("first_token_s")) / (pl.col("output_tokens") - 1))
        .alias("tpot_s"),
    )


def serving_metrics(requests: pl.LazyFrame, slo: SloTargets | None = None) -> pl.DataFrame:
    """One row of serving metrics per ``run_id`` of a ``requests`` table."""
    slo = slo or SloTargets()
    meets = pl.col("ttft_s") <= slo.ttft_s
    if slo.tpot_s is not None:
        meets = meets & (pl.col("tpot_s").is_null() | (pl.col("tpot_s") <= slo.tpot_s))
    finished = _latencies(requests)
    makespan = pl.col("finish_s").max() - pl.col("arrival_s").min()
    percentiles = [
        pl.col(metric).quantile(p / 100, interpolation="linear").alias(f"{metric[:-2]}_p{p}_s")
        for metric in ("ttft_s", "tpot_s", "e2e_s")
        for p in PERCENTILES
    ]
    per_run = finished.group_by("run_id").agg(
        pl.len().alias("finished"),
        makespan.alias("makespan_s"),
        (pl.len() / makespan).alias("throughput_rps"),
        (pl.col("output_tokens").sum() / makespan).alias("output_tokens_per_s"),
        pl.col("ttft_s").mean().alias("ttft_mean_s"),
        pl.col("e2e_s").mean().alias("e2e_mean_s"),
        *percentiles,
        meets.mean().alias("slo_attainment"),
        (meets.sum() / makespan).alias("goodput_rps"),
    )
    totals = requests.group_by("run_id").agg(
        pl.len().alias("requests"),
        pl.col("num_preemptions").sum().alias("preemptions"),
        (pl.col("num_preemptions") > 0).sum().alias("requests_preempted"),
        pl.col("num_preemptions").max().alias("max_preemptions_per_request"),
        pl.col("recomputed_tokens").sum().alias("recomputed_tokens"),
    )
    return (
        totals.join(per_run, on="run_id", how="left")
        .with_columns((pl.col("finished").fill_null(0) == pl.col("requests")).alias("all_finished"))
        .sort("run_id")
        .collect()
    )
