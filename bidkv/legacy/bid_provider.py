"""The interface a compression layer offers to a scheduler."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from bidkv.legacy.bids import CompressionBid

__all__ = ["CompressionBidProvider"]


@runtime_checkable
class CompressionBidProvider(Protocol):
    """Something that can quote bids for a request and carry one out.

    Structural: any object with these two methods qualifies, without inheriting from this class.
    The serving path never calls it; it documents the original bid protocol.

    Notes
    -----
    While the feature gate ``compress.scheduling_primitive.v1`` is off, ``get_bids`` returns an
    empty list and ``accept_bid`` does nothing.
    """

    def get_bids(
        self,
        request_id: str,
        *,
        min_tokens: int = 0,
        max_delta: float = 1.0,
    ) -> list[CompressionBid]:
        """Quote the bids available for one request.

        Must not change any state, and may be called concurrently.

        Parameters
        ----------
        request_id : str
            The request to quote for.
        min_tokens : int, optional
            Drop bids that free fewer tokens than this (0 keeps all).
        max_delta : float, optional
            Drop bids whose quality loss exceeds this (1.0 keeps all).

        Returns
        -------
        list of CompressionBid
            Bids in decreasing utility; empty when none is available.
        """
        ...

    def accept_bid(self, bid_id: str) -> None:
        """Carry out one previously quoted bid.

        Parameters
        ----------
        bid_id : str
            The bid to carry out.

        Raises
        ------
        BidExpiredError
            The bid no longer matches the KV state.
        BidCapacityError
            The promised tokens cannot be freed.
        BidExecutionError
            Any other failure while carrying it out.
        """
        ...
