"""``static-random``: random victims, each compressed by a fixed ratio (a control baseline).

Randomness is always seeded (default seed 0) and comes from a private ``random.Random``; the
global ``random`` module is never used. A fresh generator is made on every call, so a decision
depends only on the seed and the candidate list, never on how many calls came before: replays
that call the strategy a different number of times still agree on identical events.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from bidkv.legacy.baselines.base import (
    BaselineCandidate,
    BaselineStrategy,
    CompressionAction,
    act_until_freed,
    latest_per_request,
)

__all__ = ["DEFAULT_SEED", "StaticRandomStrategy"]

DEFAULT_SEED = 0
"""Seed used when none is given, including by the default registry."""


def _check_seed(seed: object) -> int:
    # None would mean "seed from the OS", i.e. unreproducible; bool is rejected as a likely typo.
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return seed


class StaticRandomStrategy(BaselineStrategy):
    """Shuffle the candidates with a seeded generator and compress each by a fixed ratio.

    Parameters
    ----------
    compression_ratio : float, optional
        Share of a request's tokens each action frees, in ``(0, 1]``.
    seed : int, optional
        Seed of the per-call generator (0 by default).

    Raises
    ------
    ValueError
        If ``compression_ratio`` is outside ``(0, 1]`` or ``seed`` is not an int.
    """

    def __init__(self, *, compression_ratio: float = 0.5, seed: int = DEFAULT_SEED) -> None:
        if not 0.0 < compression_ratio <= 1.0:
            raise ValueError(f"compression_ratio must be in (0, 1], got {compression_ratio}")
        self._compression_ratio = compression_ratio
        self._seed = _check_seed(seed)

    @property
    def name(self) -> str:
        """``"static-random"``."""
        return "static-random"

    @property
    def seed(self) -> int:
        """Seed used when a call does not pass its own."""
        return self._seed

    @property
    def compression_ratio(self) -> float:
        """Share of a request's tokens each action frees."""
        return self._compression_ratio

    def select_victims(
        self,
        candidates: Sequence[BaselineCandidate],
        needed_tokens: int,
        **kwargs: Any,
    ) -> list[CompressionAction]:
        """Compress randomly ordered candidates until ``needed_tokens`` are freed.

        ``kwargs``: ``seed`` (int) overrides :attr:`seed` for this call, e.g. an event index to
        draw a different order per event while staying reproducible; a ``seed`` that is not an
        int is a ``ValueError``. Returns ``compress`` actions with ``target_tokens =
        max(1, int(current_tokens · ratio))`` and metadata ``{strategy, compression_ratio,
        seed}``; the same seed and candidates always give the same result.
        """
        seed = _check_seed(kwargs.get("seed", self._seed))
        if needed_tokens <= 0 or not candidates:
            return []
        order = latest_per_request(candidates)
        random.Random(seed).shuffle(order)
        ratio = self._compression_ratio
        return act_until_freed(
            order,
            needed_tokens,
            lambda request, _: CompressionAction(
                request_id=request.request_id,
                action_type="compress",
                target_tokens=max(1, int(request.current_tokens * ratio)),
                metadata={"strategy": self.name, "compression_ratio": ratio, "seed": seed},
            ),
        )
