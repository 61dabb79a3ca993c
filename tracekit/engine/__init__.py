"""The embedded engine: a deterministic, pure-Python replica of vLLM v1 scheduling decisions.

It replays a workload with fake model outputs (one token per step per decoding request) and asks
a :class:`VictimHost` for every preemption victim, so a victim policy can be qualified without a
GPU. ``docs/engine.md`` lists every reproduced vLLM rule with its source. Standard library only.
"""

from tracekit.engine.clock import COST_MODEL_PRESETS, CostModel
from tracekit.engine.config import EngineConfig
from tracekit.engine.engine import EngineObserver, EngineResult, run_engine
from tracekit.engine.hosts import (
    BuiltinHost,
    ContractHost,
    LegacyHost,
    LegacySchedulingPolicy,
    TypedHost,
    VictimChoice,
    VictimHost,
)
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest, RequestStatus

__all__ = [
    "COST_MODEL_PRESETS",
    "BuiltinHost",
    "ContractHost",
    "CostModel",
    "DecisionRecord",
    "EngineConfig",
    "EngineObserver",
    "EngineRequest",
    "EngineResult",
    "LegacyHost",
    "LegacySchedulingPolicy",
    "RequestRecord",
    "RequestStatus",
    "StepRecord",
    "TypedHost",
    "VictimChoice",
    "VictimHost",
    "run_engine",
]
