"""``tracekit sweep``: qualification matrices."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    LibraryError,
    library_errors,
    out_option,
    overwrite_option,
)
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import jobs_option

if TYPE_CHECKING:
    from tracekit.sweep import SweepResult


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("matrix", type=click.Path(dir_okay=False, path_type=Path))
@out_option(
    required=True,
    help="Sweep folder: created, or resumed (complete runs are skipped).",
)
@jobs_option(
    "running the runs",
    help="Local worker processes (default: the number of cores; 1 runs in this process). "
    "With --ray: the most runs in flight.",
)
@click.option(
    "--ray",
    "ray_address",
    default=None,
    metavar="ADDRESS",
    help='Run on Ray: auto, local, or a cluster address (pip install ".[ray]" in the checkout).',
)
@click.option("--dry-run", is_flag=True, help="Print the expanded matrix and run nothing.")
@overwrite_option("a sweep folder; every run is recorded again instead of resumed")
@output_options("summary")
def sweep(
    matrix: Path,
    out: Path,
    jobs: int | None,
    ray_address: str | None,
    dry_run: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Run every run of the sweep MATRIX (TOML, docs/sweep.md) into the dataset OUT.

    Writes OUT/runs/workload=.../rate=.../strategy=.../config=.../repeat=.../ bundles,
    OUT/cells.parquet and OUT/sweep.json. Exit status: 0 all runs complete, 1 a run failed,
    2 bad input, 130 interrupted (Ctrl-C once: running runs finish; twice: they are aborted).
    Re-run the same command to resume.
    """
    from tracekit.capacity.rejections import rejection_warnings
    from tracekit.sweep import (
        StderrProgress,
        SweepInterrupted,
        load_matrix,
        make_executor,
        plan_sweep,
    )
    from tracekit.sweep.executors import refuse_in_bootstrap
    from tracekit.sweep.run import execute_plan

    with library_errors():
        if dry_run:
            click.echo(plan_sweep(load_matrix(matrix)).render())
            return
        # Planned here (run_sweep's first step) so that rejected requests are reported first.
        refuse_in_bootstrap()
        plan = plan_sweep(load_matrix(matrix))
        configs = [engine.config for engine in plan.matrix.engines]
        for message in rejection_warnings((w.workload for w in plan.workloads), configs):
            click.echo(message, err=True)
        try:
            result = execute_plan(
                plan,
                out,
                make_executor(jobs, ray_address),
                progress=StderrProgress(),
                redo=overwrite,
            )
        except SweepInterrupted as stop:
            click.echo(stop.result.render(), err=True)
            # Every interrupted command ends with one Error: line and exit 130.
            raise LibraryError(
                f"{stop.stopped_by}; {out} keeps the complete runs: re-run the same command to "
                "finish",
                EXIT_INTERRUPTED,
            ) from None
    emit(as_json, lambda: sweep_summary(result), result.render)
    raise SystemExit(result.exit_code)


def sweep_summary(result: SweepResult) -> dict[str, Any]:
    """``sweep --json``: the counts, the files written and every failed run (docs/sweep.md)."""
    statuses = ("done", "skipped", "failed", "interrupted")
    return {
        "out": str(result.out),
        "exit_code": result.exit_code,
        "executor": result.executor,
        "elapsed_s": result.elapsed_s,
        "runs": len(result.runs),
        "counts": {status: result.count(status) for status in statuses},
        "cells": None if result.cells_path is None else str(result.cells_path),
        "sweep_json": str(result.sweep_path),
        "failed": [{"path": run.path, "error": run.error} for run in result.failed],
        "interrupted": result.interrupted,
    }
