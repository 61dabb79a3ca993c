"""The engine's arrival feed: when each request reaches the engine, and when its client cancels.

The rules are those of :mod:`tracekit.workloads.client` (``docs/workloads.md``, "Client
models"), written push-style so the engine loop can drive them one step at a time:

* open loop: request ``k`` is sent at its arrival ``a_k``;
* ``max_concurrency=M``: sent at ``a_k`` for ``k < M``, else at ``max(a_k, f_{k-M})``, ``f_j``
  being the ``j``-th earliest finish (or abort, or rejection) so far; ``d_k - a_k`` is its client
  queue time;
* ``concurrency=C`` (closed loop): sent at 0 for ``k < C``, else at ``f_{k-C} + think_time_s``,
  in row order;
* cancels: ``ttft_timeout_s=T`` cancels a request with no first token by ``d_k + T``; a recorded
  ``cancel_after_s=c`` cancels an unfinished one at ``d_k + c``.

The engine learns of a cancel at the first step boundary at or after its time, as vLLM's engine
core does between steps; a request that finished (or, for the TTFT timeout, produced its first
token no later than the cancel) by then is left alone. Standard library only; no randomness, so
runs stay deterministic.
"""

from __future__ import annotations

import heapq
from bisect import insort
from typing import Protocol

from tracekit.engine.request import FINISHED_STATUSES, EngineRequest, SchedulerRequest

__all__ = ["ArrivalFeed", "ClientLimits"]


class ClientLimits(Protocol):
    """The client model as the engine reads it (``tracekit.workloads.ClientModel`` fits)."""

    @property
    def max_concurrency(self) -> int | None:
        """At most this many requests in flight; the rest wait at the client."""
        ...

    @property
    def concurrency(self) -> int | None:
        """A closed loop of this many users."""
        ...

    @property
    def think_time_s(self) -> float:
        """A closed-loop user's pause between a finish and its next request."""
        ...

    @property
    def ttft_timeout_s(self) -> float | None:
        """Cancel a request with no first token this long after it was sent."""
        ...


_TTFT = 0
_CANCEL = 1


class ArrivalFeed:
    """Releases requests to the engine under a client model and tracks their cancel times.

    A request's mutable :class:`SchedulerRequest` is made only when it is sent (:meth:`pop`): the
    rows not sent yet stay the frozen requests, which a forked run shares
    (:mod:`tracekit.engine.fork`).

    Parameters
    ----------
    rows
        The requests as ``(input index, request)``, sorted by ``(arrival_s, index)``; in a
        closed loop they are sent in input order and their ``arrival_s`` is ignored.
    client
        The client model; ``None`` is the open loop with no cap and no timeout.
    """

    __slots__ = (
        "_closed",
        "_freed",
        "_next",
        "_slots",
        "_think",
        "_timeout",
        "deadlines",
        "may_abort",
        "rows",
    )

    def __init__(
        self, rows: tuple[tuple[int, EngineRequest], ...], client: ClientLimits | None
    ) -> None:
        closed = client is not None and client.concurrency is not None
        self._closed = closed
        # Never changed after this (a fork shares it); ``_next`` is the cursor of the next send.
        self.rows = tuple(sorted(rows, key=lambda row: row[0])) if closed else rows
        self._next = 0
        self._slots = None if client is None else (client.concurrency or client.max_concurrency)
        self._think = 0.0 if client is None else float(client.think_time_s)
        self._timeout = None if client is None else client.ttft_timeout_s
        # Finish times so far, sorted: the j-th earliest frees slot j.
        self._freed: list[float] = []
        # (cancel time, order pushed, kind, request): read by the engine loop before each step.
        self.deadlines: list[tuple[float, int, int, SchedulerRequest]] = []
        # Whether any request can be cancelled (a timeout or a recorded cancel).
        self.may_abort = self._timeout is not None or any(
            r.cancel_after_s is not None for _, r in self.rows
        )

    @property
    def is_open(self) -> bool:
        """Open loop, no cap, no cancels: each request is sent at its ``arrival_s``."""
        return not self._closed and self._slots is None and not self.may_abort

    @property
    def num_sent(self) -> int:
        """Requests sent so far (the cursor into :attr:`rows`)."""
        return self._next

    @property
    def remaining(self) -> int:
        """Requests not sent yet."""
        return len(self.rows) - self._next

    def next_due(self) -> float | None:
        """When the next request is sent, or ``None`` (all sent, or waiting for a finish)."""
        k = self._next
        rows = self.rows
        if k >= len(rows):
            return None
        due = 0.0 if self._closed else float(rows[k][1].arrival_s)
        slots = self._slots
        if slots is None or k < slots:
            return due
        freed = self._freed
        j = k - slots
        if j >= len(freed):
            return None
        return max(due, freed[j] + self._think)

    def pop(self, sent_s: float) -> SchedulerRequest:
        """Make and send the next request at ``sent_s`` (the value :meth:`next_due` gave)."""
        index, request = self.rows[self._next]
        state = SchedulerRequest(request, index)
        self._next += 1
        if self._closed:
            state.client_arrival_s = sent_s
        state.arrival_s = sent_s
        if self._timeout is not None:
            heapq.heappush(self.deadlines, (sent_s + self._timeout, self._next, _TTFT, state))
        if state.cancel_after_s is not None:
            heapq.heappush(
                self.deadlines, (sent_s + state.cancel_after_s, self._next, _CANCEL, state)
            )
        return state

    def finished(self, time_s: float) -> None:
        """Note that a sent request finished (or was aborted or rejected) at ``time_s``."""
        if self._slots is not None:
            insort(self._freed, time_s)

    def pop_cancels(self, until: float) -> list[tuple[SchedulerRequest, float]]:
        """Take the cancels due by ``until`` that still apply: ``(request, cancel time)``.

        A cancel applies to a request that has not finished and, for the TTFT timeout, has no
        first token by the cancel time. A request named twice is returned once, at its earlier
        cancel.
        """
        out: list[tuple[SchedulerRequest, float]] = []
        deadlines = self.deadlines
        taken: set[str] = set()
        while deadlines and deadlines[0][0] <= until:
            time_s, _, kind, state = heapq.heappop(deadlines)
            if state.status in FINISHED_STATUSES or state.request_id in taken:
                continue
            if kind == _TTFT and state.first_token_s is not None and state.first_token_s <= time_s:
                continue
            taken.add(state.request_id)
            out.append((state, time_s))
        return out
