"""Bounds, defaults and choices that the command line's option declarations read.

This module imports the standard library alone (no polars, pyarrow, DuckDB, altair, numpy or
engine), so that a command's ``--help`` and its usage errors import no library
(``tests/test_cli_lazy.py``). The library modules import these values from here, so that each
has one definition; the few that the library derives (the embedded engine's defaults, the
experiment's matrix) are plain copies here, which ``tests/test_cli_lazy.py`` keeps equal to
the library's.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from tracekit.errors import ConfigError

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_REPEATS",
    "DEFAULT_TARGET",
    "DEFAULT_TOLERANCE",
    "DEFAULT_TPOT_S",
    "DEFAULT_TTFT_S",
    "EVENT_STRATEGIES",
    "LEGACY_STRATEGIES",
    "MAX_COUNT",
    "MAX_FINITE",
    "MAX_SEED",
    "MAX_TIME_S",
    "OBJECTIVES",
    "ORACLE_HORIZON",
    "OVERSIZE_MODES",
    "PAPER_MATRIX",
    "PAPER_RATES",
    "PAPER_SLO_TTFT_MS",
    "SCHEDULE_POLICIES",
    "Objective",
    "OversizeMode",
    "SchedulePolicyName",
    "check_slo_target",
]

# -- The bounds of a trace (tracekit.trace.values) and of a workload (tracekit.workloads) ------

#: Largest count, index or size a trace holds: 2**40, about 1.1e12. No run comes near it (a
#: million times the longest context of any model), and sums of such values over a table stay
#: far from int64's 2**63, so aggregations cannot overflow silently.
MAX_COUNT = 2**40
#: Largest time in seconds: 1e10, 317 years. Times from a run's start stay far below it, and so
#: does a host's clock reading (a Unix time before the year 2286, a monotonic clock).
MAX_TIME_S = 1e10
#: Largest seed magnitude: a seed is recorded in the manifest, which readers read as int64.
MAX_SEED = 2**63 - 1
#: Largest finite rate (requests per second) or burstiness.
MAX_FINITE = 1e6

#: What the loader does with prompts the engine would refuse (tracekit.workloads.prompt_limit).
OversizeMode = Literal["reject", "drop", "cap"]
OVERSIZE_MODES: tuple[str, ...] = get_args(OversizeMode)

# -- SLO targets (tracekit.analysis.serving) ---------------------------------------------------

#: The default TTFT target of SLO attainment (seconds).
DEFAULT_TTFT_S = 2.0
#: The default TPOT target of SLO attainment (seconds).
DEFAULT_TPOT_S = 0.1


def check_slo_target(name: str, value: float, *, example: float | None = None) -> float:
    """Return ``value`` if it is a finite latency target above zero; else a one-line error.

    The one check of SLO targets: ``SloTargets`` (qualify, sweep), the commands' ``--slo-*``
    options and the experiment's millisecond targets use it. ``example`` is a good value in
    the unit of ``name`` (the option's default), offered as the fix.
    """
    fix = "" if example is None else f"; pass e.g. {example:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name}: expected a finite number > 0, got {value!r}{fix}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name}: expected a finite number > 0, got {value!r}{fix}")
    return float(value)


# -- The capacity search (tracekit.capacity.search) and qualify (tracekit.qualify) -------------

#: The SLO attainment that defines the knee, in ``tracekit capacity`` and ``tracekit qualify``.
DEFAULT_TARGET = 0.9
#: The search's one precision: both commands bisect until the meeting and missing rates are
#: this close (relative), so they find the same knee for the same input.
DEFAULT_TOLERANCE = 0.02
#: Paired repeats of every load cell by default: the fewest that reach the precision target on
#: the primary endpoint (docs/qualify.md, "Repeats").
DEFAULT_REPEATS = 10
#: The family-wise error rate of a report: the chance that any of its labels is wrong.
DEFAULT_ALPHA = 0.05

# -- The oracle (tracekit.oracle.rollout) ------------------------------------------------------

Objective = Literal["recomputed", "e2e", "slo"]
#: Accepted ``--objective`` values.
OBJECTIVES: tuple[str, ...] = ("recomputed", "e2e", "slo")
#: Most steps a rollout runs after the decision's step starts, by default.
ORACLE_HORIZON = 128

# -- Recorders (tracekit.recording.importer, tracekit.sglang.protocol) -------------------------

# The strategy names of the legacy logger's ``strategy_choices``; ``pe-lifo`` is vLLM's built-in.
EVENT_STRATEGIES = ("pe-lifo", "largest-first", "pe-sjf", "bidkv")
#: SGLang ``--schedule-policy`` values the recorder drives.
SchedulePolicyName = Literal["fcfs", "lpm"]
SCHEDULE_POLICIES: tuple[str, ...] = get_args(SchedulePolicyName)

# -- The original BidKV experiments (tracekit.experiment) --------------------------------------

#: The strategies of the original matrix, in its order (docs/experiments.md, "The matrix"): the
#: legacy registry's names, whose rules are not those of the production policy's strategies of
#: the same names (docs/bidkv-core.md, "Same names, other rules").
LEGACY_STRATEGIES: tuple[str, ...] = (
    "preempt-evict",
    "preempt-evict-sjf",
    "static-random",
    "largest-first",
    "bidkv",
)
#: The published rates of the mixed workload (req/s).
PAPER_RATES: tuple[float, ...] = (2.0, 3.8, 5.7)
#: The defaults of ``tracekit.experiment.MatrixSpec`` that ``experiment traces|run`` show (a
#: plain copy; ``tests/test_cli_lazy.py`` keeps it equal to the dataclass's).
PAPER_MATRIX: dict[str, Any] = {
    "strategies": LEGACY_STRATEGIES,
    "rates": PAPER_RATES,
    "runs": 3,
    "num_requests": 1000,
    "seed": 42,
    "load_scale": 1.0,
    "latency_from": "arrival",
}
#: The TTFT target of the paper's tables (``tracekit.experiment.SloSpec``), milliseconds.
PAPER_SLO_TTFT_MS = 300.0
