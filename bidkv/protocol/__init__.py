"""Bid protocol: value types, errors and the provider interface.

``bid`` holds the frozen value types and the utility formula, ``errors`` the exception family, and
``provider`` the structural interface a compression layer would implement.
"""

from bidkv.protocol.bid import (
    FEATURE_GATE_ID,
    BidAcceptance,
    BidPool,
    CompressionBid,
    compute_utility,
    make_bid_id,
)
from bidkv.protocol.errors import (
    BidCapacityError,
    BidExecutionError,
    BidExpiredError,
    CompressionBidError,
)
from bidkv.protocol.provider import CompressionBidProvider

__all__ = [
    "FEATURE_GATE_ID",
    "BidAcceptance",
    "BidCapacityError",
    "BidExecutionError",
    "BidExpiredError",
    "BidPool",
    "CompressionBid",
    "CompressionBidError",
    "CompressionBidProvider",
    "compute_utility",
    "make_bid_id",
]
