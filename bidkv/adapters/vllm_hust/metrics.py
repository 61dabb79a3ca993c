"""Decision counters, bounded per-request tables and snapshots.

See docs/policy.md, "Counters, snapshots, logs" and docs/policy.md, "Bounded state".

Every decision, abstentions included, is recorded once. The per-request tables are bounded by a
least-recently-touched rule (:class:`LruTable`); nothing else grows with the number of requests.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import Any

from bidkv.adapters.vllm_hust.scoring import UtilityCandidateScore

__all__ = ["DEFAULT_STATE_LIMIT", "DecisionRecorder", "LruTable", "percentile"]

# Per-request tables keep at most this many ids. A serving process rarely has more than a few
# thousand requests alive, so forgetting the least recently touched of 65,536 loses nothing live.
DEFAULT_STATE_LIMIT = 65_536


def percentile(values: Iterable[int], p: float) -> float:
    """The selector's percentile: the value at rank ``ceil(p/100 * n) - 1`` of the sorted values.

    Parameters
    ----------
    values
        Integers (``None`` entries are skipped).
    p
        Percentile in [0, 100].

    Returns
    -------
    float
        ``0.0`` for no values; the rank is clamped to ``[0, n - 1]``.

    Examples
    --------
    >>> percentile([1, 1, 1, 5], 95)
    5.0
    >>> percentile([], 95)
    0.0
    """
    data = sorted(int(v) for v in values if v is not None)
    if not data:
        return 0.0
    rank = math.ceil((p / 100.0) * len(data)) - 1
    rank = max(0, min(rank, len(data) - 1))
    return float(data[rank])


class LruTable(OrderedDict[str, int]):
    """A ``str -> int`` table that forgets its least recently touched key beyond ``limit`` keys.

    Reads through :meth:`touch_get` and writes through :meth:`put` and :meth:`increment` count as
    touches. Until ``limit`` keys are stored it behaves exactly like a plain dict, so bounding it
    cannot change a decision before the bound is reached.

    Parameters
    ----------
    limit
        Maximum number of keys kept (at least 1); :data:`DEFAULT_STATE_LIMIT` by default.
    """

    def __init__(self, limit: int = DEFAULT_STATE_LIMIT) -> None:
        # The default lets OrderedDict's pickling (which calls cls()) rebuild the table.
        super().__init__()
        if limit < 1:
            raise ValueError("state table limit must be positive")
        self.limit = limit

    def touch_get(self, key: str, default: int = 0) -> int:
        """Return the value for ``key`` (``default`` if absent), marking it recently used."""
        value = self.get(key)
        if value is None:
            return default
        self.move_to_end(key)
        return value

    def put(self, key: str, value: int) -> None:
        """Store ``value`` for ``key`` as the most recently used entry, evicting if over limit."""
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.limit:
            self.popitem(last=False)

    def increment(self, key: str) -> None:
        """Add one to ``key``'s value (absent counts as 0), as the most recently used entry."""
        # put() inlined: this runs on every decision.
        self[key] = self.get(key, 0) + 1
        self.move_to_end(key)
        if len(self) > self.limit:
            self.popitem(last=False)


