"""Conformance vectors of the original BidKV 0.2.1 (docs/policy.md, "Barrier mode (V3)").

Every expected value here is a number the reference lists, reached through the host side of the
typed contract (``tracekit.hosts.preemption_policy.PreemptionPolicyController``) where the vector
is a host-level one.

The legacy-versus-typed fixture (docs/contracts.md, "Legacy versus typed") is the original
repository's ``tests/fixtures/vllm_hust_scheduler_trace_v1.json``
(vLLM-HUST/vllm-hust-bidkv, commit 7031084), transcribed below as data. Its candidates reproduce
every utility the reference lists (r1 210.149, r3 117.312, r2 109.762; r7 145.454, r9 144.206,
r8 45.212), which the snapshot assertions check to six decimals.
"""

from __future__ import annotations

from collections import Counter
from enum import Enum
from types import SimpleNamespace
from typing import Any

import pytest

from bidkv.adapters.vllm_hust.selector import (
    BidkvPreemptionPolicy,
    BidkvSelectorConfig,
    BidkvVictimSelector,
)
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyController,
)

FIXTURE_ADDITIONAL_CONFIG = {
    "enable_utility_victim_selection": True,
    "utility_strategy": "bidkv",
    "utility_completion_weight": 0.5,
    "utility_preempt_weight": 0.3,
    "utility_kv_gate": 0.8,
    "utility_cooldown_s": 5.0,
    "utility_min_running": 2,
    "utility_snapshot_enabled": True,
    "utility_snapshot_top_k": 3,
    "utility_snapshot_history_size": 8,
}

# (policy, kv_utilization, now_s, running); each running row is
# (request_id, priority, arrival_time, num_computed_tokens, output_tokens, max_tokens,
#  num_preemptions).
FIXTURE_STEPS: list[tuple[str, float, float, list[tuple[str, int, float, int, int, int, int]]]] = [
    (
        "FCFS",
        0.92,
        10.0,
        [
            ("r1", 0, 1.0, 220, 12, 128, 0),
            ("r2", 0, 2.0, 260, 120, 128, 3),
            ("r3", 0, 3.0, 180, 60, 128, 1),
        ],
    ),
    (
        "FCFS",
        0.55,
        20.0,
        [
            ("r4", 0, 4.0, 300, 10, 128, 0),
            ("r5", 0, 5.0, 80, 5, 128, 0),
            ("r6", 0, 6.0, 120, 30, 128, 1),
        ],
    ),
    (
        "PRIORITY",
        0.96,
        30.0,
        [
            ("r7", 1, 7.0, 150, 8, 128, 0),
            ("r8", 4, 8.0, 90, 100, 128, 2),
            ("r9", 2, 9.0, 210, 40, 128, 1),
        ],
    ),
    (
        "FCFS",
        0.99,
        32.0,
        [
            ("r10", 0, 10.0, 260, 10, 128, 0),
            ("r11", 0, 11.0, 100, 20, 128, 0),
        ],
    ),
]

FIXTURE_METRICS = {
    "total_preemptions": 4,
    "total_tokens_freed": 590,
    "kv_pressure_events": 3,
    "consecutive_preempt_ratio": 0.0,
    "preemptions_per_request_p95": 1.0,
    "preempted_req_ids": ["r1", "r6", "r7", "r11"],
    "strategy_hit_rate": 0.5,
    "utility_strategy_hits": 2,
    "default_strategy_hits": 2,
    "liveness_fallback_hits": 0,
    "liveness_epochs": 0,
    "cascade_guard_hits": 0,
    "policy_abstentions": 0,
}


def fixture_candidates(
    running: list[tuple[str, int, float, int, int, int, int]],
) -> tuple[PreemptionCandidate, ...]:
    # The new-contract test of the original builds candidates with num_prompt_tokens=0.
    return tuple(
        PreemptionCandidate(rid, prio, arrival, 0, out, computed, preempted, max_tokens)
        for rid, prio, arrival, computed, out, max_tokens, preempted in running
    )


def fixture_vllm_config() -> SimpleNamespace:
    return SimpleNamespace(additional_config=dict(FIXTURE_ADDITIONAL_CONFIG))


