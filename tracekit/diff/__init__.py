"""Legacy-versus-typed qualification: ``diff_traces`` and ``run_conformance``.

``diff_traces(legacy, typed)`` compares two recordings of the same runs made through the legacy
``VictimSelector`` host and the typed ``vllm.preemption-policy.v1`` host, classifies every
difference by its cause and gives a verdict. ``run_conformance(strategies, policy_config)`` checks
that both hosts fail, disable and roll back the policy the same way. ``docs/diff.md`` documents
both, their JSON output and exit codes.
"""

from tracekit.diff.classes import CLASSES, DifferenceClass
from tracekit.diff.compare import diff_pair, diff_traces
from tracekit.diff.conformance import INVALID_CONFIGS, ConformanceTargets, run_conformance
from tracekit.diff.conformance_report import Check, ConformanceReport
from tracekit.diff.pairing import IncomparableTracesError, RunPair, pair_runs
from tracekit.diff.report import (
    EXIT_INVALID_INPUT,
    CounterRow,
    Difference,
    DiffReport,
    Divergence,
    PairDiff,
    RunInfo,
    Verdict,
)

__all__ = [
    "CLASSES",
    "EXIT_INVALID_INPUT",
    "INVALID_CONFIGS",
    "Check",
    "ConformanceReport",
    "ConformanceTargets",
    "CounterRow",
    "DiffReport",
    "Difference",
    "DifferenceClass",
    "Divergence",
    "IncomparableTracesError",
    "PairDiff",
    "RunInfo",
    "RunPair",
    "Verdict",
    "diff_pair",
    "diff_traces",
    "pair_runs",
    "run_conformance",
]
