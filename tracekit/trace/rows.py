"""One typed row class per trace table, checked against ``schemas/trace-v3.json`` at import.

:class:`~tracekit.trace.writer.BundleWriter` takes only these rows, so a row is built by field
name (never by position) and a row of the wrong table is refused. The fields and their types are
compared with :func:`tracekit.trace.schema.trace_schema` when this module is imported: a schema
change that the rows do not follow fails at once, not in a Parquet file. The columns versions 2
and 3 added default to ``None`` (not recorded), so a recorder that cannot see the prefix cache
or ``ignore_eos`` (live recorders, imports) writes nulls without naming them.
"""

from __future__ import annotations

from typing import NamedTuple

from tracekit.trace.schema import trace_schema

__all__ = [
    "ROW_TYPES",
    "AdmissionRow",
    "CandidateRow",
    "DecisionRow",
    "RequestRow",
    "ScheduledRow",
    "StepRow",
    "TraceRow",
]


class RequestRow(NamedTuple):
    """A ``requests`` row: one finished (or rejected) request."""

    run_id: str
    request_id: str
    input_index: int
    arrival_s: float
    prompt_tokens: int
    target_output_tokens: int
    max_tokens: int
    priority: int
    first_scheduled_s: float | None
    first_token_s: float | None
    finish_s: float | None
    status: str
    output_tokens: int
    num_preemptions: int
    recomputed_tokens: int
    num_cached_tokens: int | None = None
    resume_cached_tokens: int | None = None
    ignore_eos: bool | None = None


class DecisionRow(NamedTuple):
    """A ``decisions`` row: one victim decision and the policy's counters after it."""

    run_id: str
    seq: int
    step: int
    time_s: float
    requesting_request_id: str | None
    kv_usage: float
    scheduling_policy: str
    num_candidates: int
    builtin_victim_id: str
    raw_result: str | None
    raw_result_type: str
    outcome: str
    applied_victim_id: str
    decision_reason: str | None
    calls: int
    selections: int
    abstentions: int
    failures: int
    invalid_selections: int
    policy_enabled: bool
    freed_blocks: int | None = None
    freed_tokens: int | None = None


class CandidateRow(NamedTuple):
    """A ``candidates`` row: one running request offered to a decision."""

    run_id: str
    seq: int
    position: int
    request_id: str
    priority: int
    arrival_time: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    num_preemptions: int
    max_tokens: int
    sglang_output_len: int | None
    sglang_prompt_len: int | None
    num_blocks_held: int | None = None
    num_blocks_exclusive: int | None = None


class StepRow(NamedTuple):
    """A ``steps`` row: one engine step."""

    run_id: str
    step: int
    time_s: float
    duration_s: float
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    scheduled_prefill_tokens: int
    scheduled_decode_tokens: int
    num_preemptions: int
    cache_hit_tokens: int | None = None
    cached_blocks_evicted: int | None = None


class ScheduledRow(NamedTuple):
    """A ``scheduled`` row: the tokens one request was given in one step."""

    run_id: str
    step: int
    request_id: str
    num_tokens: int


class AdmissionRow(NamedTuple):
    """An ``admissions`` row (trace v2): one admission of a request and its prefix-cache hit."""

    run_id: str
    request_id: str
    admission: int
    step: int
    time_s: float
    cached_tokens: int


TraceRow = RequestRow | DecisionRow | CandidateRow | StepRow | ScheduledRow | AdmissionRow

#: Table name -> its row class.
ROW_TYPES: dict[str, type[TraceRow]] = {
    "requests": RequestRow,
    "decisions": DecisionRow,
    "candidates": CandidateRow,
    "steps": StepRow,
    "scheduled": ScheduledRow,
    "admissions": AdmissionRow,
}

_PYTHON_TYPES = {"string": "str", "int64": "int", "float64": "float", "bool": "bool"}


def _check_rows_against_schema() -> None:
    """Raise ``RuntimeError`` if a row class differs from its table in the trace schema."""
    schema = trace_schema()
    if set(ROW_TYPES) != set(schema.tables):
        raise RuntimeError(
            f"trace row classes cover {sorted(ROW_TYPES)} but the schema has "
            f"{sorted(schema.tables)}; update tracekit/trace/rows.py"
        )
    for name, row_type in ROW_TYPES.items():
        expected = {
            c.name: _PYTHON_TYPES[c.type] + (" | None" if c.nullable else "")
            for c in schema.table(name).columns
        }
        # Annotations are strings here (postponed evaluation), held as ForwardRef by NamedTuple.
        declared = {
            field: getattr(hint, "__forward_arg__", hint)
            for field, hint in row_type.__annotations__.items()
        }
        if list(declared.items()) != list(expected.items()):
            raise RuntimeError(
                f"{row_type.__name__} fields {declared} differ from the schema's {name!r} "
                f"columns {expected}; update tracekit/trace/rows.py"
            )


_check_rows_against_schema()
