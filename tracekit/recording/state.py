"""The ``final_state`` of a recorded run's manifest, read from the victim host at the end.

Standard library only: the real-vLLM driver (``tracekit.vllm.driver``) runs the host inside the
vLLM environment and builds the same record there as ``tracekit record sim`` does here.
"""

from __future__ import annotations

from typing import Any

from tracekit.engine.hosts import LegacyHost, TypedHost

__all__ = ["final_state"]


def final_state(host: Any, num_steps: int, end_s: float) -> dict[str, Any]:
    """Controller counters, the policy's exported metrics and snapshots at the end of the run.

    Parameters
    ----------
    host
        The run's victim host (typed, legacy or built-in).
    num_steps
        Steps executed.
    end_s
        Engine time when the last step ended.

    Returns
    -------
    dict
        ``num_steps``, ``end_s`` and, for policy hosts, ``controller_stats`` and whatever the
        policy exports (``policy_metrics``, ``recent_snapshots``).
    """
    state: dict[str, Any] = {"num_steps": num_steps, "end_s": end_s}
    policy = None
    if isinstance(host, TypedHost):
        state["controller_stats"] = host.controller.export_stats()
        policy = host.policy
    elif isinstance(host, LegacyHost):
        state["controller_stats"] = {"policy_name": host.policy_name, "calls": host.calls}
        policy = host.selector
    if policy is not None:
        export = getattr(policy, "export_metrics", None)
        if callable(export):
            state["policy_metrics"] = export()
        snapshots = getattr(policy, "get_recent_snapshots", None)
        if callable(snapshots):
            state["recent_snapshots"] = snapshots(limit=20)
    return state
