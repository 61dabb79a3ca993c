"""Waiting queues, one per scheduling policy (vLLM ``vllm/v1/core/sched/request_queue.py``).

FCFS is a deque: new requests join the back and preempted ones go back to the front. PRIORITY is
a heap ordered as vLLM's ``Request.__lt__``: ``(priority, arrival_time, request_id)``; there is no
front to go back to, so "prepend" is the same as "add".
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tracekit.engine.request import SchedulerRequest

__all__ = [
    "FCFSRequestQueue",
    "PriorityRequestQueue",
    "RequestQueue",
    "create_request_queue",
]


class RequestQueue(Protocol):
    """The waiting queue the scheduler admits from."""

    def add_request(self, request: SchedulerRequest) -> None:
        """Add a newly arrived request according to the policy."""
        ...

    def prepend_request(self, request: SchedulerRequest) -> None:
        """Put a preempted request back (front for FCFS; by key for PRIORITY)."""
        ...

    def peek_request(self) -> SchedulerRequest:
        """The request the scheduler would admit next."""
        ...

    def pop_request(self) -> SchedulerRequest:
        """Remove and return the request :meth:`peek_request` shows."""
        ...

    def __len__(self) -> int:
        """Number of waiting requests."""
        ...

    def __iter__(self) -> Iterator[SchedulerRequest]:
        """The waiting requests in admission order."""
        ...


class FCFSRequestQueue:
    """First come, first served; a preempted request goes back to the front."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[SchedulerRequest] = deque()

    def add_request(self, request: SchedulerRequest) -> None:
        """Append to the back."""
        self._queue.append(request)

    def prepend_request(self, request: SchedulerRequest) -> None:
        """Put at the front (vLLM ``FCFSRequestQueue.prepend_request``)."""
        self._queue.appendleft(request)

    def peek_request(self) -> SchedulerRequest:
        """The front request; ``IndexError`` when empty."""
        return self._queue[0]

    def pop_request(self) -> SchedulerRequest:
        """Remove the front request."""
        return self._queue.popleft()

    def sort(self, key: Callable[[SchedulerRequest], Any]) -> None:
        """Stable-sort the queue by ``key``, smallest at the front.

        Not a vLLM operation: the legacy BidKV experiment hooks re-sort vLLM's waiting deque
        before every step (shortest-prompt-first admission,
        docs/experiments.md, "Experiment mode in the engine"). The default scheduler never calls it.
        """
        self._queue = deque(sorted(self._queue, key=key))

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[SchedulerRequest]:
        return iter(self._queue)


class PriorityRequestQueue:
    """A heap by ``(priority, arrival_time, request_id)``; lower priority values first."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, str, SchedulerRequest]] = []

    def add_request(self, request: SchedulerRequest) -> None:
        """Push by key."""
        heapq.heappush(
            self._heap, (request.priority, request.arrival_s, request.request_id, request)
        )

    def prepend_request(self, request: SchedulerRequest) -> None:
        """Same as :meth:`add_request`: a heap has no front (as in vLLM)."""
        self.add_request(request)

    def peek_request(self) -> SchedulerRequest:
        """The smallest request; ``IndexError`` when empty."""
        return self._heap[0][3]

    def pop_request(self) -> SchedulerRequest:
        """Remove the smallest request."""
        return heapq.heappop(self._heap)[3]

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[SchedulerRequest]:
        return (entry[3] for entry in sorted(self._heap))


def create_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    """The waiting queue for ``policy`` (``"fcfs"`` or ``"priority"``).

    Raises
    ------
    ValueError
        For any other policy name.
    """
    if policy == "fcfs":
        return FCFSRequestQueue()
    if policy == "priority":
        return PriorityRequestQueue()
    raise ValueError(f"scheduling_policy must be one of fcfs, priority; found {policy!r}")
