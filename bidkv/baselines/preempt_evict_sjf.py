"""``preempt-evict-sjf``: same victims as ``preempt-evict``; only admission differs.

The shortest-job-first ordering of the waiting queue lives in the scheduler hook, so this
strategy exists to isolate that admission change in ablations.
"""

from __future__ import annotations

from bidkv.baselines.preempt_evict import PreemptEvictStrategy

__all__ = ["PreemptEvictSJFStrategy"]


class PreemptEvictSJFStrategy(PreemptEvictStrategy):
    """Victim rule of :class:`PreemptEvictStrategy`, registered under its own name."""

    @property
    def name(self) -> str:
        """``"preempt-evict-sjf"``."""
        return "preempt-evict-sjf"
