"""KV-memory pressure detection from the latest pushed statistics.

Adapters push ``(used, max, pending_high_priority)`` with :meth:`PressureDetector.update_stats`;
decisions use only that latest snapshot, never a smoothed history, so a pressure spike is seen
in the step it happens (docs/bidkv-core.md, "Pressure detection").
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

__all__ = ["PressureConfig", "PressureDetector"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PressureConfig:
    """Thresholds of the pressure detector.

    Parameters
    ----------
    threshold_pct : float, optional
        KV occupancy (``used / max``) at or above which there is pressure, in ``(0, 1]``.
    min_free_tokens : int, optional
        With high-priority requests waiting, fewer free tokens than this is pressure; >= 0.
    enabled : bool, optional
        Feature gate; off by default, and then there is never pressure.

    Raises
    ------
    ValueError
        When a field breaks its bound.
    """

    threshold_pct: float = 0.85
    min_free_tokens: int = 512
    enabled: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold_pct <= 1.0:
            raise ValueError(f"threshold_pct must be in (0.0, 1.0], got {self.threshold_pct}")
        if not self.min_free_tokens >= 0:
            raise ValueError(f"min_free_tokens must be >= 0, got {self.min_free_tokens}")


class PressureDetector:
    """Decide from the latest KV statistics whether memory is under pressure.

    Parameters
    ----------
    config : PressureConfig or None, optional
        Thresholds; ``None`` means ``PressureConfig()`` (feature off).
    """

    def __init__(self, config: PressureConfig | None = None) -> None:
        self._config = config if config is not None else PressureConfig()
        self._used_tokens = 0
        self._max_tokens = 0
        self._pending_high_priority = 0

    @property
    def config(self) -> PressureConfig:
        """The thresholds in force."""
        return self._config

    def update_stats(
        self, used_tokens: int, max_tokens: int, pending_high_priority: int = 0
    ) -> None:
        """Replace the statistics with a new snapshot.

        Parameters
        ----------
        used_tokens : int
            KV tokens in use.
        max_tokens : int
            KV capacity in tokens.
        pending_high_priority : int, optional
            High-priority requests waiting for memory.
        """
        self._used_tokens = used_tokens
        self._max_tokens = max_tokens
        self._pending_high_priority = pending_high_priority

    def is_under_pressure(self) -> bool:
        """Whether memory is under pressure now.

        Returns
        -------
        bool
            ``False`` when disabled or ``max_tokens <= 0``; ``True`` when
            ``used / max >= threshold_pct``, or when high-priority requests wait and fewer than
            ``min_free_tokens`` are free.
        """
        if not self._config.enabled or self._max_tokens <= 0:
            return False
        if self._used_tokens / self._max_tokens >= self._config.threshold_pct:
            return True
        free_tokens = self._max_tokens - self._used_tokens
        return self._pending_high_priority > 0 and free_tokens < self._config.min_free_tokens

    def needed_tokens(self) -> int:
        """Tokens to free to get back under the threshold.

        Returns
        -------
        int
            ``max(0, used - int(max · threshold_pct))``; 0 when ``max_tokens <= 0``. Not gated by
            ``enabled``.
        """
        if self._max_tokens <= 0:
            return 0
        return max(0, self._used_tokens - int(self._max_tokens * self._config.threshold_pct))

    def set_enabled(self, enabled: bool) -> None:
        """Switch the feature gate.

        The detector keeps its own copy of the configuration, so the object passed to the
        constructor is left unchanged.

        Parameters
        ----------
        enabled : bool
            New state of the gate.
        """
        self._config = dataclasses.replace(self._config, enabled=enabled)
        logger.info("PressureDetector: enabled=%s", enabled)

    def get_kv_stats(self) -> dict[str, int]:
        """Return the latest statistics.

        Returns
        -------
        dict
            ``used_tokens``, ``max_tokens``, ``free_tokens`` (``max(0, max - used)``) and
            ``pending_high_priority``.
        """
        return {
            "used_tokens": self._used_tokens,
            "max_tokens": self._max_tokens,
            "free_tokens": max(0, self._max_tokens - self._used_tokens),
            "pending_high_priority": self._pending_high_priority,
        }
