"""The ``bidkv`` strategy (V4; docs/policy.md, "The bidkv decision"): utility, ranking, gates,
guards, counters, snapshots, log lines, and the legacy ``pick_victim`` face.

Expected numbers are worked by hand from the formulas: ``U = r / (1 + w_c*c + w_p*P + eps)``.
"""

from __future__ import annotations

import logging
from enum import Enum
from types import SimpleNamespace

import pytest

from bidkv.adapters.vllm_hust.metrics import percentile
from bidkv.adapters.vllm_hust.scoring import rank_candidates, score_candidate
from bidkv.adapters.vllm_hust.selector import (
    BidkvPreemptionPolicy,
    BidkvSelectorConfig,
    BidkvVictimSelector,
    UtilityCandidateScore,
)
from tracekit.hosts.preemption_policy import PreemptionCandidate, PreemptionContext

LOGGER = "vllm"


def cand(
    rid: str,
    r: int,
    *,
    out: int = 0,
    max_tokens: int = 1024,
    p: int = 0,
    arrival: float = 0.0,
    priority: int = 0,
    prompt: int = 0,
) -> PreemptionCandidate:
    return PreemptionCandidate(rid, priority, arrival, prompt, out, r, p, max_tokens)


def ctx(
    cands: list[PreemptionCandidate],
    requester: str = "",
    policy: str = "fcfs",
    kv: float | None = 1.0,
    now: float | None = 0.0,
) -> PreemptionContext:
    return PreemptionContext(tuple(cands), policy, requester, kv, now)  # type: ignore[arg-type]


def make(**settings: object) -> BidkvPreemptionPolicy:
    return BidkvPreemptionPolicy(
        BidkvSelectorConfig(enable_utility_victim_selection=True, **settings)  # type: ignore[arg-type]
    )


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


# -- utility and ranking ------------------------------------------------------------------


def test_utility_reference_vector() -> None:
    # U(r=220, out=12, M=128, P=0) = 220 / (1 + 0.5*0.09375 + 1e-6) = 210.149053
    s = score_candidate(cand("r1", 220, out=12, max_tokens=128), 0.5, 0.3, 1e-6, 1024)
    assert s == UtilityCandidateScore("r1", s.utility, s.utility, 220, 0.09375, 0, 0.0)
    assert round(s.utility, 6) == 210.149053
    assert s.utility == 220 / (1 + 0.5 * 0.09375 + 1e-6)


def test_utility_inputs_are_coerced_like_the_original() -> None:
    # Negative r and P clamp to 0; completion clamps to [0, 1]; a non-positive max_tokens uses
    # the default; None counts as 0.
    s = score_candidate(cand("a", -5, out=4000, max_tokens=0, p=-3), 0.5, 0.3, 1e-6, 1024)
    assert (s.tokens_freed, s.completion, s.num_preemptions, s.utility) == (0, 1.0, 0, 0.0)
    s = score_candidate(cand("b", 100, out=512, max_tokens=-1, p=2), 0.5, 0.3, 1e-6, 1024)
    assert s.completion == 0.5
    assert s.utility == 100 / (1 + 0.25 + 0.6 + 1e-6)
    duck = SimpleNamespace(request_id=7, num_computed_tokens=None, arrival_time=None)
    s = score_candidate(duck, 0.5, 0.3, 1e-6, 1024)
    assert (s.request_id, s.tokens_freed, s.arrival_time, s.utility) == ("7", 0, 0.0, 0.0)


def test_victim_maximises_utility_not_tokens() -> None:
    # big: 1000/(1+0.5*1+0.3*4) = 370.37; small: 600/1 = 600 -> small is the victim.
    policy = make(utility_liveness_preemptions=0)
    cands = [cand("big", 1000, out=1024, p=4), cand("small", 600), cand("tail", 10)]
    assert policy.select_victim(ctx(cands)) == "small"


