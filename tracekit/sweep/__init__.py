"""Sweeps: a matrix of closed-loop runs recorded into one partitioned dataset.

The one plan / executor / resume machinery of the toolkit: ``qualify``, the experiment matrix
and closed-mode replay build :class:`PlannedRun` sequences and run them with
:func:`execute_runs` too.

``run_sweep(matrix, out)`` runs strategies x workloads x rates x repeats x engine configurations
x policy settings (a TOML matrix, ``docs/sweep.md``) on local processes or a Ray cluster, and
writes ``out/runs/workload=.../rate=.../strategy=.../config=.../repeat=.../`` bundles,
``cells.parquet`` and ``sweep.json``. Modules: ``matrix`` (the file's schema), ``plan``
(expansion), ``task`` (one run in a worker), ``executors``, ``progress``, ``guards``
(lock, Ctrl-C), ``execute`` (the run loop every job shares), ``run`` (a sweep's orchestration:
``cells.parquet`` and ``sweep.json``).
"""

from __future__ import annotations

from tracekit.sweep.execute import Execution, RunFailedError, RunRecord, execute_runs
from tracekit.sweep.executors import make_executor
from tracekit.sweep.matrix import Matrix, load_matrix
from tracekit.sweep.plan import PlannedRun, SweepPlan, plan_sweep
from tracekit.sweep.progress import ProgressSnapshot, StderrProgress
from tracekit.sweep.run import SweepInterrupted, SweepResult, execute_plan, run_sweep

__all__ = [
    "Execution",
    "Matrix",
    "PlannedRun",
    "ProgressSnapshot",
    "RunFailedError",
    "RunRecord",
    "StderrProgress",
    "SweepInterrupted",
    "SweepPlan",
    "SweepResult",
    "execute_plan",
    "execute_runs",
    "load_matrix",
    "make_executor",
    "plan_sweep",
    "run_sweep",
]
