"""The scheduler of experiment mode: vLLM's step with the legacy adapter's hooks before it.

:class:`HookedVllmScheduler` extends :class:`~tracekit.engine.scheduler.VllmScheduler` the way
the original monkey-patch wrapped vLLM's ``Scheduler.schedule``
(docs/experiments.md, "Experiment mode in the engine"): before every step it calls
:meth:`~tracekit.experiment.hooks.ExperimentHooks.before_schedule`, then runs the native
step unchanged. It also offers the hooks one way to preempt outside a step (through the engine's
single preemption primitive) and emulates, when asked, the original client's cap on requests in
flight (docs/experiments.md, "Summary figures").
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from tracekit.engine.base import DecisionCallback, ScheduledStep, make_candidates
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import VictimHost
from tracekit.engine.outputs import DecisionRecord
from tracekit.engine.request import SchedulerRequest
from tracekit.engine.scheduler import VllmScheduler

if TYPE_CHECKING:
    from tracekit.experiment.hooks import ExperimentHooks

__all__ = ["HookedVllmScheduler"]


class HookedVllmScheduler(VllmScheduler):
    """:class:`VllmScheduler` with :class:`ExperimentHooks` run before every step.

    ``schedule``, ``add_request``, ``update_from_output`` and ``has_unfinished_requests`` are
    extended (each calls ``super()``); the step itself is the unchanged vLLM step.

    Parameters
    ----------
    config
        Engine configuration: ``mode="vllm"`` and ``scheduling_policy="fcfs"`` (the original
        experiment's; its re-ordering relies on FCFS preempting the running tail).
    host
        Chooses the native step's victims (``BuiltinHost`` for the original experiment).
    hooks
        The run's hooks.
    on_decision
        Called with every decision record, hook preemptions included.

    Raises
    ------
    ValueError
        For another mode or scheduling policy.
    """

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        hooks: ExperimentHooks,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        if config.mode != "vllm" or config.scheduling_policy != "fcfs":
            raise ValueError(
                "experiment hooks need mode='vllm' and scheduling_policy='fcfs'; found "
                f"mode={config.mode!r}, scheduling_policy={config.scheduling_policy!r}"
            )
        if config.enable_prefix_caching or config.async_scheduling:
            # The original runner's vLLM ran neither; these hooks drive the plain step.
            raise ValueError(
                "experiment hooks need enable_prefix_caching=False and async_scheduling=False "
                "(the original runner's settings)"
            )
        super().__init__(config, host, on_decision)
        self.hooks = hooks
        self._hook_preemptions = 0
        # Arrived requests the emulated client has not sent yet, in arrival order.
        self._held: deque[SchedulerRequest] = deque()
        self._max_in_flight = hooks.settings.client_max_in_flight

    def add_request(self, request: SchedulerRequest) -> None:
        """Queue a newly arrived request and let the hooks stamp its first sighting.

        With ``client_max_in_flight`` set and that many requests already in the engine, the
        request waits on the client side instead (see :meth:`update_from_output`).
        """
        cap = self._max_in_flight
        if cap is not None and (self._held or len(self.requests) >= cap):
            self._held.append(request)
            return
        super().add_request(request)
        self.hooks.on_arrival(request, request.arrival_s)

    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[SchedulerRequest]:
        """Apply the step's outputs, then send held requests while the client cap allows."""
        finished = super().update_from_output(out, end_s)
        held = self._held
        while held and len(self.requests) < self._max_in_flight:  # type: ignore[operator]
            request = held.popleft()
            super().add_request(request)
            self.hooks.on_arrival(request, end_s)
        return finished

    def has_unfinished_requests(self) -> bool:
        """Whether any request runs, waits, or is held by the client."""
        return super().has_unfinished_requests() or bool(self._held)

    def schedule(self, step: int, now: float) -> ScheduledStep:
        """Run the hooks, then the native step; the step counts the hooks' preemptions too."""
        self._hook_preemptions = 0
        self.hooks.before_schedule(self, step, now)
        out = super().schedule(step, now)
        out.num_preemptions += self._hook_preemptions
        return out

    def preempt_outside_step(
        self, victim: SchedulerRequest, step: int, now: float, reason: str
    ) -> None:
        """Preempt a running request chosen by a hook, through the engine's one primitive.

        Reports a decision first: candidates are the running queue before the preemption, no
        requesting request, outcome ``selected`` with ``reason`` as the decision reason, and
        the built-in victim vLLM's FCFS rule would have taken (the tail).
        """
        running = self.running
        usage = self.block_pool.get_usage()
        if self.on_decision is not None:
            self.on_decision(
                DecisionRecord(
                    seq=self.num_decisions,
                    step=step,
                    time_s=now,
                    requesting_request_id="",
                    kv_cache_usage=usage,
                    candidates=make_candidates(running),
                    builtin_victim_id=self._builtin_victim().request_id,
                    raw_result=victim.request_id,
                    outcome="selected",
                    victim_id=victim.request_id,
                    decision_reason=reason,
                    counters=None,
                )
            )
        self.num_decisions += 1
        # Outside a step nothing is scheduled yet: an empty map refunds nothing and leaves the
        # previous step's record alone.
        self._scheduled = {}
        self._preempt(victim, 0)
        self._hook_preemptions += 1
