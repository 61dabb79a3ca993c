"""The one interface a replay engine uses to ask an emulated engine host for a victim.

Both engine contracts are reached through it: the typed ``vllm.preemption-policy.v1`` host
(:class:`~tracekit.hosts.preemption_policy.PreemptionPolicyController`) and the legacy
``VictimSelector`` host (:class:`~tracekit.hosts.victim_selector.VictimSelectorHost`). The engine
builds one :class:`~tracekit.hosts.preemption_policy.PreemptionContext` per decision, in
running-queue order, and hands it to whichever host the replay was configured with. Standard
library only.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from tracekit.hosts.preemption_policy import PreemptionContext

__all__ = ["HostContract"]


@runtime_checkable
class HostContract(Protocol):
    """An engine host that owns one victim policy for one engine process.

    ``select_victim`` is called once per victim decision (one call per preempted request in a
    multi-victim cascade) by the scheduler thread, and always returns the ``request_id`` of one
    of ``context.candidates``. ``export_stats`` returns the host's cumulative per-process
    counters as a plain dictionary; its keys depend on the host, but every host reports
    ``policy_name`` and ``calls``.
    """

    def select_victim(self, context: PreemptionContext) -> str:
        """Return the id of the candidate to preempt for this decision."""
        ...

    def export_stats(self) -> dict[str, Any]:
        """The host's cumulative counters for this engine process."""
        ...
