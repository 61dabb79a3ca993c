"""BidKV: a KV-cache preemption victim-selection library with no dependencies.

The production preemption policy, which engines load by qualified name, lives in
``bidkv.adapters.vllm_hust`` (docs/policy.md); ``import bidkv`` does not import it. The original
BidKV's bid path and the strategies of its paper's experiments live apart, in ``bidkv.legacy``
(docs/bidkv-core.md).

The names below are the original BidKV's public API, which its README's examples use. Each is
loaded from ``bidkv.legacy`` on first use, so an engine that loads only the production policy
never imports the legacy modules.
"""

from __future__ import annotations

import importlib
from typing import Any

from bidkv._version import __version__

# Public name -> (module under bidkv.legacy, attribute of that module).
_LEGACY_NAMES: dict[str, tuple[str, str]] = {
    # the bid protocol
    "BidAcceptance": ("bids", "BidAcceptance"),
    "BidPool": ("bids", "BidPool"),
    "CompressionBid": ("bids", "CompressionBid"),
    "make_bid_id": ("bids", "make_bid_id"),
    "BidKVConfig": ("bid_config", "BidKVConfig"),
    # the bid path
    "BidPoolManager": ("bid_pool", "BidPoolManager"),
    "SolverConfig": ("solver", "SolverConfig"),
    "GreedyBidSolver": ("solver", "GreedyBidSolver"),
    # scoring
    "ScoringStrategy": ("token_scoring", "ScoringStrategy"),
    "PositionalScoring": ("token_scoring", "PositionalScoring"),
    "build_bids": ("bid_builder", "build_bids"),
    # the experiments' select_victims strategies
    "BaselineContext": ("baselines.base", "BaselineContext"),
    "BaselineStrategy": ("baselines.base", "BaselineStrategy"),
    "CompressionAction": ("baselines.base", "CompressionAction"),
    "RequestState": ("baselines.base", "BaselineCandidate"),
    "BaselineRegistry": ("baselines.registry", "BaselineRegistry"),
    "BidKVStrategy": ("baselines.bid_ranking", "BidKVStrategy"),
    "LargestFirstStrategy": ("baselines.largest_first", "LargestFirstStrategy"),
    "PreemptEvictStrategy": ("baselines.preempt_evict", "PreemptEvictStrategy"),
    "PreemptEvictSJFStrategy": ("baselines.preempt_evict", "PreemptEvictSJFStrategy"),
    "StaticRandomStrategy": ("baselines.static_random", "StaticRandomStrategy"),
}

__all__ = ["__version__", *_LEGACY_NAMES]


def __getattr__(name: str) -> Any:
    """Load a legacy public name from ``bidkv.legacy`` on first use."""
    try:
        module, attribute = _LEGACY_NAMES[name]
    except KeyError:
        raise AttributeError(f"module 'bidkv' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"bidkv.legacy.{module}"), attribute)
    globals()[name] = value  # later look-ups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
