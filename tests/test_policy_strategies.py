"""The strategies other than ``bidkv`` (docs/policy.md, "Strategies").

Each victim is worked out by hand on a small context; ties are set up on purpose.
"""

from __future__ import annotations

import logging
import random

import pytest

from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from bidkv.adapters.vllm_hust.strategies import StrategyInputs, sglang_default_victim
from tracekit.hosts.preemption_policy import PreemptionCandidate, PreemptionContext

LOGGER = "vllm"


def cand(
    rid: str,
    r: int = 0,
    *,
    out: int = 0,
    prompt: int = 0,
    p: int = 0,
    arrival: float = 0.0,
    priority: int = 0,
    max_tokens: int = 1024,
) -> PreemptionCandidate:
    return PreemptionCandidate(rid, priority, arrival, prompt, out, r, p, max_tokens)


def ctx(
    cands: list[PreemptionCandidate],
    policy: str = "fcfs",
    kv: float = 0.9,
    now: float = 0.0,
    requester: str = "",
) -> PreemptionContext:
    return PreemptionContext(tuple(cands), policy, requester, kv, now)  # type: ignore[arg-type]


def make(strategy: str, **settings: object) -> BidkvPreemptionPolicy:
    cfg = BidkvSelectorConfig(
        enable_utility_victim_selection=True,
        utility_strategy=strategy,
        **settings,  # type: ignore[arg-type]
    )
    return BidkvPreemptionPolicy(cfg)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and "INIT" not in r.getMessage()
    ]


PRIORITY_CANDS = [
    cand("a", 500, priority=1, arrival=1.0),
    cand("b", 10, priority=4, arrival=2.0),
    cand("c", 900, priority=4, arrival=3.0),
    cand("d", 20, priority=0, arrival=9.0),
]


