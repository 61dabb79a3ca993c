"""The embedded engine's facade: run a list of requests to completion and report every record.

:func:`run_engine` feeds arrivals to the scheduler of the configured mode, runs steps on the
configured clock, and streams one record per step, per victim decision and per finished request
to an :class:`EngineObserver` (a trace writer, say) while keeping them for the caller.

The step loop is written once, in :class:`EngineRun`, a run advanced a step at a time (and
forked by :mod:`tracekit.engine.fork`); :func:`run_engine` builds one and runs it to the end.

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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tracekit.engine.async_scheduler import AsyncVllmPrefixCachingScheduler, AsyncVllmScheduler
from tracekit.engine.base import ScheduledStep
from tracekit.engine.client_feed import ArrivalFeed, ClientLimits
from tracekit.engine.clock import CostModelClock, StepsClock, make_clock
from tracekit.engine.config import EngineConfig
from tracekit.engine.fork import ForkableRun
from tracekit.engine.hosts import BuiltinHost, VictimHost
from tracekit.engine.interface import EngineScheduler, SchedulerFactory
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest, RequestStatus, SchedulerRequest
from tracekit.engine.scheduler import VllmScheduler, make_vllm_scheduler
from tracekit.engine.sglang import SglangScheduler
from tracekit.errors import ConfigError

__all__ = ["EngineObserver", "EngineResult", "EngineRun", "run_engine"]

#: vLLM's async schedulers, whose runs of calm decodes the engine takes in one go.
_ASYNC_VLLM = (AsyncVllmScheduler, AsyncVllmPrefixCachingScheduler)


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


class FinishedRequests:
    """An observer that keeps only the request records (a run with ``collect=False`` needs them).

    The capacity search and the oracle's rollouts score the finished requests and nothing else.
    """

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests: list[RequestRecord] = []

    def on_step(self, record: StepRecord) -> None:
        """Steps are not kept."""

    def on_decision(self, record: DecisionRecord) -> None:
        """Decisions are not kept."""

    def on_request(self, record: RequestRecord) -> None:
        """Keep the request."""
        self.requests.append(record)


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
    calm_leaps: bool = True,
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
    calm_leaps
        SGLang mode, and vLLM's async scheduling: take runs of calm decode steps in one go,
        with the same records and results (:meth:`EngineRun.run_to_end`). Turn it off for an
        observer that reads the scheduler's own state after every step.

    Returns
    -------
    EngineResult
        The records and run totals.

    Raises
    ------
    ValueError
        On duplicate request ids.
    """
    run = EngineRun(
        requests,
        config,
        host,
        observer,
        collect=collect,
        check_consistency=check_consistency,
        scheduler_factory=scheduler_factory,
        client=client,
        calm_leaps=calm_leaps,
    )
    return run.run_to_end()


