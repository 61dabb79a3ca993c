"""``tracekit inspect``: a one-screen summary of a bundle or dataset.

Per run: engine, host path, strategy, requests finished, decisions by outcome, preemptions per
request and KV pressure, and, where the trace records the prefix cache (version 2), its hits and
evictions and the recomputed tokens split into those the cache served and those truly recomputed
(docs/trace-format.md, "Prefix caching"). All figures are polars aggregations over the lazily
scanned tables. A bundle with a table that is gone or has unexpected columns is a one-line error,
not a summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit.trace.bundle import open_trace
from tracekit.trace.text import text_table
from tracekit.trace.validate import check_bundle

__all__ = ["CACHE_KEYS", "READS", "inspect_trace", "recompute_split", "render_inspection"]

#: The columns the summary reads (checked first: docs/trace-format.md, "Validation").
READS = {
    "decisions": ("run_id", "outcome"),
    "requests": (
        "run_id", "status", "num_preemptions", "recomputed_tokens", "num_cached_tokens",
        "resume_cached_tokens",
    ),
    "steps": (
        "run_id", "kv_blocks_used", "kv_blocks_total", "time_s", "duration_s",
        "cache_hit_tokens", "cached_blocks_evicted", "scheduled_prefill_tokens",
    ),
}  # fmt: skip

#: The prefix-cache figures of a run, left out where the trace does not record them (null).
CACHE_KEYS = (
    "cached_tokens_first_schedule",
    "recomputed_from_cache_tokens",
    "truly_recomputed_tokens",
    "cache_hit_tokens",
    "cached_blocks_evicted",
    "cache_hit_rate",
)


def _known_sum(column: str | pl.Expr) -> pl.Expr:
    """The sum, or null when any value is unknown (a partial sum would understate it)."""
    expr = pl.col(column) if isinstance(column, str) else column
    return pl.when(expr.is_null().any()).then(None).otherwise(expr.sum())


#: Recomputed tokens the prefix cache served on resume (at most those thrown away).
_FROM_CACHE = (
    pl.when(pl.col("resume_cached_tokens").is_not_null())
    .then(pl.min_horizontal("resume_cached_tokens", "recomputed_tokens"))
    .otherwise(None)
)


def recompute_split(requests: pl.LazyFrame) -> pl.LazyFrame:
    """Per run: recomputed tokens, those the prefix cache served, and those truly recomputed.

    ``requests`` is the (v2-shaped) requests table of one or more runs. The split is null for a
    run whose requests do not record their cache hits (version 1, live recorders).
    """
    return requests.group_by("run_id", maintain_order=True).agg(
        pl.col("recomputed_tokens").sum().alias("recomputed_tokens"),
        _known_sum(_FROM_CACHE).alias("recomputed_from_cache_tokens"),
        _known_sum(pl.col("recomputed_tokens") - _FROM_CACHE).alias("truly_recomputed_tokens"),
    )


def inspect_trace(path: str | Path) -> list[dict[str, Any]]:
    """Summarise every run at or below ``path``; one dictionary per run, in dataset order.

    Raises ``TraceSchemaError`` if a bundle lacks a table it should hold, a table's columns
    differ from the schema, its rows from the manifest's count, or a value it reads breaks a
    row rule (NaN, negative, beyond any run: :mod:`tracekit.trace.values`).
    """
    dataset = open_trace(path)
    for bundle in dataset:
        check_bundle(bundle, READS)
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
            # Cancelled by the client, and refused on arrival (prompt too long).
            (pl.col("status") == "aborted").sum().alias("aborted"),
            (pl.col("status") == "rejected").sum().alias("rejected"),
            pl.col("num_preemptions").sum().alias("preemptions"),
            pl.col("num_preemptions").max().alias("max_preemptions_per_request"),
            pl.col("num_preemptions")
            .quantile(0.95, interpolation="higher")
            .alias("p95_preemptions_per_request"),
            (pl.col("num_preemptions") > 0).sum().alias("requests_preempted"),
            pl.col("recomputed_tokens").sum().alias("recomputed_tokens"),
            # Null only for a request never scheduled: known when the run records resumes.
            pl.when(pl.col("resume_cached_tokens").is_null().any())
            .then(None)
            .otherwise(pl.col("num_cached_tokens").sum())
            .alias("cached_tokens_first_schedule"),
            _known_sum(_FROM_CACHE).alias("recomputed_from_cache_tokens"),
            _known_sum(pl.col("recomputed_tokens") - _FROM_CACHE).alias("truly_recomputed_tokens"),
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
            _known_sum("cache_hit_tokens").alias("cache_hit_tokens"),
            _known_sum("cached_blocks_evicted").alias("cached_blocks_evicted"),
            # Share of the prefill (and recompute) tokens the steps needed that the cache served.
            (
                _known_sum("cache_hit_tokens")
                / (_known_sum("cache_hit_tokens") + pl.col("scheduled_prefill_tokens").sum())
            ).alias("cache_hit_rate"),
        )
        .collect()
    )
    copies: dict[Path, list[str]] = {}
    for copy, kept in dataset.copies:
        copies.setdefault(kept, []).append(str(copy))
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
        if bundle.path in copies:
            # The same run recorded again elsewhere in the folder (qualify's diff/typed).
            summary["copies"] = copies[bundle.path]
        for frame in (requests, steps):
            row = frame.filter(pl.col("run_id") == run)
            if row.height:
                summary.update(
                    {
                        k: v
                        for k, v in row.row(0, named=True).items()
                        if k != "run_id" and not (k in CACHE_KEYS and v is None)
                    }
                )
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
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def render_inspection(summaries: list[dict[str, Any]]) -> str:
    """Render :func:`inspect_trace` results as aligned text, one block per run."""
    blocks = []
    for summary in summaries:
        rows = [(key, _fmt(value)) for key, value in summary.items()]
        blocks.append("\n".join(line.rstrip() for line in text_table(rows)))
    return "\n\n".join(blocks)
