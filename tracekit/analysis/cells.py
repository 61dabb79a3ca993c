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
from tracekit.trace.bundle import TraceDataset, open_trace

__all__ = [
    "CellRun",
    "cells_frame",
    "differing_decisions",
    "efficiency_counters",
    "open_runs",
    "policy_counters",
    "request_outcomes",
]


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


def efficiency_counters(requests: pl.LazyFrame, steps: pl.LazyFrame) -> pl.LazyFrame:
    """Per run: the tokens computed, those truly recomputed, and the recompute tax.

    ``computed_tokens`` is every token the engine scheduled (prefill, recompute and decode: the
    steps' ``scheduled_prefill_tokens + scheduled_decode_tokens``); prefix-cache hits are not
    computed. Of a request's ``recomputed_tokens`` (KV its preemptions threw away),
    ``min(resume_cached_tokens, recomputed_tokens)`` came back from the cache for free
    (docs/trace-format.md, "Prefix caching"); the rest, ``truly_recomputed_tokens``, was
    computed again. ``recompute_tax = truly_recomputed_tokens / computed_tokens`` (the
    victim-policy RFC's recompute tax). A trace that does not record cache hits (version 1)
    counts every recomputed token as truly recomputed.
    """
    cached = pl.col("resume_cached_tokens").fill_null(0)
    truly = requests.group_by("run_id").agg(
        (pl.col("recomputed_tokens") - pl.min_horizontal(cached, "recomputed_tokens"))
        .sum()
        .alias("truly_recomputed_tokens")
    )
    computed = steps.group_by("run_id").agg(
        (pl.col("scheduled_prefill_tokens") + pl.col("scheduled_decode_tokens"))
        .sum()
        .alias("computed_tokens")
    )
    return truly.join(computed, on="run_id", how="left").with_columns(
        pl.when(pl.col("computed_tokens") > 0)
        .then(pl.col("truly_recomputed_tokens") / pl.col("computed_tokens"))
        .otherwise(0.0)
        .alias("recompute_tax")
    )


_COUNTER_DEFAULTS = {
    "decisions": 0, "calls": 0, "selections": 0, "abstentions": 0, "failures": 0,
    "invalid_selections": 0, "liveness_abstentions": 0, "cascade_abstentions": 0,
    "gate_fallbacks": 0,
}  # fmt: skip


def open_runs(root: Path, bundles: Sequence[Path]) -> TraceDataset:
    """The bundles of several runs as one dataset, so that each table is one scan of all files.

    One multi-file scan reads hundreds of bundles with polars' bounded parallel reader, where
    a concatenation of one scan per bundle would start a reader (and threads) per file.
    """
    opened = tuple(b for path in bundles for b in open_trace(path).bundles)
    return TraceDataset(Path(root), opened)


def request_outcomes(requests: pl.LazyFrame) -> pl.LazyFrame:
    """Per run: requests ``aborted`` by their client and ``rejected`` by the engine on arrival."""
    return requests.group_by("run_id").agg(
        (pl.col("status") == "aborted").sum().cast(pl.Int64).alias("aborted"),
        (pl.col("status") == "rejected").sum().cast(pl.Int64).alias("rejected"),
    )


def differing_decisions(decisions: pl.LazyFrame) -> pl.LazyFrame:
    """Per run: the decisions whose applied victim is not the built-in rule's.

    0 in every run of a cell means the strategy decided exactly as the built-in rule (the
    verdict then says "identical to built-in").
    """
    return decisions.group_by("run_id").agg(
        (pl.col("applied_victim_id") != pl.col("builtin_victim_id"))
        .sum()
        .cast(pl.Int64)
        .alias("differing_decisions")
    )


def cells_frame(
    root: Path, runs: Sequence[CellRun], cell: str, slo: SloTargets | None = None
) -> pl.DataFrame:
    """One row per run with its serving metrics and policy counters, sorted by repeat, strategy.

    ``bundle`` is stored relative to ``root``; ``host_path`` comes from each run's manifest.
    Besides :func:`~tracekit.analysis.serving.serving_metrics` and :func:`policy_counters`, a
    row has :func:`efficiency_counters`, :func:`request_outcomes` and
    :func:`differing_decisions`. Every table is read once for all runs (:func:`open_runs`).
    """
    dataset = open_runs(root, [run.bundle for run in runs])
    requests = dataset.scan("requests")
    decisions = dataset.scan("decisions")
    metrics = serving_metrics(requests, slo)
    counters = policy_counters(decisions).collect()
    # Older bundles read with the columns their version lacks as nulls: no cache hits.
    efficiency = efficiency_counters(requests, dataset.scan("steps")).collect()
    outcomes = request_outcomes(requests).collect()
    differing = differing_decisions(decisions).collect()
    meta = pl.DataFrame(
        {
            "repeat": [run.repeat for run in runs],
            "strategy": [run.strategy for run in runs],
            "host_path": [str(b.manifest["host_path"]) for b in dataset.bundles],
            "run_id": [b.run_id for b in dataset.bundles],
            "bundle": [str(run.bundle.relative_to(root)) for run in runs],
            "cell": [cell] * len(runs),
            "seed": [run.seed for run in runs],
        },
        schema={
            "repeat": pl.Int32, "strategy": pl.String, "host_path": pl.String,
            "run_id": pl.String, "bundle": pl.String, "cell": pl.String, "seed": pl.Int32,
        },
    )  # fmt: skip
    frame = meta
    for part in (metrics, counters, efficiency, outcomes, differing):
        frame = frame.join(part, on="run_id", how="left", maintain_order="left")
    frame = frame.with_columns(
        pl.col(name).fill_null(value)
        for name, value in {**_COUNTER_DEFAULTS, "differing_decisions": 0}.items()
    )
    return frame.sort("repeat", "strategy")
