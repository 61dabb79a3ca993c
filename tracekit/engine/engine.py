"""The embedded engine's facade: run a list of requests to completion and report every record.

:func:`run_engine` feeds arrivals to the scheduler of the configured mode, runs steps on the
configured clock, and streams one record per step, per victim decision and per finished request
to an :class:`EngineObserver` (a trace writer, say) while keeping them for the caller.

Examples
--------
>>> from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
>>> config = EngineConfig(
...     num_blocks=11,
...     block_size=16,
...     max_model_len=160,
...     enable_prefix_caching=False,
...     async_scheduling=False,
... )
>>> requests = [EngineRequest("a", 0.0, 40, 3, 3), EngineRequest("b", 0.0, 40, 2, 2)]
>>> result = run_engine(requests, config, BuiltinHost())
>>> [(r.request_id, r.num_output_tokens, r.status) for r in result.requests]
[('b', 2, 'finished_length_capped'), ('a', 3, 'finished_length_capped')]
>>> result.num_steps
3
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from tracekit.engine.client_feed import ArrivalFeed, ClientLimits
from tracekit.engine.clock import make_clock
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import BuiltinHost, VictimHost
from tracekit.engine.interface import EngineScheduler, SchedulerFactory
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest, RequestState, RequestStatus
from tracekit.engine.scheduler import VllmScheduler, make_vllm_scheduler
from tracekit.engine.sglang import SglangScheduler

__all__ = ["EngineObserver", "EngineResult", "run_engine"]


class EngineObserver(Protocol):
    """Receives records as the engine produces them, in engine order.

    Within a step, ``on_decision`` calls come first (as victims are chosen), then
    ``on_step``, then ``on_request`` for each request that finished in the step. Under async
    scheduling a step's outputs are applied after the next step is scheduled, so the
    ``on_request`` calls after step k's ``on_step`` are those step k-1's output finished.
    """

    def on_step(self, record: StepRecord) -> None:
        """One executed step."""
        ...

    def on_decision(self, record: DecisionRecord) -> None:
        """One victim decision."""
        ...

    def on_request(self, record: RequestRecord) -> None:
        """One finished or rejected request."""
        ...


@dataclass(slots=True)
class EngineResult:
    """Everything a run produced (the lists are empty when collection is off)."""

    config: EngineConfig
    steps: list[StepRecord] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    # Executed steps and victim decisions, counted even when records are not collected.
    num_steps: int = 0
    num_decisions: int = 0
    num_preemptions: int = 0
    # Engine time when the last step ended.
    end_s: float = 0.0
    # Requests refused on arrival (prompt >= max_model_len), and the longest such prompt.
    num_rejected: int = 0
    max_rejected_prompt_tokens: int = 0
    # Requests cancelled by their client (TTFT timeout or recorded cancel).
    num_aborted: int = 0
    # Client queue time (--max-concurrency) summed over requests, and its largest value.
    client_queue_total_s: float = 0.0
    client_queue_max_s: float = 0.0


def run_engine(
    requests: Iterable[EngineRequest],
    config: EngineConfig,
    host: VictimHost | None,
    observer: EngineObserver | None = None,
    *,
    collect: bool = True,
    check_consistency: bool = False,
    scheduler_factory: SchedulerFactory | None = None,
    client: ClientLimits | None = None,
) -> EngineResult:
    """Run ``requests`` through the embedded engine until every one has finished.

    Parameters
    ----------
    requests
        The workload; arrival order is by ``arrival_s``, then input order.
    config
        Engine configuration.
    host
        Chooses preemption victims; ``None`` or ``BuiltinHost()`` for the scheduler's own rule.
    observer
        Receives every record as it is produced.
    collect
        Keep the records in the returned :class:`EngineResult` (turn off for long runs that
        stream to ``observer``).
    check_consistency
        After every step, re-check the block accounting and queue membership from scratch
        (a pass over all requests; for tests and debugging).
    scheduler_factory
        Builds the scheduler from ``(config, host, on_decision)`` (any
        :class:`~tracekit.engine.interface.EngineScheduler`: experiment mode's hooked scheduler,
        the real vLLM scheduler's adapter). None (the default): the embedded scheduler of
        ``config.mode``.
    client
        The client model (``tracekit.workloads.ClientModel``): a concurrency cap, a closed
        loop, a TTFT timeout (:mod:`tracekit.engine.client_feed`). ``None``: every request is
        sent at its ``arrival_s``; recorded ``cancel_after_s`` still apply.

    Returns
    -------
    EngineResult
        The records and run totals.

    Raises
    ------
    ValueError
        On duplicate request ids.
    """
    result = EngineResult(config)
    states = [RequestState(request, index) for index, request in enumerate(requests)]
    if len({s.request_id for s in states}) != len(states):
        raise ValueError("request ids must be unique")
    states.sort(key=lambda s: (s.arrival_s, s.index))

    on_step = observer.on_step if observer is not None else None
    on_request = observer.on_request if observer is not None else None
    decisions = result.decisions

    def record_decision(record: DecisionRecord) -> None:
        if collect:
            decisions.append(record)
        if observer is not None:
            observer.on_decision(record)

    scheduler: EngineScheduler
    if scheduler_factory is not None:
        scheduler = scheduler_factory(config, host, record_decision)
    else:
        victim_host = host if host is not None else BuiltinHost()
        if config.mode == "vllm":
            if config.enable_prefix_caching or config.async_scheduling:
                scheduler = make_vllm_scheduler(config, victim_host, record_decision)
            else:
                # By module attribute: latency/bench.py substitutes a capturing subclass.
                scheduler = VllmScheduler(config, victim_host, record_decision)
        else:
            scheduler = SglangScheduler(config, victim_host, record_decision)
    clock = make_clock(config, states)
    pool = scheduler.block_pool
    kv_blocks_total = pool.num_usable_blocks
    max_model_len = config.max_model_len
    steps = result.steps
    finished_records = result.requests
    feed = ArrivalFeed(states, client)
    if feed.may_abort and not hasattr(scheduler, "finish_requests"):
        raise ValueError("client cancels need a scheduler with finish_requests (vLLM's abort)")
    num_steps = num_preemptions = 0
    end_s = 0.0

    def finish(state: RequestState) -> None:
        record = _request_record(state)
        wait = record.client_queue_s
        if wait > 0:
            result.client_queue_total_s += wait
            result.client_queue_max_s = max(result.client_queue_max_s, wait)
        if collect:
            finished_records.append(record)
        if on_request is not None:
            on_request(record)

    # Async scheduling (vLLM ``EngineCore.step_with_batch_queue`` with a batch queue of 2): the
    # step scheduled last is in flight while the next one is scheduled, and its output is
    # applied only after that; ``in_flight`` is that step and ``in_flight_end`` its end time.
    is_async = config.async_scheduling
    if is_async and not getattr(scheduler, "async_scheduling", False):
        # A synchronous scheduler in the asynchronous loop would apply outputs a step late.
        raise ValueError(
            "config.async_scheduling is on but the scheduler is synchronous; build it with "
            "async support (tracekit.engine.scheduler.make_vllm_scheduler) or turn it off"
        )
    has_requests = scheduler.has_requests if is_async else scheduler.has_unfinished_requests  # type: ignore[attr-defined]
    in_flight = None
    in_flight_end = 0.0

    def report(finished: list[RequestState], end: float) -> None:
        # ``end``: when the step whose output finished them ended (a closed-loop user's next
        # request is due from then).
        for state in finished:
            feed.finished(end)
            finish(state)
        if check_consistency:
            scheduler.check_consistency()

    while True:
        # Client cancels due by this step's start reach the engine first (vLLM's engine core
        # handles aborts between steps): finished as aborted, KV freed.
        if feed.deadlines and feed.deadlines[0][0] <= clock.now:
            cancels = feed.pop_cancels(clock.now)
            scheduler.finish_requests([s.request_id for s, _ in cancels])  # type: ignore[attr-defined]
            for state, cancel_s in cancels:
                state.finish_s = cancel_s
                result.num_aborted += 1
                feed.finished(cancel_s)
                finish(state)
        # Arrivals visible to this step join the waiting queue, in arrival order.
        while (due := feed.next_due()) is not None and clock.is_visible(due):
            state = feed.pop(due)
            if state.num_prompt_tokens >= max_model_len:
                # vLLM refuses such a prompt on input; it never reaches the scheduler.
                state.status = RequestStatus.REJECTED
                state.finish_s = state.arrival_s
                result.num_rejected += 1
                result.max_rejected_prompt_tokens = max(
                    result.max_rejected_prompt_tokens, state.num_prompt_tokens
                )
                feed.finished(state.arrival_s)
                finish(state)
            else:
                scheduler.add_request(state)
        if not has_requests():
            if in_flight is not None:
                # Nothing to schedule: block on the step in flight and apply its output.
                done, in_flight = in_flight, None
                report(scheduler.update_from_output(done, in_flight_end), in_flight_end)
                continue
            due = feed.next_due()
            if due is None:
                if feed.remaining:
                    raise RuntimeError("client feed stalled with requests left and none running")
                break
            clock.jump_to(due)
            continue

        now = clock.now
        out = scheduler.schedule(clock.step, now)
        scheduled = out.num_scheduled_tokens
        duration = clock.step_duration(out)
        end_s = now + duration
        # The step record describes the batch as scheduled, before outputs free anything.
        num_running = len(scheduler.running)
        num_waiting = len(scheduler.waiting)
        kv_blocks_used = kv_blocks_total - pool.num_free_blocks
        if is_async:
            if in_flight is None and (scheduled or has_requests()):
                # The batch queue is not full: launch this step and schedule the next one
                # before any output comes back.
                done = None
            else:
                # Full (or nothing more to do): block on the oldest step and apply its output.
                done, done_end = (
                    (in_flight, in_flight_end) if in_flight is not None else (out, end_s)
                )
            if done is out:
                in_flight = None
            else:
                in_flight, in_flight_end = out, end_s
            finished = scheduler.update_from_output(done, done_end) if done is not None else []
            finished_end = done_end if done is not None else end_s
        else:
            finished = scheduler.update_from_output(out, end_s)
            finished_end = end_s
        num_steps += 1
        num_preemptions += out.num_preemptions
        if collect or on_step is not None:
            record = StepRecord(
                out.step,
                now,
                duration,
                num_running,
                num_waiting,
                kv_blocks_used,
                kv_blocks_total,
                out.num_prefill_tokens,
                out.num_decode_tokens,
                out.num_preemptions,
                scheduled,
                # Prefix-cache figures of the step (trace v2; empty / 0 with caching off).
                out.cache_hits,
                out.num_evicted_blocks,
            )
            if collect:
                steps.append(record)
            if on_step is not None:
                on_step(record)
        report(finished, finished_end)
        clock.advance(duration)

    result.num_steps = num_steps
    result.num_decisions = scheduler.num_decisions
    result.num_preemptions = num_preemptions
    result.end_s = end_s
    return result


def _request_record(state: RequestState) -> RequestRecord:
    return RequestRecord(
        request_id=state.request_id,
        arrival_s=state.arrival_s,
        prompt_tokens=state.num_prompt_tokens,
        output_tokens=state.target_output_tokens,
        max_tokens=state.max_tokens,
        priority=state.priority,
        num_output_tokens=state.num_output_tokens,
        first_scheduled_s=state.first_scheduled_s,
        first_token_s=state.first_token_s,
        finish_s=state.finish_s,
        status=state.status,
        num_preemptions=state.num_preemptions,
        recomputed_tokens=state.recomputed_tokens,
        input_index=state.index,
        client_queue_s=state.arrival_s - state.client_arrival_s,
    )
