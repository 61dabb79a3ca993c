"""Compression bids: the value types the original bid path ranks.

A bid says "freeing ``tokens_freed`` tokens of this request costs ``quality_delta``". Bids are
ranked by the bid utility ``U = r / (δ + ε)`` with ``ε = 1e-3`` (:func:`bid_utility`,
docs/bidkv-core.md, "Bids and utility"). The production policy has its own utility, with another
``ε`` (1e-6) and another ``δ`` (``bidkv.adapters.vllm_hust.scoring.utility``); the two are not
interchangeable. ``δ`` is a predicted, surrogate signal and ``U`` an operational ranking signal;
neither is ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "BID_UTILITY_EPSILON",
    "BidAcceptance",
    "BidPool",
    "CompressionBid",
    "bid_utility",
    "make_bid_id",
]

BID_UTILITY_EPSILON: Final[float] = 1e-3
"""Keeps ``U = r / (δ + ε)`` finite when ``δ == 0``; the production policy's ``utility_epsilon``
is a separate setting (1e-6 by default)."""


def _require_non_empty(name: str, value: str) -> None:
    if not value:
        raise ValueError(f"{name} must be a non-empty string")


def _require_at_least(name: str, value: float, bound: float, shown_bound: str) -> None:
    # ``not (x >= b)`` rather than ``x < b`` so that NaN is rejected too.
    if not value >= bound:
        raise ValueError(f"{name} must be >= {shown_bound}, got {value}")


def bid_utility(tokens_freed: int, quality_delta: float) -> float:
    """The bid utility ``U = r / (δ + 1e-3)``, unchecked."""
    return tokens_freed / (quality_delta + BID_UTILITY_EPSILON)


@dataclass(frozen=True)
class CompressionBid:
    """One offer to free part (or all) of a request's KV cache.

    Parameters
    ----------
    bid_id : str
        Unique id, by convention ``"{request_id}:bid:{level}"`` (see :func:`make_bid_id`).
    request_id : str
        The request whose KV cache the bid frees.
    algorithm_id : str
        The algorithm that produced the bid.
    tokens_freed : int
        ``r``: tokens freed if accepted; must be > 0.
    quality_delta : float
        ``δ``: predicted quality loss; must be >= 0 (no upper bound here).
    compress_latency_ms : float
        Expected time to carry the bid out; must be >= 0.
    confidence : float
        Confidence in ``δ``, in ``[0, 1]``.
    metadata : dict, optional
        Algorithm-specific extras.

    Raises
    ------
    ValueError
        When a field breaks its bound; the message names the field and the value.
    """

    bid_id: str
    request_id: str
    algorithm_id: str
    tokens_freed: int
    quality_delta: float
    compress_latency_ms: float
    confidence: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_non_empty("bid_id", self.bid_id)
        _require_non_empty("request_id", self.request_id)
        _require_non_empty("algorithm_id", self.algorithm_id)
        if not self.tokens_freed > 0:
            raise ValueError(f"tokens_freed must be > 0, got {self.tokens_freed}")
        _require_at_least("quality_delta", self.quality_delta, 0.0, "0.0")
        _require_at_least("compress_latency_ms", self.compress_latency_ms, 0.0, "0.0")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0.0, 1.0], got {self.confidence}")

    @property
    def utility(self) -> float:
        """Ranking value ``tokens_freed / (quality_delta + 1e-3)``; larger is better."""
        return bid_utility(self.tokens_freed, self.quality_delta)

    @property
    def normalized_utility(self) -> float:
        """Same as :attr:`utility`; normalising across requests is the caller's job."""
        return self.utility


@dataclass(frozen=True)
class BidPool:
    """Immutable snapshot of every live bid at one instant.

    Parameters
    ----------
    snapshot_time_ns : int
        Monotonic time the snapshot was taken; must be >= 0 (0 marks an empty, inactive pool).
    bids : tuple of CompressionBid, optional
        The bids, in the order the producer chose (the pool manager sorts by ``tokens_freed``
        descending). A list is accepted and stored as a tuple so the snapshot cannot change.
    """

    snapshot_time_ns: int
    bids: tuple[CompressionBid, ...] = ()

    def __post_init__(self) -> None:
        if not self.snapshot_time_ns >= 0:
            raise ValueError(f"snapshot_time_ns must be >= 0, got {self.snapshot_time_ns}")
        if not isinstance(self.bids, tuple):
            object.__setattr__(self, "bids", tuple(self.bids))

    def bids_for_request(self, request_id: str) -> tuple[CompressionBid, ...]:
        """Return one request's bids, best utility first.

        Parameters
        ----------
        request_id : str
            The request to look up.

        Returns
        -------
        tuple of CompressionBid
            Its bids in decreasing utility (ties keep pool order); empty when it has none.
        """
        own = [bid for bid in self.bids if bid.request_id == request_id]
        return tuple(sorted(own, key=lambda bid: -bid.utility))

    def top_k_by_utility(self, k: int) -> tuple[CompressionBid, ...]:
        """Return the ``k`` best bids across all requests.

        Parameters
        ----------
        k : int
            How many bids at most; must be >= 1.

        Returns
        -------
        tuple of CompressionBid
            At most ``k`` bids in decreasing utility (ties keep pool order).

        Raises
        ------
        ValueError
            If ``k < 1``.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return tuple(sorted(self.bids, key=lambda bid: -bid.utility)[:k])

    @property
    def total_tokens_available(self) -> int:
        """Sum of ``tokens_freed`` over every bid in the pool."""
        return sum(bid.tokens_freed for bid in self.bids)


@dataclass(frozen=True)
class BidAcceptance:
    """The solver's decision: which bids to carry out, and why.

    Parameters
    ----------
    accepted_bid_ids : tuple of str
        Accepted bids in the order they were chosen (a list is stored as a tuple).
    total_tokens_freed : int
        Sum of the accepted bids' ``tokens_freed``; must be >= 0.
    total_quality_delta : float
        Sum of the accepted bids' ``quality_delta``; must be >= 0.
    decision_reason : str
        Why the decision was taken (non-empty); the solver appends ``":kill_switch"`` and similar
        suffixes when it declined to solve.
    """

    accepted_bid_ids: tuple[str, ...]
    total_tokens_freed: int
    total_quality_delta: float
    decision_reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.accepted_bid_ids, tuple):
            object.__setattr__(self, "accepted_bid_ids", tuple(self.accepted_bid_ids))
        _require_at_least("total_tokens_freed", self.total_tokens_freed, 0, "0")
        _require_at_least("total_quality_delta", self.total_quality_delta, 0.0, "0.0")
        _require_non_empty("decision_reason", self.decision_reason)

    @property
    def accepted_count(self) -> int:
        """Number of accepted bids."""
        return len(self.accepted_bid_ids)

    @property
    def is_empty(self) -> bool:
        """Whether no bid was accepted."""
        return not self.accepted_bid_ids


def make_bid_id(request_id: str, level: int) -> str:
    """Build the conventional bid id ``"{request_id}:bid:{level}"``.

    Parameters
    ----------
    request_id : str
        The request; must be non-empty.
    level : int
        Index of the compression level; must be >= 0.

    Returns
    -------
    str
        The bid id.

    Raises
    ------
    ValueError
        If ``request_id`` is empty or ``level`` is negative.
    """
    _require_non_empty("request_id", request_id)
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    return f"{request_id}:bid:{level}"