class EngineRun(ForkableRun):
    """One engine run, advanced a step at a time: the engine's step loop (one copy).

    :func:`run_engine` is ``EngineRun(...).run_to_end()``. The run totals of :attr:`result` are
    current after each step, except ``num_decisions`` (read :attr:`num_decisions`; set in the
    result by :meth:`run_to_end` and :meth:`fork`). Each :meth:`step` handles the client
    cancels due, admits the arrivals visible to the next step, runs one scheduling step, applies
    its fake outputs and emits the records; :meth:`prepare` does the first part alone, so a
    caller can stop between steps. :meth:`fork` (:mod:`tracekit.engine.fork`) copies the run so
    it can continue from here with another host (the hindsight oracle, :mod:`tracekit.oracle`).

    Parameters are those of :func:`run_engine`; ``host`` defaults to ``None``.

    Raises
    ------
    ValueError
        On duplicate request ids, client cancels with a scheduler without ``finish_requests``,
        or async scheduling configured with a synchronous scheduler.
    """

    def __init__(
        self,
        requests: Iterable[EngineRequest],
        config: EngineConfig,
        host: VictimHost | None = None,
        observer: EngineObserver | None = None,
        *,
        collect: bool = True,
        check_consistency: bool = False,
        scheduler_factory: SchedulerFactory | None = None,
        client: ClientLimits | None = None,
        calm_leaps: bool = True,
    ) -> None:
        rows = list(enumerate(requests))
        if len({r.request_id for _, r in rows}) != len(rows):
            raise ValueError("request ids must be unique")
        rows.sort(key=lambda row: (float(row[1].arrival_s), row[0]))
        self.config = config
        self.host: VictimHost = host if host is not None else BuiltinHost()
        self.observer = observer
        self.collect = collect
        self.check_consistency = check_consistency
        self.result = EngineResult(config)
        self.scheduler: EngineScheduler
        if scheduler_factory is not None:
            self.scheduler = scheduler_factory(config, host, self._on_decision)
        elif config.mode == "vllm":
            if config.enable_prefix_caching or config.async_scheduling:
                self.scheduler = make_vllm_scheduler(config, self.host, self._on_decision)
            else:
                # By module attribute: latency/bench.py substitutes a capturing subclass.
                self.scheduler = VllmScheduler(config, self.host, self._on_decision)
        else:
            self.scheduler = SglangScheduler(config, self.host, self._on_decision)
        # The embedded scheduler builds decision records only when someone takes them.
        self._wired = scheduler_factory is None
        if self._wired:
            self._wire_decisions()
        # A measured step-time model's clock learns each request's state as it arrives.
        self.clock = make_clock(config, ())
        # A model fitted to measured latencies also has each request's time outside the step
        # loop (step_time.StepTimeModel): its records' token times include it.
        self._overheads = getattr(
            getattr(self.clock, "step_model", None), "request_overheads_s", None
        )
        # The requests not sent yet stay frozen rows (shared by forks) until they arrive.
        self.feed = ArrivalFeed(tuple(rows), client)
        if self.feed.may_abort and not hasattr(self.scheduler, "finish_requests"):
            raise ValueError("client cancels need a scheduler with finish_requests (vLLM's abort)")
        self._kv_blocks_total = self.scheduler.block_pool.num_usable_blocks
        # Async scheduling (vLLM ``EngineCore.step_with_batch_queue`` with a batch queue of 2):
        # the step scheduled last is in flight while the next one is scheduled, and its output
        # is applied only after that; ``_in_flight`` is that step, ``_in_flight_end`` its end.
        self._async = bool(config.async_scheduling)
        if self._async and not getattr(self.scheduler, "async_scheduling", False):
            # A synchronous scheduler in the asynchronous loop would apply outputs a step late.
            raise ValueError(
                "config.async_scheduling is on but the scheduler is synchronous; build it with "
                "async support (tracekit.engine.scheduler.make_vllm_scheduler) or turn it off"
            )
        if hasattr(self.scheduler, "keep_in_flight_outputs") and not hasattr(
            self.clock, "register"
        ):
            # Only a clock that reads the requests' make-up (it registers their states) reads
            # which outputs were in flight when a step was scheduled.
            self.scheduler.keep_in_flight_outputs = False
        self._in_flight: Any = None
        self._in_flight_end = 0.0
        # A scheduler that applies each step's outputs after the next step is scheduled, by
        # itself (SGLang's overlap loop): its update_from_output returns the requests an older
        # step finished, produced at its ``outputs_end_s``.
        self._late_outputs = bool(getattr(self.scheduler, "late_outputs", False))
        # SGLang mode, and vLLM's async scheduler, on a steps or roofline clock take runs of
        # calm decodes in one go (the embedded schedulers themselves: a subclass may watch
        # every step).
        self.calm_leaps = (
            calm_leaps
            and type(self.clock) in (StepsClock, CostModelClock)
            and (
                (type(self.scheduler) is SglangScheduler and not self._async)
                or (type(self.scheduler) in _ASYNC_VLLM and self._async)
            )
        )
        self.done = False

    # ----------------------------------------------------------------------------- records
    def _wire_decisions(self) -> None:
        """Have the embedded scheduler build decision records only when someone takes them.

        A run that neither collects nor streams records still counts its decisions (the
        scheduler's ``num_decisions``); the host sees the same context either way.
        """
        wanted = self.collect or self.observer is not None
        self.scheduler.on_decision = self._on_decision if wanted else None  # type: ignore[attr-defined]

    def _on_decision(self, record: DecisionRecord) -> None:
        if self.collect:
            self.result.decisions.append(record)
        if self.observer is not None:
            self.observer.on_decision(record)

    def _report(self, finished: list[SchedulerRequest], end: float) -> None:
        """Records for requests that finished in a step ending at ``end``.

        ``end``: when the step whose output finished them ended (a closed-loop user's next
        request is due from then).
        """
        feed = self.feed
        for state in finished:
            feed.finished(end)
            self._finish(state)
        if self.check_consistency:
            self.scheduler.check_consistency()

    def _finish(self, state: SchedulerRequest) -> None:
        wait = state.arrival_s - state.client_arrival_s  # (the record's client_queue_s)
        result = self.result
        if wait > 0:
            result.client_queue_total_s += wait
            result.client_queue_max_s = max(result.client_queue_max_s, wait)
        if self.collect or self.observer is not None:
            record = _request_record(state, self._overheads)
            if self.collect:
                result.requests.append(record)
            if self.observer is not None:
                self.observer.on_request(record)

    # ----------------------------------------------------------------------------- state
    @property
    def now(self) -> float:
        """Engine time at the start of the next step."""
        return self.clock.now

    @property
    def next_step(self) -> int:
        """Index of the next step (the clock's step counter)."""
        return self.clock.step

    @property
    def num_decisions(self) -> int:
        """Victim decisions made so far."""
        return self.scheduler.num_decisions

    @property
    def num_pending(self) -> int:
        """Requests of the workload that have not arrived yet."""
        return self.feed.remaining

    # ----------------------------------------------------------------------------- stepping
    def prepare(self) -> bool:
        """Apply the cancels due and admit the arrivals visible to the next step.

        Idles (jumps the clock) until an arrival when nothing is live. Idempotent, and the
        first thing :meth:`step` does: call it to read :attr:`next_step` of the step about to
        run (a steps clock may jump over idle steps). False when every request has finished.
        """
        if self.done:
            return False
        scheduler = self.scheduler
        clock = self.clock
        feed = self.feed
        while True:
            # Client cancels due by this step's start reach the engine first (vLLM's engine
            # core handles aborts between steps): finished as aborted, KV freed.
            deadlines = feed.deadlines
            if deadlines and deadlines[0][0] <= clock.now:
                self._cancel()
            # Arrivals visible to this step join the waiting queue, in arrival order.
            due = feed.next_due()
            if due is not None and clock.is_visible(due):
                self._admit(due)
            if scheduler.has_requests() if self._async else scheduler.has_unfinished_requests():  # type: ignore[attr-defined]
                return True
            if self._in_flight is not None:
                # Nothing to schedule: block on the step in flight and apply its output.
                done, self._in_flight = self._in_flight, None
                end = self._in_flight_end
                self._report(scheduler.update_from_output(done, end), end)
                continue
            due = feed.next_due()
            if due is None:
                if feed.remaining:
                    raise RuntimeError("client feed stalled with requests left and none running")
                self.done = True
                return False
            clock.jump_to(due)

    def _cancel(self) -> None:
        """Apply the client cancels due by now."""
        feed = self.feed
        result = self.result
        cancels = feed.pop_cancels(self.clock.now)
        self.scheduler.finish_requests([s.request_id for s, _ in cancels])  # type: ignore[attr-defined]
        for state, cancel_s in cancels:
            state.finish_s = cancel_s
            result.num_aborted += 1
            feed.finished(cancel_s)
            self._finish(state)

    def _admit(self, due: float) -> None:
        """Send the arrivals visible now, the first due at ``due``, to the scheduler."""
        feed = self.feed
        clock = self.clock
        scheduler = self.scheduler
        result = self.result
        max_prompt = self.config.max_prompt_tokens
        register = getattr(clock, "register", None)
        while True:
            state = feed.pop(due)
            if state.num_prompt_tokens > max_prompt:
                # vLLM (and SGLang) refuse such a prompt on input; it never reaches the scheduler.
                state.status = RequestStatus.REJECTED
                state.finish_s = state.arrival_s
                result.num_rejected += 1
                result.max_rejected_prompt_tokens = max(
                    result.max_rejected_prompt_tokens, state.num_prompt_tokens
                )
                feed.finished(state.arrival_s)
                self._finish(state)
            else:
                if register is not None:
                    register(state)
                scheduler.add_request(state)
            following = feed.next_due()
            if following is None or not clock.is_visible(following):
                return
            due = following

    def step(self) -> bool:
        """Run one scheduling step; False (and nothing run) when every request has finished."""
        if not self.prepare():
            return False
        self._run_prepared_step()
        return True

    def _run_prepared_step(self) -> None:
        """The step :meth:`prepare` made ready: schedule, time, apply outputs, emit records."""
        scheduler = self.scheduler
        clock = self.clock
        result = self.result
        now = clock.now
        out = scheduler.schedule(clock.step, now)
        if out.no_batch:
            self._no_batch(out)
            return
        scheduled = out.num_scheduled_tokens
        if not scheduled and not scheduler.running and self._in_flight is None:
            # Nothing ran and nothing runs: unless an arrival or a cancel comes, every next
            # step is this one again.
            feed = self.feed
            if feed.next_due() is None and not feed.deadlines:
                raise self._never_scheduled()
        duration = clock.step_duration(out)
        end_s = now + duration
        observer = self.observer
        collect = self.collect
        if collect or observer is not None:
            # The step record describes the batch as scheduled, before outputs free anything.
            num_running = len(scheduler.running)
            num_waiting = len(scheduler.waiting)
            kv_blocks_total = self._kv_blocks_total
            kv_blocks_used = kv_blocks_total - scheduler.block_pool.num_free_blocks
        if self._async:
            in_flight = self._in_flight
            if in_flight is None and (scheduled or scheduler.has_requests()):  # type: ignore[attr-defined]
                # The batch queue is not full: launch this step and schedule the next one
                # before any output comes back.
                self._in_flight, self._in_flight_end = out, end_s
                finished = []
                finished_end = end_s
            else:
                # Full (or nothing more to do): block on the oldest step and apply its output.
                if in_flight is not None:
                    done, finished_end = in_flight, self._in_flight_end
                    self._in_flight, self._in_flight_end = out, end_s
                else:
                    done, finished_end = out, end_s
                finished = scheduler.update_from_output(done, finished_end)
        else:
            finished = scheduler.update_from_output(out, end_s)
            finished_end = scheduler.outputs_end_s if self._late_outputs else end_s  # type: ignore[attr-defined]
        result.num_steps += 1
        result.num_preemptions += out.num_preemptions
        result.end_s = end_s
        if collect or observer is not None:
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
                result.steps.append(record)
            if observer is not None:
                observer.on_step(record)
        if finished or self.check_consistency:
            self._report(finished, finished_end)
        clock.advance(duration)

    def _calm_leap(self, limit: int | None) -> int:
        """Run the next calm decode steps at once; how many (0: none were calm).

        SGLang mode, or vLLM's async scheduler. The scheduler bounds the run of steps that
        only decode and finish nothing (``SglangScheduler.calm_decodes``,
        ``_AsyncMixin.calm_decodes``); here it is cut before the first step that an arrival or
        a client cancel would reach (as :meth:`prepare` would see them), and then applied in
        one go with the same clock arithmetic, totals and records as step by step. Under async
        scheduling the run's last step stays in flight, as it would.
        """
        # (SglangScheduler, or vLLM's async scheduler: their calm_decodes and
        # apply_calm_decodes differ in signature.)
        scheduler: Any = self.scheduler
        vllm = self._async  # (calm leaps: SGLang mode, or vLLM's async scheduler)
        if vllm:
            in_flight = self._in_flight
            if in_flight is None:
                return 0
        elif not scheduler.may_leap():
            return 0  # (asked before every step that is not leapt: the cheap refusals first)
        clock = self.clock
        feed = self.feed
        due = feed.next_due()
        deadline = feed.deadlines[0][0] if feed.deadlines else None
        first = clock.step
        steps_clock = type(clock) is StepsClock
        if steps_clock:
            # Step j starts at j * step_s: cut before the first step that sees the arrival or
            # reaches the deadline (prepare already handled the step about to run).
            step_s = clock.step_s
            if due is not None:
                seen = clock.visible_step(due) - first
                limit = seen if limit is None else min(limit, seen)
            if deadline is not None:
                reached = max(first, math.ceil(deadline / step_s) - 1)
                while reached * step_s < deadline:
                    reached += 1
                limit = reached - first if limit is None else min(limit, reached - first)
        if vllm:
            num_steps = scheduler.calm_decodes(in_flight.step, limit)
        else:
            num_steps = scheduler.calm_decodes(limit)
        if num_steps <= 0:
            return 0
        running = scheduler.running
        n = len(running)
        read = 0
        for request in running:
            read += request.num_computed_tokens
        records = self.collect or self.observer is not None
        if steps_clock:
            starts = [(first + i) * step_s for i in range(num_steps)] if records else []
            durations = [step_s] * num_steps if records else []
            last_start = (first + num_steps - 1) * step_s
            last_end = last_start + step_s
            before_last = (first + num_steps - 2) * step_s + step_s if num_steps > 1 else None
        else:
            starts, durations = self._cost_model_leap(num_steps, due, deadline, n, read)
            num_steps = len(starts)
            if num_steps <= 0:
                return 0
            last_start = starts[-1]
            last_end = last_start + durations[-1]
            before_last = starts[-2] + durations[-2] if num_steps > 1 else None
        ids = [r.request_id for r in running]
        last = ScheduledStep(first + num_steps - 1, last_start)
        last.num_scheduled_tokens = dict.fromkeys(ids, 1)
        last.num_decode_tokens = n
        last.kv_tokens_read = read + n * num_steps
        last.cache_recorded = True
        if vllm:
            # vLLM: each step's free blocks after its scan and the cached blocks it evicted;
            # the last step stays in flight.
            figures = scheduler.apply_calm_decodes(num_steps, last)
            self._in_flight, self._in_flight_end = last, last_end
        else:
            free = scheduler.block_pool.num_free_blocks
            evicted = scheduler.apply_calm_decodes(num_steps, last, last_end, before_last)
            # (The KV in use once each step's tokens are taken; the radix tree evicted
            # ``evicted[i]`` cached tokens to make room.)
            figures = []
            for i in range(num_steps if records else 0):
                free += (evicted[i] if evicted else 0) - n
                figures.append((free, evicted[i] if evicted else 0))
        if records:
            total = self._kv_blocks_total
            num_waiting = len(scheduler.waiting)
            steps = self.result.steps
            for i in range(num_steps):
                free, evicted_blocks = figures[i]
                record = StepRecord(
                    first + i, starts[i], durations[i], n, num_waiting,
                    total - free, total, 0, n, 0,
                    dict.fromkeys(ids, 1), {}, evicted_blocks,
                )  # fmt: skip
                if self.collect:
                    steps.append(record)
                if self.observer is not None:
                    self.observer.on_step(record)
        self.result.num_steps += num_steps
        self.result.end_s = last_end
        clock.step += num_steps
        if not steps_clock:
            clock.now = last_end  # (a steps clock's time is its step index's)
        if self.check_consistency:
            scheduler.check_consistency()
        return num_steps

    def _cost_model_leap(
        self, limit: int, due: float | None, deadline: float | None, n: int, read: int
    ) -> tuple[list[float], list[float]]:
        """Starts and lengths of up to ``limit`` calm decodes on a cost-model clock.

        Each lasts the cost model's time of the ``n`` running requests' decoded tokens, reading
        one more token of context per request than the step before (``read`` before the
        first); the run stops before a step whose start an arrival or a deadline has reached
        (the clock's own sums, in the same order).
        """
        clock = self.clock
        duration_of = clock.duration
        now = clock.now
        starts: list[float] = []
        durations: list[float] = []
        for i in range(limit):
            if i and (
                (due is not None and due <= now) or (deadline is not None and deadline <= now)
            ):
                break
            read += n
            duration = duration_of(n, n, read)
            starts.append(now)
            durations.append(duration)
            now += duration
        return starts, durations

    def _no_batch(self, out: Any) -> None:
        """A scheduler call that ran no batch (SGLang's overlap loop): no step, no clock move.

        Its iterations applied the outputs of the step in flight; those requests are reported.
        Requests left that nothing can run before the next arrival (SGLang's loop would spin
        until one comes) move the clock to that arrival.
        """
        scheduler = self.scheduler
        finished = scheduler.update_from_output(out, self.clock.now)
        if finished or self.check_consistency:
            self._report(finished, scheduler.outputs_end_s)  # type: ignore[attr-defined]
        if scheduler.has_unfinished_requests():
            feed = self.feed
            due = feed.next_due()
            if feed.deadlines and (due is None or feed.deadlines[0][0] < due):
                due = feed.deadlines[0][0]  # (a client cancel comes first)
            if due is None:
                raise self._never_scheduled()
            self.clock.jump_to(due)

    def _never_scheduled(self) -> ConfigError:
        """The error of a run stuck for good: requests wait that the scheduler never admits.

        Nothing runs, no arrival or cancel is ahead, and the scheduler (as the real one would:
        it spins) admits none of the waiting requests even with the KV pool this free.
        """
        scheduler = self.scheduler
        waiting = list(scheduler.waiting)
        head = waiting[0] if waiting else None
        pool = scheduler.block_pool
        what = (
            f"{head.request_id} ({head.num_prompt_tokens} prompt tokens, at most "
            f"{head.max_tokens} output tokens{', ignore_eos' if head.ignore_eos else ''})"
            if head is not None
            else "a request"
        )
        more = f" and {len(waiting) - 1} more wait" if len(waiting) > 1 else " waits"
        return ConfigError(
            f"requests can never be scheduled: {what}{more} with nothing running and "
            f"{pool.num_free_blocks} of {pool.num_usable_blocks} KV blocks free, and the "
            f"{self.config.mode} scheduler admits none of them; give the engine more KV "
            "(--num-blocks) or send shorter requests (--max-tokens, --limit)"
        )

    def run_to_end(self, max_steps: int | None = None) -> EngineResult:
        """Step until every request has finished (or ``max_steps`` more steps); the result."""
        prepare = self.prepare
        run_step = self._run_prepared_step
        leap = self._calm_leap if self.calm_leaps else None
        left = max_steps
        while (left is None or left > 0) and prepare():
            taken = leap(left) if leap is not None else 0
            if not taken:
                run_step()
                taken = 1
            if left is not None:
                left -= taken
        self.result.num_decisions = self.scheduler.num_decisions
        return self.result


def _request_record(
    state: SchedulerRequest, overheads: Callable[[int, int], tuple[float, float]] | None = None
) -> RequestRecord:
    first_token_s, finish_s = state.first_token_s, state.finish_s
    if overheads is not None and first_token_s is not None:
        # The time outside the step loop: before the first token reaches the client, and
        # after it up to the last; it delays the record, not the schedule.
        before, after = overheads(state.num_prompt_tokens, state.num_output_tokens)
        first_token_s += before
        if finish_s is not None:
            finish_s += before + after
    return RequestRecord(
        request_id=state.request_id,
        arrival_s=state.arrival_s,
        prompt_tokens=state.num_prompt_tokens,
        output_tokens=state.target_output_tokens,
        max_tokens=state.max_tokens,
        priority=state.priority,
        num_output_tokens=state.num_output_tokens,
        first_scheduled_s=state.first_scheduled_s,
        first_token_s=first_token_s,
        finish_s=finish_s,
        status=state.status,
        num_preemptions=state.num_preemptions,
        recomputed_tokens=state.recomputed_tokens,
        input_index=state.index,
        client_queue_s=state.arrival_s - state.client_arrival_s,
        ignore_eos=state.ignore_eos,
    )
