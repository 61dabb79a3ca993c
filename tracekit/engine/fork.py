"""A steppable engine run that can be forked: snapshot the state, continue from the snapshot.

:class:`EngineRun` is :func:`~tracekit.engine.engine.run_engine`'s loop cut into steps: each
:meth:`EngineRun.step` admits the arrivals visible to the next step, runs one scheduling step,
applies its fake outputs and emits the same records, in the same order, as ``run_engine``.
:meth:`EngineRun.fork` returns an independent copy that continues exactly as the original would
(given the same host), or differently when given another host: the hindsight oracle
(:mod:`tracekit.oracle`) forks the run at each victim decision and tries every candidate.

What a fork copies and what it shares (copy-on-write by construction):

- **Shared, never copied:** the configuration (frozen), the workload's requests that have not
  arrived (frozen :class:`~tracekit.engine.request.EngineRequest` rows in one tuple; a run makes
  their mutable :class:`~tracekit.engine.request.RequestState` only when they arrive, so the
  arrivals a fork has not reached cost nothing to copy).
- **Replaced:** the victim host (the caller passes the fork's host; without one, the run's host
  is deep-copied, so a stateful policy continues from its state) and the observer (a fork has
  none unless given one).
- **Fresh:** the record lists (a fork collects only what it produces itself); run totals
  (steps, decisions, preemptions) carry on.
- **Deep-copied:** everything else the scheduler and clock hold (queues, request states, block
  pool, prefix cache), with :func:`copy.deepcopy`. Deep copy is deliberate: it stays correct as
  fields are added to the scheduler or the request state, where a hand-written snapshot would
  silently miss them. ``tests/test_engine_fork.py`` checks that a fork continues identically.
- **Copy-on-write where it pays** (the generic copy stays the fallback): request states are
  copied slot by slot with immutable values shared (:func:`_copy_slots`); a prefix-caching
  pool's blocks are made directly (:func:`_premake_cache_blocks`); and the untouched back of a
  long FCFS waiting queue (arrivals never scheduled) stays shared rows in the fork, made into
  states only when the queue's head reaches them (:class:`_LazyTailQueue`).

Overlap with ``engine.py``: :meth:`EngineRun.step` repeats the body of ``run_engine``'s step
loop. ``tests/test_engine_fork.py`` runs both on the same workloads and requires equal records,
so a change to one loop that is not made in the other fails there.

Examples
--------
>>> from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest
>>> config = EngineConfig(num_blocks=11, block_size=16, max_model_len=160,
...                       async_scheduling=False)
>>> run = EngineRun([EngineRequest("a", 0.0, 40, 3, 3), EngineRequest("b", 0.0, 40, 2, 2)],
...                 config, BuiltinHost())
>>> run.step()
True
>>> twin = run.fork()
>>> run.run_to_end().num_steps, twin.run_to_end().num_steps
(3, 3)
"""

from __future__ import annotations

import copy
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from tracekit.engine.clock import CostModelClock, StepsClock, make_clock
from tracekit.engine.config import EngineConfig
from tracekit.engine.engine import EngineObserver, EngineResult, _request_record
from tracekit.engine.fake_model import mark_arrived
from tracekit.engine.hosts import BuiltinHost, VictimHost
from tracekit.engine.interface import EngineScheduler, SchedulerFactory
from tracekit.engine.outputs import DecisionRecord, StepRecord
from tracekit.engine.prefix_cache import Block, PrefixCachingBlockPool
from tracekit.engine.queues import FCFSRequestQueue
from tracekit.engine.request import EngineRequest, RequestState, RequestStatus
from tracekit.engine.scheduler import (
    VllmPrefixCachingScheduler,
    VllmScheduler,
    make_vllm_scheduler,
)
from tracekit.engine.sglang import SglangScheduler

__all__ = ["EngineRun"]

# Values a copy can share: immutable and holding nothing mutable.
_ATOMIC = frozenset({int, float, str, bool, type(None), bytes})
_SLOTS: dict[type, tuple[str, ...] | None] = {}


