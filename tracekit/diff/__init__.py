"""Legacy-versus-typed comparison: ``diff_traces``.

``diff_traces(legacy, typed)`` compares two recordings of the same runs made through the legacy
``VictimSelector`` host and the typed ``vllm.preemption-policy.v1`` host, classifies every
difference by its cause and gives a verdict. ``docs/diff.md`` documents it, its JSON output and
exit codes. The failure and rollback checks live in :mod:`tracekit.conformance`.
"""

from tracekit.diff.classes import CLASSES, DifferenceClass
from tracekit.diff.compare import diff_pair, diff_traces
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
]
