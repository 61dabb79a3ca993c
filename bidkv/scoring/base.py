"""The scoring contract: give every token an importance in ``[0, 1]``.

Scorers only score. Turning scores into bids is done once, by
:func:`bidkv.scoring.bid_builder.build_bids`, so every scorer produces bids the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["ScoringStrategy"]


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