def test_fixture_replay_through_the_typed_controller() -> None:
    controller = PreemptionPolicyController(BidkvPreemptionPolicy, fixture_vllm_config())
    victims = []
    for policy, kv, now, running in FIXTURE_STEPS:
        candidates = fixture_candidates(running)
        context = PreemptionContext(
            candidates,
            policy.lower(),
            candidates[0].request_id,
            kv,
            now,  # type: ignore[arg-type]
        )
        victims.append(controller.select_victim(context))
    assert victims == ["r1", "r6", "r7", "r11"]
    assert controller.export_stats() == {
        "policy_name": "bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy",
        "enabled": True,
        "calls": 4,
        "selections": 4,
        "abstentions": 0,
        "failures": 0,
        "invalid_selections": 0,
    }
    policy = controller.policy
    assert isinstance(policy, BidkvPreemptionPolicy)
    assert policy.export_metrics() == FIXTURE_METRICS
    snapshots = policy.get_recent_snapshots(limit=20)
    assert [s["decision_reason"] for s in snapshots] == ["strategy"] * 4
    assert [s["used_utility"] for s in snapshots] == [True, False, True, False]
    assert [s["default_victim_id"] for s in snapshots] == ["r3", "r6", "r8", "r11"]
    assert [(c["request_id"], c["utility"]) for c in snapshots[0]["candidates"]] == [
        ("r1", 210.149053),
        ("r3", 117.311533),
        ("r2", 109.762487),
    ]
    assert [(c["request_id"], c["utility"]) for c in snapshots[2]["candidates"]] == [
        ("r7", 145.454404),
        ("r9", 144.20591),
        ("r8", 45.211908),
    ]
    assert snapshots[1]["candidates"] == snapshots[3]["candidates"] == []


class SchedulingPolicy(Enum):
    FCFS = "fcfs"
    PRIORITY = "priority"


def test_fixture_replay_matches_between_legacy_and_typed_faces() -> None:
    # Matched legacy-versus-typed traces (docs/contracts.md, "Legacy versus typed"): identical
    # victims, metrics and snapshots.
    legacy = BidkvVictimSelector.from_vllm_config(fixture_vllm_config())
    typed = BidkvPreemptionPolicy.from_vllm_config(fixture_vllm_config())
    legacy_victims, typed_victims = [], []
    for policy, kv, now, running in FIXTURE_STEPS:
        candidates = fixture_candidates(running)
        victim = legacy.pick_victim(
            list(candidates), SchedulingPolicy[policy], kv_utilization=kv, now_s=now
        )
        legacy_victims.append(victim.request_id)
        typed_victims.append(
            typed.select_victim(PreemptionContext(candidates, policy.lower(), "", kv, now))  # type: ignore[arg-type]
        )
    assert legacy_victims == typed_victims == ["r1", "r6", "r7", "r11"]
    assert legacy.export_metrics() == typed.export_metrics() == FIXTURE_METRICS
    assert legacy.get_recent_snapshots(limit=20) == typed.get_recent_snapshots(limit=20)


def test_invalid_configuration_fails_on_both_faces() -> None:
    bad = SimpleNamespace(additional_config={"utility_completion_weight": -1})
    for cls in (BidkvPreemptionPolicy, BidkvVictimSelector):
        with pytest.raises(ValueError, match=r"^utility_completion_weight must be non-negative$"):
            cls.from_vllm_config(bad)


# -- single vectors -----------------------------------------------------------------------


def cand(rid: str, r: int, p: int = 0) -> PreemptionCandidate:
    return PreemptionCandidate(rid, 0, 0.0, 0, 0, r, p, 1024)


def context(cands: list[PreemptionCandidate], requester: str) -> PreemptionContext:
    return PreemptionContext(tuple(cands), "fcfs", requester, 0.95, 1.0)


def enabled(**settings: Any) -> BidkvSelectorConfig:
    return BidkvSelectorConfig(enable_utility_victim_selection=True, **settings)


def host_config(config: BidkvSelectorConfig) -> SimpleNamespace:
    # The host builds the policy itself through from_vllm_config (docs/contracts.md, "Loading"),
    # so tests hand
    # it a class and a vllm_config rather than an instance.
    return SimpleNamespace(additional_config=config.to_additional_config())


LIVENESS_CANDS = [cand("r1", 300, 2), cand("r2", 200, 2), cand("r3", 100, 2)]


def test_liveness_vector_v4() -> None:
    policy = BidkvPreemptionPolicy(enabled())
    assert policy.select_victim(context(LIVENESS_CANDS, "r2")) is None
    assert policy.liveness_offsets == {"r1": 2}
    m = policy.export_metrics()
    assert (m["liveness_fallback_hits"], m["liveness_epochs"], m["policy_abstentions"]) == (1, 1, 1)
    assert m["preempted_req_ids"] == ["r3"]  # the recorded default
    assert policy.select_victim(context(LIVENESS_CANDS, "r2")) == "r1"


