"""``tracekit sweep``: run a matrix of closed-loop runs into one partitioned dataset.

:func:`run_sweep` expands the matrix, skips the runs whose bundles are already complete in the
sweep folder (resuming), runs the rest on an executor, and writes ``cells.parquet`` and
``sweep.json``::

    DIR/
      runs/workload=W/rate=R/strategy=S/config=C/repeat=K/   one trace bundle per run
      cells.parquet                                          one row per run and cell
      sweep.json                                             matrix, seeds, per-run status

A failing run is recorded with its error and the others go on. A first Ctrl-C lets the running
runs finish and starts nothing new; a second one aborts them. Either way no unfinished bundle is
left behind, and re-running the same command completes the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit import __version__, safe_output
from tracekit.analysis.cells import CellRun, cells_frame
from tracekit.errors import ConfigError
from tracekit.sweep.execute import Execution, RunRecord, execute_runs
from tracekit.sweep.executors import Executor, make_executor, refuse_in_bootstrap
from tracekit.sweep.matrix import load_matrix
from tracekit.sweep.plan import RUNS_DIR, SweepPlan, plan_sweep
from tracekit.sweep.progress import ProgressCallback
from tracekit.trace.bundle import find_bundle_dirs
from tracekit.trace.timestamps import utc_now_iso

__all__ = [
    "CELLS_FILE",
    "SWEEP_FILE",
    "SweepInterrupted",
    "SweepResult",
    "execute_plan",
    "run_sweep",
]

CELLS_FILE = "cells.parquet"
SWEEP_FILE = "sweep.json"
SWEEP_FORMAT = "tracekit.sweep"
COMMAND = "tracekit sweep"
# The marker file of a sweep folder, written when the sweep creates (or adopts) it.
MARKER = ".tracekit-sweep"


def _sweep_folder(folder: Path) -> str | None:
    """None if a sweep wrote ``folder`` (its marker, or an older sweep's sweep.json)."""
    if (folder / MARKER).is_file():
        return None
    try:
        payload = json.loads((folder / SWEEP_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        payload = None
    if isinstance(payload, dict) and payload.get("format") == SWEEP_FORMAT:
        return None
    return f"not a sweep folder (no {MARKER} file) and not empty"


SWEEP_MARK = safe_output.Mark(COMMAND, _sweep_folder)
# Leading columns of cells.parquet: cells_frame's, then the sweep's partition columns.
CELL_LEADING = (
    "repeat", "strategy", "host_path", "run_id", "bundle", "cell", "workload", "rate", "config",
    "engine", "policy", "rate_unit", "rate_scale", "seed",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep did.

    Attributes
    ----------
    out
        The sweep folder.
    runs
        Every run of the matrix, in plan order.
    cells_path
        ``cells.parquet`` (``None`` when no run is complete).
    sweep_path
        ``sweep.json``.
    executor
        ``serial``, ``processes`` or ``ray``.
    elapsed_s
        Wall time of this sweep.
    interrupted
        Whether it was stopped before every run ended.
    """

    out: Path
    runs: tuple[RunRecord, ...]
    cells_path: Path | None
    sweep_path: Path
    executor: str
    elapsed_s: float
    interrupted: bool
    extra_bundles: tuple[str, ...] = ()

    def count(self, status: str) -> int:
        """Runs with ``status``."""
        return sum(r.status == status for r in self.runs)

    @property
    def failed(self) -> list[RunRecord]:
        """The failed runs."""
        return [r for r in self.runs if r.status == "failed"]

    @property
    def exit_code(self) -> int:
        """0 when every run is complete, 1 when a run failed, 130 when interrupted."""
        if self.interrupted:
            return 130
        return 1 if self.failed else 0

    def render(self) -> str:
        """A summary: counts, the output files and every failed run with its error."""
        counts = ", ".join(
            f"{self.count(s)} {s}" for s in ("done", "skipped", "failed", "interrupted")
        )
        lines = [f"{self.out}: {len(self.runs)} runs: {counts} ({self.executor})"]
        if self.cells_path is not None:
            lines.append(f"wrote {self.cells_path}")
        lines.append(f"wrote {self.sweep_path}")
        for run in self.failed:
            lines.append(f"FAILED {run.path}: {run.error}")
        if self.extra_bundles:
            lines.append(
                f"note: {len(self.extra_bundles)} bundle(s) under {RUNS_DIR}/ are not in the "
                "matrix (an earlier matrix?); readers of the folder see them too"
            )
        if self.interrupted:
            lines.append("interrupted: re-run the same command to complete the remaining runs")
        elif self.failed:
            lines.append(f"{len(self.failed)} run(s) failed; fix them and re-run to retry them")
        return "\n".join(lines)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the sweep; ``result`` says what completed (``sweep.json`` is written).

    ``stopped_by`` says what stopped it (``stopped by SIGTERM``; ``interrupted by Ctrl-C``).
    """

    def __init__(self, result: SweepResult, stopped_by: str = "") -> None:
        super().__init__("sweep interrupted")
        self.result = result
        self.stopped_by = stopped_by or "interrupted by Ctrl-C"


def run_sweep(
    matrix_path: str | Path,
    out: str | Path,
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
    progress: ProgressCallback | None = None,
) -> SweepResult:
    """Run every run of a sweep matrix into the sweep folder ``out`` (resuming it if present).

    Parameters
    ----------
    matrix_path
        The TOML matrix (``docs/sweep.md``).
    out
        The sweep folder; created, or resumed when it holds an earlier sweep of the matrix.
    jobs
        Local worker processes (default: the number of cores; 1 runs in this process). With
        ``ray_address``: the most runs in flight (default: the cluster's CPUs).
    ray_address
        Run on Ray instead: ``auto``, ``local`` or a cluster address (needs the ``ray`` extra).
    progress
        Receives a :class:`~tracekit.sweep.progress.ProgressSnapshot` at every event (the
        command line passes :class:`~tracekit.sweep.progress.StderrProgress`).

    Returns
    -------
    SweepResult
        Every run's status; ``exit_code`` is 1 when a run failed.

    Raises
    ------
    tracekit.errors.ConfigError
        A bad matrix, ``--jobs`` or Ray address, a sweep folder another sweep is writing, or a
        complete bundle that the matrix no longer gives (the matrix changed).
    SweepInterrupted
        Ctrl-C stopped the sweep (after writing ``cells.parquet`` and ``sweep.json``).
    """
    refuse_in_bootstrap()  # a spawned worker re-running an unguarded script
    plan = plan_sweep(load_matrix(matrix_path))
    created = not Path(out).exists()
    try:
        return execute_plan(plan, out, make_executor(jobs, ray_address), progress=progress)
    except ConfigError:
        # A sweep refused before any run (an unguarded script's workers, a bad executor) leaves
        # no empty sweep folder of its own making behind.
        if created:
            with contextlib.suppress(OSError):
                (Path(out) / MARKER).unlink()
                Path(out).rmdir()
        raise


def execute_plan(
    plan: SweepPlan,
    out: str | Path,
    executor: Executor,
    *,
    progress: ProgressCallback | None = None,
    redo: bool = False,
) -> SweepResult:
    """Run an expanded plan on ``executor`` (what :func:`run_sweep` does after parsing).

    Parameters
    ----------
    plan
        From :func:`tracekit.sweep.plan.plan_sweep`.
    out
        The sweep folder.
    executor
        From :func:`tracekit.sweep.executors.make_executor`.
    progress
        Progress callback (see :func:`run_sweep`).
    redo
        Record the complete runs again too (``sweep --overwrite``), each bundle replaced once
        its new one is complete; otherwise they are kept (the folder is resumed).

    Returns
    -------
    SweepResult
        As :func:`run_sweep`.
    """
    out = Path(out)
    # docs/guarantees.md, "Safe output": a sweep writes only into a new or empty folder or one
    # a sweep wrote (its marker file), never into a bundle or a folder holding its inputs.
    inputs = [plan.matrix.path, *(w.path for w in plan.matrix.workloads)]
    safe_output.check_folder_output(out, mark=SWEEP_MARK, inputs=inputs, resume=True)
    safe_output.make_marked_folder(out, MARKER, COMMAND)
    results: list[SweepResult] = []

    def finish(execution: Execution) -> None:
        cells_path = _write_cells(plan, execution.records, out)
        result = SweepResult(
            out=out,
            runs=execution.records,
            cells_path=cells_path,
            sweep_path=out / SWEEP_FILE,
            executor=execution.executor,
            elapsed_s=execution.elapsed_s,
            interrupted=execution.interrupted,
            extra_bundles=_extra_bundles(plan, out),
        )
        _write_sweep_json(plan, result, executor)
        results.append(result)

    previous = _previous_durations(out / SWEEP_FILE) if out.is_dir() else {}
    execution = execute_runs(
        plan.runs, out, executor, progress=progress, previous=previous, finish=finish, redo=redo
    )
    (result,) = results
    if result.interrupted:
        raise SweepInterrupted(result, execution.stopped_by)
    return result


def _extra_bundles(plan: SweepPlan, out: Path) -> tuple[str, ...]:
    """Bundles below ``runs/`` that the matrix does not give (left by an earlier matrix)."""
    expected = {run.path for run in plan.runs}
    root = out / RUNS_DIR
    found = find_bundle_dirs(root) if root.is_dir() else []
    return tuple(p for p in (f.relative_to(out).as_posix() for f in found) if p not in expected)


def _previous_durations(path: Path) -> dict[str, float]:
    try:
        payload = json.loads(path.read_text("utf-8"))
        return {
            r["path"]: float(r["duration_s"])
            for r in payload["runs"]
            if r.get("duration_s") is not None and r.get("status") in ("done", "skipped")
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _write_cells(plan: SweepPlan, records: Sequence[RunRecord], out: Path) -> Path | None:
    """``cells.parquet``: every complete run, once per cell it belongs to."""
    complete = {i for i, r in enumerate(records) if r.status in ("done", "skipped")}
    frames = []
    for cell in plan.cells:
        runs = [
            CellRun(
                plan.runs[i].repeat, plan.runs[i].seed, plan.runs[i].strategy, out / records[i].path
            )
            for i in cell.runs
            if i in complete
        ]
        if not runs:
            continue
        frame = cells_frame(out, runs, cell.label, plan.matrix.slo).with_columns(
            pl.lit(cell.workload).alias("workload"),
            pl.lit(cell.rate).alias("rate"),
            pl.lit(cell.config).alias("config"),
            pl.lit(cell.engine).alias("engine"),
            pl.lit(cell.policy.describe).alias("policy"),
            pl.lit(plan.matrix.rate_unit).alias("rate_unit"),
            pl.lit(cell.rate_scale).alias("rate_scale"),
        )
        frames.append(frame.select(*CELL_LEADING, pl.exclude(CELL_LEADING)))
    path = out / CELLS_FILE
    if not frames:
        path.unlink(missing_ok=True)
        return None
    with safe_output.replacing(path) as staging:
        pl.concat(frames, how="vertical_relaxed").write_parquet(staging, compression="zstd")
    return path


def _write_sweep_json(plan: SweepPlan, result: SweepResult, executor: Executor) -> None:
    matrix = plan.matrix
    payload = {
        "format": SWEEP_FORMAT,
        "version": 1,
        "tool_version": __version__,
        "created_at": utc_now_iso(),
        "matrix": matrix.to_dict(),
        # The fields the qualification report reads from qualify.json, for `tracekit report`.
        "strategies": list(matrix.strategies),
        "candidate": matrix.candidate,
        "repeats": matrix.repeats,
        "repeat_kind": matrix.repeat_kind,
        "seed": matrix.seed,
        "slo": matrix.to_dict()["slo"],
        "executor": {"name": executor.name, "workers": executor.workers},
        "plan": plan.to_dict(),
        "summary": {s: result.count(s) for s in ("done", "skipped", "failed", "interrupted")},
        "interrupted": result.interrupted,
        "extra_bundles": list(result.extra_bundles),
        "elapsed_s": round(result.elapsed_s, 3),
        "runs": [
            {
                **dataclasses.asdict(r),
                "cells": list(plan.runs[i].cells),
                "engine": plan.runs[i].engine,
                "policy": plan.runs[i].policy,
            }
            for i, r in enumerate(result.runs)
        ],
    }
    safe_output.write_json(result.sweep_path, payload)
