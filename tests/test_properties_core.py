"""Property tests for the solver and every ``select_victims`` strategy.

For any input: no action names a request that was not a candidate, no request appears twice,
and once the running total of ``target_tokens`` reaches ``needed_tokens`` no further action
follows. For the solver the same holds for bids, plus the budget and greedy-maximality rules.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bidkv import (
    BaselineStrategy,
    BidKVStrategy,
    BidPool,
    CompressionAction,
    CompressionBid,
    GreedyBidSolver,
    LargestFirstStrategy,
    PreemptEvictSJFStrategy,
    PreemptEvictStrategy,
    RequestState,
    SolverConfig,
    StaticRandomStrategy,
)
from bidkv.legacy.baselines.registry import create_default_registry

# Applied per test so that other test modules keep their own Hypothesis settings.
PROPERTY = settings(deadline=None, max_examples=150)

# Few distinct ids so that repeated ids (and repeated requests across bids) are common.
request_ids = st.sampled_from([f"r{i}" for i in range(12)])

request_states = st.builds(
    RequestState,
    request_id=request_ids,
    current_tokens=st.integers(min_value=-3, max_value=4000),
    priority=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    arrival_time_ms=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    token_ids=st.one_of(st.just(()), st.lists(st.integers(0, 50), max_size=60).map(tuple)),
    num_prompt_tokens=st.integers(0, 3000),
    num_computed_tokens=st.integers(0, 4000),
    max_output_tokens=st.integers(-1, 1024),
    num_preemptions=st.integers(0, 6),
    private_tokens=st.one_of(st.just(0), st.integers(-2, 3000)),
)
candidate_lists = st.lists(request_states, max_size=30)
needed = st.integers(min_value=-10, max_value=60_000)

ALL_STRATEGIES: list[BaselineStrategy] = [
    PreemptEvictStrategy(),
    PreemptEvictSJFStrategy(),
    StaticRandomStrategy(),
    StaticRandomStrategy(seed=12345, compression_ratio=0.2),
    LargestFirstStrategy(),
    LargestFirstStrategy(compressible_ratio=1.0),
    BidKVStrategy(),
    *[create_default_registry().get(name) for name in create_default_registry().list_strategies()],
]


def check_common(
    candidates: list[RequestState], needed_tokens: int, actions: list[CompressionAction]
) -> None:
    candidate_ids = {c.request_id for c in candidates}
    action_ids = [a.request_id for a in actions]
    assert set(action_ids) <= candidate_ids
    assert len(action_ids) == len(set(action_ids))
    if needed_tokens <= 0 or not candidates:
        assert actions == []
    # Every action except the last was taken while the target was still unmet.
    running = 0
    for action in actions:
        assert running < needed_tokens
        assert action.target_tokens > 0
        running += action.target_tokens


@PROPERTY
@given(
    candidates=candidate_lists, needed_tokens=needed, index=st.integers(0, len(ALL_STRATEGIES) - 1)
)
def test_every_strategy_contract(
    candidates: list[RequestState], needed_tokens: int, index: int
) -> None:
    strategy = ALL_STRATEGIES[index]
    actions = strategy.select_victims(candidates, needed_tokens)
    check_common(candidates, needed_tokens, actions)
    for action in actions:
        assert action.metadata["strategy"] == strategy.name


def latest(candidates: list[RequestState]) -> dict[str, RequestState]:
    by_id: dict[str, RequestState] = {}
    for c in candidates:
        by_id[c.request_id] = c
    return by_id


@PROPERTY
@given(candidates=candidate_lists, needed_tokens=needed)
def test_preempt_evict_frees_enough_when_possible(
    candidates: list[RequestState], needed_tokens: int
) -> None:
    actions = PreemptEvictStrategy().select_victims(candidates, needed_tokens)
    states = latest(candidates)
    evictable = [s for s in states.values() if s.current_tokens > 0]
    freed = sum(a.target_tokens for a in actions)
    if needed_tokens > 0:
        # Either enough was freed, or every evictable request was used.
        assert freed >= needed_tokens or len(actions) == len(evictable)
    priorities = [states[a.request_id].priority for a in actions]
    assert priorities == sorted(priorities)
    assert all(a.target_tokens == states[a.request_id].current_tokens for a in actions)


@PROPERTY
@given(candidates=candidate_lists, needed_tokens=needed, seed=st.integers(0, 2**32))
def test_static_random_is_a_pure_function_of_seed(
    candidates: list[RequestState], needed_tokens: int, seed: int
) -> None:
    strategy = StaticRandomStrategy(seed=seed)
    first = strategy.select_victims(candidates, needed_tokens)
    assert strategy.select_victims(candidates, needed_tokens) == first
    assert StaticRandomStrategy().select_victims(candidates, needed_tokens, seed=seed) == first
    if needed_tokens > 0:
        unique = len(latest(candidates))
        assert sum(a.target_tokens for a in first) >= needed_tokens or len(first) == unique


@PROPERTY
@given(candidates=candidate_lists, needed_tokens=needed)
def test_bidkv_utility_order_and_completeness(
    candidates: list[RequestState], needed_tokens: int
) -> None:
    actions = BidKVStrategy().select_victims(candidates, needed_tokens)
    utilities = [a.metadata["utility"] for a in actions]
    assert utilities == sorted(utilities, reverse=True)
    eligible = [s for s in latest(candidates).values() if s.current_tokens > 1]
    assert all(latest(candidates)[a.request_id].current_tokens > 1 for a in actions)
    if needed_tokens > 0:
        # No cut-off at 20: with too few tokens, every eligible request is ranked.
        assert sum(a.target_tokens for a in actions) >= needed_tokens or len(actions) == len(
            eligible
        )


@PROPERTY
@given(candidates=candidate_lists, needed_tokens=needed)
def test_largest_first_never_exceeds_needed(
    candidates: list[RequestState], needed_tokens: int
) -> None:
    actions = LargestFirstStrategy().select_victims(candidates, needed_tokens)
    assert sum(a.target_tokens for a in actions) <= max(needed_tokens, 0)
    compressible = [a.metadata["compressible_tokens"] for a in actions]
    assert compressible == sorted(compressible, reverse=True)


# --------------------------------------------------------------------------------------------
# Solver

deltas = st.one_of(
    st.sampled_from([0.0, 0.0625, 0.125, 0.25, 0.5, 1.0]),
    st.floats(min_value=0.0, max_value=2.0, allow_nan=False),
)


@st.composite
def pools(draw: st.DrawFn) -> BidPool:
    specs = draw(
        st.lists(
            st.tuples(request_ids, st.integers(1, 5000), deltas),
            max_size=40,
        )
    )
    bids = tuple(
        CompressionBid(
            bid_id=f"{rid}:bid:{index}",
            request_id=rid,
            algorithm_id="prop",
            tokens_freed=tokens,
            quality_delta=delta,
            compress_latency_ms=0.0,
            confidence=0.5,
        )
        for index, (rid, tokens, delta) in enumerate(specs)
    )
    return BidPool(snapshot_time_ns=draw(st.integers(0, 10**12)), bids=bids)


@PROPERTY
@given(
    pool=pools(),
    tokens_needed=needed,
    budget=st.one_of(st.none(), st.floats(min_value=0.0, max_value=50.0, allow_nan=False)),
    config_budget=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    max_bids=st.integers(1, 50),
)
def test_solver_properties(
    pool: BidPool, tokens_needed: int, budget: float | None, config_budget: float, max_bids: int
) -> None:
    solver = GreedyBidSolver(
        SolverConfig(enabled=True, delta_budget=config_budget, max_bids_per_solve=max_bids)
    )
    result = solver.solve(pool, tokens_needed, budget)
    by_id = {b.bid_id: b for b in pool.bids}
    accepted = [by_id[bid_id] for bid_id in result.accepted_bid_ids]

    # Only pool bids, at most one per request.
    assert len(accepted) == len(result.accepted_bid_ids)
    requests = [b.request_id for b in accepted]
    assert len(requests) == len(set(requests))
    if tokens_needed <= 0 or not pool.bids:
        assert result.is_empty
        return

    # Totals, budget and utility order.
    effective_budget = config_budget if budget is None else budget
    spent = 0.0
    for b in accepted:
        spent += b.quality_delta
        assert spent <= effective_budget
    assert result.total_tokens_freed == sum(b.tokens_freed for b in accepted)
    assert math.isclose(result.total_quality_delta, round(spent, 6))
    utilities = [b.utility for b in accepted]
    assert utilities == sorted(utilities, reverse=True)

    # Early stop: the target was unmet before each accepted bid.
    running = 0
    for b in accepted:
        assert running < tokens_needed
        running += b.tokens_freed

    # Greedy maximality: if the target is unmet, every considered bid that was left out either
    # shares a request with an accepted bid or no longer fits the budget (spending only grows).
    considered = sorted(pool.bids, key=lambda b: -b.utility)[:max_bids]
    if result.total_tokens_freed < tokens_needed:
        chosen = set(requests)
        for b in considered:
            if b.bid_id not in result.accepted_bid_ids:
                assert b.request_id in chosen or spent + b.quality_delta > effective_budget


@PROPERTY
@given(pool=pools(), tokens_needed=needed)
def test_solver_off_or_killed_accepts_nothing(pool: BidPool, tokens_needed: int) -> None:
    for config in (SolverConfig(), SolverConfig(enabled=True, kill_switch=True)):
        assert GreedyBidSolver(config).solve(pool, tokens_needed).is_empty
