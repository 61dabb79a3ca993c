"""Configuration, scoring, bid pool, user strategies and package surface.

Expected scores and gaps are worked by hand from the formulas in docs/bidkv-core.md.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import json
import math
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import bidkv
from bidkv import (
    BaselineRegistry,
    BaselineStrategy,
    BidKVConfig,
    BidPool,
    BidPoolManager,
    CompressionAction,
    CompressionBid,
    PositionalScoring,
    RequestState,
    ScoringStrategy,
    build_bids,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tracekit extra installs the backport there
    import tomli as tomllib

PACKAGE_DIR = Path(bidkv.__file__).parent


def make_bid(
    request_id: str, level: int = 0, tokens: int = 10, delta: float = 0.5
) -> CompressionBid:
    return CompressionBid(
        bid_id=f"{request_id}:bid:{level}",
        request_id=request_id,
        algorithm_id="test",
        tokens_freed=tokens,
        quality_delta=delta,
        compress_latency_ms=0.0,
        confidence=0.5,
    )


# --------------------------------------------------------------------------------------------
# BidKVConfig


class TestBidKVConfig:
    def test_defaults_are_off(self) -> None:
        config = BidKVConfig()
        assert (config.enabled, config.kill_switch) == (False, False)
        assert (config.delta_budget, config.max_bids_per_solve, config.truncation_ratio) == (
            1.0,
            0,
            0.5,
        )
        assert not config.is_active

    @pytest.mark.parametrize(
        ("enabled", "kill_switch", "active"),
        [(False, False, False), (True, False, True), (False, True, False), (True, True, False)],
    )
    def test_kill_switch_wins(self, enabled: bool, kill_switch: bool, active: bool) -> None:
        assert BidKVConfig(enabled=enabled, kill_switch=kill_switch).is_active is active

    def test_altered_copies_are_validated_too(self) -> None:
        active = dataclasses.replace(BidKVConfig(), enabled=True)
        assert active.is_active
        assert not dataclasses.replace(active, kill_switch=True).is_active
        with pytest.raises(ValueError, match=r"truncation_ratio must be in \[0.0, 1.0\], got 2"):
            dataclasses.replace(active, truncation_ratio=2)

    def test_equal_settings_are_one_dict_key(self) -> None:
        seen = {BidKVConfig(enabled=True): "a", BidKVConfig(enabled=True, delta_budget=1.0): "b"}
        assert seen == {BidKVConfig(enabled=True): "b"}

    def test_boundaries_accepted(self) -> None:
        BidKVConfig(delta_budget=0.0, max_bids_per_solve=0, truncation_ratio=0.0)
        BidKVConfig(delta_budget=5.0, max_bids_per_solve=100, truncation_ratio=1.0)

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            ({"delta_budget": -0.1}, r"delta_budget must be >= 0.0, got -0.1"),
            ({"delta_budget": math.nan}, r"delta_budget must be >= 0.0, got nan"),
            ({"max_bids_per_solve": -1}, r"max_bids_per_solve must be >= 0, got -1"),
            ({"truncation_ratio": 1.01}, r"truncation_ratio must be in \[0.0, 1.0\], got 1.01"),
            ({"truncation_ratio": -0.5}, r"truncation_ratio must be in \[0.0, 1.0\], got -0.5"),
        ],
    )
    def test_validation(self, overrides: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            BidKVConfig(**overrides)


# --------------------------------------------------------------------------------------------
# PositionalScoring


class TestPositionalScoring:
    def test_is_a_scoring_strategy(self) -> None:
        assert isinstance(PositionalScoring(), ScoringStrategy)

    def test_empty_sequence(self) -> None:
        assert PositionalScoring().score([]) == []

    def test_single_token(self) -> None:
        # sink 0.8·e^0 = 0.8, recency 0.6 for n == 1 -> 0.8
        assert PositionalScoring().score([42]) == [pytest.approx(0.8)]

    def test_five_tokens_by_hand(self) -> None:
        # n = 5: sink scale max(1, 0.25) = 1, recency 0.6·i/4.
        # i=0: max(0.8, 0)            = 0.8
        # i=1: max(0.8/e = 0.29430, 0.15) = 0.29430
        # i=2: max(0.8/e² = 0.10827, 0.30) = 0.30
        # i=3: max(0.8/e³ = 0.03983, 0.45) = 0.45
        # i=4: max(0.8/e⁴ = 0.01465, 0.60) = 0.60
        scores = PositionalScoring().score([7, 7, 7, 7, 7])
        assert scores == pytest.approx([0.8, 0.2943035529, 0.3, 0.45, 0.6])

    def test_share_below_half_for_100_tokens(self) -> None:
        # n = 100: sink scale 5; sink < 0.5 once i > 5·ln 1.6 = 2.35, recency < 0.5 while
        # i < 0.5/0.6·99 = 82.5, so i = 3..82 score below 0.5: 80 tokens.
        scores = PositionalScoring().score(list(range(100)))
        assert sum(1 for s in scores if s < 0.5) == 80
        assert all(0.0 <= s <= 1.0 for s in scores)

    def test_attention_mode_by_hand(self) -> None:
        scorer = PositionalScoring()
        scorer.update_from_decode_step([1.0, 3.0, 2.0])
        scorer.update_from_decode_step([0.0, 1.0, 0.0, 0.0, 0.0])
        assert scorer.decode_steps == 2
        # totals [1, 4, 2, 0, 0] -> normalised [0.25, 1, 0.5, 0, 0];
        # heavy = max(1, int(5·0.2)) = 1 -> position 1 (floor 0.7, stays 1.0);
        # recent = 1 -> position 4 lifted to 0.6.
        assert scorer.score([0] * 5) == pytest.approx([0.25, 1.0, 0.5, 0.0, 0.6])

    def test_attention_mode_two_heavy_hitters(self) -> None:
        scorer = PositionalScoring(heavy_ratio=0.4, recent_ratio=0.2)
        scorer.update_from_decode_step([1.0, 4.0, 2.0, 0.0, 0.0])
        # heavy = int(5·0.4) = 2 -> positions 1 and 2; position 2 lifted 0.5 -> 0.7.
        assert scorer.score([0] * 5) == pytest.approx([0.25, 1.0, 0.7, 0.0, 0.6])

    def test_attention_tie_goes_to_earlier_position(self) -> None:
        scorer = PositionalScoring(heavy_ratio=0.25, recent_ratio=0.25)
        scorer.update_from_decode_step([0.0, 2.0, 2.0, 4.0])
        # normalised [0, .5, .5, 1]; heavy = 1 -> position 3; recent -> position 3.
        assert scorer.score([0] * 4) == pytest.approx([0.0, 0.5, 0.5, 1.0])
        scorer2 = PositionalScoring(heavy_ratio=0.5, recent_ratio=0.25)
        scorer2.update_from_decode_step([0.0, 2.0, 2.0, 4.0])
        # heavy = 2 -> positions 3 and 1 (1 before 2 among equals).
        assert scorer2.score([0] * 4) == pytest.approx([0.0, 0.7, 0.5, 1.0])

    def test_all_zero_attention(self) -> None:
        scorer = PositionalScoring()
        scorer.update_from_decode_step([0.0, 0.0, 0.0, 0.0, 0.0])
        # normalised all 0; heavy position 0 -> 0.7; recent position 4 -> 0.6.
        assert scorer.score([0] * 5) == pytest.approx([0.7, 0.0, 0.0, 0.0, 0.6])

    def test_short_attention_falls_back_to_positions(self) -> None:
        scorer = PositionalScoring()
        scorer.update_from_decode_step([5.0, 5.0])
        assert scorer.score([0] * 5) == PositionalScoring().score([0] * 5)

    def test_attention_pattern_in_context_is_accumulated_first(self) -> None:
        scorer = PositionalScoring()
        scores = scorer.score([0] * 5, attention_pattern=[1.0, 4.0, 2.0, 0.0, 0.0])
        assert scorer.decode_steps == 1
        assert scores == pytest.approx([0.25, 1.0, 0.5, 0.0, 0.6])

    def test_empty_pattern_is_ignored(self) -> None:
        scorer = PositionalScoring()
        scorer.update_from_decode_step([])
        assert scorer.decode_steps == 0

    def test_reset(self) -> None:
        scorer = PositionalScoring()
        scorer.update_from_decode_step([1.0] * 5)
        scorer.reset()
        assert scorer.decode_steps == 0
        assert scorer.score([0] * 5) == PositionalScoring().score([0] * 5)

    def test_confidence(self) -> None:
        scorer = PositionalScoring()
        assert scorer.confidence() == 0.3
        scorer.update_from_decode_step([1.0])
        # 0.5 + 0.1·ln 2 = 0.569315
        assert scorer.confidence() == pytest.approx(0.5693147181)
        for _ in range(200):
            scorer.update_from_decode_step([1.0])
        # 0.5 + 0.1·ln 202 = 1.03 -> capped at 1
        assert scorer.confidence() == 1.0

    def test_generate_bids(self) -> None:
        scorer = PositionalScoring(algorithm_id="pos-test")
        bids = scorer.generate_bids("r", [0] * 5, [0.4])
        # n = 5, level 0.4 -> 2 tokens: the two lowest scores 0.29430 and 0.30 -> δ = 0.29715
        assert len(bids) == 1
        only = bids[0]
        assert (only.bid_id, only.algorithm_id, only.tokens_freed) == ("r:bid:0", "pos-test", 2)
        assert only.quality_delta == pytest.approx(0.2971517765)
        assert only.confidence == 0.3
        assert only.metadata == {
            "compression_level": 0.4,
            "heavy_ratio": 0.2,
            "recent_ratio": 0.2,
            "decode_steps": 0,
            "scoring_method": "positional",
        }

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"heavy_ratio": -0.1}, r"heavy_ratio must be in \[0, 1\], got -0.1"),
            ({"heavy_ratio": 1.5}, r"heavy_ratio must be in \[0, 1\], got 1.5"),
            ({"recent_ratio": 2.0}, r"recent_ratio must be in \[0, 1\], got 2.0"),
            (
                {"heavy_ratio": 0.6, "recent_ratio": 0.5},
                r"heavy_ratio \+ recent_ratio must be <= 1.0, got 0.6 \+ 0.5 = 1.1",
            ),
        ],
    )
    def test_validation(self, kwargs: dict[str, float], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            PositionalScoring(**kwargs)


# --------------------------------------------------------------------------------------------
# build_bids


class TestBuildBids:
    def test_levels_by_hand(self) -> None:
        scores = [0.9, 0.1, 0.5, 0.3]
        bids = build_bids("q", [1, 2, 3, 4], scores, [0.5, 0.25, 1.0], "algo")
        # level 0.5 -> int(2) = 2 tokens: lowest 0.1, 0.3 -> δ 0.2
        # level 0.25 -> 1 token: 0.1
        # level 1.0 -> min(4, 3) = 3 tokens (keep one): 0.1, 0.3, 0.5 -> δ 0.3
        assert [b.bid_id for b in bids] == ["q:bid:0", "q:bid:1", "q:bid:2"]
        assert [b.tokens_freed for b in bids] == [2, 1, 3]
        assert [b.quality_delta for b in bids] == pytest.approx([0.2, 0.1, 0.3])
        assert [b.compress_latency_ms for b in bids] == pytest.approx([0.2, 0.1, 0.3])
        assert all(b.confidence == 0.5 and b.algorithm_id == "algo" for b in bids)
        assert bids[1].metadata == {"compression_level": 0.25}

    def test_tiny_level_still_frees_one_token(self) -> None:
        # int(4·0.01) = 0 -> max(1, 0) = 1
        (only,) = build_bids("q", [1, 2, 3, 4], [0.4, 0.2, 0.6, 0.8], [0.01], "a")
        assert only.tokens_freed == 1
        assert only.quality_delta == pytest.approx(0.2)

    def test_single_token_yields_nothing(self) -> None:
        assert build_bids("q", [1], [0.5], [0.5, 1.0], "a") == []

    def test_empty_tokens(self) -> None:
        assert build_bids("q", [], [], [0.5], "a") == []

    def test_delta_is_clamped(self) -> None:
        (only,) = build_bids("q", [1, 2], [3.0, 2.0], [0.5], "a")
        assert only.quality_delta == 1.0

    def test_options(self) -> None:
        (only,) = build_bids(
            "q",
            [1, 2, 3],
            [0.1, 0.2, 0.3],
            [0.34],
            "a",
            confidence_fn=lambda: 0.9,
            latency_factor=2.0,
            extra_metadata={"compression_level": "overridden", "k": 1},
        )
        assert only.confidence == 0.9
        assert only.compress_latency_ms == 2.0
        assert only.metadata == {"compression_level": "overridden", "k": 1}

    def test_length_mismatch(self) -> None:
        with pytest.raises(
            ValueError, match=r"scores length \(2\) must match token_ids length \(3\)"
        ):
            build_bids("q", [1, 2, 3], [0.1, 0.2], [0.5], "a")


# --------------------------------------------------------------------------------------------
# BidPoolManager


class TestBidPoolManager:
    def test_inactive_by_default(self) -> None:
        manager = BidPoolManager()
        manager.submit_bids("r", [make_bid("r")])
        assert not manager.is_active
        assert manager.get_pool_snapshot() == BidPool(snapshot_time_ns=0, bids=())
        assert manager.get_bid("r:bid:0") is None
        assert manager.get_bids_for_request("r") == []
        assert manager.get_stats() == {
            "enabled": False,
            "kill_switch": False,
            "is_active": False,
            "active_requests": 0,
            "total_bids": 0,
        }

    def test_snapshot_sorted_by_tokens_desc_with_stable_ties(self) -> None:
        manager = BidPoolManager(enabled=True)
        manager.submit_bids("a", [make_bid("a", 0, tokens=10), make_bid("a", 1, tokens=50)])
        manager.submit_bids("b", [make_bid("b", 0, tokens=50), make_bid("b", 1, tokens=5)])
        manager.submit_bids("c", [make_bid("c", 0, tokens=10)])
        snapshot = manager.get_pool_snapshot()
        # 50s in submission order (a:1 then b:0), then 10s (a:0 then c:0), then 5.
        assert [b.bid_id for b in snapshot.bids] == [
            "a:bid:1",
            "b:bid:0",
            "a:bid:0",
            "c:bid:0",
            "b:bid:1",
        ]
        assert snapshot.snapshot_time_ns > 0

    def test_submit_replaces_and_reindexes(self) -> None:
        manager = BidPoolManager(enabled=True)
        manager.submit_bids("a", [make_bid("a", 0), make_bid("a", 1)])
        manager.submit_bids("a", [make_bid("a", 2, tokens=99)])
        assert manager.get_bid("a:bid:0") is None
        assert manager.get_bid("a:bid:2") == make_bid("a", 2, tokens=99)
        assert manager.get_bids_for_request("a") == [make_bid("a", 2, tokens=99)]
        assert (manager.active_request_count, manager.total_bid_count) == (1, 1)

    def test_returned_lists_are_copies(self) -> None:
        manager = BidPoolManager(enabled=True)
        manager.submit_bids("a", [make_bid("a")])
        manager.get_bids_for_request("a").clear()
        assert manager.total_bid_count == 1

    def test_removal(self) -> None:
        manager = BidPoolManager(enabled=True)
        manager.submit_bids("a", [make_bid("a", 0), make_bid("a", 1)])
        manager.submit_bids("b", [make_bid("b")])
        manager.submit_bids("c", [make_bid("c")])
        assert manager.remove_by_request("a") == 2
        assert manager.remove_by_request("a") == 0
        assert manager.get_bid("a:bid:1") is None
        manager.invalidate("b")
        assert manager.get_bids_for_request("b") == []
        assert manager.total_bid_count == 1
        manager.invalidate_all()
        assert manager.get_stats()["total_bids"] == 0

    def test_kill_switch_clears_and_blocks(self) -> None:
        manager = BidPoolManager(enabled=True)
        manager.submit_bids("a", [make_bid("a")])
        manager.activate_kill_switch()
        assert manager.total_bid_count == 0
        manager.submit_bids("a", [make_bid("a")])
        assert manager.total_bid_count == 0
        assert manager.get_stats()["kill_switch"] is True
        manager.enable()
        assert manager.is_active
        manager.submit_bids("a", [make_bid("a")])
        assert manager.total_bid_count == 1

    def test_kill_switch_at_construction(self) -> None:
        manager = BidPoolManager(enabled=True, kill_switch=True)
        manager.submit_bids("a", [make_bid("a")])
        assert not manager.is_active
        assert manager.total_bid_count == 0

    def test_disable_clears(self) -> None:
        manager = BidPoolManager(enabled=True)
        manager.submit_bids("a", [make_bid("a")])
        manager.disable()
        assert not manager.is_active
        assert manager.total_bid_count == 0

    def test_concurrent_submit_snapshot_and_remove(self) -> None:
        """Writers, readers and removers at once: snapshots must stay whole and consistent.

        Without the lock, iterating the request map while another thread inserts raises
        ``RuntimeError: dictionary changed size during iteration``, and a snapshot can see one
        request's bids from two different submissions.
        """
        manager = BidPoolManager(enabled=True)
        num_writers, rounds, bids_per_submit = 6, 600, 3
        errors: list[BaseException] = []
        start = threading.Barrier(num_writers + 2)
        done = threading.Event()
        old_interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)

        def writer(index: int) -> None:
            try:
                start.wait()
                for round_ in range(rounds):
                    request = f"w{index}-{round_ % 40}"
                    # Every bid of one submission carries the round in its tokens_freed.
                    bids = [
                        make_bid(request, level, tokens=round_ + 1)
                        for level in range(bids_per_submit)
                    ]
                    manager.submit_bids(request, bids)
                    if round_ % 7 == 0:
                        manager.remove_by_request(f"w{index}-{(round_ + 20) % 40}")
            except BaseException as exc:  # collected and re-raised by the test thread
                errors.append(exc)

        def reader() -> None:
            try:
                start.wait()
                while not done.is_set():
                    snapshot = manager.get_pool_snapshot()
                    by_request: dict[str, set[int]] = {}
                    for b in snapshot.bids:
                        by_request.setdefault(b.request_id, set()).add(b.tokens_freed)
                    for request, generations in by_request.items():
                        assert len(generations) == 1, f"{request} mixes submissions {generations}"
                    counts = [b.tokens_freed for b in snapshot.bids]
                    assert counts == sorted(counts, reverse=True)
                    manager.get_stats()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(num_writers)]
        threads += [threading.Thread(target=reader), threading.Thread(target=reader)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads[:num_writers]:
                thread.join()
            done.set()
            for thread in threads[num_writers:]:
                thread.join()
        finally:
            sys.setswitchinterval(old_interval)

        assert errors == []
        stats = manager.get_stats()
        snapshot = manager.get_pool_snapshot()
        assert stats["total_bids"] == len(snapshot.bids)
        assert stats["active_requests"] * bids_per_submit == stats["total_bids"]
        # Every stored bid is reachable through the index.
        assert all(manager.get_bid(b.bid_id) == b for b in snapshot.bids)

    def test_kill_switch_races_with_writers(self) -> None:
        manager = BidPoolManager(enabled=True)
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(index: int) -> None:
            try:
                round_ = 0
                while not stop.is_set():
                    manager.submit_bids(
                        f"k{index}-{round_ % 10}", [make_bid(f"k{index}-{round_ % 10}")]
                    )
                    round_ += 1
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        manager.activate_kill_switch()
        # Once the switch is thrown nothing may be stored, even by writers already running.
        for _ in range(200):
            assert manager.total_bid_count == 0
        stop.set()
        for thread in threads:
            thread.join()
        assert errors == []
        assert manager.get_stats()["total_bids"] == 0


class _Oldest(BaselineStrategy):
    """A user strategy: evict the oldest request (smallest arrival), whole."""

    @property
    def name(self) -> str:
        return "bidkv"  # shadows a built-in name on purpose

    def select_victims(
        self, candidates: Sequence[RequestState], needed_tokens: int, **kwargs: Any
    ) -> list[CompressionAction]:
        if needed_tokens <= 0 or not candidates:
            return []
        oldest = min(candidates, key=lambda r: r.arrival_time_ms)
        return [CompressionAction(oldest.request_id, "evict", oldest.current_tokens)]


class TestUserStrategyInTheRegistry:
    def test_registered_user_strategy_survives_the_defaults_and_is_used(self) -> None:
        # docs/bidkv-core.md, "Modules": create_default_registry() skips names already registered.
        registry = BaselineRegistry()
        registry.register(_Oldest())
        registry.create_default_registry()
        assert registry.count == 5
        strategy = registry.get("bidkv")
        assert type(strategy) is _Oldest
        candidates = [
            RequestState("young", current_tokens=40, arrival_time_ms=5.0),
            RequestState("old", current_tokens=30, arrival_time_ms=1.0),
        ]
        actions = strategy.select_victims(candidates, needed_tokens=10)
        assert [(a.request_id, a.action_type, a.target_tokens) for a in actions] == [
            ("old", "evict", 30)
        ]
        with pytest.raises(ValueError, match="Strategy 'bidkv' already registered"):
            registry.register(_Oldest())
        with pytest.raises(KeyError, match="Available: bidkv, largest-first, preempt-evict,"):
            registry.get("oldest")


# --------------------------------------------------------------------------------------------
# Package surface


REFERENCE_ALL = {
    # docs/bidkv-core.md, "Public names": top-level bidkv.__all__
    "__version__", "BidAcceptance", "BidKVConfig", "BidPool", "CompressionBid", "make_bid_id",
    "BidPoolManager", "GreedyBidSolver", "SolverConfig", "PositionalScoring", "ScoringStrategy",
    "build_bids", "BaselineContext", "BaselineRegistry", "BaselineStrategy", "BidKVStrategy",
    "CompressionAction", "LargestFirstStrategy", "PreemptEvictStrategy",
    "PreemptEvictSJFStrategy", "RequestState", "StaticRandomStrategy",
}  # fmt: skip


class TestPackage:
    def test_all_matches_reference(self) -> None:
        assert len(bidkv.__all__) == len(set(bidkv.__all__))
        assert set(bidkv.__all__) == REFERENCE_ALL
        for name in bidkv.__all__:
            assert hasattr(bidkv, name), name

    def test_version_is_the_one_the_distribution_and_manifests_declare(self) -> None:
        # pyproject's dynamic version names a module attribute: read that literal from the
        # source (not by importing it), then compare it with what pip installed and shipped.
        # The checkout holding these tests: CI installs the package into site-packages.
        root = Path(__file__).resolve().parents[1]
        pyproject = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
        attr = pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"]
        module, _, name = attr.rpartition(".")
        source = (root / (module.replace(".", "/") + ".py")).read_text("utf-8")
        literals = [
            node.value.value
            for node in ast.parse(source).body
            if isinstance(node, ast.Assign)
            and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]
            and isinstance(node.value, ast.Constant)
        ]
        assert literals == [bidkv.__version__]
        assert re.fullmatch(r"\d+\.\d+\.\d+", bidkv.__version__)
        assert importlib.metadata.version("bidkv") == bidkv.__version__
        for manifest in sorted((PACKAGE_DIR / "manifests").glob("*.json")):
            data = json.loads(manifest.read_text("utf-8"))
            shipped = data.get("bundle_version", data.get("extension_version"))
            assert shipped == bidkv.__version__, manifest.name

    def test_public_names_are_the_legacy_objects(self) -> None:
        # docs/bidkv-core.md, "Public names": loaded from bidkv.legacy on first use.
        from bidkv.legacy.baselines.base import BaselineCandidate
        from bidkv.legacy.bid_config import BidKVConfig as LegacyConfig

        assert bidkv.RequestState is BaselineCandidate
        assert bidkv.BidKVConfig is LegacyConfig
        for name in REFERENCE_ALL - {"__version__"}:
            assert getattr(bidkv, name).__module__.startswith("bidkv.legacy."), name
        assert set(dir(bidkv)) >= REFERENCE_ALL
        with pytest.raises(AttributeError, match="no attribute 'RequestStat'"):
            bidkv.RequestStat  # noqa: B018

    def test_import_is_cheap_and_stdlib_only(self) -> None:
        code = (
            "import sys\n"
            "before = set(sys.modules)\n"
            "import bidkv\n"
            "for name in bidkv.__all__: getattr(bidkv, name)\n"
            "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
            "third = sorted(n for n in new if n != 'bidkv' and n not in sys.stdlib_module_names"
            " and not n.startswith('_'))\n"
            "print(third)\n"
            "print(any(m.startswith('bidkv.adapters.vllm_hust') for m in sys.modules))\n"
            "print(any(m.startswith('tracekit') for m in sys.modules))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert result.stdout.split("\n")[:3] == ["[]", "False", "False"]

    def test_no_unseeded_randomness_anywhere(self) -> None:
        """Only ``random.Random(seed)`` instances may be used; never the module-level functions."""
        offenders: list[str] = []
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "random":
                    names = [alias.name for alias in node.names]
                    if names != ["Random"]:
                        offenders.append(f"{path}: from random import {names}")
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "random"
                    and node.attr not in {"Random"}
                ):
                    offenders.append(f"{path}:{node.lineno}: random.{node.attr}")
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "Random"
                    and not node.args
                    and not node.keywords
                ):
                    offenders.append(f"{path}:{node.lineno}: Random() without a seed")
        assert offenders == []