def test_cascade_vectors_v4() -> None:
    policy = BidkvPreemptionPolicy(enabled(utility_liveness_preemptions=0))
    three = [cand("largest", 1000), cand("requester", 900), cand("small", 100)]
    assert policy.select_victim(context(three, "requester")) is None
    controller = PreemptionPolicyController(BidkvPreemptionPolicy, host_config(enabled()))
    assert controller.select_victim(context(three, "requester")) == "small"  # built-in
    assert controller.export_stats()["abstentions"] == 1
    two = [cand("largest", 2000), cand("requester", 900)]
    assert policy.select_victim(context(two, "requester")) == "largest"


# -- V3 (barrier mode) and V4 on the same inputs (docs/policy.md, "Barrier mode (V3)") ------


def test_liveness_vector_v3_barrier_then_v4() -> None:
    v3 = BidkvPreemptionPolicy(enabled(utility_liveness_mode="barrier"))
    assert v3.select_victim(context(LIVENESS_CANDS, "r2")) == "r2"  # progress barrier
    m = v3.export_metrics()
    assert (m["liveness_fallback_hits"], m["liveness_epochs"], m["policy_abstentions"]) == (1, 1, 0)
    assert v3.liveness_offsets == {"r1": 2, "r2": 2, "r3": 2}
    assert v3.get_recent_snapshots() == []
    assert v3.select_victim(context(LIVENESS_CANDS, "r2")) == "r1"  # utility again
    v4 = BidkvPreemptionPolicy(enabled())
    assert v4.select_victim(context(LIVENESS_CANDS, "r2")) is None
    assert v4.select_victim(context(LIVENESS_CANDS, "r2")) == "r1"


def test_barrier_without_requester_picks_the_default() -> None:
    v3 = BidkvPreemptionPolicy(
        enabled(utility_liveness_mode="barrier", utility_snapshot_enabled=True)
    )
    assert v3.select_victim(context(LIVENESS_CANDS, "")) == "r3"
    assert v3.get_recent_snapshots()[0]["decision_reason"] == "liveness_fallback"


def test_barrier_needs_every_candidate_and_more_than_one() -> None:
    v3 = BidkvPreemptionPolicy(enabled(utility_liveness_mode="barrier"))
    mixed = [cand("r1", 300, 2), cand("r2", 200, 1), cand("r3", 100, 2)]
    assert v3.select_victim(context(mixed, "r2")) == "r1"  # r2 below the bound: no barrier
    assert v3.select_victim(context([cand("solo", 5, 9)], "solo")) == "solo"
    assert v3.export_metrics()["liveness_fallback_hits"] == 0


def test_cascade_vectors_v3_barrier_then_v4(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="vllm")
    three = [cand("largest", 1000), cand("requester", 900), cand("small", 100)]
    two = [cand("largest", 2000), cand("requester", 900)]
    v3 = BidkvPreemptionPolicy(enabled(utility_liveness_mode="barrier"))
    assert v3.select_victim(context(three, "requester")) == "requester"
    assert caplog.records[-1].getMessage() == (
        "[BidKV] UTILITY_ACTIVE | victim=requester | U=899.9991 | r=900 tok | completion=0.00 | "
        "preemptions=0 | kv_util=0.95 | running=3 | cascade_guard=True"
    )
    assert v3.select_victim(context(two, "requester")) == "largest"
    m = v3.export_metrics()
    assert (m["cascade_guard_hits"], m["utility_strategy_hits"], m["policy_abstentions"]) == (
        1,
        2,
        0,
    )
    v4 = BidkvPreemptionPolicy(enabled())
    assert v4.select_victim(context(three, "requester")) is None
    assert v4.select_victim(context(two, "requester")) == "largest"


# -- sustained pressure ---------------------------------------------------------------------


def sustained_loop(
    config: BidkvSelectorConfig, steps: int = 120
) -> tuple[Counter[str], PreemptionPolicyController, BidkvPreemptionPolicy]:
    """Three running requests under constant pressure.

    Each step asks for one victim with the requester rotating r0, r1, r2. The host applies its
    built-in FCFS victim (the tail, r2) on an abstention, and increments the actual victim's
    ``num_preemptions`` by one, as vLLM's ``_preempt_request`` does; token counts stay constant.
    """
    controller = PreemptionPolicyController(BidkvPreemptionPolicy, host_config(config))
    policy = controller.policy
    assert isinstance(policy, BidkvPreemptionPolicy)
    tokens = {"r0": 1000, "r1": 975, "r2": 950}
    preemptions = dict.fromkeys(tokens, 0)
    victims: Counter[str] = Counter()
    for step in range(steps):
        candidates = tuple(
            PreemptionCandidate(rid, 0, float(i), 0, 0, tokens[rid], preemptions[rid], 1024)
            for i, rid in enumerate(tokens)
        )
        ctx = PreemptionContext(candidates, "fcfs", f"r{step % 3}", 1.0, float(step))
        victim = controller.select_victim(ctx)
        victims[victim] += 1
        preemptions[victim] += 1
    return victims, controller, policy