# -- pe and its aliases ---------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["pe", "pe-sjf", "preempt-evict", "preempt-evict-sjf"])
def test_pe_family_returns_the_builtin_victim(
    strategy: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make(strategy)
    assert policy.strategy in {"pe", "pe-sjf"}
    assert policy.select_victim(ctx(PRIORITY_CANDS, "fcfs")) == "d"  # FCFS tail
    assert policy.select_victim(ctx(PRIORITY_CANDS, "priority")) == "c"  # max (4, 3.0)
    assert lines(caplog) == []
    m = policy.export_metrics()
    assert (m["default_strategy_hits"], m["utility_strategy_hits"], m["strategy_hit_rate"]) == (
        2,
        0,
        0.0,
    )


@pytest.mark.parametrize(
    "settings",
    [
        {"enable_utility_victim_selection": False},
        {"enable_utility_victim_selection": True, "utility_kill_switch": True},
    ],
)
@pytest.mark.parametrize(
    "strategy", ["bidkv", "largest-first", "static-random", "sglang-default", "slack-aware"]
)
def test_switched_off_or_killed_means_pe(strategy: str, settings: dict[str, bool]) -> None:
    policy = BidkvPreemptionPolicy(BidkvSelectorConfig(utility_strategy=strategy, **settings))
    assert policy.strategy == "pe"
    assert policy.select_victim(ctx(PRIORITY_CANDS, "fcfs")) == "d"


# -- static-random --------------------------------------------------------------------------


def test_static_random_is_reproducible_from_the_seed() -> None:
    cands = [cand(f"r{i}", 10 * i) for i in range(7)]
    first = make("static-random", utility_seed=123)
    second = make("static-random", utility_seed=123)
    picks = [first.select_victim(ctx(cands)) for _ in range(50)]
    assert picks == [second.select_victim(ctx(cands)) for _ in range(50)]
    # One choice per call from the policy's own random.Random(utility_seed).
    rng = random.Random(123)
    assert picks == [rng.choice(cands).request_id for _ in range(50)]
    other = make("static-random", utility_seed=124)
    assert picks != [other.select_victim(ctx(cands)) for _ in range(50)]
    assert set(picks) == {c.request_id for c in cands}


def test_static_random_leaves_the_global_generator_alone() -> None:
    state = random.getstate()
    try:
        random.seed(7)
        expected = [random.random() for _ in range(3)]
        random.seed(7)
        policy = make("static-random")
        for _ in range(20):
            policy.select_victim(ctx([cand("a"), cand("b"), cand("c")]))
        assert [random.random() for _ in range(3)] == expected
    finally:
        random.setstate(state)


def test_static_random_ignores_gates_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make("static-random", utility_kv_gate=0.99, utility_min_running=10, utility_seed=5)
    victim = policy.select_victim(ctx([cand("a"), cand("b")], kv=0.25))
    assert victim in {"a", "b"}
    assert lines(caplog) == [f"[BidKV] RANDOM | victim={victim} | kv_util=0.25 | running=2"]
    m = policy.export_metrics()
    assert (m["utility_strategy_hits"], m["default_strategy_hits"]) == (1, 0)


# -- largest-first --------------------------------------------------------------------------


def test_largest_first_takes_the_first_maximal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make("largest-first", utility_kv_gate=0.95)
    cands = [cand("a", 100), cand("b", 300, p=9), cand("c", 300), cand("d", 299)]
    assert policy.select_victim(ctx(cands, kv=0.5)) == "b"  # gates do not apply
    assert lines(caplog) == [
        "[BidKV] LARGEST_FIRST | victim=b | tokens=300 | kv_util=0.50 | running=4"
    ]
    assert policy.export_metrics()["utility_strategy_hits"] == 1


def test_largest_first_never_abstains_on_liveness_or_cascade() -> None:
    policy = make("largest-first")
    cands = [cand("big", 1000, p=50), cand("q", 999, p=50)]
    for _ in range(5):
        assert policy.select_victim(ctx(cands, requester="q")) == "big"


# -- sglang-default -------------------------------------------------------------------------


def test_sglang_default_fewest_outputs_then_longest_prompt_then_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    cands = [
        cand("a", out=5, prompt=100),
        cand("b", out=2, prompt=50),
        cand("c", out=2, prompt=80),
        cand("d", out=2, prompt=80),
        cand("e", out=9, prompt=10),
    ]
    policy = make("sglang-default")
    # Fewest outputs: b, c, d; longest prompt: c, d; exact tie: the last in host order.
    assert policy.select_victim(ctx(cands)) == "d"
    assert lines(caplog) == [
        "[BidKV] SGLANG_DEFAULT | victim=d | output_tokens=2 | prompt_tokens=80 | "
        "kv_util=0.90 | running=5"
    ]
    assert policy.select_victim(ctx(cands[:3])) == "c"
    assert policy.select_victim(ctx([cands[4], cands[0]])) == "a"


def test_sglang_default_priority_mode_puts_the_least_important_first() -> None:
    cands = [
        cand("a", out=5, prompt=100, priority=5),
        cand("b", out=2, prompt=50, priority=1),
        cand("c", out=2, prompt=80, priority=1),
        cand("e", out=9, prompt=10, priority=5),
    ]
    # Largest priority value (5: a, e) first, then fewest outputs: a.
    assert make("sglang-default").select_victim(ctx(cands, "priority")) == "a"
    assert make("sglang-default").select_victim(ctx(cands, "fcfs")) == "c"


def test_sglang_default_matches_sglangs_sort_and_pop() -> None:
    # retract_decode: sort by (len(output_ids), -len(origin_input_ids)) descending, stable, and
    # pop from the end. Replayed literally on random batches with many ties.
    rng = random.Random(2024)
    for _ in range(300):
        cands = [
            cand(f"r{i}", out=rng.randint(0, 3), prompt=rng.randint(0, 3))
            for i in range(rng.randint(1, 12))
        ]
        order = sorted(
            range(len(cands)),
            key=lambda i: (cands[i].num_output_tokens, -cands[i].num_prompt_tokens),
            reverse=True,
        )
        inputs = StrategyInputs("fcfs", None, 0.0, random.Random(0), 120.0)
        assert sglang_default_victim(cands, inputs)[0] is cands[order[-1]]


# -- slack-aware ----------------------------------------------------------------------------


def test_slack_aware_takes_the_most_slack_and_the_last_of_ties(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    policy = make("slack-aware", utility_slo_s=120.0)
    # slack = arrival + 120 - 100: a 30, b 70, c 70, d 40.
    cands = [
        cand("a", arrival=10.0),
        cand("b", arrival=50.0),
        cand("c", arrival=50.0),
        cand("d", arrival=20.0),
    ]
    assert policy.select_victim(ctx(cands, now=100.0)) == "c"
    assert lines(caplog) == [
        "[BidKV] SLACK_AWARE | victim=c | slack_s=70.000 | slo_s=120.0 | kv_util=0.90 | running=4"
    ]
    assert policy.select_victim(ctx(cands[:2], now=100.0)) == "b"


def test_slack_aware_negative_slack_and_slo_setting() -> None:
    policy = make("slack-aware", utility_slo_s=1.0)
    # Both past their objective: slack -89 and -59; the later arrival still has the most.
    cands = [cand("old", arrival=10.0), cand("new", arrival=40.0), cand("mid", arrival=20.0)]
    assert policy.select_victim(ctx(cands, now=100.0)) == "new"
    assert policy.export_metrics()["utility_strategy_hits"] == 1


@pytest.mark.parametrize(
    "strategy", ["pe", "pe-sjf", "static-random", "largest-first", "sglang-default", "slack-aware"]
)
def test_other_strategies_never_abstain(strategy: str) -> None:
    policy = make(strategy)
    cands = [cand("r1", 300, p=2), cand("r2", 200, p=2), cand("r3", 100, p=2)]
    for _ in range(5):
        assert policy.select_victim(ctx(cands, requester="r2")) in {"r1", "r2", "r3"}
    assert policy.export_metrics()["policy_abstentions"] == 0
