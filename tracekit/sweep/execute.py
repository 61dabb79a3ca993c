"""The one run loop: record a plan of runs on an executor, resuming what is complete.

:func:`execute_runs` takes a sequence of :class:`~tracekit.sweep.plan.PlannedRun` (the one
execution plan type), skips the runs whose bundles are already complete
(:attr:`tracekit.trace.bundle.Bundle.complete`), runs the rest on an executor
(:mod:`tracekit.sweep.executors`), and returns one :class:`RunRecord` per run. Sweeps
(:func:`tracekit.sweep.run.execute_plan`), ``qualify``, the experiment matrix and closed-mode
replay all call it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError, TracekitError
from tracekit.sweep.executors import Executor, refuse_in_bootstrap
from tracekit.sweep.guards import interrupt_guard, sweep_lock
from tracekit.sweep.plan import PlannedRun
from tracekit.sweep.progress import ProgressCallback, ProgressCounter
from tracekit.sweep.task import (
    SweepTask,
    TaskOutcome,
    bundle_state,
    existing_folders,
    remove_partials,
)

__all__ = ["Execution", "RunFailedError", "RunRecord", "execute_runs"]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One planned run and how it ended.

    Attributes
    ----------
    path
        Bundle folder relative to the output folder.
    run_id, workload, rate, strategy, config, repeat, seed
        The run's identity and labels (a sweep's partition values).
    status
        ``done`` (completed now), ``skipped`` (already complete), ``failed`` or ``interrupted``
        (not run because the sweep was stopped).
    error, traceback
        For a failed run.
    duration_s
        Wall time of the run (for a skipped run: from the earlier sweep's record, if any).
    """

    path: str
    run_id: str
    workload: str
    rate: float
    strategy: str
    config: str
    repeat: int
    seed: int
    status: str
    error: str | None = None
    traceback: str | None = None
    duration_s: float | None = None


class _Tracker:
    """Keeps each run's record and the progress counts as executors report."""

    def __init__(self, records: list[RunRecord], counter: ProgressCounter) -> None:
        self.records = records
        self.counter = counter

    def started(self, index: int) -> None:
        self.counter.started(self.records[index].path)

    def requeued(self, index: int) -> None:
        self.counter.requeued(self.records[index].path)

    def finished(self, outcome: TaskOutcome) -> None:
        old = self.records[outcome.index]
        self.records[outcome.index] = _replace(
            old,
            status=outcome.status,
            error=outcome.error,
            traceback=outcome.traceback,
            duration_s=round(outcome.duration_s, 6),
        )
        self.counter.finished(old.path, outcome.status == "done", outcome.error)

    def stopping(self) -> None:
        self.counter.emit("stopping")


def _replace(record: RunRecord, **changes: Any) -> RunRecord:
    return dataclasses.replace(record, **changes)


class RunFailedError(TracekitError, RuntimeError):
    """A run of a job that needs every run (``qualify``, closed-mode replay, ...) failed."""


@dataclass(frozen=True, slots=True)
class Execution:
    """What :func:`execute_runs` did.

    Attributes
    ----------
    records
        Every planned run and how it ended, in plan order.
    executor, workers
        The executor's name and its number of workers.
    elapsed_s
        Wall time.
    interrupted
        Ctrl-C stopped it before every run ended.
    stopped_by
        What stopped it, as the interruption said (``stopped by SIGTERM``); "" for Ctrl-C.
    """

    records: tuple[RunRecord, ...]
    executor: str
    workers: int
    elapsed_s: float
    interrupted: bool
    stopped_by: str = ""

    def count(self, status: str) -> int:
        """Runs with ``status``."""
        return sum(r.status == status for r in self.records)

    def check(self) -> None:
        """Raise when the runs did not all complete: Ctrl-C, or a failed run.

        Raises
        ------
        KeyboardInterrupt
            The execution was interrupted.
        RunFailedError
            A run failed; the message names the first one and its error.
        """
        if self.interrupted:
            # Says what stopped it (SIGTERM is not Ctrl-C).
            raise KeyboardInterrupt(self.stopped_by)
        failed = [r for r in self.records if r.status == "failed"]
        if failed:
            more = f" (and {len(failed) - 1} more run(s))" if len(failed) > 1 else ""
            raise RunFailedError(f"run {failed[0].path} failed: {failed[0].error}{more}")


