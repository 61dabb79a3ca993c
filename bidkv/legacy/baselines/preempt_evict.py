"""``preempt-evict`` and ``preempt-evict-sjf``: evict the lowest-priority requests whole.

Adapters set ``priority = -arrival_ms``, so the newest request goes first, which is vLLM's LIFO
preemption: the engine's default, the lower bound every other strategy is compared with.
``preempt-evict-sjf`` has the same victims; its shortest-job-first ordering of the waiting queue
lives in the scheduler hook, so the strategy exists to isolate that admission change in
ablations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bidkv.legacy.baselines.base import (
    BaselineCandidate,
    BaselineStrategy,
    CompressionAction,
    act_until_freed,
    latest_per_request,
)

__all__ = ["PreemptEvictSJFStrategy", "PreemptEvictStrategy"]


class PreemptEvictStrategy(BaselineStrategy):
    """Evict whole requests in increasing ``priority`` until enough tokens are freed.

    Equal priorities keep candidate order (stable sort). Candidates with ``current_tokens <= 0``
    free nothing and are skipped; the original raised ``ValueError`` on them instead.
    """

    @property
    def name(self) -> str:
        """``"preempt-evict"``."""
        return "preempt-evict"

    def select_victims(
        self,
        candidates: Sequence[BaselineCandidate],
        needed_tokens: int,
        **kwargs: Any,
    ) -> list[CompressionAction]:
        """Evict lowest priority first until ``needed_tokens`` are freed.

        Returns ``evict`` actions with ``target_tokens = current_tokens`` and metadata
        ``{strategy, priority}``; ``kwargs`` are ignored.
        """
        if needed_tokens <= 0 or not candidates:
            return []
        evictable = [r for r in latest_per_request(candidates) if r.current_tokens > 0]
        evictable.sort(key=lambda request: request.priority)
        return act_until_freed(
            evictable,
            needed_tokens,
            lambda request, _: CompressionAction(
                request_id=request.request_id,
                action_type="evict",
                target_tokens=request.current_tokens,
                metadata={"strategy": self.name, "priority": request.priority},
            ),
        )


class PreemptEvictSJFStrategy(PreemptEvictStrategy):
    """Victim rule of :class:`PreemptEvictStrategy`, registered under its own name."""

    @property
    def name(self) -> str:
        """``"preempt-evict-sjf"``."""
        return "preempt-evict-sjf"
