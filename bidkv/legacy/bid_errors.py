"""Errors raised around compression bids.

Every error derives from :class:`CompressionBidError`, so a caller can catch the whole family with
one ``except`` clause and still read which bid (if any) was involved.
"""

from __future__ import annotations

__all__ = [
    "BidCapacityError",
    "BidExecutionError",
    "BidExpiredError",
    "CompressionBidError",
]


class CompressionBidError(Exception):
    """Root of every bid error.

    Parameters
    ----------
    message : str
        Human-readable description; also the exception's ``str()``.
    bid_id : str or None, optional
        The bid the error is about, or ``None`` when it concerns no single bid.

    Attributes
    ----------
    message : str
        The description passed in.
    bid_id : str or None
        The bid the error is about.
    """

    def __init__(self, message: str, *, bid_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.bid_id = bid_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(message={self.message!r}, bid_id={self.bid_id!r})"


class BidExpiredError(CompressionBidError):
    """The bid no longer matches the KV state it was made for.

    Raised when the KV blocks a bid refers to changed between ``get_bids()`` and ``accept_bid()``.
    The caller should ask for fresh bids rather than retry the same one.
    """


class BidCapacityError(CompressionBidError):
    """The request cannot free as many tokens as asked.

    Parameters
    ----------
    message : str
        Human-readable description.
    bid_id : str or None, optional
        The bid the error is about.
    requested_tokens : int, optional
        Tokens the caller wanted freed.
    available_tokens : int, optional
        Tokens that can actually be freed.
    """

    def __init__(
        self,
        message: str,
        *,
        bid_id: str | None = None,
        requested_tokens: int = 0,
        available_tokens: int = 0,
    ) -> None:
        super().__init__(message, bid_id=bid_id)
        self.requested_tokens = requested_tokens
        self.available_tokens = available_tokens


class BidExecutionError(CompressionBidError):
    """Carrying out an accepted bid failed.

    Parameters
    ----------
    message : str
        Human-readable description.
    bid_id : str or None, optional
        The bid the error is about.
    cause : BaseException or None, optional
        The underlying exception, kept for diagnostics.
    """

    def __init__(
        self,
        message: str,
        *,
        bid_id: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, bid_id=bid_id)
        self.cause = cause
