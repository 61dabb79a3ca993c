"""The original BidKV's adapter contract and the counters every adapter keeps.

An adapter plugs BidKV into one serving framework. It reports KV occupancy, gives BidKV a chance
to act before the framework's own preemption, feeds decode-step information to the scorer, and
cleans up when a request finishes.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass

from bidkv.legacy.bid_config import BidKVConfig
from bidkv.legacy.token_scoring import ScoringStrategy

__all__ = ["BaseAdapterMetrics", "FrameworkAdapter"]


class FrameworkAdapter(ABC):
    """Bridge between BidKV and one serving framework.

    Parameters
    ----------
    config : BidKVConfig
        Feature gate, kill switch and budgets.
    scoring : ScoringStrategy
        Token scorer the adapter feeds and queries.
    """

    def __init__(self, config: BidKVConfig, scoring: ScoringStrategy) -> None:
        self._config = config
        self._scoring = scoring

    @property
    def config(self) -> BidKVConfig:
        """The configuration the adapter was built with."""
        return self._config

    @property
    def scoring(self) -> ScoringStrategy:
        """The token scorer."""
        return self._scoring

    @abstractmethod
    def install(self) -> None:
        """Hook BidKV into the framework's scheduling path (patch, subclass or plugin)."""

    @abstractmethod
    def get_kv_stats(self) -> tuple[int, int]:
        """Return the framework's KV occupancy.

        Returns
        -------
        tuple of int
            ``(used_tokens, max_tokens)``.
        """

    @abstractmethod
    def on_request_complete(self, request_id: str) -> None:
        """Drop the bids and state kept for a finished request.

        Parameters
        ----------
        request_id : str
            The request that finished.
        """


@dataclass
class BaseAdapterMetrics:
    """Counters common to every adapter; framework adapters may add fields by subclassing.

    Attributes
    ----------
    total_evictions : int
        Evictions that freed at least one token.
    total_tokens_freed : int
        Tokens freed by those evictions.
    total_pressure_events : int
        Pressure events seen.
    total_requests_completed : int
        Requests that finished.
    total_decode_steps : int
        Decode steps observed.
    kill_switch_activations : int
        Times the kill switch was thrown.
    """

    total_evictions: int = 0
    total_tokens_freed: int = 0
    total_pressure_events: int = 0
    total_requests_completed: int = 0
    total_decode_steps: int = 0
    kill_switch_activations: int = 0

    def record_eviction(self, request_id: str, tokens_freed: int) -> None:
        """Count an eviction; ignored when it freed no tokens.

        Parameters
        ----------
        request_id : str
            The evicted request (not stored).
        tokens_freed : int
            Tokens the eviction freed.
        """
        if tokens_freed > 0:
            self.total_evictions += 1
            self.total_tokens_freed += tokens_freed

    def record_pressure_event(self) -> None:
        """Count a pressure event."""
        self.total_pressure_events += 1

    def record_request_complete(self, request_id: str) -> None:
        """Count a finished request.

        Parameters
        ----------
        request_id : str
            The request (not stored).
        """
        self.total_requests_completed += 1

    def record_decode_step(self, request_id: str) -> None:
        """Count a decode step.

        Parameters
        ----------
        request_id : str
            The request decoded (not stored).
        """
        self.total_decode_steps += 1

    def record_kill_switch(self) -> None:
        """Count a kill-switch activation."""
        self.kill_switch_activations += 1

    def as_dict(self) -> dict[str, int]:
        """Return every counter by name, subclass fields included, in declaration order.

        Returns
        -------
        dict of str to int
            For this class: ``total_evictions``, ``total_tokens_freed``,
            ``total_pressure_events``, ``total_requests_completed``, ``total_decode_steps``,
            ``kill_switch_activations``.
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
