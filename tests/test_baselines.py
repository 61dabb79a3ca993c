"""Legacy ``select_victims`` strategies, their registry, and the deliberate differences.

The worked example is the original's verified example (requests a, b, c, d). Arrivals
0, 1, 2, 3 ms with ``priority = -arrival`` as the adapters set it; every request has
``max_output_tokens = 256``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import pytest

from bidkv import (
    BaselineContext,
    BaselineRegistry,
    BaselineStrategy,
    BidKVStrategy,
    CompressionAction,
    LargestFirstStrategy,
    PreemptEvictSJFStrategy,
    PreemptEvictStrategy,
    RequestState,
    StaticRandomStrategy,
)
from bidkv.legacy.baselines.registry import create_default_registry

STRATEGY_NAMES = ["bidkv", "largest-first", "preempt-evict", "preempt-evict-sjf", "static-random"]


def request(
    request_id: str,
    current: int,
    prompt: int = 0,
    computed: int = 0,
    max_output: int = 256,
    preemptions: int = 0,
    arrival: float = 0.0,
    **extra: Any,
) -> RequestState:
    return RequestState(
        request_id=request_id,
        current_tokens=current,
        priority=-arrival,
        arrival_time_ms=arrival,
        num_prompt_tokens=prompt,
        num_computed_tokens=computed,
        max_output_tokens=max_output,
        num_preemptions=preemptions,
        **extra,
    )


EXAMPLE = [
    request("a", 600, prompt=500, computed=600, arrival=0.0),
    request("b", 300, prompt=100, computed=300, preemptions=1, arrival=1.0),
    request("c", 300, prompt=290, computed=300, arrival=2.0),
    request("d", 1, arrival=3.0),
]
EXAMPLE_NEEDED = sum(r.current_tokens for r in EXAMPLE)  # 1201: as adapters do, rank everything


def ids(actions: Sequence[CompressionAction]) -> list[str]:
    return [a.request_id for a in actions]


# --------------------------------------------------------------------------------------------
# Worked example (docs/bidkv-core.md, "The legacy strategies (select_victims)")


class TestWorkedExample:
    @pytest.mark.parametrize("strategy", [PreemptEvictStrategy(), PreemptEvictSJFStrategy()])
    def test_preempt_evict_is_lifo(self, strategy: BaselineStrategy) -> None:
        # priorities a 0, b -1, c -2, d -3 -> ascending: d, c, b, a. Running sum before a is
        # 1 + 300 + 300 = 601 < 1201, so all four are evicted whole.
        actions = strategy.select_victims(EXAMPLE, EXAMPLE_NEEDED)
        assert ids(actions) == ["d", "c", "b", "a"]
        assert [a.target_tokens for a in actions] == [1, 300, 300, 600]
        assert {a.action_type for a in actions} == {"evict"}
        assert actions[0].metadata == {"strategy": strategy.name, "priority": -3.0}

    def test_largest_first(self) -> None:
        # No token ids -> compressible = max(1, int(current·0.6)): a 360, b 180, c 180;
        # d (current 1) is skipped; b before c on the tie (candidate order).
        actions = LargestFirstStrategy().select_victims(EXAMPLE, EXAMPLE_NEEDED)
        assert [(a.request_id, a.target_tokens) for a in actions] == [
            ("a", 360),
            ("b", 180),
            ("c", 180),
        ]
        assert {a.action_type for a in actions} == {"compress"}
        # Without scores the δ estimate is 0.6·0.5 = 0.3.
        assert actions[0].metadata == {
            "strategy": "largest-first",
            "estimated_quality_delta": pytest.approx(0.3),
            "compressible_tokens": 360,
        }

    def test_bidkv(self) -> None:
        # Branch B: δ = 1 + 0.5·c + 0.3·P with c = (computed - prompt) / 256.
        #   a: c = 100/256 = 0.390625, P 0 -> δ = 1.1953125;  U = 600 / 1.1963125 = 501.5412
        #   b: c = 200/256 = 0.78125,  P 1 -> δ = 1.690625;   U = 300 / 1.691625  = 177.3442
        #   c: c =  10/256 = 0.0390625, P 0 -> δ = 1.01953125; U = 300 / 1.02053125 = 293.9646
        #   d: current 1 -> no bid.
        actions = BidKVStrategy().select_victims(EXAMPLE, EXAMPLE_NEEDED)
        assert ids(actions) == ["a", "c", "b"]
        assert [a.target_tokens for a in actions] == [600, 300, 300]
        assert {a.action_type for a in actions} == {"evict"}
        deltas = [a.metadata["quality_delta"] for a in actions]
        utilities = [a.metadata["utility"] for a in actions]
        assert deltas == pytest.approx([1.1953125, 1.01953125, 1.690625])
        assert [round(d, 4) for d in deltas] == [1.1953, 1.0195, 1.6906]
        assert utilities == pytest.approx([501.5412, 293.9646, 177.3442], abs=1e-4)
        assert [round(u, 2) for u in utilities] == [501.54, 293.96, 177.34]
        assert actions[0].metadata["strategy"] == "bidkv"
        assert actions[0].metadata["bid_id"] == "a:bid:0"

    def test_bidkv_stops_once_enough(self) -> None:
        # a alone frees 600 >= 500.
        assert ids(BidKVStrategy().select_victims(EXAMPLE, 500)) == ["a"]
        # a (600) then c (900) >= 700.
        assert ids(BidKVStrategy().select_victims(EXAMPLE, 700)) == ["a", "c"]

    def test_preempt_evict_stops_once_enough(self) -> None:
        # d 1, c 301 >= 301 -> stop.
        assert ids(PreemptEvictStrategy().select_victims(EXAMPLE, 301)) == ["d", "c"]
        assert ids(PreemptEvictStrategy().select_victims(EXAMPLE, 302)) == ["d", "c", "b"]

    def test_largest_first_trims_last_action(self) -> None:
        # a 360, then b limited to 400 - 360 = 40.
        actions = LargestFirstStrategy().select_victims(EXAMPLE, 400)
        assert [(a.request_id, a.target_tokens) for a in actions] == [("a", 360), ("b", 40)]
        assert actions[1].metadata["compressible_tokens"] == 180


# --------------------------------------------------------------------------------------------
# Common contract


@pytest.fixture(params=STRATEGY_NAMES)
def strategy(request: pytest.FixtureRequest) -> BaselineStrategy:
    return create_default_registry().get(request.param)


class TestCommonContract:
    @pytest.mark.parametrize("needed", [0, -5])
    def test_nothing_needed(self, strategy: BaselineStrategy, needed: int) -> None:
        assert strategy.select_victims(EXAMPLE, needed) == []

    def test_no_candidates(self, strategy: BaselineStrategy) -> None:
        assert strategy.select_victims([], 100) == []

    def test_duplicate_ids_use_last_snapshot_once(self, strategy: BaselineStrategy) -> None:
        # "x" appears twice; the later snapshot (800 tokens) is the one used, and only once.
        candidates = [
            request("x", 100, arrival=5.0),
            request("y", 400),
            request("x", 800, arrival=5.0),
        ]
        actions = strategy.select_victims(candidates, 10_000)
        assert sorted(ids(actions)) == ["x", "y"]
        x_action = next(a for a in actions if a.request_id == "x")
        expected_x = {
            "bidkv": 800,
            "largest-first": 480,  # int(800·0.6)
            "preempt-evict": 800,
            "preempt-evict-sjf": 800,
            "static-random": 400,  # int(800·0.5)
        }[strategy.name]
        assert x_action.target_tokens == expected_x

    def test_is_a_baseline_strategy(self, strategy: BaselineStrategy) -> None:
        assert isinstance(strategy, BaselineStrategy)

    def test_cannot_instantiate_abstract_base(self) -> None:
        with pytest.raises(TypeError):
            BaselineStrategy()  # type: ignore[abstract]


# --------------------------------------------------------------------------------------------
# Types


class TestTypes:
    def test_request_state_defaults(self) -> None:
        state = RequestState("r", 10)
        assert (state.priority, state.arrival_time_ms, state.deadline_ms, state.token_ids) == (
            0.0,
            0.0,
            None,
            (),
        )
        assert (
            state.num_prompt_tokens,
            state.num_computed_tokens,
            state.max_output_tokens,
            state.num_preemptions,
            state.private_tokens,
        ) == (0, 0, 0, 0, 0)
        with pytest.raises(dataclasses.FrozenInstanceError):
            state.current_tokens = 5  # type: ignore[misc]

    def test_untracked_request_state_is_allowed(self) -> None:
        assert RequestState("r", 0).current_tokens == 0

    def test_action_ok(self) -> None:
        action = CompressionAction("r", "compress", 3)
        assert action.metadata == {}

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("r", "drop", 3), "action_type must be 'evict' or 'compress', got 'drop'"),
            (("r", "EVICT", 3), "action_type must be 'evict' or 'compress', got 'EVICT'"),
            (("r", "evict", 0), "target_tokens must be > 0, got 0"),
            (("r", "compress", -2), "target_tokens must be > 0, got -2"),
        ],
    )
    def test_action_validation(self, args: tuple[Any, ...], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            CompressionAction(*args)

    def test_baseline_context_is_structural(self) -> None:
        class Context:
            def get_active_requests(self) -> list[RequestState]:
                return list(EXAMPLE)

            def get_kv_stats(self) -> tuple[int, int]:
                return (900, 1000)

        class StatsOnly:
            def get_kv_stats(self) -> tuple[int, int]:
                return (0, 0)

        assert isinstance(Context(), BaselineContext)
        assert not isinstance(StatsOnly(), BaselineContext)


# --------------------------------------------------------------------------------------------
# Registry


class TestRegistry:
    def test_default_names(self) -> None:
        registry = create_default_registry()
        assert registry.list_strategies() == STRATEGY_NAMES
        assert registry.count == 5
        assert all(registry.get(name).name == name for name in STRATEGY_NAMES)

    def test_default_types(self) -> None:
        registry = create_default_registry()
        assert type(registry.get("preempt-evict")) is PreemptEvictStrategy
        assert type(registry.get("preempt-evict-sjf")) is PreemptEvictSJFStrategy
        assert type(registry.get("static-random")) is StaticRandomStrategy
        assert type(registry.get("largest-first")) is LargestFirstStrategy
        assert type(registry.get("bidkv")) is BidKVStrategy

    def test_registry_static_random_is_seeded_zero(self) -> None:
        static = create_default_registry().get("static-random")
        assert isinstance(static, StaticRandomStrategy)
        assert static.seed == 0

    def test_register_and_duplicate(self) -> None:
        registry = BaselineRegistry()
        registry.register(PreemptEvictStrategy())
        with pytest.raises(ValueError, match="Strategy 'preempt-evict' already registered"):
            registry.register(PreemptEvictStrategy())

    def test_unknown_lists_available(self) -> None:
        registry = BaselineRegistry()
        registry.register(PreemptEvictSJFStrategy())
        registry.register(BidKVStrategy())
        with pytest.raises(
            KeyError, match=r"Strategy 'h2o-style' not found. Available: bidkv, preempt-evict-sjf"
        ):
            registry.get("h2o-style")

    def test_defaults_keep_existing_names(self) -> None:
        mine = StaticRandomStrategy(seed=7)
        registry = BaselineRegistry()
        registry.register(mine)
        registry.create_default_registry()
        assert registry.get("static-random") is mine
        assert registry.count == 5


# --------------------------------------------------------------------------------------------
# Decision 1: bidkv ranks every candidate (the original cut the ranking at 20 bids)


class TestBidkvRanksEveryCandidate:
    @staticmethod
    def utility(state: RequestState) -> float:
        # Independent restatement of branch B: δ = 1 + 0.5·c + 0.3·P, U = r / (δ + 0.001)
        completion = min(1.0, max(0, state.num_computed_tokens - state.num_prompt_tokens) / 256)
        delta = 1.0 + 0.5 * completion + 0.3 * state.num_preemptions
        return state.current_tokens / (delta + 0.001)

    def test_thirty_candidates_all_ranked(self) -> None:
        candidates = [
            request(
                f"r{i:02d}",
                current=100 + 37 * ((i * 7) % 30),
                prompt=50,
                computed=50 + (i * 11) % 256,
                preemptions=i % 3,
                arrival=float(i),
            )
            for i in range(30)
        ]
        ineligible = [request("untracked", 0), request("one", 1)]
        needed = sum(c.current_tokens for c in candidates)
        actions = BidKVStrategy().select_victims(candidates + ineligible, needed)

        assert len(actions) == 30  # the original returned 20
        expected = sorted(candidates, key=self.utility, reverse=True)
        assert ids(actions) == [c.request_id for c in expected]
        utilities = [a.metadata["utility"] for a in actions]
        assert utilities == sorted(utilities, reverse=True)
        assert utilities == pytest.approx([self.utility(c) for c in expected])

    def test_more_than_twenty_even_with_tight_delta_budget(self) -> None:
        candidates = [request(f"q{i}", 500 + i) for i in range(25)]
        actions = BidKVStrategy(delta_budget=0.0).select_victims(candidates, 10**9)
        # Equal δ = 1: larger current_tokens first.
        assert ids(actions) == [f"q{i}" for i in reversed(range(25))]


# --------------------------------------------------------------------------------------------
# bidkv branches and ties


class TestBidkvDetails:
    def test_branch_a_radix_aware(self) -> None:
        # private 512: recompute_norm = max(0.5, 512/256) = 2; c = 100/200 = 0.5; P = 1
        # δ = max(0.1, 2 + 0.5·0.5 + 0.3·1) = 2.55; U = 512 / 2.551 = 200.7056
        state = request(
            "p", 900, prompt=500, computed=600, max_output=200, preemptions=1, private_tokens=512
        )
        (action,) = BidKVStrategy().select_victims([state], 10_000)
        assert action.target_tokens == 512
        assert action.metadata["quality_delta"] == pytest.approx(2.55)
        assert action.metadata["utility"] == pytest.approx(200.7056, abs=1e-4)

    def test_branch_a_metadata_and_floor(self) -> None:
        # private 64: recompute_norm = max(0.5, 0.25) = 0.5; c = 0; P = 0 -> δ = 0.5
        bid = BidKVStrategy().make_bid(request("p", 900, private_tokens=64))
        assert bid is not None
        assert bid.quality_delta == pytest.approx(0.5)
        assert bid.metadata == {
            "private_tokens": 64,
            "recompute_norm": 0.5,
            "completion": 0.0,
            "num_preemptions": 0,
            "mode": "A",
            "path": "radix-aware",
        }

    def test_branch_a_weights_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("BIDKV_COMPLETION_WEIGHT", "1.0")
        monkeypatch.setenv("BIDKV_STARVATION_WEIGHT", "0.0")
        monkeypatch.setenv("BIDKV_RECOMPUTE_DIV", "128")
        monkeypatch.setenv("BIDKV_RECOMPUTE_FLOOR", "0.25")
        # private 64: norm = max(0.25, 64/128 = 0.5) = 0.5; c = 0.5·1.0; P·0 -> δ = 1.0
        state = request(
            "p", 900, prompt=500, computed=600, max_output=200, preemptions=3, private_tokens=64
        )
        bid = BidKVStrategy().make_bid(state)
        assert bid is not None
        assert bid.quality_delta == pytest.approx(1.0)

    def test_constructor_weights_win_over_environment(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("BIDKV_STARVATION_WEIGHT", "9.0")
        bid = BidKVStrategy(starvation_weight=0.0).make_bid(
            request("p", 900, preemptions=2, private_tokens=64)
        )
        assert bid is not None
        assert bid.quality_delta == pytest.approx(0.5)

    def test_branch_b_ignores_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("BIDKV_COMPLETION_WEIGHT", "5.0")
        monkeypatch.setenv("BIDKV_STARVATION_WEIGHT", "5.0")
        bid = BidKVStrategy().make_bid(EXAMPLE[1])  # b: δ = 1 + 0.5·0.78125 + 0.3 = 1.690625
        assert bid is not None
        assert bid.quality_delta == pytest.approx(1.690625)
        assert bid.metadata == {
            "completion": 0.7812,
            "num_preemptions": 1,
            "mode": "A",
            "path": "v8-frozen",
        }

    def test_bad_environment_value(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("BIDKV_RECOMPUTE_DIV", "fast")
        with pytest.raises(ValueError, match="BIDKV_RECOMPUTE_DIV must be a number, got 'fast'"):
            BidKVStrategy()

    def test_recompute_div_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match=r"recompute_div must be > 0, got 0\.0"):
            BidKVStrategy(recompute_div=0.0)

    def test_delta_budget_validated(self) -> None:
        with pytest.raises(ValueError, match=r"delta_budget must be in \[0.0, 1.0\], got 2.0"):
            BidKVStrategy(delta_budget=2.0)

    def test_completion_edge_cases(self) -> None:
        # Unknown max_output -> completion 0 -> δ 1.0; output beyond max -> capped at 1 -> δ 1.5
        unknown = BidKVStrategy().make_bid(request("u", 50, prompt=10, computed=40, max_output=0))
        over = BidKVStrategy().make_bid(request("o", 50, prompt=10, computed=400, max_output=100))
        assert unknown is not None and over is not None
        assert unknown.quality_delta == 1.0
        assert over.quality_delta == 1.5

    def test_ineligible(self) -> None:
        assert BidKVStrategy().make_bid(request("one", 1)) is None
        assert BidKVStrategy().select_victims([request("one", 1), request("zero", 0)], 100) == []

    def test_equal_utility_keeps_candidate_order(self) -> None:
        x, y = request("x", 400), request("y", 400)
        assert ids(BidKVStrategy().select_victims([x, y], 10_000)) == ["x", "y"]
        assert ids(BidKVStrategy().select_victims([y, x], 10_000)) == ["y", "x"]


# --------------------------------------------------------------------------------------------
# preempt-evict details


class TestPreemptEvictDetails:
    def test_zero_token_candidates_are_skipped(self) -> None:
        # The original raised ValueError (target_tokens must be > 0) on the untracked request.
        candidates = [request("old", 100, arrival=0.0), request("untracked", 0, arrival=9.0)]
        actions = PreemptEvictStrategy().select_victims(candidates, 50)
        assert ids(actions) == ["old"]

    def test_equal_priority_keeps_candidate_order(self) -> None:
        candidates = [request("p", 10), request("q", 10), request("r", 10)]
        assert ids(PreemptEvictStrategy().select_victims(candidates, 25)) == ["p", "q", "r"]

    def test_sjf_variant_metadata(self) -> None:
        (first, *_) = PreemptEvictSJFStrategy().select_victims(EXAMPLE, 1)
        assert first.metadata == {"strategy": "preempt-evict-sjf", "priority": -3.0}


# --------------------------------------------------------------------------------------------
# largest-first details


class TestLargestFirstDetails:
    def test_scored_tokens_cap_compressible(self) -> None:
        # big: 1000 tracked tokens but only 10 token ids. Positional scores for n = 10 (sink scale
        # 1, recency 0.6·i/9): i = 1..7 score below 0.5 -> compressible = min(600, 7) = 7.
        # mid: no token ids -> int(100·0.6) = 60. So mid goes first.
        big = request("big", 1000, token_ids=tuple(range(10)))
        mid = request("mid", 100)
        actions = LargestFirstStrategy().select_victims([big, mid], 10_000)
        assert [(a.request_id, a.target_tokens) for a in actions] == [("mid", 60), ("big", 7)]
        # δ estimate: mean of the 7 lowest scores
        # 0.13333 (i=2), 0.2 (3), 0.26667 (4), 0.29430 (1), 0.33333 (5), 0.4 (6), 0.46667 (7)
        assert actions[1].metadata["estimated_quality_delta"] == pytest.approx(2.0943036 / 7)

    def test_scoring_states_override(self) -> None:
        class KeepEverything:
            def score(self, token_ids: Sequence[int], **context: Any) -> list[float]:
                return [0.9] * len(token_ids)

        state = request("s", 100, token_ids=tuple(range(100)))
        strategy = LargestFirstStrategy()
        # Default scorer: 80 of 100 positional scores are below 0.5 -> min(60, 80) = 60.
        assert strategy.select_victims([state], 1000)[0].target_tokens == 60
        # Nothing below 0.5 -> compressible 0 -> skipped.
        assert strategy.select_victims([state], 1000, scoring_states={"s": KeepEverything()}) == []

    def test_any_scoring_strategy_in_constructor(self) -> None:
        class LowAfterFirstTwo:
            def score(self, token_ids: Sequence[int], **context: Any) -> list[float]:
                return [0.9, 0.9] + [0.1] * (len(token_ids) - 2)

        state = request("s", 100, token_ids=tuple(range(10)))
        # 8 of 10 scores below 0.5 -> min(int(100·0.6) = 60, 8) = 8
        (action,) = LargestFirstStrategy(scoring=LowAfterFirstTwo()).select_victims([state], 1000)
        assert action.target_tokens == 8
        assert action.metadata["estimated_quality_delta"] == pytest.approx(0.1)

    def test_custom_ratio(self) -> None:
        (action,) = LargestFirstStrategy(compressible_ratio=1.0).select_victims(
            [request("a", 7)], 100
        )
        assert action.target_tokens == 7

    @pytest.mark.parametrize("ratio", [0.0, -0.1, 1.01])
    def test_ratio_validation(self, ratio: float) -> None:
        with pytest.raises(
            ValueError, match=rf"compressible_ratio must be in \(0, 1\], got {ratio}"
        ):
            LargestFirstStrategy(compressible_ratio=ratio)


# --------------------------------------------------------------------------------------------
# Decision 2: static-random is seeded and never touches the global generator


TEN = [request(f"s{i}", 100 + i) for i in range(10)]


class TestStaticRandom:
    def test_default_seed_is_zero(self) -> None:
        assert StaticRandomStrategy().seed == 0

    def test_order_is_random_random_shuffle_of_the_seed(self) -> None:
        # Reference: ``random.Random(seed).shuffle(copy)``.
        expected = list(TEN)
        random.Random(0).shuffle(expected)
        actions = StaticRandomStrategy().select_victims(TEN, 10**6)
        assert ids(actions) == [r.request_id for r in expected]
        # 50 % of each request, at least 1 token.
        assert [a.target_tokens for a in actions] == [r.current_tokens // 2 for r in expected]
        assert actions[0].metadata == {
            "strategy": "static-random",
            "compression_ratio": 0.5,
            "seed": 0,
        }

    def test_reproducible_per_call_and_across_instances(self) -> None:
        strategy = StaticRandomStrategy(seed=11)
        first = strategy.select_victims(TEN, 10**6)
        assert strategy.select_victims(TEN, 10**6) == first
        assert StaticRandomStrategy(seed=11).select_victims(TEN, 10**6) == first

    def test_seed_changes_the_order(self) -> None:
        orders = {
            tuple(ids(StaticRandomStrategy(seed=s).select_victims(TEN, 10**6))) for s in range(5)
        }
        assert len(orders) > 1

    def test_seed_keyword_overrides_per_call(self) -> None:
        per_call = StaticRandomStrategy(seed=0).select_victims(TEN, 10**6, seed=3)
        assert per_call == StaticRandomStrategy(seed=3).select_victims(TEN, 10**6)
        assert per_call[0].metadata["seed"] == 3

    def test_global_random_untouched(self, monkeypatch: pytest.MonkeyPatch) -> None:
        state = random.getstate()

        def forbidden(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("global random used")

        for name in ("shuffle", "random", "choice", "sample", "randrange", "randint", "seed"):
            monkeypatch.setattr(random, name, forbidden)
        StaticRandomStrategy().select_victims(TEN, 10**6)
        create_default_registry().get("static-random").select_victims(TEN, 10**6)
        monkeypatch.undo()
        assert random.getstate() == state

    def test_stops_once_enough(self) -> None:
        # Each action frees >= 50 tokens; 120 needs at most 3 actions and exactly the prefix.
        actions = StaticRandomStrategy().select_victims(TEN, 120)
        freed = [a.target_tokens for a in actions]
        assert sum(freed[:-1]) < 120 <= sum(freed)

    def test_tiny_requests_free_one_token(self) -> None:
        (action,) = StaticRandomStrategy().select_victims([request("t", 1)], 1)
        assert action.target_tokens == 1

    @pytest.mark.parametrize("seed", [None, 1.5, "0", True])
    def test_seed_must_be_int(self, seed: Any) -> None:
        with pytest.raises(ValueError, match="seed must be an int"):
            StaticRandomStrategy(seed=seed)
        with pytest.raises(ValueError, match="seed must be an int"):
            StaticRandomStrategy().select_victims(TEN, 10, seed=seed)

    @pytest.mark.parametrize("ratio", [0.0, 1.5])
    def test_ratio_validation(self, ratio: float) -> None:
        with pytest.raises(
            ValueError, match=rf"compression_ratio must be in \(0, 1\], got {ratio}"
        ):
            StaticRandomStrategy(compression_ratio=ratio)
