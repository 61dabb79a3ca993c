"""The ``bidkv`` decision function on hand-worked contexts, and the one utility formula.

Each example states the arithmetic: with the default weights (w_c 0.5, w_p 0.3, epsilon 1e-6),
``U = r / (1 + 0.5 c + 0.3 P + 1e-6)``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from bidkv.adapters.vllm_hust.decision import (
    DecisionRules,
    DecisionState,
    Step,
    decide,
    gate_reasons,
)
from bidkv.adapters.vllm_hust.scoring import scan_top, utility

RULES = DecisionRules()
NEVER = -math.inf


def cand(rid: str, r: int, *, out: int = 0, p: int = 0, arrival: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(
        request_id=rid,
        num_computed_tokens=r,
        num_output_tokens=out,
        max_tokens=100,
        num_preemptions=p,
        arrival_time=arrival,
        priority=0,
    )


def run(
    cands: list[SimpleNamespace],
    *,
    rules: DecisionRules = RULES,
    kv: float | None = 0.5,
    now: float = 10.0,
    requester: str = "",
    last_pick: float = NEVER,
    offsets: dict[str, int] | None = None,
) -> tuple[Step, str | None, int]:
    step, scan, relative = decide(
        rules, cands, len(cands), kv, now, requester, last_pick, offsets or {}
    )
    return step, None if scan is None else scan[2], relative


def test_the_utility_winner_is_selected() -> None:
    # a: 300 / (1 + 0.5*0.5 + 0) = 240.0; b: 400 / (1 + 0 + 0.3*3) = 210.5: a wins despite r.
    cands = [cand("a", 300, out=50), cand("b", 400, p=3)]
    assert run(cands) == (Step.UTILITY, "a", 0)


def test_each_gate_closes_the_decision_before_the_scan() -> None:
    cands = [cand("a", 300), cand("b", 100)]
    assert run(cands, rules=DecisionRules(min_running=3)) == (Step.GATE, None, 0)
    assert run(cands, rules=DecisionRules(kv_gate=0.8), kv=0.7) == (Step.GATE, None, 0)
    assert run(cands, rules=DecisionRules(kv_gate=0.8), kv=None) == (Step.GATE, None, 0)
    assert run(cands, rules=DecisionRules(kv_gate=0.8), kv=0.8)[0] is Step.UTILITY
    # Cooldown of 5 s after a pick at t=6: closed at t=10, open again at t=11.
    cooling = DecisionRules(cooldown_s=5.0)
    assert run(cands, rules=cooling, last_pick=6.0, now=10.0) == (Step.GATE, None, 0)
    assert run(cands, rules=cooling, last_pick=6.0, now=11.0)[0] is Step.UTILITY


def test_gate_reasons_name_every_closed_gate() -> None:
    rules = DecisionRules(min_running=3, kv_gate=0.9)
    assert gate_reasons(rules, 2, 0.5) == "running(2)<min(3),kv(0.50)<gate(0.9)"
    assert gate_reasons(rules, 2, None) == "running(2)<min(3),kv(None)<gate(0.9)"
    assert gate_reasons(DecisionRules(cooldown_s=1.0), 2, 0.5) == "unknown"


def test_liveness_abstains_once_the_winner_reached_the_bound() -> None:
    # a wins with P=3 (300/1.9 = 157.9 > 100): 3 - offset 1 = 2 >= bound 2.
    cands = [cand("a", 300, p=3), cand("b", 100)]
    assert run(cands, offsets={"a": 1}) == (Step.LIVENESS, "a", 2)
    assert run(cands, offsets={"a": 2}) == (Step.UTILITY, "a", 0)
    assert run(cands, rules=DecisionRules(liveness_preemptions=0))[0] is Step.UTILITY


def test_cascade_abstains_when_the_requester_frees_almost_as_much() -> None:
    # Winner a frees 300; requester b frees 250: 250 * 1.25 = 312.5 >= 300.
    cands = [cand("a", 300), cand("b", 250)]
    assert run(cands, requester="b") == (Step.CASCADE, "a", 0)
    # 200 * 1.25 = 250 < 300: the winner is taken.
    assert run([cand("a", 300), cand("b", 200)], requester="b")[0] is Step.UTILITY
    # The requester as the winner, or absent, never abstains.
    assert run(cands, requester="a")[0] is Step.UTILITY
    assert run(cands, requester="zz")[0] is Step.UTILITY


def test_liveness_is_tested_before_the_cascade() -> None:
    # a: 400 / 1.6 = 250 beats b: 350 / 2.5 = 140, and 350 * 1.25 >= 400 would cascade, but
    # a's two preemptions reach the bound first.
    cands = [cand("a", 400, p=2), cand("b", 350, p=5)]
    assert run(cands, requester="b")[0] is Step.LIVENESS
    assert run(cands, requester="b", offsets={"a": 1})[0] is Step.CASCADE


def test_commit_moves_the_offset_and_restarts_the_cooldown() -> None:
    rules = DecisionRules()
    state = DecisionState(limit=2)
    cands = [cand("a", 300, p=2), cand("b", 100)]
    decision = decide(rules, cands, 2, 0.5, 1.0, "", state.last_pick, state.offsets)
    assert decision[0] is Step.LIVENESS
    state.commit(rules, decision, 1.0)
    assert dict(state.offsets) == {"a": 2} and state.last_pick == NEVER
    decision = decide(rules, cands, 2, 0.5, 2.0, "", state.last_pick, state.offsets)
    assert decision[0] is Step.UTILITY
    state.commit(rules, decision, 2.0)
    assert state.last_pick == 2.0
    # A gate decision changes nothing.
    state.commit(rules, (Step.GATE, None, 0), 3.0)
    assert state.last_pick == 2.0


def test_commit_touches_the_winner_read_past_the_gates() -> None:
    # Two ids fit; reading "a" (the winner) makes "b" the least recently used, so storing a
    # third id forgets "b".
    rules = DecisionRules()
    state = DecisionState(limit=2)
    state.offsets.put("a", 0)
    state.offsets.put("b", 0)
    decision = decide(rules, [cand("a", 300)], 1, 0.5, 1.0, "", NEVER, state.offsets)
    state.commit(rules, decision, 1.0)
    state.offsets.put("c", 0)
    assert list(state.offsets) == ["a", "c"]


def test_rules_from_config() -> None:
    config = BidkvSelectorConfig(utility_kv_gate=0.5, utility_liveness_preemptions=4)
    assert DecisionRules.from_config(config).liveness_preemptions == 4
    assert DecisionRules.from_config(config).kv_gate == 0.5
    barrier = BidkvSelectorConfig(utility_liveness_preemptions=4, utility_liveness_mode="barrier")
    assert DecisionRules.from_config(barrier).liveness_preemptions == 0
    assert DecisionRules.from_config(BidkvSelectorConfig()) == DecisionRules()


@given(
    r=st.integers(min_value=0, max_value=2**62),
    out=st.integers(min_value=0, max_value=2**40),
    m=st.integers(min_value=1, max_value=2**40),
    p=st.integers(min_value=0, max_value=2**40),
    wc=st.floats(min_value=0, max_value=1e6),
    wp=st.floats(min_value=0, max_value=1e6),
    eps=st.floats(min_value=1e-12, max_value=1.0),
)
def test_the_scan_computes_the_one_formula_bit_for_bit(
    r: int, out: int, m: int, p: int, wc: float, wp: float, eps: float
) -> None:
    c = SimpleNamespace(
        request_id="x",
        num_computed_tokens=r,
        num_output_tokens=out,
        max_tokens=m,
        num_preemptions=p,
        arrival_time=0.0,
    )
    scan = scan_top([c], wc, wp, eps, 1024, "")
    completion = min(out / m, 1.0)
    assert scan[5] == completion
    assert scan[3] == utility(r, completion, p, wc, wp, eps)
