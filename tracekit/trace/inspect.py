"""``tracekit inspect``: a one-screen summary of a bundle or dataset.

Per run: engine, host path, strategy, requests finished, decisions by outcome, preemptions per
request and KV pressure. All figures are polars aggregations over the lazily scanned tables. A
bundle with a table that is gone or has unexpected columns is a one-line error, not a summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit.trace.bundle import open_trace
from tracekit.trace.text import text_table
from tracekit.trace.validate import check_readable

__all__ = ["inspect_trace", "render_inspection"]


def inspect_trace(path: str | Path) -> list[dict[str, Any]]:
    """Summarise every run at or below ``path``; one dictionary per run, in dataset order.

    Raises ``TraceSchemaError`` if a bundle lacks a table it should hold or a table's columns
    differ from the schema.
    """
    dataset = open_trace(path)
    for bundle in dataset:
        check_readable(bundle)
    outcomes = (
        dataset.scan("decisions")
        .group_by("run_id", "outcome")
        .len()
        .collect()
        .pivot(on="outcome", index="run_id", values="len")
    )
    requests = (
        dataset.scan("requests")
        .group_by("run_id")
        .agg(
            pl.len().alias("requests"),
            (pl.col("status") == "finished").sum().alias("finished"),
            # Cancelled by the client (issue 14), and refused on arrival (prompt too long).
            (pl.col("status") == "aborted").sum().alias("aborted"),
            (pl.col("status") == "rejected").sum().alias("rejected"),
            pl.col("num_preemptions").sum().alias("preemptions"),
            pl.col("num_preemptions").max().alias("max_preemptions_per_request"),
            pl.col("num_preemptions")
            .quantile(0.95, interpolation="higher")
            .alias("p95_preemptions_per_request"),
            (pl.col("num_preemptions") > 0).sum().alias("requests_preempted"),
            pl.col("recomputed_tokens").sum().alias("recomputed_tokens"),
        )
        .collect()
    )
    steps = (
        dataset.scan("steps")
        .with_columns((pl.col("kv_blocks_used") / pl.col("kv_blocks_total")).alias("kv"))
        .group_by("run_id")
        .agg(
            pl.len().alias("steps"),
            pl.col("kv").mean().alias("mean_kv_usage"),
            pl.col("kv").max().alias("max_kv_usage"),
            (pl.col("kv") >= 0.9).mean().alias("share_of_steps_kv_at_least_0_9"),
            (pl.col("time_s") + pl.col("duration_s")).max().alias("duration_s"),
        )
        .collect()
    )
    summaries = []
    for bundle in dataset:
        run = bundle.run_id
        summary: dict[str, Any] = {
            "run_id": run,
            "path": str(bundle.path),
            "complete": bundle.complete,
            "engine": bundle.manifest.get("engine"),
            "host_path": bundle.manifest.get("host_path"),
            "strategy": bundle.manifest.get("strategy"),
            "scheduling_policy": bundle.manifest.get("scheduling_policy"),
        }
        for frame in (requests, steps):
            row = frame.filter(pl.col("run_id") == run)
            if row.height:
                summary.update({k: v for k, v in row.row(0, named=True).items() if k != "run_id"})
        row = outcomes.filter(pl.col("run_id") == run) if outcomes.height else outcomes
        counts = row.row(0, named=True) if row.height else {}
        summary["decisions"] = {k: int(v) for k, v in counts.items() if k != "run_id" and v}
        summary["num_decisions"] = sum(summary["decisions"].values())
        summaries.append(summary)
    return summaries


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "none"
    return str(value)


def render_inspection(summaries: list[dict[str, Any]]) -> str:
    """Render :func:`inspect_trace` results as aligned text, one block per run."""
    blocks = []
    for summary in summaries:
        rows = [(key, _fmt(value)) for key, value in summary.items()]
        blocks.append("\n".join(line.rstrip() for line in text_table(rows)))
    return "\n\n".join(blocks)
