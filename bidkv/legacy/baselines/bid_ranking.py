"""``bidkv``: rank every candidate by utility through the bid pool and the greedy solver.

Each candidate with ``current_tokens > 1`` gets one bid (the original's "v8-frozen" rule,
docs/bidkv-core.md, "The legacy strategies (select_victims)"):

* Branch B (vLLM, and SGLang without radix data): ``r = current_tokens`` and
  ``δ = 1 + 0.5·c + 0.3·P``, where ``c = min(1, max(0, computed - prompt) / max_output)`` (0 if
  ``max_output <= 0``) and ``P`` the preemption count. The weights are fixed, as in the original.
* Branch A (``private_tokens > 0``, radix-aware): ``r = private_tokens`` and
  ``δ = max(0.1, max(floor, r / div) + w_c·c + w_s·P)``, with ``w_c, w_s, div, floor`` taken from
  the constructor or the environment (``BIDKV_COMPLETION_WEIGHT=0.5``,
  ``BIDKV_STARVATION_WEIGHT=0.3``, ``BIDKV_RECOMPUTE_DIV=256``, ``BIDKV_RECOMPUTE_FLOOR=0.5``).

The solver then ranks bids by ``U = r / (δ + 1e-3)``. Unlike the original, whose solver only
looked at the first 20 bids, every eligible candidate is ranked.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from bidkv.legacy.baselines.base import (
    BaselineCandidate,
    BaselineStrategy,
    CompressionAction,
    latest_per_request,
)
from bidkv.legacy.bid_pool import BidPoolManager
from bidkv.legacy.bids import CompressionBid, make_bid_id
from bidkv.legacy.solver import GreedyBidSolver, SolverConfig
from bidkv.legacy.token_scoring import PositionalScoring, ScoringStrategy

__all__ = ["BidKVStrategy"]

# Branch B weights: fixed in the original; its environment variables never reached this branch.
_BRANCH_B_COMPLETION_WEIGHT = 0.5
_BRANCH_B_PREEMPTION_WEIGHT = 0.3
_BRANCH_A_MIN_DELTA = 0.1

_ALGORITHM_ID = "bidkv"
_BID_CONFIDENCE = 0.8
_DECISION_REASON = "baseline_bidkv"
# The ranking budget is max(Σδ + 1, 100): large enough that the budget never excludes a bid.
_RANKING_BUDGET_FLOOR = 100.0


def _weight(value: float | None, env_name: str, default: float) -> float:
    if value is not None:
        return value
    raw = os.environ.get(env_name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{env_name} must be a number, got {raw!r}") from None


def _completion(request: BaselineCandidate) -> float:
    if request.max_output_tokens <= 0:
        return 0.0
    generated = max(0, request.num_computed_tokens - request.num_prompt_tokens)
    return min(1.0, generated / request.max_output_tokens)


class BidKVStrategy(BaselineStrategy):
    """Evict candidates in decreasing utility ``U = r / (δ + 1e-3)``.

    Parameters
    ----------
    scoring : ScoringStrategy or None, optional
        Kept for interface compatibility; the utility does not use token scores.
    delta_budget : float, optional
        Budget of the internal solver configuration, in ``[0, 1]``. Each call overrides it with
        a budget that admits every bid, as the original did.
    completion_weight, starvation_weight, recompute_div, recompute_floor : float or None
        Branch A constants. ``None`` reads ``BIDKV_COMPLETION_WEIGHT``,
        ``BIDKV_STARVATION_WEIGHT``, ``BIDKV_RECOMPUTE_DIV`` and ``BIDKV_RECOMPUTE_FLOOR`` when
        the strategy is built (defaults 0.5, 0.3, 256 and 0.5).

    Raises
    ------
    ValueError
        If ``delta_budget`` is outside ``[0, 1]``, an environment value is not a number, or
        ``recompute_div <= 0``.
    """

    def __init__(
        self,
        *,
        scoring: ScoringStrategy | None = None,
        delta_budget: float = 0.15,
        completion_weight: float | None = None,
        starvation_weight: float | None = None,
        recompute_div: float | None = None,
        recompute_floor: float | None = None,
    ) -> None:
        # Built (and so validated) once; each call only resizes its ranking window.
        self._solver_config = SolverConfig(enabled=True, delta_budget=delta_budget)
        self._scoring: ScoringStrategy = scoring if scoring is not None else PositionalScoring()
        self._delta_budget = delta_budget
        self._completion_weight = _weight(completion_weight, "BIDKV_COMPLETION_WEIGHT", 0.5)
        self._starvation_weight = _weight(starvation_weight, "BIDKV_STARVATION_WEIGHT", 0.3)
        self._recompute_div = _weight(recompute_div, "BIDKV_RECOMPUTE_DIV", 256.0)
        self._recompute_floor = _weight(recompute_floor, "BIDKV_RECOMPUTE_FLOOR", 0.5)
        if not self._recompute_div > 0.0:
            raise ValueError(f"recompute_div must be > 0, got {self._recompute_div}")

    @property
    def name(self) -> str:
        """``"bidkv"``."""
        return "bidkv"

    @property
    def scoring(self) -> ScoringStrategy:
        """The (unused) scorer kept for interface compatibility."""
        return self._scoring

    @property
    def delta_budget(self) -> float:
        """Budget of the internal solver configuration."""
        return self._delta_budget

    def make_bid(self, request: BaselineCandidate) -> CompressionBid | None:
        """Build the single bid of one candidate.

        Parameters
        ----------
        request : BaselineCandidate
            The candidate.

        Returns
        -------
        CompressionBid or None
            ``None`` when the candidate is not eligible (``current_tokens <= 1``).
        """
        if request.current_tokens <= 1:
            return None
        completion = _completion(request)
        if request.private_tokens > 0:
            tokens_freed = request.private_tokens
            recompute_norm = max(self._recompute_floor, tokens_freed / self._recompute_div)
            quality_delta = max(
                _BRANCH_A_MIN_DELTA,
                recompute_norm
                + completion * self._completion_weight
                + request.num_preemptions * self._starvation_weight,
            )
            metadata: dict[str, Any] = {
                "private_tokens": tokens_freed,
                "recompute_norm": round(recompute_norm, 4),
                "completion": round(completion, 4),
                "num_preemptions": request.num_preemptions,
                "mode": "A",
                "path": "radix-aware",
            }
        else:
            tokens_freed = request.current_tokens
            quality_delta = 1.0 + _BRANCH_B_COMPLETION_WEIGHT * completion
            if request.num_preemptions > 0:
                quality_delta += request.num_preemptions * _BRANCH_B_PREEMPTION_WEIGHT
            metadata = {
                "completion": round(completion, 4),
                "num_preemptions": request.num_preemptions,
                # "A" is the original's label for request-level Mode A, not branch A.
                "mode": "A",
                "path": "v8-frozen",
            }
        return CompressionBid(
            bid_id=make_bid_id(request.request_id, 0),
            request_id=request.request_id,
            algorithm_id=_ALGORITHM_ID,
            tokens_freed=tokens_freed,
            quality_delta=quality_delta,
            compress_latency_ms=0.0,
            confidence=_BID_CONFIDENCE,
            metadata=metadata,
        )

    def select_victims(
        self,
        candidates: Sequence[BaselineCandidate],
        needed_tokens: int,
        **kwargs: Any,
    ) -> list[CompressionAction]:
        """Evict in decreasing utility until ``needed_tokens`` are freed.

        Ties in utility go to the larger ``tokens_freed``, then to candidate order.

        Parameters
        ----------
        candidates : sequence of BaselineCandidate
            Running requests; those with ``current_tokens <= 1`` are never returned.
        needed_tokens : int
            Tokens to free; adapters pass the sum over all candidates to get a full ranking.
        **kwargs
            Ignored.

        Returns
        -------
        list of CompressionAction
            ``evict`` actions with ``target_tokens = r`` and metadata
            ``{strategy, bid_id, quality_delta, utility}``.
        """
        if needed_tokens <= 0 or not candidates:
            return []

        pool_manager = BidPoolManager(enabled=True)
        for request in latest_per_request(candidates):
            bid = self.make_bid(request)
            if bid is not None:
                pool_manager.submit_bids(request.request_id, [bid])
        pool = pool_manager.get_pool_snapshot()
        if not pool.bids:
            return []

        # One solver per call, sized to the pool, so no candidate is cut from the ranking
        # (the original's default of 20 bids per solve silently dropped the rest).
        solver = GreedyBidSolver(
            dataclasses.replace(self._solver_config, max_bids_per_solve=len(pool.bids))
        )
        budget = max(sum(bid.quality_delta for bid in pool.bids) + 1.0, _RANKING_BUDGET_FLOOR)
        acceptance = solver.solve(pool, needed_tokens, budget, decision_reason=_DECISION_REASON)

        by_id = {bid.bid_id: bid for bid in pool.bids}
        actions: list[CompressionAction] = []
        for bid_id in acceptance.accepted_bid_ids:
            bid = by_id[bid_id]
            actions.append(
                CompressionAction(
                    request_id=bid.request_id,
                    action_type="evict",
                    target_tokens=bid.tokens_freed,
                    metadata={
                        "strategy": self.name,
                        "bid_id": bid.bid_id,
                        "quality_delta": bid.quality_delta,
                        "utility": bid.utility,
                    },
                )
            )
        return actions
