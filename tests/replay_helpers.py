"""Small hand-written bundles for the open-mode replay tests, imported from this folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
from trace_helpers import base_manifest

from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyStats,
    builtin_victim_id,
)
from tracekit.recording.rows import candidate_rows, decision_row
from tracekit.trace.writer import BundleWriter


def cand(
    rid: str,
    computed: int,
    *,
    arrival: float = 0.0,
    priority: int = 0,
    prompt: int | None = None,
    output: int = 0,
    preemptions: int = 0,
    max_tokens: int = 64,
) -> PreemptionCandidate:
    """A candidate; the prompt defaults to the computed tokens."""
    return PreemptionCandidate(
        rid,
        priority,
        arrival,
        computed if prompt is None else prompt,
        output,
        computed,
        preemptions,
        max_tokens,
    )


def ctx(
    candidates: Sequence[PreemptionCandidate],
    requester: str = "",
    *,
    now: float = 1.0,
    kv: float = 0.99,
    policy: str = "fcfs",
) -> PreemptionContext:
    """A context; ``requester=""`` is recorded as a null requester."""
    return PreemptionContext(tuple(candidates), policy, requester, kv, now)  # type: ignore[arg-type]


def write_trace(
    out: Path,
    decisions: Sequence[PreemptionContext | tuple[PreemptionContext, str]],
    run_id: str = "run-a",
) -> Path:
    """A bundle of ``decisions``, each recorded as the built-in victim or the given victim."""
    stats = PreemptionPolicyStats()
    with BundleWriter(out, base_manifest(run_id)) as writer:
        for seq, item in enumerate(decisions):
            context, applied = item if isinstance(item, tuple) else (item, None)
            builtin = builtin_victim_id(context)
            writer.append(
                "decisions",
                decision_row(
                    run_id=run_id,
                    seq=seq,
                    step=seq,
                    context=context,
                    builtin_victim_id=builtin,
                    raw=None,
                    outcome="builtin",
                    applied_victim_id=applied or builtin,
                    decision_reason=None,
                    stats=stats,
                ),
            )
            for row in candidate_rows(run_id, seq, context.candidates):
                writer.append("candidates", row)
    return out


def read_rows(out: Path) -> pl.DataFrame:
    """The replay_decisions table."""
    return pl.read_parquet(out / "replay_decisions.parquet")


def column(rows: pl.DataFrame, strategy: str, name: str) -> list:
    """One strategy's values of a column, in seq order."""
    return rows.filter(pl.col("strategy") == strategy)[name].to_list()


# -- a three-decision trace whose agreements are worked out by hand ------------------------

# d0: the recorded victim is the FCFS tail c; largest-first takes b (300 tokens).
# d1: recorded b (the tail); largest-first takes a, the requester (400 tokens).
# d2: recorded z (the tail), also the largest.
HAND = [
    (ctx([cand("a", 100), cand("b", 300, arrival=1.0), cand("c", 200, arrival=2.0)], "c"), "c"),
    (ctx([cand("a", 400), cand("b", 50, arrival=1.0)], "a"), "b"),
    (ctx([cand("x", 10), cand("y", 20), cand("z", 30)], "y"), "z"),
]
