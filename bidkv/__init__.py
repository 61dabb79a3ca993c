"""BidKV: a KV-cache preemption victim-selection library with no dependencies.

Layers, each a subpackage: ``protocol`` (bid value types and errors), ``scoring`` (token
importance and bid building), ``pool`` / ``solver`` / ``pressure`` (the legacy bid path),
``baselines`` (the ``select_victims`` strategies), ``adapters`` (framework contracts) and
``experiments`` (metric records). The production preemption policy loaded by engines lives in
``bidkv.adapters.vllm_hust`` and is deliberately not imported here.
"""

from bidkv._version import __version__
from bidkv.adapters.base import BaseAdapterMetrics, FrameworkAdapter
from bidkv.baselines import (
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
from bidkv.config import BidKVConfig
from bidkv.experiments import ExperimentMetrics
from bidkv.pool import BidPoolManager
from bidkv.pressure import PressureConfig, PressureDetector
from bidkv.protocol import (
    FEATURE_GATE_ID,
    BidAcceptance,
    BidCapacityError,
    BidExecutionError,
    BidExpiredError,
    BidPool,
    CompressionBid,
    CompressionBidError,
    CompressionBidProvider,
    compute_utility,
    make_bid_id,
)
from bidkv.scoring import PositionalScoring, ScoringStrategy, build_bids
from bidkv.solver import GreedyBidSolver, SolverConfig

__all__ = [
    "__version__",
    # protocol
    "FEATURE_GATE_ID",
    "BidAcceptance",
    "BidCapacityError",
    "BidExecutionError",
    "BidExpiredError",
    "BidKVConfig",
    "BidPool",
    "CompressionBid",
    "CompressionBidError",
    "CompressionBidProvider",
    "compute_utility",
    "make_bid_id",
    # legacy bid path
    "BidPoolManager",
    "GreedyBidSolver",
    "PressureConfig",
    "PressureDetector",
    "SolverConfig",
    # scoring
    "PositionalScoring",
    "ScoringStrategy",
    "build_bids",
    # baselines
    "BaselineContext",
    "BaselineRegistry",
    "BaselineStrategy",
    "BidKVStrategy",
    "CompressionAction",
    "LargestFirstStrategy",
    "PreemptEvictStrategy",
    "PreemptEvictSJFStrategy",
    "RequestState",
    "StaticRandomStrategy",
    # adapters
    "BaseAdapterMetrics",
    "FrameworkAdapter",
    # experiments
    "ExperimentMetrics",
]
