"""Load-side checks and searches: rejected requests before a run, and the saturation point.

:mod:`~tracekit.capacity.rejections` counts the requests an engine configuration refuses, so
every command can warn about them; :mod:`~tracekit.capacity.search` finds the largest request
rate at which the built-in policy meets an SLO-attainment target (``tracekit capacity``).
"""

from tracekit.capacity.rejections import Rejections, find_rejections
from tracekit.capacity.search import (
    DEFAULT_TARGET,
    DEFAULT_TOLERANCE,
    CapacityResult,
    Probe,
    find_capacity,
    mean_rate,
    workload_at_rate,
)

__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TOLERANCE",
    "CapacityResult",
    "Probe",
    "Rejections",
    "find_capacity",
    "find_rejections",
    "mean_rate",
    "workload_at_rate",
]
