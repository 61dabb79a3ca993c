"""``last_decision_reason()``: the finer reason recorders write into traces."""

from __future__ import annotations

from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    decision_reason_of,
)


def ctx(kv: float = 0.99, now: float = 10.0, requester: str = "b") -> PreemptionContext:
    # a frees 1000 tokens, b 900, c 100: a is the utility top (U = r / 1.0 with no output).
    cands = (
        PreemptionCandidate("a", 0, 0.0, 1000, 0, 1000, 0, 64),
        PreemptionCandidate("b", 0, 1.0, 900, 0, 900, 0, 64),
        PreemptionCandidate("c", 0, 2.0, 100, 0, 100, 0, 64),
    )
    return PreemptionContext(cands, "fcfs", requester, kv, now)


def policy(**settings: object) -> BidkvPreemptionPolicy:
    config = {"enable_utility_victim_selection": True, "utility_liveness_preemptions": 0}
    return BidkvPreemptionPolicy(BidkvSelectorConfig(**{**config, **settings}))


def test_before_any_decision_there_is_no_reason() -> None:
    assert decision_reason_of(policy()) is None


def test_utility_pick_is_strategy() -> None:
    p = policy()
    # Requester c frees 100 * 1.25 < 1000: no cascade; a is selected.
    assert p.select_victim(ctx(requester="c")) == "a"
    assert decision_reason_of(p) == "strategy"


def test_kv_gate_fallback_is_distinguished_from_a_pick() -> None:
    p = policy(utility_kv_gate=0.95)
    assert p.select_victim(ctx(kv=0.5, requester="c")) == "c"  # default = FCFS tail
    assert decision_reason_of(p) == "gate_fallback"
    # The decision record still says "strategy" for a gate fallback (docs/replay.md, "The summary").
    assert p.get_last_decision()["decision_reason"] == "strategy"
    assert p.select_victim(ctx(kv=0.99, requester="c")) == "a"
    assert decision_reason_of(p) == "strategy"


def test_cooldown_fallback() -> None:
    p = policy(utility_cooldown_s=5.0)
    assert p.select_victim(ctx(now=10.0, requester="c")) == "a"
    assert p.select_victim(ctx(now=12.0, requester="c")) == "c"
    assert decision_reason_of(p) == "gate_fallback"


def test_cascade_abstention() -> None:
    p = policy()
    # Requester b frees 900 * 1.25 = 1125 >= 1000: the cascade guard abstains.
    assert p.select_victim(ctx(requester="b")) is None
    assert decision_reason_of(p) == "cascade_abstain"


def test_switched_off_policy_is_disabled() -> None:
    p = BidkvPreemptionPolicy(BidkvSelectorConfig(enable_utility_victim_selection=False))
    assert p.select_victim(ctx()) == "c"
    assert decision_reason_of(p) == "disabled"
