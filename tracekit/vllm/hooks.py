"""Seeing, and optionally choosing, the preemption victims of a real vLLM v1 ``Scheduler``.

Standard library only; works on a ``vllm.v1.core.sched.scheduler.Scheduler`` instance without
importing vLLM itself. Two instance attributes are wrapped (nothing in vLLM is copied or
patched at class level):

``scheduler.kv_cache_manager.allocate_slots``
    When it returns ``None`` for a RUNNING request, the running scan is about to preempt: the
    hooks take the decision context there (the running queue in order, which still holds the
    victim; the requester, i.e. the request whose allocation failed; the KV usage).
``scheduler._preempt_request``
    Called by the scan with the victim it removed from ``running``: the hooks emit the decision
    (and count the computed tokens the preemption throws away) before vLLM's own code runs.

**Observation** (``host=None``) changes nothing: the victim recorded is the one vLLM chose.

**The shim** (``host`` given) asks the host for every victim at the failed allocation and makes
the scheduler's own code preempt it. vLLM 0.32/0.33 choose a victim in two ways: FCFS takes
``running[-1]`` and ``running.pop()``s it; PRIORITY takes ``max(running, key=(priority,
arrival_time))``, deletes it by index, moves the scan cursor back if it sat before it and, if it
was already scheduled in this step, gives its tokens back to the budget and drops it from the
step's output. The second path is correct for any victim, so the shim always sends the scheduler
down it: ``scheduler.policy`` becomes a :class:`_PolicySwitch` that compares equal to
``PRIORITY`` while a chosen victim is pending and to the configured policy otherwise (so the
0.33 rule "continue after a PRIORITY self-preemption" still follows the configured policy), and
the chosen victim's ``priority`` is raised above every other for the instant between the
``max()`` and ``_preempt_request``, where it is restored before vLLM requeues the victim. If
vLLM then preempts anything but the chosen victim, :class:`ShimError` stops the run rather than
record a decision that was not applied. ``docs/vllm-recorder.md`` lists the limits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from tracekit.engine.hosts import VictimChoice, VictimHost
from tracekit.engine.outputs import DecisionRecord
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    builtin_victim,
    candidates_of,
)

__all__ = ["SchedulerHooks", "ShimError"]


class ShimError(RuntimeError):
    """The real scheduler did not behave as the hooks expect (a vLLM change, most likely)."""


class _Pending(NamedTuple):
    """The context of the victim decision the running scan is about to make."""

    requester: Any
    candidates: tuple[PreemptionCandidate, ...]
    usage: float
    builtin_id: str
    choice: VictimChoice | None
    # Per candidate: (KV blocks held, blocks only it holds), as the embedded engine records.
    blocks: tuple[tuple[int, int], ...]


class _PolicySwitch:
    """Stands in for ``scheduler.policy``: PRIORITY while a chosen victim is pending.

    ``self.policy == SchedulingPolicy.PRIORITY`` asks this object first (it is the left operand),
    so the scan's two victim branches take the by-index path for the shim's victim, and every
    other comparison sees the configured policy.
    """

    __slots__ = ("_hooks", "_priority", "real")

    def __init__(self, real: Any, priority: Any, hooks: SchedulerHooks) -> None:
        self.real = real
        self._priority = priority
        self._hooks = hooks

    def __eq__(self, other: object) -> bool:
        if self._hooks.forced_victim is not None:
            return bool(other == self._priority)
        return bool(self.real == other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __repr__(self) -> str:
        return f"_PolicySwitch({self.real!r})"


class SchedulerHooks:
    """Observe, or with a host steer, the preemptions of one real vLLM ``Scheduler``.

    Parameters
    ----------
    scheduler
        A freshly built vLLM v1 ``Scheduler`` (no step run yet).
    scheduling_policy
        ``"fcfs"`` or ``"priority"``: the configured policy, as passed to policies.
    running_status
        vLLM's ``RequestStatus.RUNNING``.
    priority_policy
        vLLM's ``SchedulingPolicy.PRIORITY`` (needed by the shim only).
    host
        ``None`` to observe vLLM's own victims; otherwise the victim host the shim asks.
    on_decision
        Receives every decision record, in order, just before vLLM preempts the victim.
    """

    def __init__(
        self,
        scheduler: Any,
        *,
        scheduling_policy: str,
        running_status: Any,
        priority_policy: Any = None,
        host: VictimHost | None = None,
        on_decision: Callable[[DecisionRecord], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.scheduling_policy = scheduling_policy
        self.host = host
        self.on_decision = on_decision
        self.step = 0
        self.now = 0.0
        self.num_decisions = 0
        self.num_preempted_in_step = 0
        # vLLM's victim differed from the built-in rule as documented (observation only).
        self.builtin_rule_mismatches = 0
        # request_id -> computed tokens thrown away by its preemptions.
        self.recomputed_tokens: dict[str, int] = {}
        self.forced_victim: Any = None
        self._forced_priority: Any = None
        self._pending: _Pending | None = None
        self._running_status = running_status
        manager = scheduler.kv_cache_manager
        # The full-attention group's request -> blocks map (one KV cache group on this model).
        self._req_to_blocks = manager.coordinator.single_type_managers[0].req_to_blocks
        self._block_size = int(scheduler.cache_config.block_size)
        self._allocate_slots = manager.allocate_slots
        self._preempt_request = scheduler._preempt_request
        manager.allocate_slots = self._on_allocate_slots
        scheduler._preempt_request = self._on_preempt_request
        if host is not None:
            if priority_policy is None:
                raise ValueError("the shim needs vLLM's SchedulingPolicy.PRIORITY")
            scheduler.policy = _PolicySwitch(scheduler.policy, priority_policy, self)

    # ---------------------------------------------------------------------------- steps
    def begin_step(self, step: int, now: float) -> None:
        """Set the step index and time that decisions of the next ``schedule()`` carry."""
        self.step = step
        self.now = now
        self.num_preempted_in_step = 0

    def end_step(self) -> None:
        """Check that no chosen victim is left pending once ``schedule()`` returned."""
        if self._pending is not None and self._pending.choice is not None:
            victim = self._pending.choice.victim_id
            self._release()
            self._pending = None
            raise ShimError(
                f"step {self.step}: the host chose {victim!r} but vLLM preempted nothing; the "
                "shim does not match this vLLM's running scan"
            )
        self._pending = None

    # ---------------------------------------------------------------------------- wrappers
    def _on_allocate_slots(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._pending is not None and self._pending.choice is not None:
            # A chosen victim that vLLM did not preempt before allocating again.
            victim = self._pending.choice.victim_id
            self._release()
            self._pending = None
            raise ShimError(
                f"step {self.step}: vLLM retried an allocation without preempting the host's "
                f"victim {victim!r}; the shim does not match this vLLM's running scan"
            )
        self._pending = None
        blocks = self._allocate_slots(request, *args, **kwargs)
        if blocks is None and request.status == self._running_status:
            self._pending = self._decide(request)
        return blocks

    def _on_preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        pending = self._pending
        self._pending = None
        if pending is None:
            raise ShimError(
                f"step {self.step}: vLLM preempted {request.request_id!r} outside the running "
                "scan's allocation loop; the recorder does not model that path"
            )
        if pending.choice is not None:
            self._release()
            choice = pending.choice
            if request.request_id != choice.victim_id:
                raise ShimError(
                    f"step {self.step}: the host chose {choice.victim_id!r} but vLLM preempted "
                    f"{request.request_id!r}; the shim does not match this vLLM's running scan"
                )
            builtin_id = pending.builtin_id
        else:
            builtin_id = request.request_id
            if builtin_id != pending.builtin_id:
                self.builtin_rule_mismatches += 1
            choice = VictimChoice(builtin_id, "builtin")
        position = next(
            i for i, c in enumerate(pending.candidates) if c.request_id == request.request_id
        )
        freed = pending.blocks[position][1]
        record = DecisionRecord.of_choice(
            self.num_decisions,
            self.step,
            self.now,
            pending.requester.request_id,
            pending.usage,
            pending.candidates,
            builtin_id,
            choice,
            pending.blocks,
            freed,
            self._block_size,
        )
        self.num_decisions += 1
        self.num_preempted_in_step += 1
        rid = request.request_id
        self.recomputed_tokens[rid] = (
            self.recomputed_tokens.get(rid, 0) + request.num_computed_tokens
        )
        if self.on_decision is not None:
            self.on_decision(record)
        return self._preempt_request(request, *args, **kwargs)

    # ---------------------------------------------------------------------------- decisions
    def _decide(self, requester: Any) -> _Pending:
        running = self.scheduler.running
        candidates = candidates_of(running)
        usage = float(self.scheduler.kv_cache_manager.usage)
        # Only blocks at reference count 1 go back to the free queue when their holder is
        # preempted (BlockPool.free_blocks); shared prefix blocks stay held by the others.
        req_to_blocks = self._req_to_blocks
        blocks = tuple(
            (len(held), sum(1 for b in held if b.ref_cnt == 1))
            for held in (req_to_blocks.get(r.request_id, ()) for r in running)
        )
        # vLLM's rule as documented (docs/engine.md): PRIORITY max, FCFS the tail.
        builtin = builtin_victim(running, self.scheduling_policy)
        if self.host is None:
            return _Pending(requester, candidates, usage, builtin.request_id, None, blocks)
        context = PreemptionContext(
            candidates,
            self.scheduling_policy,  # type: ignore[arg-type]
            requester.request_id,
            usage,
            self.now,
            builtin.request_id,
        )
        choice = self.host.choose_victim(context)
        victim = next((r for r in running if r.request_id == choice.victim_id), None)
        if victim is None:
            raise ShimError(f"the host chose {choice.victim_id!r}, which is not running")
        # Make the victim the unique maximum of vLLM's PRIORITY key until _preempt_request.
        self.forced_victim = victim
        self._forced_priority = victim.priority
        victim.priority = math.inf
        return _Pending(requester, candidates, usage, builtin.request_id, choice, blocks)

    def _release(self) -> None:
        victim = self.forced_victim
        if victim is not None:
            victim.priority = self._forced_priority
            self.forced_victim = None
            self._forced_priority = None
