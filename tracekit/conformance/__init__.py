"""Conformance: a policy fails, disables and rolls back the same way through both engine hosts.

``run_conformance(strategies, policy_config)`` loads each strategy the ways an engine loads it
and runs the named checks (:mod:`~tracekit.conformance.checks`, rollback inside the embedded
engine in :mod:`~tracekit.conformance.rollback`); the result is a
:class:`~tracekit.conformance.report.ConformanceReport`. ``docs/diff.md`` documents the checks.
"""

from tracekit.conformance.checks import INVALID_CONFIGS, ConformanceTargets, run_conformance
from tracekit.conformance.report import Check, ConformanceReport

__all__ = [
    "INVALID_CONFIGS",
    "Check",
    "ConformanceReport",
    "ConformanceTargets",
    "run_conformance",
]
