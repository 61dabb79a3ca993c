"""Greedy bid selection under a quality budget (the original's Algorithm 1).

Bids are taken in decreasing utility ``r / (δ + 1e-3)``. A bid is skipped when its request already
has an accepted bid, or when it would push the summed ``δ`` over the budget. Selection stops as
soon as the accepted bids free at least the tokens needed
(docs/bidkv-core.md, "The greedy solver").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bidkv.legacy.bids import BidAcceptance, BidPool

__all__ = ["GreedyBidSolver", "SolverConfig"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SolverConfig:
    """Settings of :class:`GreedyBidSolver`.

    Parameters
    ----------
    enabled : bool, optional
        Feature gate; off by default, and then every solve returns an empty acceptance.
    delta_budget : float, optional
        Largest summed ``δ`` of one solve, in ``[0, 1]``; a solve may override it.
    max_bids_per_solve : int, optional
        Only the first this-many bids in utility order are considered; must be >= 1.
    kill_switch : bool, optional
        Emergency off; wins over ``enabled``.
    decision_reason : str, optional
        Default reason recorded on acceptances.

    Raises
    ------
    ValueError
        When a field breaks its bound.
    """

    enabled: bool = False
    delta_budget: float = 0.15
    max_bids_per_solve: int = 20
    kill_switch: bool = False
    decision_reason: str = "kv_pool_pressure_threshold_exceeded"

    def __post_init__(self) -> None:
        if not 0.0 <= self.delta_budget <= 1.0:
            raise ValueError(f"delta_budget must be in [0.0, 1.0], got {self.delta_budget}")
        if not self.max_bids_per_solve >= 1:
            raise ValueError(f"max_bids_per_solve must be >= 1, got {self.max_bids_per_solve}")

    @property
    def is_active(self) -> bool:
        """Whether solves run: ``enabled`` and not ``kill_switch``."""
        return self.enabled and not self.kill_switch


def _empty(reason: str) -> BidAcceptance:
    return BidAcceptance(
        accepted_bid_ids=(), total_tokens_freed=0, total_quality_delta=0.0, decision_reason=reason
    )


class GreedyBidSolver:
    """Pick bids that free enough tokens while keeping the summed quality loss in budget.

    Parameters
    ----------
    config : SolverConfig or None, optional
        Settings; ``None`` means ``SolverConfig()`` (feature off).
    """

    def __init__(self, config: SolverConfig | None = None) -> None:
        self._config = config if config is not None else SolverConfig()

    @property
    def config(self) -> SolverConfig:
        """The settings in force."""
        return self._config

    def update_config(self, config: SolverConfig) -> None:
        """Replace the settings, e.g. to throw the kill switch at run time.

        Parameters
        ----------
        config : SolverConfig
            The new settings.
        """
        self._config = config
        logger.info(
            "GreedyBidSolver: enabled=%s kill_switch=%s", config.enabled, config.kill_switch
        )

    def solve(
        self,
        pool: BidPool,
        tokens_needed: int,
        delta_budget: float | None = None,
        *,
        decision_reason: str | None = None,
    ) -> BidAcceptance:
        """Choose the bids to carry out.

        Checks run in this order, each returning an empty acceptance whose reason gets a suffix:
        kill switch (``":kill_switch"``), feature off (``":feature_off"``),
        ``tokens_needed <= 0`` (``":no_tokens_needed"``), empty pool (``":empty_pool"``).

        Parameters
        ----------
        pool : BidPool
            The snapshot to choose from.
        tokens_needed : int
            Tokens to free; selection stops once the accepted bids reach it.
        delta_budget : float or None, optional
            Overrides ``config.delta_budget`` for this solve (not range-checked, so callers may
            pass a budget above 1 to rank everything). A NaN budget admits no bid.
        decision_reason : str or None, optional
            Overrides ``config.decision_reason``.

        Returns
        -------
        BidAcceptance
            Accepted bid ids in decreasing utility; bids of equal utility keep pool order.
            ``total_quality_delta`` is rounded to 6 decimals.
        """
        reason = decision_reason or self._config.decision_reason
        if self._config.kill_switch:
            return _empty(f"{reason}:kill_switch")
        if not self._config.enabled:
            return _empty(f"{reason}:feature_off")
        if tokens_needed <= 0:
            return _empty(f"{reason}:no_tokens_needed")
        if not pool.bids:
            return _empty(f"{reason}:empty_pool")

        budget = self._config.delta_budget if delta_budget is None else delta_budget
        result = self._select(pool, tokens_needed, budget, reason)
        logger.debug(
            "GreedyBidSolver: accepted %d of %d bids, freed %d of %d tokens, delta %.4f",
            result.accepted_count,
            len(pool.bids),
            result.total_tokens_freed,
            tokens_needed,
            result.total_quality_delta,
        )
        return result

    def _select(
        self, pool: BidPool, tokens_needed: int, budget: float, reason: str
    ) -> BidAcceptance:
        # Stable sort: equal utilities keep pool order (the pool manager puts larger
        # tokens_freed first, then submission order).
        ranked = sorted(pool.bids, key=lambda bid: -bid.utility)
        considered = ranked[: self._config.max_bids_per_solve]

        accepted: list[str] = []
        chosen_requests: set[str] = set()
        freed = 0
        spent = 0.0
        for bid in considered:
            if bid.request_id in chosen_requests:
                continue
            # ``not (a <= b)`` instead of ``a > b`` so that a NaN budget admits nothing.
            if not spent + bid.quality_delta <= budget:
                continue
            accepted.append(bid.bid_id)
            chosen_requests.add(bid.request_id)
            freed += bid.tokens_freed
            spent += bid.quality_delta
            if freed >= tokens_needed:
                break
        return BidAcceptance(
            accepted_bid_ids=tuple(accepted),
            total_tokens_freed=freed,
            total_quality_delta=round(spent, 6),
            decision_reason=reason,
        )
