"""What the engine reports: plain records with no behaviour (cf. vLLM ``sched/output.py``).

One :class:`StepRecord` per executed step, one :class:`DecisionRecord` per victim decision (one
per preempted request, so a multi-victim cascade gives several), one :class:`RequestRecord` per
request when it finishes or is rejected. Times are engine seconds from the start of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit.hosts.preemption_policy import PolicyOutcome, PreemptionCandidate

if TYPE_CHECKING:
    from tracekit.engine.hosts import VictimChoice

__all__ = ["DecisionRecord", "RequestRecord", "StepRecord"]


@dataclass(slots=True)
class StepRecord:
    """One executed step, as scheduled (after admission and preemption, before outputs).

    Invariants: ``num_prefill_tokens + num_decode_tokens == sum(num_scheduled_tokens.values())
    <= max_num_batched_tokens``; ``kv_blocks_used <= kv_blocks_total``.
    """

    # Step index: consecutive under the cost-model clock; time / step_s under the steps clock.
    step: int
    # Engine time at the start of the step, seconds.
    time_s: float
    # Modelled length of the step, seconds.
    duration_s: float
    # Requests in the running queue after scheduling.
    num_running: int
    # Requests in the waiting queue after scheduling (arrived, not running, not finished).
    num_waiting: int
    # KV blocks held by requests after scheduling, and usable blocks (null block excluded).
    kv_blocks_used: int
    kv_blocks_total: int
    # Scheduled tokens of requests still prefilling (or recomputing after a preemption).
    num_prefill_tokens: int
    # Scheduled tokens of requests decoding one token.
    num_decode_tokens: int
    # Requests preempted (vLLM) or retracted (SGLang) in this step.
    num_preemptions: int
    # req_id -> num_scheduled_tokens, in scheduling order (vLLM ``num_scheduled_tokens``).
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    # Prefix caching (empty and 0 with it off): req_id -> tokens hit in the prefix cache, for
    # each request admitted in this step (first schedules and resumes), in admission order.
    # Like the decisions' block counts below, recorder annotations: outside equality and the
    # real-vLLM driver's wire format (tracekit.vllm.protocol), which compare what was scheduled.
    cache_hits: dict[str, int] = field(default_factory=dict, compare=False)
    # Cached blocks evicted in this step (reused for new content, their hash dropped).
    num_evicted_blocks: int = field(default=0, compare=False)

    @classmethod
    def make_empty(cls, step: int, time_s: float, kv_blocks_total: int) -> StepRecord:
        """A step that scheduled nothing."""
        return cls(step, time_s, 0.0, 0, 0, 0, kv_blocks_total, 0, 0, 0, {})


@dataclass(slots=True)
class DecisionRecord:
    """One victim decision: the context shown to the host and what the engine applied."""

    # 0, 1, 2, ... over the run.
    seq: int
    step: int
    time_s: float
    # The running request whose KV allocation failed ("" in SGLang mode, which has none).
    requesting_request_id: str
    # Fraction of usable KV blocks in use when the host was asked.
    kv_cache_usage: float
    # The running queue, in order, including the requester.
    candidates: tuple[PreemptionCandidate, ...]
    # The engine's own victim (vLLM FCFS tail / PRIORITY max; SGLang's retraction order).
    builtin_victim_id: str
    # What the policy returned (None when it abstained, was not called or is the built-in).
    raw_result: object
    # What the host did with the call (``PolicyOutcome``).
    outcome: PolicyOutcome
    # The request the engine preempted.
    victim_id: str
    # The policy's own explanation when it exposes one, else None.
    decision_reason: str | None
    # The host's cumulative counters after the call (e.g. the controller's stats), or None.
    counters: dict[str, Any] | None
    # Per candidate (same order): (KV blocks held, blocks only it holds, i.e. reference count
    # 1). Empty when the scheduler does not report blocks (the trace then records null).
    # Recorder annotations: outside equality and the driver's wire format (see StepRecord).
    candidate_blocks: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    # Blocks the preemption returned to the free queue (the victim's exclusive blocks) and that
    # capacity in tokens (blocks * block_size); None when not reported.
    freed_blocks: int | None = field(default=None, compare=False)
    freed_tokens: int | None = field(default=None, compare=False)

    @classmethod
    def of_choice(
        cls,
        seq: int,
        step: int,
        time_s: float,
        requesting_request_id: str,
        kv_cache_usage: float,
        candidates: tuple[PreemptionCandidate, ...],
        builtin_victim_id: str,
        choice: VictimChoice,
        candidate_blocks: tuple[tuple[int, int], ...],
        freed_blocks: int,
        block_size: int,
    ) -> DecisionRecord:
        """The record of a host's ``choice``, whose victim freed ``freed_blocks`` blocks.

        The embedded engine and the vLLM recorder's shim both record their decisions so.
        """
        return cls(
            seq=seq,
            step=step,
            time_s=time_s,
            requesting_request_id=requesting_request_id,
            kv_cache_usage=kv_cache_usage,
            candidates=candidates,
            builtin_victim_id=builtin_victim_id,
            raw_result=choice.raw_result,
            outcome=choice.outcome,
            victim_id=choice.victim_id,
            decision_reason=choice.decision_reason,
            counters=choice.counters,
            candidate_blocks=candidate_blocks,
            freed_blocks=freed_blocks,
            freed_tokens=freed_blocks * block_size,
        )


@dataclass(slots=True)
class RequestRecord:
    """One request at the end of its life."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    # Target output length (the emulated end-of-sequence position).
    output_tokens: int
    max_tokens: int
    priority: int
    # Output tokens actually produced.
    num_output_tokens: int
    # Start of the first step that scheduled it; None if never scheduled.
    first_scheduled_s: float | None
    # End of the step that produced its first output token.
    first_token_s: float | None
    # End of the step that produced its last token, or arrival time when rejected.
    finish_s: float | None
    # ``RequestStatus`` value: finished_stopped, finished_length_capped, rejected or aborted.
    status: str
    num_preemptions: int
    # Computed tokens discarded by its preemptions (to be computed again).
    recomputed_tokens: int
    # Position in the workload's input order (arrival ties are served in this order).
    input_index: int = 0
    # Time it waited at the client before being sent (--max-concurrency); ``arrival_s`` is the
    # time it was sent, so the engine's latencies exclude this wait, as vLLM bench's do.
    client_queue_s: float = 0.0
    # Run with the ignore_eos sampling parameter (no end of sequence: it runs to its limit).
    ignore_eos: bool = False
