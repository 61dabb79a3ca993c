"""GreedyBidSolver: gates, budget, one bid per request, early stop and tie order.

The rules: docs/bidkv-core.md, "The greedy solver".

Bid deltas are powers of two (0.0625, 0.125, 0.5) so that budget sums are exact in binary and
the boundary cases below are not blurred by rounding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from bidkv import (
    BidAcceptance,
    BidPool,
    CompressionBid,
    GreedyBidSolver,
    SolverConfig,
)

REASON = "kv_pool_pressure_threshold_exceeded"


def make_bid(
    bid_id: str, tokens: int, delta: float, request_id: str | None = None
) -> CompressionBid:
    return CompressionBid(
        bid_id=bid_id,
        request_id=request_id if request_id is not None else bid_id.split(":")[0],
        algorithm_id="test",
        tokens_freed=tokens,
        quality_delta=delta,
        compress_latency_ms=0.0,
        confidence=1.0,
    )


# Hand-worked utilities U = r / (δ + 0.001):
#   A: 100 / 0.126  =   793.65
#   B: 300 / 0.501  =   598.80
#   C:  50 / 0.001  = 50000.00
#   D: 200 / 0.0635 =  3149.61
# Utility order: C, D, A, B.
A = make_bid("A:bid:0", 100, 0.125)
B = make_bid("B:bid:0", 300, 0.5)
C = make_bid("C:bid:0", 50, 0.0)
D = make_bid("D:bid:0", 200, 0.0625)
POOL = BidPool(snapshot_time_ns=1, bids=(A, B, C, D))


def solver(**overrides: Any) -> GreedyBidSolver:
    config: dict[str, Any] = {"enabled": True, "delta_budget": 0.25}
    config.update(overrides)
    return GreedyBidSolver(SolverConfig(**config))


class TestSolverConfig:
    def test_defaults(self) -> None:
        config = SolverConfig()
        assert config == SolverConfig(
            enabled=False,
            delta_budget=0.15,
            max_bids_per_solve=20,
            kill_switch=False,
            decision_reason=REASON,
        )
        assert not config.is_active

    @pytest.mark.parametrize(
        ("enabled", "kill_switch", "active"),
        [(False, False, False), (True, False, True), (False, True, False), (True, True, False)],
    )
    def test_is_active(self, enabled: bool, kill_switch: bool, active: bool) -> None:
        assert SolverConfig(enabled=enabled, kill_switch=kill_switch).is_active is active

    def test_kill_switch_thrown_at_run_time_stops_solving(self) -> None:
        # update_config's documented use: a new config (an altered copy) replaces the old one.
        running = solver()
        assert running.solve(POOL, 250).accepted_bid_ids == ("C:bid:0", "D:bid:0")
        stopped = dataclasses.replace(running.config, kill_switch=True)
        running.update_config(stopped)
        assert running.config is stopped
        assert running.solve(POOL, 250).accepted_bid_ids == ()

    def test_altered_copies_are_validated_too(self) -> None:
        with pytest.raises(ValueError, match=r"delta_budget must be in \[0.0, 1.0\], got 2.0"):
            dataclasses.replace(SolverConfig(), delta_budget=2.0)

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            ({"delta_budget": -0.01}, r"delta_budget must be in \[0.0, 1.0\], got -0.01"),
            ({"delta_budget": 1.5}, r"delta_budget must be in \[0.0, 1.0\], got 1.5"),
            ({"delta_budget": math.nan}, r"delta_budget must be in \[0.0, 1.0\], got nan"),
            ({"max_bids_per_solve": 0}, r"max_bids_per_solve must be >= 1, got 0"),
        ],
    )
    def test_validation(self, overrides: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            SolverConfig(**overrides)


class TestGates:
    def test_default_solver_is_off(self) -> None:
        result = GreedyBidSolver().solve(POOL, 100)
        assert result == BidAcceptance((), 0, 0.0, f"{REASON}:feature_off")

    def test_kill_switch_wins_over_enabled(self) -> None:
        result = solver(kill_switch=True).solve(POOL, 100)
        assert result == BidAcceptance((), 0, 0.0, f"{REASON}:kill_switch")

    def test_kill_switch_checked_before_feature_gate(self) -> None:
        result = solver(enabled=False, kill_switch=True).solve(POOL, 100)
        assert result.decision_reason == f"{REASON}:kill_switch"

    @pytest.mark.parametrize("needed", [0, -10])
    def test_no_tokens_needed(self, needed: int) -> None:
        result = solver().solve(POOL, needed)
        assert result == BidAcceptance((), 0, 0.0, f"{REASON}:no_tokens_needed")

    def test_no_tokens_checked_before_empty_pool(self) -> None:
        result = solver().solve(BidPool(0), 0)
        assert result.decision_reason == f"{REASON}:no_tokens_needed"

    def test_empty_pool(self) -> None:
        result = solver().solve(BidPool(snapshot_time_ns=0), 100)
        assert result == BidAcceptance((), 0, 0.0, f"{REASON}:empty_pool")

    def test_reason_overrides(self) -> None:
        assert (
            solver(decision_reason="cfg").solve(BidPool(0), 5).decision_reason == "cfg:empty_pool"
        )
        result = solver().solve(POOL, 5, decision_reason="call")
        assert result.decision_reason == "call"

    def test_update_config_throws_kill_switch(self) -> None:
        s = solver()
        assert not s.solve(POOL, 100).is_empty
        s.update_config(SolverConfig(enabled=True, kill_switch=True))
        assert s.config.kill_switch
        assert s.solve(POOL, 100).decision_reason == f"{REASON}:kill_switch"


class TestSelection:
    def test_budget_skips_expensive_bid(self) -> None:
        # C (Σδ 0), D (0.0625), A (0.1875); B would make 0.6875 > 0.25 -> skipped.
        result = solver().solve(POOL, 1000)
        assert result.accepted_bid_ids == ("C:bid:0", "D:bid:0", "A:bid:0")
        assert result.total_tokens_freed == 350
        assert result.total_quality_delta == 0.1875
        assert result.decision_reason == REASON

    def test_budget_boundary_is_inclusive(self) -> None:
        # 0.0625 + 0.125 == 0.1875 exactly: A still fits.
        result = solver(delta_budget=0.1875).solve(POOL, 1000)
        assert result.accepted_bid_ids == ("C:bid:0", "D:bid:0", "A:bid:0")
        result = solver(delta_budget=0.1874).solve(POOL, 1000)
        assert result.accepted_bid_ids == ("C:bid:0", "D:bid:0")

    def test_zero_budget_takes_only_free_bids(self) -> None:
        assert solver(delta_budget=0.0).solve(POOL, 1000).accepted_bid_ids == ("C:bid:0",)

    def test_budget_override_per_call(self) -> None:
        # Above the config range on purpose: the override is how a caller ranks everything.
        result = solver().solve(POOL, 1000, delta_budget=5.0)
        assert result.accepted_bid_ids == ("C:bid:0", "D:bid:0", "A:bid:0", "B:bid:0")
        assert result.total_tokens_freed == 650
        assert result.total_quality_delta == 0.6875

    def test_nan_budget_admits_nothing(self) -> None:
        result = solver().solve(POOL, 1000, delta_budget=math.nan)
        assert result.is_empty
        assert result.decision_reason == REASON

    def test_skipped_bid_does_not_block_cheaper_later_ones(self) -> None:
        # E is ranked first but too expensive; F, ranked after it, still fits.
        e = make_bid("E:bid:0", 10_000, 0.5)  # 19960
        f = make_bid("F:bid:0", 10, 0.0)  # 10000
        result = solver(delta_budget=0.25).solve(BidPool(0, (f, e)), 50_000)
        assert result.accepted_bid_ids == ("F:bid:0",)

    def test_stops_as_soon_as_enough(self) -> None:
        # C frees 50 (< 250), D brings it to 250 >= 250: stop before A.
        result = solver().solve(POOL, 250)
        assert result.accepted_bid_ids == ("C:bid:0", "D:bid:0")
        assert result.total_tokens_freed == 250
        assert result.total_quality_delta == 0.0625

    def test_first_bid_can_be_enough(self) -> None:
        assert solver().solve(POOL, 50).accepted_bid_ids == ("C:bid:0",)
        assert solver().solve(POOL, 1).accepted_bid_ids == ("C:bid:0",)

    def test_one_bid_per_request(self) -> None:
        # r1:1 U=200000, r1:0 U=100000, r2:0 U=10000; r1:0 is skipped because r1 already has one.
        bids = (
            make_bid("r1:bid:0", 100, 0.0),
            make_bid("r1:bid:1", 200, 0.0),
            make_bid("r2:bid:0", 10, 0.0),
        )
        result = solver().solve(BidPool(0, bids), 1000)
        assert result.accepted_bid_ids == ("r1:bid:1", "r2:bid:0")
        assert result.total_tokens_freed == 210

    def test_stable_tie_order(self) -> None:
        x = make_bid("x:bid:0", 100, 0.125)
        y = make_bid("y:bid:0", 100, 0.125)
        z = make_bid("z:bid:0", 100, 0.125)
        assert solver(delta_budget=1.0).solve(BidPool(0, (x, y, z)), 1000).accepted_bid_ids == (
            "x:bid:0",
            "y:bid:0",
            "z:bid:0",
        )
        assert solver(delta_budget=1.0).solve(BidPool(0, (z, x, y)), 1000).accepted_bid_ids == (
            "z:bid:0",
            "x:bid:0",
            "y:bid:0",
        )

    def test_max_bids_per_solve_truncates_the_ranking(self) -> None:
        # Only the first two by utility (C, D) are considered, even though more are needed.
        result = solver(max_bids_per_solve=2, delta_budget=1.0).solve(POOL, 1000)
        assert result.accepted_bid_ids == ("C:bid:0", "D:bid:0")

    def test_truncation_counts_skipped_bids(self) -> None:
        # The window is taken before the one-bid-per-request rule: r1:0 uses a slot.
        bids = (
            make_bid("r1:bid:0", 100, 0.0),
            make_bid("r1:bid:1", 200, 0.0),
            make_bid("r2:bid:0", 10, 0.0),
        )
        result = solver(max_bids_per_solve=2).solve(BidPool(0, bids), 1000)
        assert result.accepted_bid_ids == ("r1:bid:1",)

    def test_total_delta_rounded_to_6_places(self) -> None:
        # 0.1 + 0.2 = 0.30000000000000004 in floats; reported as 0.3.
        bids = (make_bid("p:bid:0", 10, 0.1), make_bid("q:bid:0", 10, 0.2))
        result = solver(delta_budget=1.0).solve(BidPool(0, bids), 1000)
        assert result.total_quality_delta == 0.3