class DecisionRecorder:
    """Counters and history of one policy instance.

    Parameters
    ----------
    history_size
        Length of the recent-victim and snapshot histories.
    snapshots_enabled
        Keep a snapshot of every decision.
    snapshot_top_k
        Ranked candidates kept per snapshot.
    state_limit
        Bound of the per-request preemption table (:class:`LruTable`).
    """

    __slots__ = (
        "_last",
        "cascade_guard_hits",
        "consecutive_preemption_checks",
        "consecutive_preemption_events",
        "default_strategy_hits",
        "kv_pressure_events",
        "last_preempted_request_id",
        "liveness_epochs",
        "liveness_fallback_hits",
        "policy_abstentions",
        "preemptions_per_request",
        "recent_preempted_req_ids",
        "snapshot_top_k",
        "snapshots",
        "snapshots_enabled",
        "total_preemptions",
        "total_tokens_freed",
        "utility_strategy_hits",
    )

    def __init__(
        self,
        history_size: int,
        snapshots_enabled: bool,
        snapshot_top_k: int,
        state_limit: int = DEFAULT_STATE_LIMIT,
    ) -> None:
        size = max(1, int(history_size))
        self.total_preemptions = 0
        self.total_tokens_freed = 0
        self.kv_pressure_events = 0
        self.utility_strategy_hits = 0
        self.default_strategy_hits = 0
        self.liveness_fallback_hits = 0
        self.liveness_epochs = 0
        self.cascade_guard_hits = 0
        self.policy_abstentions = 0
        self.consecutive_preemption_events = 0
        self.consecutive_preemption_checks = 0
        self.last_preempted_request_id: str | None = None
        self.preemptions_per_request = LruTable(state_limit)
        self.recent_preempted_req_ids: deque[str] = deque(maxlen=size)
        self.snapshots: deque[dict[str, Any]] = deque(maxlen=size)
        self.snapshots_enabled = snapshots_enabled
        self.snapshot_top_k = max(1, int(snapshot_top_k))
        # The last decision's fields as a tuple; the dict is built only when someone asks.
        self._last: tuple[Any, ...] | None = None

    def record(
        self,
        victim: Any,
        used_utility: bool,
        policy: object,
        kv_utilization: float | None,
        now: float,
        default_id: str,
        running_size: int,
        reason: str = "strategy",
        ranked: Sequence[UtilityCandidateScore] = (),
    ) -> None:
        """Record one decision (docs/policy.md, "Counters, snapshots, logs").

        Parameters
        ----------
        victim
            The candidate recorded as victim (on an abstention, the policy's own default).
        used_utility
            Whether the configured strategy (not the default rule) chose it.
        policy
            The context's scheduling policy.
        kv_utilization
            The context's KV usage, recorded as given.
        now
            Decision time in seconds.
        default_id
            The id of the policy's default victim.
        running_size
            Number of candidates.
        reason
            ``strategy``, ``liveness_abstain``, ``cascade_abstain`` or ``liveness_fallback``.
        ranked
            The ranking's first records, for snapshots (empty when not ranked).
        """
        request_id = getattr(victim, "request_id", "")
        if request_id.__class__ is not str:
            request_id = str(request_id)
        tokens = getattr(victim, "num_computed_tokens", 0)
        if tokens.__class__ is not int:
            # Only non-int values need the original's coercion (an int is its own result).
            tokens = int(tokens or 0)
        self.total_preemptions += 1
        if tokens > 0:
            self.total_tokens_freed += tokens
        if request_id:
            last = self.last_preempted_request_id
            if last is not None:
                self.consecutive_preemption_checks += 1
                if request_id == last:
                    self.consecutive_preemption_events += 1
            self.preemptions_per_request.increment(request_id)
            self.recent_preempted_req_ids.append(request_id)
            self.last_preempted_request_id = request_id
        if used_utility:
            self.utility_strategy_hits += 1
        else:
            self.default_strategy_hits += 1
        self._last = (
            now,
            policy,
            used_utility,
            kv_utilization,
            running_size,
            request_id,
            default_id,
            reason,
        )
        if self.snapshots_enabled:
            snapshot = _decision_dict(self._last)
            snapshot["candidates"] = [
                {
                    "rank": rank,
                    "request_id": s.request_id,
                    "utility": round(s.utility, 6),
                    "evict_score": round(s.evict_score, 6),
                    "tokens_freed": s.tokens_freed,
                    "completion": round(s.completion, 6),
                    "num_preemptions": s.num_preemptions,
                    "arrival_time": s.arrival_time,
                    "selected": s.request_id == request_id,
                }
                for rank, s in enumerate(ranked[: self.snapshot_top_k], start=1)
            ]
            self.snapshots.append(snapshot)

    def last_decision(self) -> dict[str, Any] | None:
        """The last decision record, or ``None`` before any decision.

        Keys: docs/policy.md, "Counters, snapshots, logs".
        """
        return None if self._last is None else _decision_dict(self._last)

    def export(self) -> dict[str, Any]:
        """The metrics dictionary of ``export_metrics``, keys in its order.

        See docs/policy.md, "Counters, snapshots, logs".
        """
        total = self.total_preemptions
        checks = self.consecutive_preemption_checks
        return {
            "total_preemptions": total,
            "total_tokens_freed": self.total_tokens_freed,
            "kv_pressure_events": self.kv_pressure_events,
            "consecutive_preempt_ratio": (
                self.consecutive_preemption_events / checks if checks > 0 else 0.0
            ),
            "preemptions_per_request_p95": percentile(self.preemptions_per_request.values(), 95),
            "preempted_req_ids": list(self.recent_preempted_req_ids),
            "strategy_hit_rate": self.utility_strategy_hits / total if total > 0 else 0.0,
            "utility_strategy_hits": self.utility_strategy_hits,
            "default_strategy_hits": self.default_strategy_hits,
            "liveness_fallback_hits": self.liveness_fallback_hits,
            "liveness_epochs": self.liveness_epochs,
            "cascade_guard_hits": self.cascade_guard_hits,
            "policy_abstentions": self.policy_abstentions,
        }

    def emit_log(self, logger: logging.Logger, scheduler_name: str) -> None:
        """Log the counters, the last decision and (at DEBUG) the last snapshot.

        See docs/policy.md, "Counters, snapshots, logs".

        Nothing is logged before the first decision. The formats are the original's.
        """
        metrics = self.export()
        if metrics["total_preemptions"] <= 0:
            return
        logger.info(
            "[BidKV][%s] total_preemptions=%d utility_hits=%d "
            "default_hits=%d hit_rate=%.3f tokens_freed=%d "
            "kv_pressure_events=%d consecutive_preempt_ratio=%.3f "
            "p95_preemptions_per_request=%.2f",
            scheduler_name,
            metrics["total_preemptions"],
            metrics["utility_strategy_hits"],
            metrics["default_strategy_hits"],
            metrics["strategy_hit_rate"],
            metrics["total_tokens_freed"],
            metrics["kv_pressure_events"],
            metrics["consecutive_preempt_ratio"],
            metrics["preemptions_per_request_p95"],
        )
        decision = self.last_decision()
        if decision is not None:
            logger.info(
                "[BidKV][%s] latest_decision victim=%s default_victim=%s "
                "used_utility=%s kv_utilization=%s running=%d policy=%s",
                scheduler_name,
                decision["selected_victim_id"],
                decision["default_victim_id"],
                decision["used_utility"],
                decision["kv_utilization"],
                decision["running_size"],
                decision["policy"],
            )
        if self.snapshots_enabled and self.snapshots:
            logger.debug("[BidKV][%s] latest_snapshot=%s", scheduler_name, self.snapshots[-1])

    def recent_snapshots(self, limit: int = 10) -> list[dict[str, Any]]:
        """The last ``limit`` snapshots, oldest first (``[]`` when ``limit <= 0``)."""
        if limit <= 0:
            return []
        return list(self.snapshots)[-limit:]


def _decision_dict(fields: tuple[Any, ...]) -> dict[str, Any]:
    now, policy, used, kv, size, victim_id, default_id, reason = fields
    return {
        "timestamp_s": round(now, 6),
        "policy": policy,
        "used_utility": used,
        "kv_utilization": kv,
        "running_size": size,
        "selected_victim_id": victim_id,
        "default_victim_id": default_id,
        "decision_reason": reason,
    }
