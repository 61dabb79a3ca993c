"""Look the experiments' ``select_victims`` strategies up by their names (the original's)."""

from __future__ import annotations

from bidkv.legacy.baselines.base import BaselineStrategy
from bidkv.legacy.baselines.bid_ranking import BidKVStrategy
from bidkv.legacy.baselines.largest_first import LargestFirstStrategy
from bidkv.legacy.baselines.preempt_evict import PreemptEvictSJFStrategy, PreemptEvictStrategy
from bidkv.legacy.baselines.static_random import StaticRandomStrategy

__all__ = ["BaselineRegistry", "create_default_registry"]


class BaselineRegistry:
    """Strategies indexed by their :attr:`~BaselineStrategy.name`."""

    def __init__(self) -> None:
        # name -> strategy instance
        self._strategies: dict[str, BaselineStrategy] = {}

    def register(self, strategy: BaselineStrategy) -> None:
        """Add a strategy under its name.

        Parameters
        ----------
        strategy : BaselineStrategy
            The instance to add.

        Raises
        ------
        ValueError
            If a strategy with that name is already registered.
        """
        if strategy.name in self._strategies:
            raise ValueError(f"Strategy {strategy.name!r} already registered")
        self._strategies[strategy.name] = strategy

    def get(self, name: str) -> BaselineStrategy:
        """Return the strategy registered under ``name``.

        Parameters
        ----------
        name : str
            A registered name.

        Returns
        -------
        BaselineStrategy
            The registered instance.

        Raises
        ------
        KeyError
            If nothing is registered under ``name``; the message lists the available names.
        """
        try:
            return self._strategies[name]
        except KeyError:
            available = ", ".join(sorted(self._strategies))
            raise KeyError(f"Strategy {name!r} not found. Available: {available}") from None

    def list_strategies(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._strategies)

    @property
    def count(self) -> int:
        """Number of registered strategies."""
        return len(self._strategies)

    def create_default_registry(self) -> None:
        """Register the five built-in strategies, keeping any already registered under a name.

        The built-ins are ``preempt-evict``, ``preempt-evict-sjf``, ``static-random`` (seed 0),
        ``largest-first`` and ``bidkv``, each with default settings.
        """
        defaults: list[BaselineStrategy] = [
            PreemptEvictStrategy(),
            PreemptEvictSJFStrategy(),
            StaticRandomStrategy(seed=0),
            LargestFirstStrategy(),
            BidKVStrategy(),
        ]
        for strategy in defaults:
            self._strategies.setdefault(strategy.name, strategy)


def create_default_registry() -> BaselineRegistry:
    """Return a new registry holding the five built-in strategies.

    Returns
    -------
    BaselineRegistry
        With ``bidkv``, ``largest-first``, ``preempt-evict``, ``preempt-evict-sjf`` and
        ``static-random`` (seed 0).
    """
    registry = BaselineRegistry()
    registry.create_default_registry()
    return registry
