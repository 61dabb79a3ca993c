"""``largest-first``: compress the requests that can give up the most tokens first.

Each request may give up ``max(1, int(current_tokens · 0.6))`` tokens, capped, when its tokens
are known, by how many score below 0.5. With the positional scorer about 81 % of tokens do, so
in practice this orders by ``current_tokens``. (It was once called ``h2o-style``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bidkv.legacy.baselines.base import (
    BaselineCandidate,
    BaselineStrategy,
    CompressionAction,
    act_until_freed,
    latest_per_request,
)
from bidkv.legacy.token_scoring import PositionalScoring, ScoringStrategy

__all__ = ["LargestFirstStrategy"]

_LOW_IMPORTANCE = 0.5
"""Tokens scoring below this count as compressible."""


class LargestFirstStrategy(BaselineStrategy):
    """Compress the candidates with the most compressible tokens first.

    Parameters
    ----------
    scoring : ScoringStrategy or None, optional
        Scorer for candidates with ``token_ids``; a default :class:`PositionalScoring` if
        ``None``.
    compressible_ratio : float, optional
        Largest share of a request that may be compressed, in ``(0, 1]``.

    Raises
    ------
    ValueError
        If ``compressible_ratio`` is outside ``(0, 1]``.
    """

    def __init__(
        self,
        *,
        scoring: ScoringStrategy | None = None,
        compressible_ratio: float = 0.6,
    ) -> None:
        if not 0.0 < compressible_ratio <= 1.0:
            raise ValueError(f"compressible_ratio must be in (0, 1], got {compressible_ratio}")
        self._scoring: ScoringStrategy = scoring if scoring is not None else PositionalScoring()
        self._compressible_ratio = compressible_ratio

    @property
    def name(self) -> str:
        """``"largest-first"``."""
        return "largest-first"

    @property
    def scoring(self) -> ScoringStrategy:
        """Scorer used for candidates without their own."""
        return self._scoring

    def select_victims(
        self,
        candidates: Sequence[BaselineCandidate],
        needed_tokens: int,
        **kwargs: Any,
    ) -> list[CompressionAction]:
        """Compress the largest compressible candidates until ``needed_tokens`` are freed.

        Candidates with ``current_tokens <= 1`` are skipped. Equal compressible counts keep
        candidate order. The last action is trimmed so the total never exceeds
        ``needed_tokens``.

        ``kwargs``: ``scoring_states`` (mapping of request id to scorer) gives some requests
        their own scorer, e.g. one fed with attention. Returns ``compress`` actions with metadata
        ``{strategy, estimated_quality_delta, compressible_tokens}``.
        """
        if needed_tokens <= 0 or not candidates:
            return []
        scorers: Mapping[str, ScoringStrategy] = kwargs.get("scoring_states", {})

        # (request, compressible tokens, estimated quality loss)
        ranked: list[tuple[BaselineCandidate, int, float]] = []
        for request in latest_per_request(candidates):
            if request.current_tokens <= 1:
                continue
            scorer = scorers.get(request.request_id, self._scoring)
            scores = scorer.score(request.token_ids) if request.token_ids else []
            compressible = max(1, int(request.current_tokens * self._compressible_ratio))
            if scores:
                compressible = min(compressible, sum(1 for s in scores if s < _LOW_IMPORTANCE))
            if compressible > 0:
                ranked.append((request, compressible, self._estimate_delta(scores, compressible)))
        ranked.sort(key=lambda item: -item[1])

        return act_until_freed(
            ranked,
            needed_tokens,
            lambda item, still_needed: CompressionAction(
                request_id=item[0].request_id,
                action_type="compress",
                target_tokens=min(item[1], still_needed),
                metadata={
                    "strategy": self.name,
                    "estimated_quality_delta": item[2],
                    "compressible_tokens": item[1],
                },
            ),
        )

    def _estimate_delta(self, scores: Sequence[float], num_compressed: int) -> float:
        # Mean score of the tokens that would go; without scores, half the ratio (0.3 at 0.6).
        if not scores:
            return self._compressible_ratio * 0.5
        dropped = sorted(scores)[:num_compressed]
        return sum(dropped) / len(dropped) if dropped else 0.0