def execute_runs(
    runs: Sequence[PlannedRun],
    out: str | Path,
    executor: Executor,
    *,
    progress: ProgressCallback | None = None,
    previous: Mapping[str, float] | None = None,
    finish: Callable[[Execution], None] | None = None,
    redo: bool = False,
) -> Execution:
    """Record ``runs`` below ``out`` on ``executor``, resuming what is already complete.

    The one run loop of the toolkit (sweeps, ``qualify``, the experiment matrix, closed-mode
    replay). A run whose folder holds a complete bundle (:attr:`Bundle.complete
    <tracekit.trace.bundle.Bundle.complete>`) with the planned run id is ``skipped``; an
    incomplete one is recorded again. ``out/.sweep.lock`` keeps two executions out of one
    folder, a first Ctrl-C lets running runs finish, and unfinished bundles are removed.

    Parameters
    ----------
    runs
        The plan, in execution order.
    out
        The output folder (created if needed).
    executor
        From :func:`tracekit.sweep.executors.make_executor`.
    progress
        Receives a :class:`~tracekit.sweep.progress.ProgressSnapshot` at every event.
    previous
        Durations of complete runs from an earlier execution, by path (for their records).
    finish
        Called with the execution before the lock is released (to write summary files).
    redo
        Record complete runs again too (``experiment run --overwrite``): each bundle is
        replaced once its new one is complete.

    Returns
    -------
    Execution
        Every run's record; ``interrupted`` when Ctrl-C stopped it (nothing is raised).

    Raises
    ------
    tracekit.errors.ConfigError
        ``out`` is a file or another execution holds its lock, or a complete bundle holds
        another run than planned.
    """
    refuse_in_bootstrap()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: is a file; pass a folder for --out")
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    roots = sorted({out / run.path.split("/", 1)[0] for run in runs})
    with sweep_lock(out):
        # The folders there before this execution: the user's own empty folders are kept.
        keep = frozenset().union(*(existing_folders(root) for root in roots))
        _remove_partials(roots)
        records, tasks = _resume(runs, out, previous or {}, redo=redo)
        skipped = sum(r.status == "skipped" for r in records)
        counter = ProgressCounter(len(records), skipped, progress)
        tracker = _Tracker(records, counter)
        counter.emit("start")
        interrupted = False
        stopped_by = ""
        with interrupt_guard(tracker.stopping) as requested:
            try:
                executor.run(tasks, out, tracker, requested)
            except KeyboardInterrupt as stop:
                interrupted, stopped_by = True, str(stop)
            except BaseException:
                _remove_partials(roots, keep)
                raise
            # A Ctrl-C that came as the last run finished interrupted nothing.
            stopped = interrupted or requested()
            interrupted = stopped and any(r.status == "pending" for r in records)
            _remove_partials(roots, keep)
            execution = Execution(
                records=tuple(
                    _replace(r, status="interrupted") if r.status == "pending" else r
                    for r in records
                ),
                executor=executor.name,
                workers=executor.workers,
                elapsed_s=time.perf_counter() - start,
                interrupted=interrupted,
                stopped_by=stopped_by,
            )
            if finish is not None:
                finish(execution)
    counter.running = 0  # runs aborted by a second Ctrl-C never reported back
    counter.emit("end")
    return execution


def _remove_partials(roots: Sequence[Path], keep: frozenset[Path] | None = None) -> None:
    for root in roots:
        remove_partials(root, keep)


def _resume(
    runs: Sequence[PlannedRun], out: Path, previous: Mapping[str, float], *, redo: bool = False
) -> tuple[list[RunRecord], list[SweepTask]]:
    """Records of every run (complete ones ``skipped``, unless ``redo``) and the tasks to run."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    records: list[RunRecord] = []
    tasks: list[SweepTask] = []
    for index, run in enumerate(runs):
        state, found = bundle_state(out / run.path)
        if state == "complete" and found != run.run_id and not redo:
            raise ConfigError(
                f"{out / run.path}: holds run {found}, but the matrix now gives {run.run_id} "
                "there (a workload, engine or policy value changed); use a new --out or delete "
                "that folder to re-run it"
            )
        status = "skipped" if state == "complete" and not redo else "pending"
        records.append(
            RunRecord(
                path=run.path,
                run_id=run.run_id,
                workload=run.workload,
                rate=run.rate,
                strategy=run.strategy,
                config=run.config,
                repeat=run.repeat,
                seed=run.seed,
                status=status,
                duration_s=previous.get(run.path) if status == "skipped" else None,
            )
        )
        if status == "pending":
            task = SweepTask(index, run.path, run.run, run.run_id, state != "missing", epoch)
            tasks.append(dataclasses.replace(task, recorder=run.recorder, sidecar=run.sidecar))
    return records, tasks