def _slot_names(cls: type) -> tuple[str, ...] | None:
    """Every slot of ``cls`` and its bases, or None when an instance also has a ``__dict__``."""
    if cls not in _SLOTS:
        names: list[str] = []
        ok = True
        for base in cls.__mro__[:-1]:
            slots = base.__dict__.get("__slots__")
            if slots is None:
                ok = False
                break
            names.extend([slots] if isinstance(slots, str) else slots)
        _SLOTS[cls] = (
            tuple(n for n in names if n not in ("__dict__", "__weakref__")) if ok else None
        )
    return _SLOTS[cls]


def _flat(values: tuple[Any, ...]) -> bool:
    """Whether a tuple holds only immutable scalars (so a copy may share it)."""
    return all(type(item) in _ATOMIC for item in values)


def _copy_slots(obj: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(obj, memo)``, faster for a slotted object (a request state).

    Every slot is copied (so fields added later are copied too): immutable values are shared,
    anything else goes through ``copy.deepcopy`` with the same memo.
    """
    found = memo.get(id(obj))
    if found is not None:
        return found
    cls = type(obj)
    names = _slot_names(cls)
    if names is None:
        return copy.deepcopy(obj, memo)
    new = cls.__new__(cls)
    memo[id(obj)] = new
    for name in names:
        try:
            value = getattr(obj, name)
        except AttributeError:
            continue
        kind = type(value)
        if kind in _ATOMIC or (kind is tuple and _flat(value)):
            pass
        elif kind is list and all(
            type(i) in _ATOMIC or (type(i) is tuple and _flat(i)) for i in value
        ):
            # (A request's block keys: a new list of shared immutable keys.)
            value = list(value)
        else:
            value = copy.deepcopy(value, memo)
        setattr(new, name, value)
    return new


def _share_keys(keys: Iterable[Any], memo: dict[int, Any]) -> None:
    """Let the copy share immutable keys (ints, tuples of them): memo maps each to itself."""
    for key in keys:
        if type(key) is tuple:
            memo[id(key)] = key


def _premake_cache_blocks(pool: Any, held: list[Any], memo: dict[int, Any]) -> None:
    """Copy a prefix-caching pool's blocks fast before the generic deep copy reaches them.

    A block is two slots (its key, immutable, and its reference count); the generic copy
    costs tens of microseconds per block. Only for the embedded pool: anything not found here
    is still copied, correctly, by ``copy.deepcopy``. ``held``: the requests' block lists.
    """
    if type(pool) is not PrefixCachingBlockPool:
        return
    new_block = Block.__new__
    free_unhashed = getattr(pool, "_free_unhashed", ())
    free_hashed = getattr(pool, "_free_hashed", {})
    cached = getattr(pool, "_cached", {})
    groups = [free_unhashed, free_hashed, *cached.values(), *held]
    for group in groups:
        for block in group:
            if id(block) not in memo:
                twin = new_block(Block)
                twin.key = block.key
                twin.ref_cnt = block.ref_cnt
                memo[id(block)] = twin
    _share_keys(cached, memo)
    _share_keys((key[1] for key in getattr(pool, "_content_keys", {})), memo)
    _share_keys(getattr(pool, "_content_keys", {}), memo)


class _LazyTailQueue(FCFSRequestQueue):
    """An FCFS waiting queue whose back is arrivals not made into request states yet.

    A fork's queue: the made head (``_queue``), then the untouched arrivals ``arrivals[_lazy:
    _lazy_end]`` (rows shared by every fork; rejected ones skipped, they never queued), then
    whatever arrived after the fork (``_after``). A state is made, registered in the
    scheduler's request table and marked arrived only when the head runs dry, so a rollout that
    never reaches the back of a long backlog never pays for it. Behaves as the FCFS queue it
    replaces: the same order, length and states.
    """

    __slots__ = ("_after", "_arrivals", "_lazy", "_lazy_count", "_lazy_end", "_max_len", "_table")

    def __init__(
        self,
        head: deque[RequestState],
        arrivals: tuple[tuple[int, EngineRequest], ...],
        start: int,
        end: int,
        count: int,
        table: dict[str, RequestState],
        max_model_len: int,
    ) -> None:
        super().__init__()
        self._queue = head
        self._arrivals = arrivals
        self._lazy = start
        self._lazy_end = end
        self._lazy_count = count
        self._table = table
        self._max_len = max_model_len
        self._after: deque[RequestState] = deque()

    def _make_next(self) -> RequestState:
        """Make the first lazy arrival into a registered, arrived request state."""
        arrivals, max_len = self._arrivals, self._max_len
        while True:
            index, request = arrivals[self._lazy]
            self._lazy += 1
            if request.prompt_tokens < max_len:  # (a rejected one never queued)
                break
        state = RequestState(request, index)
        mark_arrived(state, max_len)
        self._table[state.request_id] = state
        self._lazy_count -= 1
        return state

    def _fill(self) -> None:
        if not self._queue:
            if self._lazy_count:
                self._queue.append(self._make_next())
            elif self._after:
                self._queue, self._after = self._after, deque()

    def unmade(self) -> list[EngineRequest]:
        """The arrivals of the lazy part, in queue order (not made by this call)."""
        rows = self._arrivals[self._lazy : self._lazy_end]
        return [r for _, r in rows if r.prompt_tokens < self._max_len]

    def add_request(self, request: RequestState) -> None:
        """Append to the back (after the lazy part)."""
        if self._lazy_count:
            self._after.append(request)
        else:
            self._queue.append(request)

    def peek_request(self) -> RequestState:
        """The front request; ``IndexError`` when empty."""
        self._fill()
        return self._queue[0]

    def pop_request(self) -> RequestState:
        """Remove the front request."""
        self._fill()
        return self._queue.popleft()

    def sort(self, key: Any) -> None:
        """Make everything, then sort as the FCFS queue does."""
        self._make_all()
        super().sort(key)

    def _make_all(self) -> None:
        while self._lazy_count:
            self._queue.append(self._make_next())
        self._queue.extend(self._after)
        self._after.clear()

    def __len__(self) -> int:
        return len(self._queue) + self._lazy_count + len(self._after)

    def __iter__(self) -> Iterator[RequestState]:
        # Every state must exist to be iterated: make them (rare: consistency checks).
        self._make_all()
        return iter(self._queue)

    def made(self) -> list[RequestState]:
        """The states made so far, in queue order (nothing is made by this call)."""
        return [*self._queue, *self._after]


class EngineRun:
    """One engine run, advanced a step at a time, that can be forked.

    Parameters
    ----------
    requests
        The workload; arrival order is by ``arrival_s``, then input order.
    config
        Engine configuration.
    host
        Chooses preemption victims; ``None`` for the scheduler's own rule.
    observer
        Receives every record as it is produced (as in ``run_engine``).
    collect
        Keep the records (:attr:`result`).
    scheduler_factory
        As in ``run_engine``; None: the embedded scheduler of ``config.mode``.

    Raises
    ------
    ValueError
        On duplicate request ids.
    """

    def __init__(
        self,
        requests: Iterable[EngineRequest],
        config: EngineConfig,
        host: VictimHost | None = None,
        observer: EngineObserver | None = None,
        *,
        collect: bool = True,
        scheduler_factory: SchedulerFactory | None = None,
    ) -> None:
        indexed = list(enumerate(requests))
        if len({r.request_id for _, r in indexed}) != len(indexed):
            raise ValueError("request ids must be unique")
        indexed.sort(key=lambda pair: (float(pair[1].arrival_s), pair[0]))
        # Shared by every fork (frozen rows); ``_next`` is this run's cursor into it.
        self._arrivals: tuple[tuple[int, EngineRequest], ...] = tuple(indexed)
        self._next = 0
        # The shared queue tail (see _unstarted_tail_length) and the state it was found in.
        self._tail_start = 0
        self._tail_length = 0
        self._tail_key: tuple[Any, ...] | None = None
        self.config = config
        self.host: VictimHost = host if host is not None else BuiltinHost()
        self.observer = observer
        self.collect = collect
        self.result = EngineResult(config)
        self.scheduler: EngineScheduler
        if scheduler_factory is not None:
            self.scheduler = scheduler_factory(config, host, self._on_decision)
        elif config.mode == "vllm":
            if config.enable_prefix_caching or config.async_scheduling:
                self.scheduler = make_vllm_scheduler(config, self.host, self._on_decision)
            else:
                self.scheduler = VllmScheduler(config, self.host, self._on_decision)
        else:
            self.scheduler = SglangScheduler(config, self.host, self._on_decision)
        if any(r.cancel_after_s is not None for _, r in indexed):
            raise ValueError("EngineRun does not model client cancels (cancel_after_s) yet")
        self.clock = make_clock(config)
        if not isinstance(self.clock, StepsClock | CostModelClock):
            # A measured step-time model's clock reads every request's state by id up front,
            # which the lazily made states of a run (and its forks) do not offer.
            raise ValueError(
                f"EngineRun supports the steps clock and the roofline cost model, not "
                f"latency {config.effective_latency!r}"
            )
        self._kv_blocks_total = self.scheduler.block_pool.num_usable_blocks
        # Async scheduling (run_engine's is_async branch): the step in flight and its end.
        self._async = bool(config.async_scheduling)
        if self._async and not getattr(self.scheduler, "async_scheduling", False):
            raise ValueError("config.async_scheduling is on but the scheduler is synchronous")
        self._in_flight: Any = None
        self._in_flight_end = 0.0
        self.done = False

    # ----------------------------------------------------------------------------- records
    def _on_decision(self, record: DecisionRecord) -> None:
        if self.collect:
            self.result.decisions.append(record)
        if self.observer is not None:
            self.observer.on_decision(record)

    def _finish(self, state: RequestState) -> None:
        record = _request_record(state)
        if self.collect:
            self.result.requests.append(record)
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
        return len(self._arrivals) - self._next

    def live_requests(self) -> list[RequestState]:
        """The request states running or waiting now, running queue first.

        A fork's untouched backlog (:meth:`unmade_arrivals`) is not included: those requests
        have no state yet (they are waiting, never scheduled, nothing recomputed).
        """
        waiting = self.scheduler.waiting
        if isinstance(waiting, _LazyTailQueue):
            return [*self.scheduler.running, *waiting.made()]  # type: ignore[misc]
        return [*self.scheduler.running, *waiting]  # type: ignore[misc]

    def unmade_arrivals(self) -> list[EngineRequest]:
        """Waiting requests of a fork's shared backlog that have no state yet (queue order)."""
        waiting = self.scheduler.waiting
        return waiting.unmade() if isinstance(waiting, _LazyTailQueue) else []

    # ----------------------------------------------------------------------------- stepping
    def _has_requests(self) -> bool:
        """Whether the scheduler has work (async: also finished requests not yet reported)."""
        if self._async:
            return bool(self.scheduler.has_requests())  # type: ignore[attr-defined]
        return self.scheduler.has_unfinished_requests()

    def prepare(self) -> bool:
        """Admit the arrivals visible to the next step (idling until one if nothing is live).

        Idempotent, and the first thing :meth:`step` does: call it to read :attr:`next_step`
        of the step about to run (a steps clock may jump over idle steps). False when every
        request has finished.
        """
        if self.done:
            return False
        scheduler = self.scheduler
        clock = self.clock
        arrivals = self._arrivals
        num_arrivals = len(arrivals)
        max_model_len = self.config.max_model_len
        while True:
            # Arrivals visible to this step join the waiting queue, in arrival order.
            while self._next < num_arrivals and clock.is_visible(arrivals[self._next][1].arrival_s):
                index, request = arrivals[self._next]
                self._next += 1
                state = RequestState(request, index)
                if state.num_prompt_tokens >= max_model_len:
                    # vLLM refuses such a prompt on input; it never reaches the scheduler.
                    state.status = RequestStatus.REJECTED
                    state.finish_s = state.arrival_s
                    self.result.num_rejected += 1
                    self.result.max_rejected_prompt_tokens = max(
                        self.result.max_rejected_prompt_tokens, state.num_prompt_tokens
                    )
                    self._finish(state)
                else:
                    scheduler.add_request(state)
            if self._has_requests():
                return True
            if self._in_flight is not None:
                # Nothing to schedule: block on the step in flight and apply its output.
                done, self._in_flight = self._in_flight, None
                for state in scheduler.update_from_output(done, self._in_flight_end):
                    self._finish(state)
                continue
            if self._next >= num_arrivals:
                self.done = True
                return False
            clock.jump_to(arrivals[self._next][1].arrival_s)

    def step(self) -> bool:
        """Run one scheduling step; False (and nothing run) when every request has finished."""
        if not self.prepare():
            return False
        scheduler = self.scheduler
        clock = self.clock
        result = self.result
        now = clock.now
        out = scheduler.schedule(clock.step, now)
        scheduled = out.num_scheduled_tokens
        duration = clock.step_duration(out)
        end_s = now + duration
        num_running = len(scheduler.running)
        num_waiting = len(scheduler.waiting)
        kv_blocks_used = self._kv_blocks_total - scheduler.block_pool.num_free_blocks
        if self._async:
            if self._in_flight is None and (scheduled or self._has_requests()):
                # The batch queue is not full: launch this step, schedule the next one first.
                done = None
            else:
                done, done_end = (
                    (self._in_flight, self._in_flight_end)
                    if self._in_flight is not None
                    else (out, end_s)
                )
            if done is out:
                self._in_flight = None
            else:
                self._in_flight, self._in_flight_end = out, end_s
            finished = scheduler.update_from_output(done, done_end) if done is not None else []
        else:
            finished = scheduler.update_from_output(out, end_s)
        result.num_steps += 1
        result.num_preemptions += out.num_preemptions
        result.num_decisions = scheduler.num_decisions
        result.end_s = end_s
        observer = self.observer
        if self.collect or observer is not None:
            record = StepRecord(
                out.step,
                now,
                duration,
                num_running,
                num_waiting,
                kv_blocks_used,
                self._kv_blocks_total,
                out.num_prefill_tokens,
                out.num_decode_tokens,
                out.num_preemptions,
                scheduled,
                # Prefix-cache figures of the step (empty / 0 with caching off).
                out.cache_hits,
                out.num_evicted_blocks,
            )
            if self.collect:
                result.steps.append(record)
            if observer is not None:
                observer.on_step(record)
        for state in finished:
            self._finish(state)
        clock.advance(duration)
        return True

    def run_to_end(self, max_steps: int | None = None) -> EngineResult:
        """Step until every request has finished (or ``max_steps`` more steps); the result."""
        if max_steps is None:
            while self.step():
                pass
        else:
            for _ in range(max_steps):
                if not self.step():
                    break
        return self.result

    def _unstarted_tail_length(self) -> int:
        """How many untouched arrivals sit at the back of an FCFS waiting queue.

        They are the last arrivals admitted to the queue, never scheduled: a fork can make them
        again from the frozen rows (``RequestState`` then ``add_request`` give the same state).
        Only for the embedded synchronous vLLM schedulers with an FCFS queue, where nothing but
        ``add_request`` appends to the back; the first ``max_num_seqs`` entries always stay.
        Sets ``_tail_start``, the arrival cursor of the first of them. Cached until the run
        moves (forking one snapshot many times scans its queue once).
        """
        scheduler = self.scheduler
        if type(scheduler) not in (VllmScheduler, VllmPrefixCachingScheduler):
            return 0
        waiting = scheduler.waiting
        if type(waiting) is not FCFSRequestQueue:
            return 0
        queue = waiting._queue
        key = (self.clock.step, self.clock.now, self._next, len(queue), scheduler.num_decisions)
        if self._tail_key == key:
            return self._tail_length
        limit = len(queue) - self.config.max_num_seqs
        requests = scheduler.requests
        max_model_len = self.config.max_model_len
        arrivals = self._arrivals
        position = self._next
        length = 0
        for state, request_id in zip(reversed(queue), reversed(requests), strict=False):
            if length >= limit:
                break
            # Rejected arrivals never reached the queue: step over them.
            while position > 0 and arrivals[position - 1][1].prompt_tokens >= max_model_len:
                position -= 1
            if position == 0:
                break
            if (
                state.index != arrivals[position - 1][0]
                or request_id != state.request_id
                or state.status != RequestStatus.WAITING
                or state.num_computed_tokens
                or state.num_blocks
                or state.num_preemptions
                or state.first_scheduled_s is not None
            ):
                break
            length += 1
            position -= 1
        self._tail_start = position
        self._tail_key = key
        self._tail_length = length
        return length

    # ----------------------------------------------------------------------------- fork
    def fork(
        self,
        host: VictimHost | None = None,
        *,
        collect: bool | None = None,
        observer: EngineObserver | None = None,
    ) -> EngineRun:
        """An independent copy of this run that continues from its current state.

        Parameters
        ----------
        host
            The fork's victim host. None: a deep copy of this run's host (so a stateful policy
            continues from its state; a :class:`BuiltinHost` is stateless).
        collect
            Whether the fork keeps records (default: as this run).
        observer
            The fork's observer (default: none).

        Returns
        -------
        EngineRun
            A run whose record lists start empty and whose totals carry on from this run.
        """
        new_host = copy.deepcopy(self.host) if host is None else host
        # Objects the copy shares or replaces instead of copying (see the module docstring).
        memo: dict[int, Any] = {
            id(self.config): self.config,
            id(self._arrivals): self._arrivals,
            id(self.host): new_host,
        }
        if self.observer is not None:
            # (Never key None: every None in the state would become the new observer.)
            memo[id(self.observer)] = observer
        twin = copy.copy(self)
        memo[id(self)] = twin
        scheduler = self.scheduler
        states = getattr(scheduler, "requests", None)
        _premake_cache_blocks(
            scheduler.block_pool,
            [getattr(s, "kv_blocks", ()) for s in states.values()] if type(states) is dict else [],
            memo,
        )
        if type(states) is dict:
            shared = self._unstarted_tail_length()
            kept = itertools.islice(states.items(), len(states) - shared)
            # The live request states first, by the fast slot copy (the bulk of a fork).
            new_states = {key: _copy_slots(state, memo) for key, state in kept}
            if shared:
                # Copy-on-write of the untouched arrivals at the back of the FCFS waiting
                # queue: the fork's queue keeps them as shared rows and makes their states
                # only when its head runs dry (_LazyTailQueue).
                waiting = scheduler.waiting
                queue = waiting._queue  # type: ignore[attr-defined]
                head = deque(
                    memo[id(state)] for state in itertools.islice(queue, len(queue) - shared)
                )
                memo[id(waiting)] = _LazyTailQueue(
                    head,
                    self._arrivals,
                    self._tail_start,
                    self._next,
                    shared,
                    new_states,
                    self.config.max_model_len,
                )
                memo[id(states)] = new_states
        twin.scheduler = copy.deepcopy(scheduler, memo)
        twin.clock = copy.deepcopy(self.clock, memo)
        twin.host = new_host
        twin.observer = observer
        twin.collect = self.collect if collect is None else collect
        old = self.result
        twin.result = EngineResult(
            self.config,
            num_steps=old.num_steps,
            num_decisions=old.num_decisions,
            num_preemptions=old.num_preemptions,
            end_s=old.end_s,
            num_rejected=old.num_rejected,
            max_rejected_prompt_tokens=old.max_rejected_prompt_tokens,
        )
        return twin
