"""Turn per-token scores into one bid per compression level.

For a level ``L`` over ``n`` tokens the bid frees ``min(max(1, int(n·L)), n - 1)`` tokens (always
keeping at least one), and its ``δ`` is the mean score of the tokens it would drop, which are the
lowest-scoring ones (docs/bidkv-core.md, "Building bids").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bidkv.legacy.bids import CompressionBid, make_bid_id

__all__ = ["build_bids"]

_DEFAULT_CONFIDENCE = 0.5


def build_bids(
    request_id: str,
    token_ids: Sequence[int],
    scores: Sequence[float],
    compression_levels: Sequence[float],
    algorithm_id: str,
    *,
    confidence_fn: Callable[[], float] | None = None,
    latency_factor: float = 0.1,
    extra_metadata: dict[str, Any] | None = None,
) -> list[CompressionBid]:
    """Build one bid per compression level from token scores.

    Parameters
    ----------
    request_id : str
        The request the bids are for.
    token_ids : sequence of int
        The request's tokens; an empty sequence yields no bids.
    scores : sequence of float
        One importance per token (higher = keep); must have the same length as ``token_ids``.
    compression_levels : sequence of float
        Share of tokens each bid drops, e.g. ``[0.2, 0.4]``; the index becomes the bid level.
    algorithm_id : str
        Stored on every bid.
    confidence_fn : callable, optional
        Returns the confidence to store; 0.5 when omitted. Called once.
    latency_factor : float, optional
        Expected milliseconds per freed token.
    extra_metadata : dict, optional
        Merged into every bid's metadata after ``compression_level``.

    Returns
    -------
    list of CompressionBid
        Bids in level order; levels that would free nothing (one-token requests) are skipped.

    Raises
    ------
    ValueError
        If ``scores`` and ``token_ids`` differ in length.
    """
    num_tokens = len(token_ids)
    if num_tokens == 0:
        return []
    if len(scores) != num_tokens:
        raise ValueError(
            f"scores length ({len(scores)}) must match token_ids length ({num_tokens})"
        )

    # Dropping the least important tokens first; a stable sort keeps earlier positions first
    # among equal scores.
    ascending = sorted(scores)
    confidence = _DEFAULT_CONFIDENCE if confidence_fn is None else confidence_fn()
    extras = dict(extra_metadata or {})

    bids: list[CompressionBid] = []
    for level_index, level in enumerate(compression_levels):
        tokens_freed = min(max(1, int(num_tokens * level)), num_tokens - 1)
        if tokens_freed <= 0:
            continue
        dropped = ascending[:tokens_freed]
        quality_delta = min(1.0, max(0.0, sum(dropped) / tokens_freed))
        bids.append(
            CompressionBid(
                bid_id=make_bid_id(request_id, level_index),
                request_id=request_id,
                algorithm_id=algorithm_id,
                tokens_freed=tokens_freed,
                quality_delta=quality_delta,
                compress_latency_ms=latency_factor * tokens_freed,
                confidence=confidence,
                metadata={"compression_level": level, **extras},
            )
        )
    return bids
