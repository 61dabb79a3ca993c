"""The module engines load by qualified name (docs/policy.md, "Loading").

``--preemption-policy bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy`` (typed hosts) and
``bidkv.adapters.vllm_hust.selector:BidkvVictimSelector`` (legacy hosts, entry point group
``vllm.victim_selector``) both resolve here. The implementation lives in the sibling modules;
the two policy classes report this module as their ``__module__``, because hosts label a policy
with ``f"{type(policy).__module__}.{type(policy).__qualname__}"`` and analysers match that label
against the name engines were configured with.
"""

from __future__ import annotations

from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from bidkv.adapters.vllm_hust.policy import BidkvPreemptionPolicy, BidkvVictimSelector
from bidkv.adapters.vllm_hust.scoring import UtilityCandidateScore

__all__ = [
    "BidkvPreemptionPolicy",
    "BidkvSelectorConfig",
    "BidkvVictimSelector",
    "UtilityCandidateScore",
]
