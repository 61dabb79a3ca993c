"""Legacy victim strategies of the ``select_victims`` API and their registry.

One module per strategy: ``preempt_evict`` (the engine default, LIFO), ``preempt_evict_sjf``
(same victims, SJF admission in the hook), ``static_random`` (seeded random control),
``largest_first`` (capacity greedy) and ``bidkv_strategy`` (utility ranking through the bid pool
and solver). ``base`` holds the shared types and ``registry`` the name lookup.
"""

from bidkv.baselines.base import (
    BaselineContext,
    BaselineStrategy,
    CompressionAction,
    RequestState,
)
from bidkv.baselines.bidkv_strategy import BidKVStrategy
from bidkv.baselines.largest_first import LargestFirstStrategy
from bidkv.baselines.preempt_evict import PreemptEvictStrategy
from bidkv.baselines.preempt_evict_sjf import PreemptEvictSJFStrategy
from bidkv.baselines.registry import BaselineRegistry, create_default_registry
from bidkv.baselines.static_random import StaticRandomStrategy

__all__ = [
    "BaselineContext",
    "BaselineRegistry",
    "BaselineStrategy",
    "BidKVStrategy",
    "CompressionAction",
    "LargestFirstStrategy",
    "PreemptEvictSJFStrategy",
    "PreemptEvictStrategy",
    "RequestState",
    "StaticRandomStrategy",
    "create_default_registry",
]