def test_ties_go_to_earliest_arrival_then_smallest_id() -> None:
    policy = make()
    cands = [cand("b", 100, arrival=2.0), cand("c", 100, arrival=1.0), cand("a", 100, arrival=2.0)]
    assert policy.select_victim(ctx(cands)) == "c"
    cands = [cand("b", 100, arrival=1.0), cand("a", 100, arrival=1.0), cand("z", 50)]
    assert policy.select_victim(ctx(cands)) == "a"


def test_rank_candidates_orders_by_key_and_keeps_host_order_on_exact_ties() -> None:
    cands = [cand("x", 10), cand("y", 30), cand("x", 10, prompt=1), cand("w", 30, arrival=-1.0)]
    ranked = rank_candidates(cands, 0.5, 0.3, 1e-6, 1024)
    assert [s.request_id for s in ranked] == ["w", "y", "x", "x"]
    assert rank_candidates(cands, 0.5, 0.3, 1e-6, 1024, limit=2) == ranked[:2]


def test_requester_may_be_the_top_candidate() -> None:
    # Selecting the requester is allowed when it is the utility winner.
    policy = make()
    assert policy.select_victim(ctx([cand("q", 500), cand("o", 100)], requester="q")) == "q"


def test_duplicate_ids_resolve_to_the_last_object() -> None:
    policy = make()
    cands = [cand("d", 900), cand("e", 10), cand("d", 5)]
    assert policy.select_victim(ctx(cands)) == "d"
    # The recorded tokens come from the last object named "d", as with the original's id map.
    assert policy.export_metrics()["total_tokens_freed"] == 5


def test_duck_typed_candidates_with_missing_attributes() -> None:
    policy = make()
    cands = (
        SimpleNamespace(request_id="a", num_computed_tokens=300),
        SimpleNamespace(request_id="b", num_computed_tokens=200, num_preemptions=0),
    )
    context = SimpleNamespace(
        candidates=cands, scheduling_policy="fcfs", kv_cache_usage=0.5, now=1.0
    )
    assert policy.select_victim(context) == "a"


def test_empty_candidates_raise() -> None:
    with pytest.raises(ValueError, match=r"^running is empty, cannot pick victim$"):
        make().select_victim(ctx([]))


# -- default victim -------------------------------------------------------------------------


def test_default_victim_fcfs_tail_and_priority_max() -> None:
    policy = make(utility_min_running=10)  # force the gate fallback: the default is returned
    cands = [
        cand("a", 1, priority=2, arrival=5.0),
        cand("b", 1, priority=3, arrival=1.0),
        cand("c", 1, priority=3, arrival=4.0),
        cand("d", 1, priority=3, arrival=4.0),
        cand("e", 1, priority=0, arrival=9.0),
    ]
    assert policy.select_victim(ctx(cands, policy="fcfs")) == "e"
    # (priority, arrival) largest; first maximal among exact ties.
    assert policy.select_victim(ctx(cands, policy="priority")) == "c"


def test_builtin_victim_id_of_the_host_is_ignored() -> None:
    # The policy recomputes its own default.
    policy = make(utility_min_running=10)
    context = PreemptionContext((cand("a", 1), cand("b", 1)), "fcfs", "", 1.0, 0.0, "a")
    assert policy.select_victim(context) == "b"


# -- gates --------------------------------------------------------------------------------


def test_min_running_gate_returns_default_with_fallback_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(utility_min_running=3)
    assert policy.select_victim(ctx([cand("a", 900), cand("b", 1)], kv=0.5)) == "b"
    assert messages(caplog)[-1] == (
        "[BidKV] FALLBACK | victim=b (default) | reason=running(2)<min(3) | kv_util=0.50 | "
        "running=2"
    )
    m = policy.export_metrics()
    assert (m["default_strategy_hits"], m["utility_strategy_hits"], m["policy_abstentions"]) == (
        1,
        0,
        0,
    )