def test_sustained_pressure_loop_v4() -> None:
    victims, controller, policy = sustained_loop(enabled())
    assert victims == {"r0": 27, "r1": 26, "r2": 67}
    stats = controller.export_stats()
    assert (stats["calls"], stats["selections"], stats["abstentions"]) == (120, 55, 65)
    m = policy.export_metrics()
    assert m["policy_abstentions"] == 65
    assert (m["liveness_fallback_hits"], m["cascade_guard_hits"]) == (26, 39)
    assert m["utility_strategy_hits"] == 55
    assert m["policy_abstentions"] == m["liveness_fallback_hits"] + m["cascade_guard_hits"]
    assert m["liveness_epochs"] == m["liveness_fallback_hits"]


def test_sustained_pressure_loop_v3_never_abstains() -> None:
    # The V3 evidence: every call was a selection (483 of 483; 63 of 63).
    _, controller, policy = sustained_loop(enabled(utility_liveness_mode="barrier"))
    stats = controller.export_stats()
    assert (stats["calls"], stats["selections"], stats["abstentions"]) == (120, 120, 0)
    assert policy.export_metrics()["policy_abstentions"] == 0


# -- host controller vectors (docs/contracts.md, "The controller and its counters") ---------


class SelectFirst:
    def select_victim(self, ctx: PreemptionContext) -> str:
        return ctx.candidates[0].request_id


class Abstaining:
    def select_victim(self, ctx: PreemptionContext) -> None:
        return None


class Invalid:
    def select_victim(self, ctx: PreemptionContext) -> str:
        return "missing"


class Failing:
    calls = 0

    def select_victim(self, ctx: PreemptionContext) -> str:
        type(self).calls += 1
        raise RuntimeError("boom")


HOST_CTX = PreemptionContext((cand("first", 10), cand("last", 20)), "fcfs", "first", 0.9, 1.0)


def test_controller_select_first() -> None:
    controller = PreemptionPolicyController(SelectFirst())
    assert controller.select_victim(HOST_CTX) == "first"
    assert controller.export_stats()["selections"] == 1


def test_controller_abstaining() -> None:
    controller = PreemptionPolicyController(Abstaining())
    assert controller.select_victim(HOST_CTX) == "last"
    stats = controller.export_stats()
    assert (stats["abstentions"], stats["enabled"]) == (1, True)


def test_controller_invalid_selection_disables_the_policy() -> None:
    controller = PreemptionPolicyController(Invalid())
    assert controller.select_victim(HOST_CTX) == "last"
    assert controller.select_victim(HOST_CTX) == "last"
    stats = controller.export_stats()
    del stats["policy_name"]
    assert stats == {
        "enabled": False,
        "calls": 1,
        "selections": 0,
        "abstentions": 0,
        "failures": 1,
        "invalid_selections": 1,
    }


def test_controller_failing_policy_is_invoked_once() -> None:
    Failing.calls = 0
    controller = PreemptionPolicyController(Failing())
    assert controller.select_victim(HOST_CTX) == "last"
    assert controller.select_victim(HOST_CTX) == "last"
    assert Failing.calls == 1
    stats = controller.export_stats()
    assert (stats["failures"], stats["invalid_selections"], stats["calls"]) == (1, 0, 1)


def test_controller_without_policy() -> None:
    controller = PreemptionPolicyController(None)
    assert controller.select_victim(HOST_CTX) == "last"
    assert controller.export_stats() == {
        "policy_name": "builtin",
        "enabled": False,
        "calls": 0,
        "selections": 0,
        "abstentions": 0,
        "failures": 0,
        "invalid_selections": 0,
    }


def test_controller_loads_the_policy_by_qualified_name() -> None:
    controller = PreemptionPolicyController(
        "bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy",
        SimpleNamespace(additional_config={"enable_utility_victim_selection": True}),
    )
    assert controller.select_victim(HOST_CTX) == "last"  # 20 tokens beat 10
    assert controller.export_stats()["selections"] == 1
