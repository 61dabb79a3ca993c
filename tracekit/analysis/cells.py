"""``cells.parquet``: one row per closed-loop run with serving metrics and policy counters.

Qualification and sweeps both summarise their runs this way, and the report reads it. A *cell*
is one (workload, rate, configuration) point; its rows are the repeats of every strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.analysis.serving import SloTargets, serving_metrics
from tracekit.trace.bundle import open_trace

__all__ = ["CellRun", "cells_frame", "policy_counters"]


@dataclass(frozen=True, slots=True)
class CellRun:
    """One closed-loop run to summarise: its repeat, seed, strategy name and bundle folder."""

    repeat: int
    seed: int
    strategy: str
    bundle: Path


def policy_counters(decisions: pl.LazyFrame) -> pl.LazyFrame:
    """Policy counters of each run from its ``decisions`` table."""
    reason = pl.col("decision_reason")
    return decisions.group_by("run_id").agg(
        pl.len().alias("decisions"),
        pl.col("calls").max().alias("calls"),
        pl.col("selections").max().alias("selections"),
        pl.col("abstentions").max().alias("abstentions"),
        pl.col("failures").max().alias("failures"),
        pl.col("invalid_selections").max().alias("invalid_selections"),
        pl.col("policy_enabled").sort_by("seq").last().alias("policy_enabled"),
        (reason == "liveness_abstain").sum().alias("liveness_abstentions"),
        (reason == "cascade_abstain").sum().alias("cascade_abstentions"),
        (reason == "gate_fallback").sum().alias("gate_fallbacks"),
    )


_COUNTER_DEFAULTS = {
    "decisions": 0, "calls": 0, "selections": 0, "abstentions": 0, "failures": 0,
    "invalid_selections": 0, "liveness_abstentions": 0, "cascade_abstentions": 0,
    "gate_fallbacks": 0,
}  # fmt: skip


def cells_frame(
    root: Path, runs: Sequence[CellRun], cell: str, slo: SloTargets | None = None
) -> pl.DataFrame:
    """One row per run with its serving metrics and policy counters, sorted by repeat, strategy.

    ``bundle`` is stored relative to ``root``; ``host_path`` comes from each run's manifest.
    """
    frames = []
    for run in runs:
        dataset = open_trace(run.bundle)
        metrics = serving_metrics(dataset.scan("requests"), slo)
        counters = policy_counters(dataset.scan("decisions")).collect()
        row = metrics.join(counters, on="run_id", how="left").with_columns(
            pl.lit(run.repeat).alias("repeat"),
            pl.lit(run.strategy).alias("strategy"),
            pl.lit(str(dataset.bundles[0].manifest["host_path"])).alias("host_path"),
            pl.lit(str(run.bundle.relative_to(root))).alias("bundle"),
            pl.lit(cell).alias("cell"),
            pl.lit(run.seed).alias("seed"),
        )
        frames.append(row)
    frame = pl.concat(frames, how="vertical_relaxed").with_columns(
        pl.col(name).fill_null(value) for name, value in _COUNTER_DEFAULTS.items()
    )
    leading = ["repeat", "strategy", "host_path", "run_id", "bundle", "cell", "seed"]
    return frame.select(*leading, pl.exclude(leading)).sort("repeat", "strategy")
