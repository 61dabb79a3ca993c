"""Protocol layer: bid value types and the utility formula.

Expected numbers are worked by hand from ``U = r / (δ + 1e-3)`` (docs/bidkv-core.md,
"Bids and utility").
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
    make_bid_id,
)


def bid(**overrides: Any) -> CompressionBid:
    fields: dict[str, Any] = {
        "bid_id": "r1:bid:0",
        "request_id": "r1",
        "algorithm_id": "positional",
        "tokens_freed": 100,
        "quality_delta": 0.5,
        "compress_latency_ms": 1.0,
        "confidence": 0.5,
    }
    fields.update(overrides)
    return CompressionBid(**fields)


class TestCompressionBid:
    def test_utility_uses_epsilon_1e_3(self) -> None:
        # 100 / (0.5 + 0.001) = 100 / 0.501 = 199.6007984...
        b = bid(tokens_freed=100, quality_delta=0.5)
        assert b.utility == pytest.approx(199.6007984031936, rel=1e-12)
        assert b.normalized_utility == b.utility

    def test_zero_delta_gives_r_times_1000(self) -> None:
        # 7 / (0 + 0.001) = 7000
        assert bid(tokens_freed=7, quality_delta=0.0).utility == pytest.approx(7000.0)

    def test_delta_above_one_is_allowed_on_the_bid(self) -> None:
        # The bid does not bound δ by 1; 300 / (1.5 + 0.001) = 199.8667...
        assert bid(tokens_freed=300, quality_delta=1.5).utility == pytest.approx(199.866755, 1e-6)

    def test_boundaries_accepted(self) -> None:
        bid(tokens_freed=1, quality_delta=0.0, compress_latency_ms=0.0, confidence=0.0)
        bid(confidence=1.0)

    def test_metadata_defaults_to_fresh_dict(self) -> None:
        first, second = bid(), bid()
        assert first.metadata == {}
        assert first.metadata is not second.metadata

    def test_altered_copy_recomputes_utility_and_is_validated(self) -> None:
        # 200 / (0.5 + 0.001) = 399.2015968...
        assert dataclasses.replace(bid(), tokens_freed=200).utility == pytest.approx(
            399.2015968063872, rel=1e-12
        )
        with pytest.raises(ValueError, match="tokens_freed must be > 0, got 0"):
            dataclasses.replace(bid(), tokens_freed=0)

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            ({"bid_id": ""}, "bid_id must be a non-empty string"),
            ({"request_id": ""}, "request_id must be a non-empty string"),
            ({"algorithm_id": ""}, "algorithm_id must be a non-empty string"),
            ({"tokens_freed": 0}, "tokens_freed must be > 0, got 0"),
            ({"tokens_freed": -3}, "tokens_freed must be > 0, got -3"),
            ({"quality_delta": -0.1}, "quality_delta must be >= 0.0, got -0.1"),
            ({"quality_delta": math.nan}, "quality_delta must be >= 0.0, got nan"),
            ({"compress_latency_ms": -1.0}, "compress_latency_ms must be >= 0.0, got -1.0"),
            ({"compress_latency_ms": math.nan}, "compress_latency_ms must be >= 0.0, got nan"),
            ({"confidence": 1.5}, "confidence must be in [0.0, 1.0], got 1.5"),
            ({"confidence": -0.01}, "confidence must be in [0.0, 1.0], got -0.01"),
            ({"confidence": math.nan}, "confidence must be in [0.0, 1.0], got nan"),
        ],
    )
    def test_validation(self, overrides: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            bid(**overrides)


class TestBidPool:
    def test_negative_snapshot_time_rejected(self) -> None:
        with pytest.raises(ValueError, match="snapshot_time_ns must be >= 0, got -1"):
            BidPool(snapshot_time_ns=-1)

    def test_empty_defaults(self) -> None:
        pool = BidPool(snapshot_time_ns=0)
        assert pool.bids == ()
        assert pool.total_tokens_available == 0
        assert pool.top_k_by_utility(3) == ()

    def test_list_is_stored_as_tuple(self) -> None:
        b = bid()
        pool = BidPool(snapshot_time_ns=1, bids=[b])  # type: ignore[arg-type]
        assert pool.bids == (b,)

    def test_bids_for_request_sorted_by_utility(self) -> None:
        # r1 bids: 100/0.501 = 199.6, 200/0.251 = 796.8, 50/0.001 = 50000
        low = bid(bid_id="r1:bid:0", tokens_freed=100, quality_delta=0.5)
        mid = bid(bid_id="r1:bid:1", tokens_freed=200, quality_delta=0.25)
        high = bid(bid_id="r1:bid:2", tokens_freed=50, quality_delta=0.0)
        other = bid(bid_id="r2:bid:0", request_id="r2", tokens_freed=999, quality_delta=0.0)
        pool = BidPool(snapshot_time_ns=5, bids=(low, other, mid, high))
        assert pool.bids_for_request("r1") == (high, mid, low)
        assert pool.bids_for_request("missing") == ()

    def test_top_k_across_requests(self) -> None:
        a = bid(bid_id="a:bid:0", request_id="a", tokens_freed=10, quality_delta=0.0)  # 10000
        b = bid(bid_id="b:bid:0", request_id="b", tokens_freed=1000, quality_delta=1.0)  # 999
        c = bid(bid_id="c:bid:0", request_id="c", tokens_freed=30, quality_delta=0.0)  # 30000
        pool = BidPool(snapshot_time_ns=0, bids=(a, b, c))
        assert pool.top_k_by_utility(2) == (c, a)
        assert pool.top_k_by_utility(10) == (c, a, b)
        assert pool.total_tokens_available == 1040

    def test_top_k_ties_keep_pool_order(self) -> None:
        x = bid(bid_id="x:bid:0", request_id="x")
        y = bid(bid_id="y:bid:0", request_id="y")
        assert BidPool(0, (x, y)).top_k_by_utility(2) == (x, y)
        assert BidPool(0, (y, x)).top_k_by_utility(2) == (y, x)

    @pytest.mark.parametrize("k", [0, -1])
    def test_top_k_requires_positive_k(self, k: int) -> None:
        with pytest.raises(ValueError, match=f"k must be >= 1, got {k}"):
            BidPool(snapshot_time_ns=0).top_k_by_utility(k)


class TestBidAcceptance:
    def test_properties(self) -> None:
        done = BidAcceptance(("a:bid:0", "b:bid:0"), 300, 0.25, "pressure")
        assert done.accepted_count == 2
        assert not done.is_empty
        empty = BidAcceptance((), 0, 0.0, "pressure:empty_pool")
        assert empty.accepted_count == 0
        assert empty.is_empty

    def test_list_is_stored_as_tuple(self) -> None:
        done = BidAcceptance(["a"], 1, 0.0, "r")  # type: ignore[arg-type]
        assert done.accepted_bid_ids == ("a",)

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (((), -1, 0.0, "r"), "total_tokens_freed must be >= 0, got -1"),
            (((), 0, -0.5, "r"), "total_quality_delta must be >= 0.0, got -0.5"),
            (((), 0, math.nan, "r"), "total_quality_delta must be >= 0.0, got nan"),
            (((), 0, 0.0, ""), "decision_reason must be a non-empty string"),
        ],
    )
    def test_validation(self, args: tuple[Any, ...], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            BidAcceptance(*args)


class TestMakeBidId:
    def test_format(self) -> None:
        assert make_bid_id("req-7", 0) == "req-7:bid:0"
        assert make_bid_id("req-7", 12) == "req-7:bid:12"

    def test_empty_request(self) -> None:
        with pytest.raises(ValueError, match="request_id must be a non-empty string"):
            make_bid_id("", 0)

    def test_negative_level(self) -> None:
        with pytest.raises(ValueError, match="level must be >= 0, got -1"):
            make_bid_id("r", -1)
