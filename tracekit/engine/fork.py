"""Forking an engine run: snapshot the state, continue from the snapshot.

:class:`~tracekit.engine.engine.EngineRun` is the engine's step loop as a steppable object
(``run_engine`` runs one to the end); this module is its :class:`ForkableRun` base, the copying.
:meth:`ForkableRun.fork` returns an independent copy that continues exactly as the original would
(given the same host), or differently when given another host: the hindsight oracle
(:mod:`tracekit.oracle`) forks the run at each victim decision and tries every candidate.

What a fork copies and what it shares (copy-on-write by construction):

- **Shared, never copied:** the configuration (frozen), the workload's requests that have not
  arrived (frozen :class:`~tracekit.engine.request.EngineRequest` rows in one tuple, the client
  feed's; a run makes their mutable :class:`~tracekit.engine.request.SchedulerRequest` only when
  they arrive, so the arrivals a fork has not reached cost nothing to copy).
- **Replaced:** the victim host (the caller passes the fork's host; without one, the run's host
  is deep-copied, so a stateful policy continues from its state) and the observer (a fork has
  none unless given one).
- **Fresh:** the record lists (a fork collects only what it produces itself); run totals
  (steps, decisions, preemptions, rejections, aborts, client queue time) carry on.
- **Deep-copied:** everything else the scheduler, the clock and the client feed hold (queues,
  request states, block pool, prefix cache, the feed's cursor, finish times and pending
  cancels), with :func:`copy.deepcopy`. Deep copy is deliberate: it stays correct as
  fields are added to the scheduler or the request state, where a hand-written snapshot would
  silently miss them. ``tests/test_engine_fork.py`` checks that a fork continues identically.
- **Copy-on-write where it pays** (the generic copy stays the fallback): request states are
  copied slot by slot with immutable values shared (:func:`_copy_slots`); a prefix-caching
  pool's blocks are made directly (:func:`_premake_cache_blocks`); and the untouched back of a
  long FCFS waiting queue (arrivals never scheduled) stays shared rows in the fork, made into
  states only when the queue's head reaches them (:class:`_LazyTailQueue`; open loop only: a
  client model's send times and cancels, or a measured latency model's clock, hold the states,
  so the whole queue is copied then).

Examples
--------
>>> from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest
>>> from tracekit.engine.engine import EngineRun
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
import dataclasses
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tracekit.engine.client_feed import ArrivalFeed
from tracekit.engine.config import EngineConfig
from tracekit.engine.fake_model import mark_arrived
from tracekit.engine.hosts import VictimHost
from tracekit.engine.interface import EngineScheduler
from tracekit.engine.prefix_cache import Block, PrefixCachingBlockPool
from tracekit.engine.queues import FCFSRequestQueue
from tracekit.engine.request import EngineRequest, RequestStatus, SchedulerRequest
from tracekit.engine.scheduler import VllmPrefixCachingScheduler, VllmScheduler

if TYPE_CHECKING:
    from typing import Self

__all__ = ["ForkableRun"]

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
    cls: Any = type(obj)
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
    lone = [entry for entry in cached.values() if type(entry) is Block]
    shared = [entry for entry in cached.values() if type(entry) is not Block]
    groups = [free_unhashed, free_hashed, lone, *shared, *held]
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
        head: deque[SchedulerRequest],
        arrivals: tuple[tuple[int, EngineRequest], ...],
        start: int,
        end: int,
        count: int,
        table: dict[str, SchedulerRequest],
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
        self._after: deque[SchedulerRequest] = deque()

    def _make_next(self) -> SchedulerRequest:
        """Make the first lazy arrival into a registered, arrived request state."""
        arrivals, max_len = self._arrivals, self._max_len
        while True:
            index, request = arrivals[self._lazy]
            self._lazy += 1
            if request.prompt_tokens < max_len:  # (a rejected one never queued)
                break
        state = SchedulerRequest(request, index)
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

    def add_request(self, request: SchedulerRequest) -> None:
        """Append to the back (after the lazy part)."""
        if self._lazy_count:
            self._after.append(request)
        else:
            self._queue.append(request)

    def peek_request(self) -> SchedulerRequest:
        """The front request; ``IndexError`` when empty."""
        self._fill()
        return self._queue[0]

    def pop_request(self) -> SchedulerRequest:
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

    def __iter__(self) -> Iterator[SchedulerRequest]:
        # Every state must exist to be iterated: make them (rare: consistency checks).
        self._make_all()
        return iter(self._queue)

    def made(self) -> list[SchedulerRequest]:
        """The states made so far, in queue order (nothing is made by this call)."""
        return [*self._queue, *self._after]


class ForkableRun:
    """What makes an engine run forkable: :meth:`fork` and the views the oracle reads.

    The base of :class:`~tracekit.engine.engine.EngineRun`, which owns the step loop and the
    attributes read here (``config``, ``scheduler``, ``clock``, ``feed``, ``host``,
    ``observer``, ``collect``, ``result``).
    """

    # Set by EngineRun.__init__ (declared for the type checker).
    config: EngineConfig
    scheduler: EngineScheduler
    clock: Any
    feed: ArrivalFeed
    host: VictimHost
    observer: Any
    collect: bool
    result: Any
    _wired: bool
    _wire_decisions: Any
    # The shared queue tail (see _unstarted_tail_length) and the state it was found in.
    _tail_start = 0
    _tail_length = 0
    _tail_key: tuple[Any, ...] | None = None

    def live_requests(self) -> list[SchedulerRequest]:
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

    def _unstarted_tail_length(self) -> int:
        """How many untouched arrivals sit at the back of an FCFS waiting queue.

        They are the last arrivals admitted to the queue, never scheduled: a fork can make them
        again from the frozen rows (``SchedulerRequest`` then ``add_request`` give the same state).
        Only for the embedded synchronous vLLM schedulers with an FCFS queue, where nothing but
        ``add_request`` appends to the back; the first ``max_num_seqs`` entries always stay.
        Sets ``_tail_start``, the arrival cursor of the first of them. Cached until the run
        moves (forking one snapshot many times scans its queue once).
        """
        scheduler = self.scheduler
        if type(scheduler) not in (VllmScheduler, VllmPrefixCachingScheduler):
            return 0
        assert isinstance(scheduler, VllmScheduler)  # (what the line above says, for mypy)
        feed = self.feed
        if not feed.is_open or hasattr(self.clock, "register"):
            # A client model sends requests later than their rows say (and may cancel them),
            # and a measured step-time model's clock holds every state: a state made again
            # from its row would differ, so the whole queue is copied.
            return 0
        waiting = scheduler.waiting
        if type(waiting) is not FCFSRequestQueue:
            return 0
        queue = waiting._queue
        key = (self.clock.step, self.clock.now, feed.num_sent, len(queue), scheduler.num_decisions)
        if self._tail_key == key:
            return self._tail_length
        limit = len(queue) - self.config.max_num_seqs
        requests = scheduler.requests
        max_model_len = self.config.max_model_len
        arrivals = feed.rows
        position = feed.num_sent
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
        observer: Any = None,
    ) -> Self:
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
        feed = self.feed
        memo: dict[int, Any] = {
            id(self.config): self.config,
            id(feed.rows): feed.rows,
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
                    feed.rows,
                    self._tail_start,
                    feed.num_sent,
                    shared,
                    new_states,
                    self.config.max_model_len,
                )
                memo[id(states)] = new_states
        twin.scheduler = copy.deepcopy(scheduler, memo)
        twin.clock = copy.deepcopy(self.clock, memo)
        # The client feed: its rows shared, its cursor, finish times and cancels copied (the
        # cancels name the copied request states through the memo).
        twin.feed = _copy_slots(feed, memo)
        twin.host = new_host
        twin.observer = observer
        twin.collect = self.collect if collect is None else collect
        if twin._wired:
            # Decision records only if the fork keeps or streams them (an embedded scheduler).
            twin._wire_decisions()
        # Fresh record lists; every run total carries on.
        twin.result = dataclasses.replace(
            self.result,
            steps=[],
            decisions=[],
            requests=[],
            num_decisions=scheduler.num_decisions,
        )
        return twin


def __getattr__(name: str) -> Any:
    # ``from tracekit.engine.fork import EngineRun``: the run lives in engine.py, which imports
    # this module (so it cannot be imported here at the top).
    if name == "EngineRun":
        from tracekit.engine.engine import EngineRun

        return EngineRun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
