"""Token importance for the original bid path: the scorer contract and the positional scorer.

A scorer gives every token of a request an importance in ``[0, 1]`` and does nothing else;
:func:`bidkv.legacy.bid_builder.build_bids` turns scores into bids, once for every scorer. (The
production policy scores whole candidates, not tokens: ``bidkv.adapters.vllm_hust.scoring``.)

Serving engines with fused attention kernels expose no attention weights, so by default a token's
importance comes from its position alone (docs/bidkv-core.md, "Positional scoring")::

    score_i = clamp(max(0.8·exp(-i / max(1, 0.05·n)), 0.6·i / max(1, n - 1)), 0, 1)

(``0.6`` for the recency term of a single token). Once at least ``n`` positions of attention have
been accumulated with :meth:`PositionalScoring.update_from_decode_step`, scores become the
normalised accumulated attention, lifted to 0.7 for the heavy hitters and to 0.6 for the most
recent tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from bidkv.legacy.bid_builder import build_bids
from bidkv.legacy.bids import CompressionBid

__all__ = ["PositionalScoring", "ScoringStrategy"]

_SINK_PEAK = 0.8
_SINK_DECAY_SHARE = 0.05
_RECENCY_PEAK = 0.6
_HEAVY_FLOOR = 0.7
_RECENT_FLOOR = 0.6
_CONFIDENCE_WITHOUT_STEPS = 0.3


@runtime_checkable
class ScoringStrategy(Protocol):
    """Anything with a ``score`` method of this shape (structural; no inheritance needed)."""

    def score(self, token_ids: Sequence[int], **context: Any) -> list[float]:
        """Return one importance per token.

        Parameters
        ----------
        token_ids : sequence of int
            The request's tokens.
        **context
            Scorer-specific inputs, such as an attention pattern.

        Returns
        -------
        list of float
            As many values as ``token_ids``, each in ``[0, 1]``; higher means keep.
        """
        ...


def _check_ratio(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


class PositionalScoring:
    """Score tokens by position, or by accumulated attention once it covers the sequence.

    Parameters
    ----------
    heavy_ratio : float, optional
        Share of tokens treated as heavy hitters in attention mode, in ``[0, 1]``.
    recent_ratio : float, optional
        Share of trailing tokens protected in attention mode, in ``[0, 1]``.
    algorithm_id : str, optional
        Stored on the bids from :meth:`generate_bids`.

    Raises
    ------
    ValueError
        If a ratio is outside ``[0, 1]`` or both add up to more than 1.
    """

    def __init__(
        self,
        *,
        heavy_ratio: float = 0.2,
        recent_ratio: float = 0.2,
        algorithm_id: str = "positional",
    ) -> None:
        _check_ratio("heavy_ratio", heavy_ratio)
        _check_ratio("recent_ratio", recent_ratio)
        if heavy_ratio + recent_ratio > 1.0:
            raise ValueError(
                "heavy_ratio + recent_ratio must be <= 1.0, "
                f"got {heavy_ratio} + {recent_ratio} = {heavy_ratio + recent_ratio}"
            )
        self._heavy_ratio = heavy_ratio
        self._recent_ratio = recent_ratio
        self._algorithm_id = algorithm_id
        # position -> attention summed over decode steps
        self._cumulative_attention: list[float] = []
        self._decode_steps = 0

    @property
    def heavy_ratio(self) -> float:
        """Share of tokens treated as heavy hitters."""
        return self._heavy_ratio

    @property
    def recent_ratio(self) -> float:
        """Share of trailing tokens protected."""
        return self._recent_ratio

    @property
    def algorithm_id(self) -> str:
        """Algorithm id stored on generated bids."""
        return self._algorithm_id

    @property
    def decode_steps(self) -> int:
        """Number of non-empty attention patterns accumulated so far."""
        return self._decode_steps

    def update_from_decode_step(self, attention_pattern: Sequence[float]) -> None:
        """Add one decode step's attention to the running totals.

        Parameters
        ----------
        attention_pattern : sequence of float
            Attention paid to each KV position in this step; need not be normalised. A longer
            pattern than seen before extends the totals. An empty one is ignored and not counted.
        """
        if not attention_pattern:
            return
        missing = len(attention_pattern) - len(self._cumulative_attention)
        if missing > 0:
            self._cumulative_attention.extend([0.0] * missing)
        for position, weight in enumerate(attention_pattern):
            self._cumulative_attention[position] += weight
        self._decode_steps += 1

    def score(self, token_ids: Sequence[int], **context: Any) -> list[float]:
        """Return each token's importance in ``[0, 1]``.

        Parameters
        ----------
        token_ids : sequence of int
            The request's tokens; only their count matters.
        **context
            ``attention_pattern`` (sequence of float), if given, is accumulated first with
            :meth:`update_from_decode_step`.

        Returns
        -------
        list of float
            One score per token: attention-based when the totals cover every token, positional
            otherwise.
        """
        num_tokens = len(token_ids)
        if num_tokens == 0:
            return []
        if "attention_pattern" in context:
            self.update_from_decode_step(context["attention_pattern"])
        if self._cumulative_attention and len(self._cumulative_attention) >= num_tokens:
            return self._attention_scores(num_tokens)
        return self._positional_scores(num_tokens)

    def _attention_scores(self, num_tokens: int) -> list[float]:
        totals = self._cumulative_attention[:num_tokens]
        peak = max(totals)
        normalised = [total / peak for total in totals] if peak > 0 else [0.0] * num_tokens

        num_heavy = max(1, int(num_tokens * self._heavy_ratio))
        num_recent = max(1, int(num_tokens * self._recent_ratio))
        # Stable sort: among equal totals the earlier position counts as the heavier hitter.
        by_weight = sorted(range(num_tokens), key=lambda pos: -normalised[pos])
        heavy = set(by_weight[:num_heavy])
        first_recent = max(0, num_tokens - num_recent)

        scores: list[float] = []
        for position, value in enumerate(normalised):
            if position in heavy:
                value = max(value, _HEAVY_FLOOR)
            if position >= first_recent:
                value = max(value, _RECENT_FLOOR)
            scores.append(min(1.0, value))
        return scores

    @staticmethod
    def _positional_scores(num_tokens: int) -> list[float]:
        sink_scale = max(1, num_tokens * _SINK_DECAY_SHARE)
        last = max(1, num_tokens - 1)
        scores: list[float] = []
        for position in range(num_tokens):
            sink = _SINK_PEAK * math.exp(-position / sink_scale)
            recency = _RECENCY_PEAK * position / last if num_tokens > 1 else _RECENCY_PEAK
            scores.append(min(1.0, max(0.0, max(sink, recency))))
        return scores

    def confidence(self) -> float:
        """Confidence in the scores: ``min(1, 0.5 + 0.1·ln(1 + steps))``, or 0.3 without steps.

        Returns
        -------
        float
            The confidence stored on generated bids.
        """
        if self._decode_steps > 0:
            return min(1.0, 0.5 + 0.1 * math.log1p(self._decode_steps))
        return _CONFIDENCE_WITHOUT_STEPS

    def generate_bids(
        self,
        request_id: str,
        token_ids: Sequence[int],
        compression_levels: Sequence[float],
        **context: Any,
    ) -> list[CompressionBid]:
        """Score the tokens and build one bid per compression level.

        Parameters
        ----------
        request_id : str
            The request the bids are for.
        token_ids : sequence of int
            The request's tokens.
        compression_levels : sequence of float
            Share of tokens each bid drops.
        **context
            Passed to :meth:`score`.

        Returns
        -------
        list of CompressionBid
            See :func:`bidkv.legacy.bid_builder.build_bids`; the metadata also carries the
            ratios, the number of decode steps and ``scoring_method="positional"``.
        """
        scores = self.score(token_ids, **context)
        return build_bids(
            request_id,
            token_ids,
            scores,
            compression_levels,
            self._algorithm_id,
            confidence_fn=self.confidence,
            extra_metadata={
                "heavy_ratio": self._heavy_ratio,
                "recent_ratio": self._recent_ratio,
                "decode_steps": self._decode_steps,
                "scoring_method": "positional",
            },
        )

    def reset(self) -> None:
        """Forget all accumulated attention."""
        self._cumulative_attention.clear()
        self._decode_steps = 0
