"""Matched legacy-versus-typed scheduler traces (docs/contracts.md, "Legacy versus typed").

The same decisions are replayed through three hosts built from the installed package:

- the legacy host with the ``vllm.victim_selector`` entry point ``bidkv``;
- the legacy host with the admitted typed component ``org.vllm-hust.bidkv/victim-selector``;
- the typed ``PreemptionPolicyController`` with ``--preemption-policy`` set to
  ``bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy``.

They must choose the same victims and end with the same ``export_metrics()`` and
``get_recent_snapshots(limit=20)``; the same invalid configuration must fail startup on every path
with the same root cause; and the emergency bypass must give the built-in rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tracekit.hosts import (
    HostContract,
    NoOpVictimSelector,
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyController,
    VictimSelectorHost,
    VictimSelectorMaterializationError,
)

TRACE = Path(__file__).parent / "data" / "legacy_vs_typed" / "scheduler_trace.json"
BUNDLE_ID = "org.vllm-hust.bidkv"
COMPONENT = f"{BUNDLE_ID}/victim-selector"
POLICY = "bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy"

# The verified V4 outcome of this trace: utility pick, kv-gate fallback,
# utility pick under PRIORITY, cooldown fallback.
EXPECTED_VICTIMS = ["r1", "r6", "r7", "r11"]


# The policy's defaults and the host's admission, not the developer's shell (conftest.py).
pytestmark = pytest.mark.usefixtures("no_bidkv_environment")


@pytest.fixture(scope="module")
def trace() -> dict[str, Any]:
    return json.loads(TRACE.read_text())


def contexts(trace: dict[str, Any]) -> list[PreemptionContext]:
    """One context per step; the first running request is the requester, as in the original."""
    built = []
    for step in trace["steps"]:
        candidates = tuple(
            PreemptionCandidate(num_prompt_tokens=0, **request) for request in step["running"]
        )
        built.append(
            PreemptionContext(
                candidates=candidates,
                scheduling_policy=step["policy"].lower(),
                requesting_request_id=candidates[0].request_id,
                kv_cache_usage=step["kv_utilization"],
                now=step["now_s"],
            )
        )
    return built


def vllm_config(**additional_config: Any) -> SimpleNamespace:
    return SimpleNamespace(additional_config=additional_config)


def build_hosts(config: dict[str, Any]) -> dict[str, HostContract]:
    return {
        "legacy entry point": VictimSelectorHost.from_vllm_config(
            vllm_config(**config, victim_selector_plugin="bidkv"), bundles=[]
        ),
        "legacy typed bundle": VictimSelectorHost.from_vllm_config(
            vllm_config(**config, victim_selector_component=COMPONENT), bundles=[BUNDLE_ID]
        ),
        "typed controller": PreemptionPolicyController(POLICY, vllm_config(**config)),
    }


def policy_of(host: HostContract) -> Any:
    return host.selector if isinstance(host, VictimSelectorHost) else host.policy


def test_three_paths_replay_identically(trace: dict[str, Any]) -> None:
    from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvVictimSelector

    hosts = build_hosts(trace["additional_config"])
    assert type(policy_of(hosts["legacy entry point"])) is BidkvVictimSelector
    assert type(policy_of(hosts["legacy typed bundle"])) is BidkvVictimSelector
    assert type(policy_of(hosts["typed controller"])) is BidkvPreemptionPolicy

    victims = {
        name: [host.select_victim(context) for context in contexts(trace)]
        for name, host in hosts.items()
    }
    assert victims == dict.fromkeys(hosts, EXPECTED_VICTIMS)

    metrics = {name: policy_of(host).export_metrics() for name, host in hosts.items()}
    snapshots = {
        name: policy_of(host).get_recent_snapshots(limit=20) for name, host in hosts.items()
    }
    reference = metrics["typed controller"]
    assert metrics == dict.fromkeys(hosts, reference)
    assert snapshots == dict.fromkeys(hosts, snapshots["typed controller"])

    # Independent facts of this trace: r1+r6+r7+r11 computed tokens freed.
    assert reference["total_preemptions"] == 4
    assert reference["total_tokens_freed"] == 220 + 120 + 150 + 100
    assert reference["kv_pressure_events"] == 3  # kv 0.92, 0.96, 0.99 >= gate 0.8
    assert reference["utility_strategy_hits"] == 2
    assert reference["default_strategy_hits"] == 2
    assert reference["strategy_hit_rate"] == 0.5
    assert reference["preemptions_per_request_p95"] == 1.0
    assert reference["consecutive_preempt_ratio"] == 0.0
    assert reference["policy_abstentions"] == 0
    assert [s["selected_victim_id"] for s in snapshots["typed controller"]] == EXPECTED_VICTIMS
    assert [s["used_utility"] for s in snapshots["typed controller"]] == [True, False, True, False]

    stats = hosts["typed controller"].export_stats()
    assert stats | {"policy_name": POLICY} == {
        "policy_name": POLICY,
        "enabled": True,
        "calls": 4,
        "selections": 4,
        "abstentions": 0,
        "failures": 0,
        "invalid_selections": 0,
    }
    assert hosts["legacy entry point"].export_stats()["calls"] == 4
    assert hosts["legacy typed bundle"].export_stats()["calls"] == 4


def test_typed_host_reports_the_qualified_name_engines_load() -> None:
    # The controller names the policy f"{type(policy).__module__}.{__qualname__}"
    # (docs/policy.md, "Loading"); analysers match that label against the configured
    # --preemption-policy, so the class must report the module engines load it from.
    controller = PreemptionPolicyController(POLICY, vllm_config())
    assert controller.export_stats()["policy_name"] == POLICY


def test_invalid_config_fails_startup_with_the_same_root_cause(trace: dict[str, Any]) -> None:
    invalid = {**trace["additional_config"], "utility_completion_weight": -1}
    with pytest.raises(RuntimeError) as legacy:
        VictimSelectorHost.from_vllm_config(
            vllm_config(**invalid, victim_selector_plugin="bidkv"), bundles=[]
        )
    with pytest.raises(VictimSelectorMaterializationError) as typed_bundle:
        VictimSelectorHost.from_vllm_config(
            vllm_config(**invalid, victim_selector_component=COMPONENT), bundles=[BUNDLE_ID]
        )
    with pytest.raises(ValueError) as controller:
        PreemptionPolicyController(POLICY, vllm_config(**invalid))

    root_causes = [legacy.value.__cause__, typed_bundle.value.__cause__, controller.value]
    assert [type(cause) for cause in root_causes] == [ValueError] * 3
    assert [str(cause) for cause in root_causes] == [
        "utility_completion_weight must be non-negative"
    ] * 3
    assert str(legacy.value) == (
        "Failed to load requested victim selector plugin 'bidkv': "
        "utility_completion_weight must be non-negative"
    )
    assert str(typed_bundle.value) == (
        f"scheduler-policy component '{COMPONENT}' failed to initialize"
    )


def test_emergency_bypass_gives_the_builtin_rule(trace: dict[str, Any]) -> None:
    disabled = vllm_config(
        **trace["additional_config"],
        victim_selector_plugin="bidkv",
        victim_selector_component=COMPONENT,
        victim_selector_plugin_disabled=True,
    )
    legacy = VictimSelectorHost.from_vllm_config(disabled, bundles=[BUNDLE_ID])
    builtin = PreemptionPolicyController(None, disabled)
    assert type(legacy.selector) is NoOpVictimSelector
    # FCFS tail, FCFS tail, PRIORITY max (r8 has priority 4), FCFS tail.
    expected = ["r3", "r6", "r8", "r11"]
    assert [legacy.select_victim(context) for context in contexts(trace)] == expected
    assert [builtin.select_victim(context) for context in contexts(trace)] == expected
    assert builtin.export_stats()["policy_name"] == "builtin"
    assert builtin.export_stats()["enabled"] is False
    assert builtin.export_stats()["calls"] == 0


def test_legacy_path_has_no_requester_so_the_cascade_rule_never_fires() -> None:
    # The one known divergence (docs/contracts.md, "Legacy versus typed"): the typed host names the
    # requester and
    # the V4 cascade rule abstains (900 * 1.25 >= 1000); the legacy call names none.
    config = {"enable_utility_victim_selection": True, "utility_strategy": "bidkv"}
    candidates = tuple(
        PreemptionCandidate(request_id, 0, float(index), 0, 0, tokens, 0, 128)
        for index, (request_id, tokens) in enumerate(
            [("largest", 1000), ("requester", 900), ("small", 100)]
        )
    )
    context = PreemptionContext(candidates, "fcfs", "requester", 0.95, 1.0)
    legacy = VictimSelectorHost.from_vllm_config(
        vllm_config(**config, victim_selector_plugin="bidkv"), bundles=[]
    )
    typed = PreemptionPolicyController(POLICY, vllm_config(**config))
    assert legacy.select_victim(context) == "largest"
    assert typed.select_victim(context) == "small"  # abstained: the built-in FCFS tail
    assert typed.export_stats()["abstentions"] == 1
    assert typed.policy.export_metrics()["cascade_guard_hits"] == 1
    assert legacy.selector.export_metrics()["cascade_guard_hits"] == 0
