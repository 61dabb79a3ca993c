"""Turning one victim decision into ``decisions`` and ``candidates`` rows.

Shared by every recorder so that the row layout follows ``schemas/trace-v1.json`` in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tracekit.hosts.preemption_policy import PolicyOutcome, PreemptionPolicyStats

__all__ = ["candidate_rows", "decision_row", "raw_result_fields"]


def raw_result_fields(raw: object, called: bool) -> tuple[str | None, str]:
    """``(raw_result, raw_result_type)`` for what a policy returned."""
    if not called:
        return None, "not-called"
    if raw is None:
        return None, "none"
    if isinstance(raw, str):
        return raw, "str"
    return repr(raw), "other"


def decision_row(
    *,
    run_id: str,
    seq: int,
    step: int,
    context: Any,
    builtin_victim_id: str,
    raw: object,
    outcome: PolicyOutcome,
    applied_victim_id: str,
    decision_reason: str | None,
    stats: PreemptionPolicyStats,
) -> tuple[Any, ...]:
    """One ``decisions`` row in schema column order."""
    raw_result, raw_type = raw_result_fields(raw, outcome not in ("disabled", "builtin"))
    requester = getattr(context, "requesting_request_id", None) or None
    return (
        run_id,
        seq,
        step,
        float(context.now),
        requester,
        float(context.kv_cache_usage),
        str(context.scheduling_policy),
        len(context.candidates),
        builtin_victim_id,
        raw_result,
        raw_type,
        outcome,
        applied_victim_id,
        decision_reason,
        stats.calls,
        stats.selections,
        stats.abstentions,
        stats.failures,
        stats.invalid_selections,
        stats.enabled,
    )


def candidate_rows(run_id: str, seq: int, candidates: Any) -> Iterator[tuple[Any, ...]]:
    """The ``candidates`` rows of one decision, in host order."""
    for position, c in enumerate(candidates):
        yield (
            run_id,
            seq,
            position,
            c.request_id,
            int(c.priority),
            float(c.arrival_time),
            int(c.num_prompt_tokens),
            int(c.num_output_tokens),
            int(c.num_computed_tokens),
            int(c.num_preemptions),
            int(c.max_tokens),
            getattr(c, "sglang_output_len", None),
            getattr(c, "sglang_prompt_len", None),
        )
