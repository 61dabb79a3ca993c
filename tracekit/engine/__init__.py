"""The embedded engine: a deterministic, pure-Python replica of vLLM v1 scheduling decisions.

It replays a workload with fake model outputs (one token per step per decoding request) and asks
a :class:`VictimHost` for every preemption victim, so a victim policy can be qualified without a
GPU. ``docs/engine.md`` lists every reproduced vLLM rule with its source. Standard library only.
"""

from tracekit.engine.clock import COST_MODEL_PRESETS, CostModel
from tracekit.engine.config import (
    CLOCKS,
    DEFAULT_CLOCK,
    ENGINE_DEFAULTS,
    ENGINE_MODES,
    SCHEDULING_POLICIES,
    EngineConfig,
    make_engine_config,
)
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
from tracekit.engine.interface import EngineScheduler, SchedulerFactory
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest, RequestStatus, engine_requests

__all__ = [
    "CLOCKS",
    "COST_MODEL_PRESETS",
    "DEFAULT_CLOCK",
    "ENGINE_DEFAULTS",
    "ENGINE_MODES",
    "SCHEDULING_POLICIES",
    "BuiltinHost",
    "ContractHost",
    "CostModel",
    "DecisionRecord",
    "EngineConfig",
    "EngineObserver",
    "EngineRequest",
    "EngineResult",
    "EngineScheduler",
    "LegacyHost",
    "LegacySchedulingPolicy",
    "RequestRecord",
    "RequestStatus",
    "SchedulerFactory",
    "StepRecord",
    "TypedHost",
    "VictimChoice",
    "VictimHost",
    "engine_requests",
    "make_engine_config",
    "run_engine",
]
