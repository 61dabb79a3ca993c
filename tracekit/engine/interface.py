"""The contract between :func:`~tracekit.engine.run_engine` and a scheduler.

In the manner of vLLM's ``SchedulerInterface`` (``vllm/v1/core/sched/interface.py``): the verbs
the step loop calls, nothing else. Three schedulers implement it: the embedded ``VllmScheduler``
and ``SglangScheduler`` (through :class:`~tracekit.engine.base.SchedulerBase`), and the adapter
around the real vLLM scheduler in ``tracekit.vllm.driver``. A ``scheduler_factory`` given to
``run_engine`` builds any of them, so the step loop (arrivals, clock, records) exists once.

One step, as ``run_engine`` drives it::

    scheduler.add_request(state)              # each arrival visible to the step
    out = scheduler.schedule(step, now)       # decisions go to on_decision as they are made
    len(scheduler.running), len(scheduler.waiting), scheduler.block_pool.num_free_blocks
    finished = scheduler.update_from_output(out, end_s)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tracekit.engine.base import ScheduledStep
    from tracekit.engine.config import EngineConfig
    from tracekit.engine.hosts import VictimHost
    from tracekit.engine.outputs import DecisionRecord
    from tracekit.engine.request import SchedulerRequest

__all__ = ["BlockPoolView", "EngineScheduler", "QueueView", "SchedulerFactory"]


class BlockPoolView(Protocol):
    """The KV block counts the step record reports."""

    @property
    def num_usable_blocks(self) -> int:
        """Blocks a request can hold (the null block excluded); constant over a run."""
        ...

    @property
    def num_free_blocks(self) -> int:
        """Usable blocks no request holds now."""
        ...


class QueueView(Protocol):
    """A queue as the loop reads it: its length, and its requests in order."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...


class EngineScheduler(Protocol):
    """What the step loop needs from a scheduler.

    ``running`` and ``waiting`` are the queues as they stand (read for their lengths after
    ``schedule()``, before ``update_from_output``); ``num_decisions`` counts the victim decisions
    made so far.
    """

    @property
    def running(self) -> Sized:
        """The running queue."""
        ...

    @property
    def waiting(self) -> QueueView:
        """The waiting queue (preempted requests included; its ids name a stuck run)."""
        ...

    @property
    def block_pool(self) -> BlockPoolView:
        """The KV block counts."""
        ...

    @property
    def num_decisions(self) -> int:
        """Victim decisions made so far."""
        ...

    def add_request(self, request: SchedulerRequest) -> None:
        """Take a request that has just arrived; ``ValueError`` on a duplicate id.

        The request's prompt is shorter than ``max_model_len`` (the loop rejects longer ones).
        """
        ...

    def has_unfinished_requests(self) -> bool:
        """Whether a request is still waiting, running or held: the loop steps while true."""
        ...

    def schedule(self, step: int, now: float) -> ScheduledStep:
        """Run one scheduling step at engine time ``now``.

        Returns the scheduled tokens per request in scheduling order, the step's prefill and
        decode tokens (for vLLM, :func:`~tracekit.engine.fake_model.split_tokens`), the KV tokens
        read and the preemptions. Every victim decision is passed to the ``on_decision``
        callback the scheduler was built with, in order, before this returns.
        ``num_computed_tokens`` of the scheduled requests has advanced.
        """
        ...

    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[SchedulerRequest]:
        """Apply the fake model's output of step ``out``, which ended at ``end_s``.

        Returns the requests that finished, in scheduling order, with their outcome fields
        (``status``, ``num_output_tokens``, times, preemptions) final.
        """
        ...

    def check_consistency(self) -> None:
        """Re-check the scheduler's bookkeeping from scratch; ``AssertionError`` if broken."""
        ...


#: Builds the scheduler of one run from its configuration, host (``None``: the scheduler's own
#: rule) and decision callback.
SchedulerFactory = Callable[
    ["EngineConfig", "VictimHost | None", "Callable[[DecisionRecord], None]"], EngineScheduler
]
