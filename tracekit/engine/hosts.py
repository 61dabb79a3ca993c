"""How the engine asks for a preemption victim.

The scheduler builds one :class:`~tracekit.hosts.preemption_policy.PreemptionContext` per victim
decision (candidates in running-queue order, the requester included, the engine's own
``builtin_victim_id`` filled in) and calls ``choose_victim`` on a :class:`VictimHost`. The host
answers with a :class:`VictimChoice`; the engine preempts ``victim_id``. Four hosts:

- :class:`BuiltinHost`: the engine's own rule (docs/contracts.md, "The built-in victim").
- :class:`TypedHost`: a ``vllm.preemption-policy.v1`` policy behind the host's
  :class:`~tracekit.hosts.preemption_policy.PreemptionPolicyController`
  (docs/contracts.md, "The controller and its counters").
- :class:`LegacyHost`: a pre-0.28 ``pick_victim`` selector, with no failure isolation
  (docs/contracts.md, "Driving a selector: VictimSelectorHost").
- :class:`ContractHost`: any object with ``select_victim(context) -> str`` (a ``HostContract``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tracekit.hosts.preemption_policy import (
    PolicyOutcome,
    PreemptionContext,
    PreemptionPolicyController,
    builtin_victim_id,
    decision_reason_of,
)
from tracekit.hosts.victim_selector import SchedulingPolicy, VictimSelectorHost

__all__ = [
    "BuiltinHost",
    "ContractHost",
    "LegacyHost",
    "LegacySchedulingPolicy",
    "TypedHost",
    "VictimChoice",
    "VictimHost",
]


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """A host's answer to one victim decision.

    Parameters
    ----------
    victim_id
        The candidate to preempt; always one of the context's candidate ids.
    outcome
        What happened to the policy call (``selected``, ``abstained``, ``invalid``,
        ``exception``, ``disabled`` or ``builtin``).
    raw_result
        What the policy returned, before the host validated it (None when not called).
    decision_reason
        The policy's explanation when it exposes one, else None.
    counters
        The host's cumulative counters after the call, or None when it keeps none.
    """

    victim_id: str
    outcome: PolicyOutcome
    raw_result: object = None
    decision_reason: str | None = None
    counters: dict[str, Any] | None = None


class VictimHost(Protocol):
    """Chooses the victim of one decision; called by the scheduler thread, once per victim."""

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """Return the victim for ``context``; its ``victim_id`` must name a candidate."""
        ...


class BuiltinHost:
    """The engine's built-in victim: ``context.builtin_victim_id`` (vLLM's rule)."""

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """Apply the built-in rule; no policy is involved."""
        return VictimChoice(builtin_victim_id(context), "builtin")


class TypedHost:
    """A typed policy behind the controller (docs/contracts.md#the-controller-and-its-counters).

    The controller counts calls, applies the built-in victim on abstention, and disables the
    policy for the rest of the run after an exception or an invalid id; the engine stays
    consistent because it always gets a valid candidate id back.

    Parameters
    ----------
    policy
        Anything :class:`~tracekit.hosts.preemption_policy.PreemptionPolicyController` accepts:
        None, a qualified name, a class, a factory or an instance.
    vllm_config
        Passed to ``from_vllm_config`` factories.
    """

    def __init__(self, policy: Any, vllm_config: Any = None) -> None:
        self._last: tuple[PolicyOutcome, object] = ("builtin", None)
        # The engine runs in one thread, but a recorder may drive it from a worker thread.
        self.controller = PreemptionPolicyController(
            policy, vllm_config, on_call=self._observe, check_thread=False
        )
        # Kept after the controller drops a failed policy, to read its last decision.
        self._policy = self.controller.policy

    @property
    def policy(self) -> Any:
        """The configured policy object (kept after the controller disables it)."""
        return self._policy

    def _observe(self, outcome: PolicyOutcome, raw: object, victim: str) -> None:
        self._last = (outcome, raw)

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """Ask the controller; report its outcome, the raw result and its counters."""
        victim = self.controller.select_victim(context)
        outcome, raw = self._last
        reason = None
        if outcome in ("selected", "abstained"):
            reason = decision_reason_of(self._policy)
        return VictimChoice(victim, outcome, raw, reason, self.controller.export_stats())


# The queue policy a legacy ``pick_victim`` receives: the legacy host's own enum.
LegacySchedulingPolicy = SchedulingPolicy


class LegacyHost:
    """A legacy ``pick_victim(running, policy, *, kv_utilization, now_s)`` selector.

    The engine face of :class:`tracekit.hosts.victim_selector.VictimSelectorHost`, which makes
    the call: the candidates are passed as the running requests (a ``PreemptionCandidate``
    carries every attribute a selector reads); no requesting request reaches the selector. As in
    the legacy host there is no failure isolation: an exception propagates, and so does a
    returned object that is not one of the candidates (``RuntimeError``).

    Parameters
    ----------
    selector
        Any object with a ``pick_victim`` method of that signature.
    """

    def __init__(self, selector: Any) -> None:
        self.selector = selector
        self._host = VictimSelectorHost(selector)

    @property
    def policy_name(self) -> str:
        """The selector's ``module.Class``."""
        return self._host.policy_name

    @property
    def calls(self) -> int:
        """``pick_victim`` calls so far."""
        return self._host.calls

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """Call ``pick_victim`` once; the returned candidate object is the victim."""
        victim_id = self._host.select_victim(context)
        return VictimChoice(
            victim_id,
            "selected",
            victim_id,
            decision_reason_of(self.selector),
            self._host.export_stats(),
        )


class ContractHost:
    """Any host with ``select_victim(context) -> str`` (``tracekit.hosts.contract.HostContract``).

    Parameters
    ----------
    host
        The contract host; ``export_stats()`` is read after each call when present.
    """

    def __init__(self, host: Any) -> None:
        self.host = host

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """Call ``select_victim``; an id that is not a candidate raises ``RuntimeError``."""
        victim_id = self.host.select_victim(context)
        if not any(c.request_id == victim_id for c in context.candidates):
            raise RuntimeError(f"host returned {victim_id!r}, which is not a candidate")
        export = getattr(self.host, "export_stats", None)
        counters = dict(export()) if callable(export) else None
        return VictimChoice(victim_id, "selected", victim_id, None, counters)