def test_kv_gate_and_pressure_events(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(utility_kv_gate=0.8, utility_min_running=3)
    cands = [cand("a", 900), cand("b", 1)]
    assert policy.select_victim(ctx(cands, kv=0.5)) == "b"
    assert messages(caplog)[-1] == (
        "[BidKV] FALLBACK | victim=b (default) | reason=running(2)<min(3),kv(0.50)<gate(0.8) | "
        "kv_util=0.50 | running=2"
    )
    # Pressure is counted before the gate decision, even when another gate fails.
    assert policy.select_victim(ctx(cands, kv=0.8)) == "b"
    assert policy.export_metrics()["kv_pressure_events"] == 1


def test_kv_gate_with_unknown_usage_falls_back_instead_of_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The original formatted None with :.2f and raised TypeError (disabling the policy).
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(utility_kv_gate=0.8)
    assert policy.select_victim(ctx([cand("a", 900), cand("b", 1)], kv=None)) == "b"
    assert messages(caplog)[-1] == (
        "[BidKV] FALLBACK | victim=b (default) | reason=kv(None)<gate(0.8) | kv_util=0.00 | "
        "running=2"
    )
    assert policy.export_metrics()["kv_pressure_events"] == 0


def test_cooldown_starts_on_utility_picks_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(utility_cooldown_s=5.0, utility_min_running=2)
    cands = [cand("a", 900), cand("b", 1)]
    assert policy.select_victim(ctx(cands[:1], now=0.0)) == "a"  # gate fallback: no timer
    assert policy.select_victim(ctx(cands, now=1.0)) == "a"  # utility pick at t=1
    assert policy.select_victim(ctx(cands, now=5.9)) == "b"  # 4.9 s < 5 s
    assert messages(caplog)[-1] == (
        "[BidKV] FALLBACK | victim=b (default) | reason=unknown | kv_util=1.00 | running=2"
    )
    assert policy.select_victim(ctx(cands, now=6.0)) == "a"  # 5.0 s: allowed again


# -- liveness guard (V4) --------------------------------------------------------------------


def test_liveness_abstains_once_then_rearms(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make()  # L = 2
    cands = [cand("r1", 300, p=2), cand("r2", 200, p=2), cand("r3", 100, p=2)]
    assert policy.select_victim(ctx(cands, requester="r2", kv=0.9)) is None
    assert policy.liveness_offsets == {"r1": 2}
    assert messages(caplog)[-1] == (
        "[BidKV] LIVENESS_ABSTAIN | utility_victim=r1 | builtin_victim=r3 | threshold=2 | "
        "epoch=1 | relative_preemptions=2 | kv_util=0.90 | running=3"
    )
    assert caplog.records[-1].levelno == logging.WARNING
    m = policy.export_metrics()
    assert (m["liveness_fallback_hits"], m["liveness_epochs"], m["policy_abstentions"]) == (1, 1, 1)
    assert (m["total_preemptions"], m["preempted_req_ids"], m["total_tokens_freed"]) == (
        1,
        ["r3"],
        100,
    )
    assert policy.select_victim(ctx(cands, requester="r2", kv=0.9)) == "r1"
    assert policy.export_metrics()["utility_strategy_hits"] == 1


def test_liveness_counts_host_preemptions_since_the_offset() -> None:
    policy = make()
    assert policy.select_victim(ctx([cand("a", 900, p=1), cand("b", 1)])) == "a"
    assert policy.select_victim(ctx([cand("a", 900, p=2), cand("b", 1)])) is None
    # Offset 2 now: a third and a fourth preemption are needed before the next abstention.
    assert policy.select_victim(ctx([cand("a", 900, p=3), cand("b", 1)])) == "a"
    assert policy.select_victim(ctx([cand("a", 900, p=4), cand("b", 1)])) is None
    assert policy.liveness_offsets == {"a": 4}


def test_liveness_zero_disables_the_guard() -> None:
    policy = make(utility_liveness_preemptions=0)
    assert policy.select_victim(ctx([cand("a", 900, p=50), cand("b", 1)])) == "a"


# -- cascade guard (V4) ---------------------------------------------------------------------


def test_cascade_abstains_on_marginal_gain(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(utility_liveness_preemptions=0)
    cands = [cand("largest", 1000), cand("requester", 900), cand("small", 100)]
    assert policy.select_victim(ctx(cands, requester="requester", kv=0.97)) is None
    assert messages(caplog)[-1] == (
        "[BidKV] CASCADE_ABSTAIN | utility_victim=largest | builtin_victim=small | "
        "requester=requester | gain_ratio=1.25 | kv_util=0.97 | running=3"
    )
    m = policy.export_metrics()
    assert (m["cascade_guard_hits"], m["policy_abstentions"], m["preempted_req_ids"]) == (
        1,
        1,
        ["small"],
    )


def test_cascade_compares_tokens_not_utility() -> None:
    # requester: U = 1000/(1+0.3*10) = 250 < top's 600, but 1000 * 1.25 >= 600 -> abstain.
    policy = make(utility_liveness_preemptions=0)
    cands = [cand("top", 600), cand("q", 1000, p=10), cand("z", 1)]
    assert policy.select_victim(ctx(cands, requester="q")) is None


def test_cascade_lets_a_material_gain_through() -> None:
    policy = make(utility_liveness_preemptions=0)
    cands = [cand("largest", 2000), cand("requester", 900)]
    assert policy.select_victim(ctx(cands, requester="requester")) == "largest"
    # 900 * 1.25 = 1125 >= 1125: the bound is inclusive.
    cands = [cand("largest", 1125), cand("requester", 900)]
    assert policy.select_victim(ctx(cands, requester="requester")) is None


def test_unknown_requester_never_triggers_the_cascade() -> None:
    policy = make(utility_liveness_preemptions=0)
    cands = [cand("largest", 1000), cand("other", 999)]
    assert policy.select_victim(ctx(cands, requester="gone")) == "largest"
    assert policy.select_victim(ctx(cands, requester="")) == "largest"


# -- records, metrics, snapshots ------------------------------------------------------------


def test_percentile_rule_is_ceil_minus_one() -> None:
    assert percentile([1] * 9 + [5], 95) == 5.0  # ceil(9.5) - 1 = 9; int(n*p) - 1 would give 1
    assert percentile([3, 1, 2], 0) == 1.0
    assert percentile([3, 1, 2], 100) == 3.0
    assert percentile([], 95) == 0.0


def test_metrics_after_a_sequence() -> None:
    policy = make(utility_snapshot_history_size=3, utility_liveness_preemptions=0)
    steps = [
        [cand("a", 500), cand("b", 10)],  # a
        [cand("a", 400), cand("b", 10)],  # a again: consecutive
        [cand("c", 50), cand("b", 40)],  # c
        [cand("b", 60), cand("c", 50)],  # b
    ]
    victims = [policy.select_victim(ctx(s)) for s in steps]
    assert victims == ["a", "a", "c", "b"]
    assert policy.export_metrics() == {
        "total_preemptions": 4,
        "total_tokens_freed": 1010,
        "kv_pressure_events": 0,
        "consecutive_preempt_ratio": 1 / 3,
        "preemptions_per_request_p95": 2.0,
        "preempted_req_ids": ["a", "c", "b"],
        "strategy_hit_rate": 1.0,
        "utility_strategy_hits": 4,
        "default_strategy_hits": 0,
        "liveness_fallback_hits": 0,
        "liveness_epochs": 0,
        "cascade_guard_hits": 0,
        "policy_abstentions": 0,
    }
    assert policy.preemptions_per_request == {"a": 2, "c": 1, "b": 1}


def test_fresh_metrics_are_zero() -> None:
    m = make().export_metrics()
    assert m["total_preemptions"] == 0
    assert m["strategy_hit_rate"] == 0.0
    assert m["consecutive_preempt_ratio"] == 0.0
    assert m["preemptions_per_request_p95"] == 0.0
    assert m["preempted_req_ids"] == []


def test_snapshots_record_ranked_top_k() -> None:
    policy = make(
        utility_snapshot_enabled=True, utility_snapshot_top_k=2, utility_snapshot_history_size=2
    )
    cands = [
        cand("r1", 220, out=12, max_tokens=128, arrival=1.0),
        cand("r2", 260, out=120, max_tokens=128, p=3, arrival=2.0),
        cand("r3", 180, out=60, max_tokens=128, p=1, arrival=3.0),
    ]
    assert policy.select_victim(ctx(cands, requester="r1", kv=0.92, now=10.0)) == "r1"
    (snapshot,) = policy.get_recent_snapshots()
    assert snapshot == {
        "timestamp_s": 10.0,
        "policy": "fcfs",
        "used_utility": True,
        "kv_utilization": 0.92,
        "running_size": 3,
        "selected_victim_id": "r1",
        "default_victim_id": "r3",
        "decision_reason": "strategy",
        "candidates": [
            {
                "rank": 1,
                "request_id": "r1",
                "utility": 210.149053,
                "evict_score": 210.149053,
                "tokens_freed": 220,
                "completion": 0.09375,
                "num_preemptions": 0,
                "arrival_time": 1.0,
                "selected": True,
            },
            {
                "rank": 2,
                "request_id": "r3",
                "utility": 117.311533,
                "evict_score": 117.311533,
                "tokens_freed": 180,
                "completion": 0.46875,
                "num_preemptions": 1,
                "arrival_time": 3.0,
                "selected": False,
            },
        ],
    }
    for now in (11.0, 12.0):
        policy.select_victim(ctx(cands, kv=0.9, now=now))
    assert [s["timestamp_s"] for s in policy.get_recent_snapshots()] == [11.0, 12.0]
    assert [s["timestamp_s"] for s in policy.get_recent_snapshots(limit=1)] == [12.0]
    assert policy.get_recent_snapshots(limit=0) == []
    assert policy.get_recent_snapshots(limit=-3) == []


def test_gate_fallback_snapshot_has_no_candidates() -> None:
    policy = make(utility_snapshot_enabled=True, utility_min_running=5)
    policy.select_victim(ctx([cand("a", 1), cand("b", 2)], now=3.0))
    (snapshot,) = policy.get_recent_snapshots()
    assert snapshot["candidates"] == []
    assert snapshot["used_utility"] is False
    assert snapshot["decision_reason"] == "strategy"


def test_abstention_snapshot_records_the_default_and_reason() -> None:
    policy = make(utility_snapshot_enabled=True, utility_liveness_preemptions=0)
    cands = [cand("largest", 1000), cand("requester", 900), cand("small", 100)]
    policy.select_victim(ctx(cands, requester="requester"))
    (snapshot,) = policy.get_recent_snapshots()
    assert snapshot["selected_victim_id"] == "small"
    assert snapshot["decision_reason"] == "cascade_abstain"
    assert [c["request_id"] for c in snapshot["candidates"]] == ["largest", "requester", "small"]
    assert [c["selected"] for c in snapshot["candidates"]] == [False, False, True]


def test_snapshots_off_keeps_none() -> None:
    policy = make()
    policy.select_victim(ctx([cand("a", 1)]))
    assert policy.get_recent_snapshots() == []


def test_missing_now_uses_the_monotonic_clock() -> None:
    policy = make(utility_snapshot_enabled=True)
    policy.select_victim(ctx([cand("a", 1)], now=None))
    assert policy.get_recent_snapshots()[0]["timestamp_s"] > 0


# -- log lines ----------------------------------------------------------------------------


def test_init_and_utility_active_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(utility_kv_gate=0.5)
    cands = [cand("r1", 220, out=12, max_tokens=128), cand("r2", 10)]
    policy.select_victim(ctx(cands, kv=0.92))
    assert messages(caplog) == [
        "[BidKV] INIT | enabled=True | strategy=bidkv | kv_gate=0.50 | min_running=1 | "
        "completion_w=0.50 | preempt_w=0.30 | liveness_preemptions=2 | cascade_gain_ratio=1.25",
        "[BidKV] UTILITY_ACTIVE | victim=r1 | U=210.1491 | r=220 tok | completion=0.09 | "
        "preemptions=0 | kv_util=0.92 | running=2 | cascade_guard=False",
    ]


def test_emit_observability_log(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.observability")
    caplog.set_level(logging.DEBUG, logger="test.observability")
    policy = make(utility_snapshot_enabled=True, utility_snapshot_top_k=1)
    policy.emit_observability_log(logger, "sched0")
    assert caplog.records == []  # nothing before the first decision
    policy.select_victim(ctx([cand("a", 300), cand("b", 100)], kv=0.75, now=2.0))
    policy.select_victim(ctx([cand("a", 300), cand("b", 100)], kv=0.5, now=3.0))
    policy.emit_observability_log(logger, "sched0")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:2] == [
        "[BidKV][sched0] total_preemptions=2 utility_hits=2 default_hits=0 hit_rate=1.000 "
        "tokens_freed=600 kv_pressure_events=0 consecutive_preempt_ratio=1.000 "
        "p95_preemptions_per_request=2.00",
        "[BidKV][sched0] latest_decision victim=a default_victim=b used_utility=True "
        "kv_utilization=0.5 running=2 policy=fcfs",
    ]
    assert caplog.records[2].levelno == logging.DEBUG
    assert lines[2].startswith("[BidKV][sched0] latest_snapshot={'timestamp_s': 3.0,")


# -- legacy faces -------------------------------------------------------------------------


class SchedulingPolicy(Enum):
    FCFS = "fcfs"
    PRIORITY = "priority"


def test_pick_victim_returns_the_candidate_object() -> None:
    policy = make()
    running = [cand("a", 10, priority=5), cand("b", 700), cand("c", 20)]
    assert (
        policy.pick_victim(running, SchedulingPolicy.FCFS, kv_utilization=0.9, now_s=1.0)
        is running[1]
    )
    assert policy.pick_victim(running, "PRIORITY") is running[1]


def test_pick_victim_never_applies_the_cascade_rule() -> None:
    # No requester on the legacy path: the largest is picked even if another is close.
    policy = make(utility_liveness_preemptions=0)
    running = [cand("largest", 1000), cand("close", 999), cand("small", 1)]
    assert policy.pick_victim(running, SchedulingPolicy.FCFS).request_id == "largest"


def test_pick_victim_on_abstention_returns_the_default_object() -> None:
    policy = make()
    running = [
        cand("r1", 300, p=2, priority=0),
        cand("r2", 200, p=2, priority=9),
        cand("r3", 100, p=2),
    ]
    assert policy.pick_victim(running, SchedulingPolicy.PRIORITY) is running[1]
    assert policy.export_metrics()["policy_abstentions"] == 1


def test_pick_victim_policy_name_attribute_and_defaults() -> None:
    policy = make(utility_snapshot_enabled=True)
    running = [cand("a", 1), cand("b", 2)]
    assert policy.pick_victim(running, SimpleNamespace(name="FCFS")) is running[1]
    snapshot = policy.get_recent_snapshots()[-1]
    assert snapshot["policy"] == "fcfs"
    assert snapshot["kv_utilization"] == 0.0  # None becomes 0.0 on this path


def test_victim_selector_is_the_same_policy_with_the_legacy_version() -> None:
    assert BidkvPreemptionPolicy.vllm_preemption_policy_api_version == 1
    assert BidkvVictimSelector.vllm_victim_selector_api_version == 1
    assert BidkvVictimSelector.vllm_preemption_policy_api_version == 1
    assert not hasattr(BidkvPreemptionPolicy, "vllm_victim_selector_api_version")
    selector = BidkvVictimSelector.from_vllm_config(
        SimpleNamespace(additional_config={"enable_utility_victim_selection": True})
    )
    assert isinstance(selector, BidkvVictimSelector)
    typed = make()
    steps = [[cand("a", 300, p=i % 3), cand("b", 280, p=1), cand("c", 5)] for i in range(8)]
    for s in steps:
        assert selector.select_victim(ctx(s, requester="b")) == typed.select_victim(
            ctx(s, requester="b")
        )
    assert selector.export_metrics() == typed.export_metrics()


def test_switched_off_policy_returns_default_and_counts_default_hits() -> None:
    policy = BidkvPreemptionPolicy(BidkvSelectorConfig())
    assert policy.strategy == "pe"
    assert policy.select_victim(ctx([cand("a", 900), cand("b", 1)], policy="fcfs")) == "b"
    m = policy.export_metrics()
    assert (m["default_strategy_hits"], m["utility_strategy_hits"]) == (1, 0)
