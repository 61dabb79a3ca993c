"""Run the README's policy examples end to end.

The configuration and registry examples of the original BidKV README, then one BidKV victim
decision through the typed engine contract.

This is the README's first command until ``tracekit qualify`` exists.
"""

from __future__ import annotations

from bidkv import BaselineRegistry, BidKVConfig, BidKVStrategy, PreemptEvictStrategy
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyController,
)


def main() -> None:
    """Print each example's result."""
    assert BidKVConfig(enabled=True).is_active
    assert not BidKVConfig(enabled=True, kill_switch=True).is_active
    registry = BaselineRegistry()
    registry.register(BidKVStrategy())
    registry.register(PreemptEvictStrategy())
    print("registry:", registry.list_strategies())

    # Three running requests under KV pressure; r2's allocation just failed.
    candidates = (
        PreemptionCandidate("r0", 0, 0.0, 400, 120, 520, 0, 256),
        PreemptionCandidate("r1", 0, 1.0, 900, 10, 910, 1, 256),
        PreemptionCandidate("r2", 0, 2.0, 64, 3, 67, 0, 256),
    )
    context = PreemptionContext(candidates, "fcfs", "r2", 0.98, 12.0)
    policy = BidkvPreemptionPolicy(BidkvSelectorConfig(enable_utility_victim_selection=True))
    controller = PreemptionPolicyController(policy)
    victim = controller.select_victim(context)
    print(f"built-in (FCFS tail) victim: r2; BidKV victim: {victim}")
    print("controller stats:", controller.export_stats())
    print("policy metrics:", policy.export_metrics())


if __name__ == "__main__":
    main()
