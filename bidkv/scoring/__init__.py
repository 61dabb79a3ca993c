"""Token scoring: the scorer contract, the positional scorer, and the scores-to-bids builder."""

from bidkv.scoring.base import ScoringStrategy
from bidkv.scoring.bid_builder import build_bids
from bidkv.scoring.positional import PositionalScoring

__all__ = ["PositionalScoring", "ScoringStrategy", "build_bids"]
