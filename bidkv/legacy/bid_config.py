"""Global switches for the legacy bid path: a feature gate that defaults off and a kill switch.

The kill switch always wins: with it set, nothing is active whatever ``enabled`` says.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BidKVConfig"]


@dataclass(frozen=True)
class BidKVConfig:
    """Feature gate, kill switch and budgets for the legacy bid path.

    Parameters
    ----------
    enabled : bool, optional
        Feature gate; off by default so that installing BidKV changes nothing.
    kill_switch : bool, optional
        Emergency off; overrides ``enabled``.
    delta_budget : float, optional
        Largest total quality loss per solve; must be >= 0 (1.0 by default).
    max_bids_per_solve : int, optional
        Largest number of bids per solve; must be >= 0 (0 means no limit).
    truncation_ratio : float, optional
        Share of a request's tokens a compression would drop, in ``[0, 1]``.

    Raises
    ------
    ValueError
        When a field breaks its bound (NaN included).
    """

    enabled: bool = False
    kill_switch: bool = False
    delta_budget: float = 1.0
    max_bids_per_solve: int = 0
    truncation_ratio: float = 0.5

    def __post_init__(self) -> None:
        # Written as ``not (x >= b)`` so that NaN is rejected as well.
        if not self.delta_budget >= 0.0:
            raise ValueError(f"delta_budget must be >= 0.0, got {self.delta_budget}")
        if not self.max_bids_per_solve >= 0:
            raise ValueError(f"max_bids_per_solve must be >= 0, got {self.max_bids_per_solve}")
        if not 0.0 <= self.truncation_ratio <= 1.0:
            raise ValueError(f"truncation_ratio must be in [0.0, 1.0], got {self.truncation_ratio}")

    @property
    def is_active(self) -> bool:
        """Whether the bid path runs: ``enabled`` and not ``kill_switch``."""
        return self.enabled and not self.kill_switch
