"""The frames of the report's load section, from a results folder with a load plan.

* :func:`goodput_frame` — per load cell and strategy: offered rate, achieved rate and SLO
  attainment, means over the repeats (the goodput curves);
* :func:`queue_depth_frame` — the built-in runs' waiting queue over time, repeat 0 of every load
  cell, reduced to at most ``points`` time bins per cell (the largest depth in each bin).

Both are empty for a folder without a load plan (no ``load`` column in ``cells.parquet``).
"""

from __future__ import annotations

import polars as pl

from tracekit.qualify.frames import run_table
from tracekit.qualify.results import BASELINE, Results

__all__ = ["goodput_frame", "queue_depth_frame"]

_GOODPUT_SCHEMA = {
    "load": pl.String,
    "strategy": pl.String,
    "offered_rps": pl.Float64,
    "achieved_rps": pl.Float64,
    "slo_attainment": pl.Float64,
    "order": pl.Int64,
}
_QUEUE_SCHEMA = {"load": pl.String, "time_s": pl.Float64, "num_waiting": pl.Int64}


def goodput_frame(results: Results) -> pl.DataFrame:
    """``load, strategy, offered_rps, achieved_rps, slo_attainment, order`` (means over repeats).

    ``order`` ranks the loads by offered rate, the closed-loop cell (no offered rate) last.
    """
    cells = results.cells
    if "load" not in cells.columns or "slo_attainment" not in cells.columns:
        return pl.DataFrame(schema=_GOODPUT_SCHEMA)
    frame = cells.group_by("load", "strategy").agg(
        pl.col("offered_rps").first(),
        pl.col("throughput_rps").mean().alias("achieved_rps"),
        pl.col("slo_attainment").mean(),
    )
    loads = (
        frame.select("load", "offered_rps")
        .unique("load")
        .sort(pl.col("offered_rps").fill_null(float("inf")), "load")
        .with_row_index("order")
        .select("load", pl.col("order").cast(pl.Int64))
    )
    return frame.join(loads, on="load").sort("order", "strategy").select(list(_GOODPUT_SCHEMA))


def queue_depth_frame(results: Results, points: int = 150) -> pl.DataFrame:
    """``load, time_s, num_waiting``: the built-in rule's waiting queue, repeat 0 of each load."""
    cells = results.cells
    if "load" not in cells.columns:
        return pl.DataFrame(schema=_QUEUE_SCHEMA)
    runs = cells.filter((pl.col("strategy") == BASELINE) & (pl.col("repeat") == 0))
    if runs.height == 0:
        return pl.DataFrame(schema=_QUEUE_SCHEMA)
    loads = dict(zip(runs["bundle"], runs["load"], strict=True))
    steps = pl.concat(
        [
            run_table(results, "steps", runs.filter(pl.col("bundle") == bundle))
            .select("time_s", "num_waiting")
            .with_columns(pl.lit(load).alias("load"))
            for bundle, load in loads.items()
        ],
        how="vertical_relaxed",
    )
    span = pl.col("time_s").max().over("load")
    binned = steps.with_columns(
        (pl.col("time_s") / span * points).floor().clip(0, points - 1).alias("bin"), span=span
    )
    return (
        binned.group_by("load", "bin")
        .agg(
            (pl.col("bin").first() * pl.col("span").first() / points).alias("time_s"),
            pl.col("num_waiting").max().cast(pl.Int64),
        )
        .sort("load", "time_s")
        .select(list(_QUEUE_SCHEMA))
        .collect()
    )
