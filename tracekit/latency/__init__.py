"""Step-time models: how long a scheduled step lasts (``docs/latency.md``).

Three implementations share :class:`StepTimeModel`: the engine's roofline (no dependencies),
AIConfigurator's measured per-operator tables (optional extra ``aiconfigurator``, Python 3.11 or
newer, imported only when used), and a model calibrated from a live engine's measured steps.
:func:`parse_latency_spec` turns a ``--latency`` value into a model. Standard library only at
import time.
"""

from tracekit.latency.interface import PrefillChunk, StepShape, StepTimeModel
from tracekit.latency.roofline import RooflineModel
from tracekit.latency.spec import LatencySpec, make_step_time_model, parse_latency_spec

__all__ = [
    "LatencySpec",
    "PrefillChunk",
    "RooflineModel",
    "StepShape",
    "StepTimeModel",
    "make_step_time_model",
    "parse_latency_spec",
]
