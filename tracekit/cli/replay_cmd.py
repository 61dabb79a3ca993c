"""``tracekit replay``: open and closed mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import (
    CONTEXT_SETTINGS,
    ignored_option,
    library_errors,
    option_given,
    out_option,
    overwrite_option,
    trace_argument,
)
from tracekit.cli.options import Progress
from tracekit.cli.output import echo_json, echo_table, emit, output_options
from tracekit.cli.params import JOBS, SEED, Choice, count, deprecated_alias, jobs_option

if TYPE_CHECKING:
    import polars as pl

    from tracekit.trace.text import Align

#: The options one mode alone reads (parameter name: the mode).
_MODE_OPTIONS = {"host_path": "closed", "limit": "open", "reference": "open"}


@click.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@click.option(
    "--strategy",
    "strategies",
    required=True,
    help="Comma-separated strategies (builtin, bidkv, pe, ..., module:Object) or all.",
)
@click.option(
    "--mode",
    type=Choice(["open", "closed"]),
    default="open",
    show_default=True,
    help="open: every strategy on the recorded decisions; closed: re-simulate each run.",
)
@click.option("--policy-config", default=None, metavar="JSON|@FILE")
@click.option("--seed", type=SEED, default=0, show_default=True)
@out_option(required=True)
@overwrite_option("a folder replay wrote")
@click.option(
    "--host",
    "host_path",
    type=Choice(["typed", "legacy"]),
    default="typed",
    show_default=True,
    help="Closed mode: the contract the policies are called through.",
)
@jobs_option("replaying runs (open) or re-simulating them (closed) in parallel")
@deprecated_alias("--workers", "--jobs", "jobs", type=JOBS)
@click.option("--limit", type=count(), default=None, help="Open mode: first N.")
@click.option(
    "--reference", is_flag=True, help="Open mode: the plain controller loop only (no fast path)."
)
@output_options("summary")
def replay(**options: Any) -> None:
    """Replay TRACE through other strategies (docs/replay.md)."""
    from tracekit.replay import replay_closed, replay_open
    from tracekit.strategies import parse_policy_config, parse_strategy_list
    from tracekit.sweep.executors import default_jobs
    from tracekit.trace.bundle import open_trace
    from tracekit.trace.validate import check_readable

    with library_errors():
        mode = options["mode"]
        for name, needed in _MODE_OPTIONS.items():
            if needed != mode and option_given(name):
                option = "--host" if name == "host_path" else f"--{name}"
                raise ignored_option(option, f"--mode {needed}", f"--mode {mode}")
        for bundle in open_trace(options["trace"]):
            check_readable(bundle)
        policy_config = parse_policy_config(options["policy_config"])
        specs = parse_strategy_list(options["strategies"], policy_config, seed=options["seed"])
        if options["mode"] == "closed":
            closed = replay_closed(
                options["trace"], specs, options["out"], host_path=options["host_path"],
                progress=lambda label: Progress(f"replay {label}"), jobs=options["jobs"],
                overwrite=options["overwrite"],
            )  # fmt: skip
            columns = [
                "recorded_run_id", "strategy", "throughput_rps", "e2e_p95_s", "preemptions",
                "throughput_rps_change_pct", "e2e_p95_s_change_pct",
            ]  # fmt: skip
            if options["as_json"]:
                echo_json(
                    {"mode": "closed", "out": str(closed.out),
                     "summary": closed.summary.to_dicts()}
                )  # fmt: skip
            else:
                echo_table(_closed_rows(closed.summary.select(columns)), align=ALIGN)
                click.echo(f"wrote {closed.out}")
            return
        result = replay_open(
            options["trace"], specs, options["out"], fast=not options["reference"],
            workers=options["jobs"] or default_jobs(), limit=options["limit"],
            progress=Progress("replay"), overwrite=options["overwrite"],
        )  # fmt: skip
        emit(
            options["as_json"],
            lambda: {
                "mode": "open", "out": str(result.out_dir), "decisions": result.decisions,
                "evaluations": result.evaluations, "elapsed_s": result.elapsed_s,
                "summary": result.summary.to_dicts(),
                "failures": [str(failure) for failure in result.failures],
            },
            lambda: result.text,
        )  # fmt: skip


HEADER = ("run", "strategy", "throughput_rps", "e2e_p95_s", "preemptions", "throughput", "e2e_p95")
ALIGN: tuple[Align, ...] = ("left", "left", "right", "right", "right", "right", "right")


def _closed_rows(frame: pl.DataFrame) -> list[tuple[str, ...]]:
    """Closed replay's summary as text: the two changes as signed percentages to 0.01 %.

    A plain table, not polars' (its shape line and dtype row were noise), and a change of the
    last bit prints as +0.00 %, never as -1.1102e-14.
    """

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{round(value, 2) + 0.0:+.2f}%"

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    rows = [HEADER]
    for run, strategy, rps, p95, preemptions, d_rps, d_p95 in frame.iter_rows():
        rows.append((run, strategy, num(rps), num(p95), str(preemptions), pct(d_rps), pct(d_p95)))
    return rows
