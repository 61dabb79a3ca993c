"""Turning engine records and victim decisions into the typed rows of each trace table.

Shared by every recorder, so each table's row is built by field name in one place (the row
classes, :mod:`tracekit.trace.rows`, follow ``schemas/trace-v3.json``). The prefix-cache columns
of version 2 are null unless the caller passes what it knows: a recorder that cannot see the
cache (live hosts, imports, the real-vLLM driver today) writes null, never a made-up 0.
``requests.ignore_eos`` (version 3) likewise: what the request was run with, when known.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from tracekit.hosts.preemption_policy import PolicyOutcome, PreemptionPolicyStats
from tracekit.trace.rows import CandidateRow, DecisionRow, RequestRow, ScheduledRow, StepRow

if TYPE_CHECKING:
    from tracekit.engine import RequestRecord, StepRecord

__all__ = [
    "candidate_rows",
    "decision_row",
    "raw_result_fields",
    "request_row",
    "scheduled_rows",
    "step_row",
]


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
    freed_blocks: int | None = None,
    freed_tokens: int | None = None,
) -> DecisionRow:
    """The ``decisions`` row of one decision (``freed_*``: what the preemption freed, if known)."""
    raw_result, raw_type = raw_result_fields(raw, outcome not in ("disabled", "builtin"))
    return DecisionRow(
        run_id=run_id,
        seq=seq,
        step=step,
        time_s=float(context.now),
        requesting_request_id=getattr(context, "requesting_request_id", None) or None,
        kv_usage=float(context.kv_cache_usage),
        scheduling_policy=str(context.scheduling_policy),
        num_candidates=len(context.candidates),
        builtin_victim_id=builtin_victim_id,
        raw_result=raw_result,
        raw_result_type=raw_type,
        outcome=outcome,
        applied_victim_id=applied_victim_id,
        decision_reason=decision_reason,
        calls=stats.calls,
        selections=stats.selections,
        abstentions=stats.abstentions,
        failures=stats.failures,
        invalid_selections=stats.invalid_selections,
        policy_enabled=stats.enabled,
        freed_blocks=freed_blocks,
        freed_tokens=freed_tokens,
    )


def candidate_rows(
    run_id: str, seq: int, candidates: Any, blocks: Sequence[tuple[int, int]] = ()
) -> Iterator[CandidateRow]:
    """The ``candidates`` rows of one decision, in host order.

    ``blocks``: per candidate, ``(blocks held, blocks only it holds)`` when the recorder knows
    them (:attr:`tracekit.engine.DecisionRecord.candidate_blocks`); empty leaves them null.
    """
    known = len(blocks) == len(candidates) and len(blocks) > 0
    for position, c in enumerate(candidates):
        held, exclusive = blocks[position] if known else (None, None)
        yield CandidateRow(
            run_id=run_id,
            seq=seq,
            position=position,
            request_id=c.request_id,
            priority=int(c.priority),
            arrival_time=float(c.arrival_time),
            num_prompt_tokens=int(c.num_prompt_tokens),
            num_output_tokens=int(c.num_output_tokens),
            num_computed_tokens=int(c.num_computed_tokens),
            num_preemptions=int(c.num_preemptions),
            max_tokens=int(c.max_tokens),
            sglang_output_len=getattr(c, "sglang_output_len", None),
            sglang_prompt_len=getattr(c, "sglang_prompt_len", None),
            num_blocks_held=held,
            num_blocks_exclusive=exclusive,
        )


# Steps are the hot table (one row per engine step): their row is read from the record by one
# C-level attrgetter instead of keyword arguments. Column -> StepRecord attribute, by name.
_STEP_ATTRIBUTES = {
    "step": "step",
    "time_s": "time_s",
    "duration_s": "duration_s",
    "num_running": "num_running",
    "num_waiting": "num_waiting",
    "kv_blocks_used": "kv_blocks_used",
    "kv_blocks_total": "kv_blocks_total",
    "scheduled_prefill_tokens": "num_prefill_tokens",
    "scheduled_decode_tokens": "num_decode_tokens",
    "num_preemptions": "num_preemptions",
}
# The prefix-cache columns (trace v2) follow, computed from the record's cache fields.
_STEP_CACHE_COLUMNS = ("cache_hit_tokens", "cached_blocks_evicted")
if ("run_id", *_STEP_ATTRIBUTES, *_STEP_CACHE_COLUMNS) != StepRow._fields:
    raise RuntimeError(
        "_STEP_ATTRIBUTES and _STEP_CACHE_COLUMNS must list StepRow's fields after run_id, in order"
    )
_step_values = attrgetter(*_STEP_ATTRIBUTES.values())
_new_row = tuple.__new__


def step_row(
    run_id: str, record: StepRecord, *, cache: bool = False, evictions: bool = True
) -> StepRow:
    """The ``steps`` row of one engine step.

    ``cache``: the record's prefix-cache fields are known (the embedded engine fills them, 0
    with caching off); otherwise those columns are null. ``evictions`` false: the hits are
    known but not the cached blocks evicted (the real-vLLM recorder), whose column is null.
    """
    if cache:
        hits = record.cache_hits
        tail = (sum(hits.values()) if hits else 0, record.num_evicted_blocks if evictions else None)
    else:
        tail = (None, None)
    return _new_row(StepRow, (run_id, *_step_values(record), *tail))


def scheduled_rows(run_id: str, record: StepRecord) -> Iterator[ScheduledRow]:
    """The ``scheduled`` rows of one engine step: tokens per request."""
    for request_id, tokens in record.num_scheduled_tokens.items():
        yield ScheduledRow(
            run_id=run_id, step=record.step, request_id=request_id, num_tokens=tokens
        )


def request_row(
    run_id: str,
    record: RequestRecord,
    num_cached_tokens: int | None = None,
    resume_cached_tokens: int | None = None,
    *,
    ignore_eos: bool | None = None,
) -> RequestRow:
    """The ``requests`` row of one request; every ``finished_*`` status is ``finished``.

    ``num_cached_tokens`` / ``resume_cached_tokens``: its prefix-cache hits at the first schedule
    and summed over its resumes, when the recorder knows them; ``ignore_eos``: whether it ran
    with that sampling parameter, when the recorder knows it.
    """
    return RequestRow(
        run_id=run_id,
        request_id=record.request_id,
        input_index=record.input_index,
        arrival_s=record.arrival_s,
        prompt_tokens=record.prompt_tokens,
        target_output_tokens=record.output_tokens,
        max_tokens=record.max_tokens,
        priority=record.priority,
        first_scheduled_s=record.first_scheduled_s,
        first_token_s=record.first_token_s,
        finish_s=record.finish_s,
        status="finished" if record.status.startswith("finished") else record.status,
        output_tokens=record.num_output_tokens,
        num_preemptions=record.num_preemptions,
        recomputed_tokens=record.recomputed_tokens,
        num_cached_tokens=num_cached_tokens,
        resume_cached_tokens=resume_cached_tokens,
        ignore_eos=ignore_eos,
    )
