"""The ``tracekit`` command line: thin click commands over library functions.

Each command parses its options, calls one library function, and renders the result. Library
errors (``TracekitError``) become a one-line error here and nowhere else. One module per
command family; this module assembles the group from a registry, so that a command's module is
imported only when that command is looked up: ``tracekit --help`` imports click and this
package only. A command module imports its library (polars, DuckDB, altair, the engine) in the
command's body, and its options read ``tracekit.defaults`` and ``tracekit.engine_options``
only, so that a command's own ``--help`` and its usage errors import no library either
(docs/index.md, "Conventions"; ``tests/test_cli_lazy.py``).
"""

from __future__ import annotations

import click

from tracekit import __version__
from tracekit.cli.common import CONTEXT_SETTINGS, FixHintGroup, exit_status_help
from tracekit.cli.lazy import LazyCommand, LazyGroup

__all__ = ["cli"]

# name -> where the command lives and the first paragraph of its help (the listing's summary;
# tests/test_cli_lazy.py checks each against the command itself).
COMMANDS = {
    "accuracy": LazyCommand(
        "tracekit.cli.accuracy_cmd:accuracy",
        "Compare measured RESULTS (repeats of one configuration) with their simulation.",
    ),
    "calibrate": LazyCommand(
        "tracekit.cli.calibrate_cmd:calibrate",
        "Fit a step-time model to the measured step durations of TRACES (docs/latency.md).",
    ),
    "capacity": LazyCommand(
        "tracekit.cli.capacity_cmd:capacity",
        "Find the largest request rate at which the built-in policy meets the SLO target.",
    ),
    "diff": LazyCommand(
        "tracekit.cli.diff_cmd:diff",
        "Compare LEGACY and TYPED recordings of the same runs (legacy vs typed host).",
    ),
    "experiment": LazyCommand(
        "tracekit.cli.experiment_cmd:experiment",
        "Re-run the original BidKV experiments on the embedded engine (docs/experiments.md).",
    ),
    "fidelity": LazyCommand(
        "tracekit.cli.vllm_cmd:fidelity",
        "Compare SIM_TRACE (record sim) with VLLM_TRACE (record vllm) of one run, step by step.",
    ),
    "inspect": LazyCommand(
        "tracekit.cli.trace_cmd:inspect",
        "Summarise TRACE: runs, decisions by outcome, preemptions per request, KV pressure.",
    ),
    "latency": LazyCommand(
        "tracekit.cli.latency_cmd:latency",
        "Step-time models (docs/latency.md); --latency SPEC on the commands that run the engine.",
    ),
    "manifest": LazyCommand(
        "tracekit.cli.manifest_cmd:manifest",
        "Validate and render extension manifests (Extension Manifest 0.2/0.3, Bundle v1).",
    ),
    "oracle": LazyCommand(  # docs/oracle.md
        "tracekit.cli.oracle_cmd:oracle",
        "Score TRACE's victim decisions against the hindsight best (docs/oracle.md).",
    ),
    "outputs": LazyCommand(
        "tracekit.cli.vllm_cmd:outputs",
        "The output-equality gate of two live recordings (record vllm --live) of one workload.",
    ),
    "qualify": LazyCommand(
        "tracekit.cli.qualify_cmd:qualify",
        "Qualify a policy end to end and write the HTML report (docs/qualify.md).",
    ),
    "query": LazyCommand(
        "tracekit.cli.trace_cmd:query", "Run a read-only SQL SELECT over TRACE with DuckDB."
    ),
    "replay": LazyCommand(
        "tracekit.cli.replay_cmd:replay", "Replay TRACE through other strategies (docs/replay.md)."
    ),
    "report": LazyCommand(
        "tracekit.cli.qualify_cmd:report",
        "Render the offline HTML report and qualification.json of a qualify or sweep folder.",
    ),
    "sweep": LazyCommand(
        "tracekit.cli.sweep_cmd:sweep",
        "Run every run of the sweep MATRIX (TOML, docs/sweep.md) into the dataset OUT.",
    ),
    "validate": LazyCommand(
        "tracekit.cli.trace_cmd:validate",
        "Check every bundle of TRACE against the schema and the trace invariants.",
    ),
}

RECORD_COMMANDS = {
    "import": LazyCommand(
        "tracekit.cli.record_cmd:record_import",
        "Convert the original BidKV's preemption-event JSONL or decision snapshots to a bundle.",
    ),
    "sglang": LazyCommand(
        "tracekit.cli.sglang_cmd:record_sglang_command",
        "Run a workload through SGLang 0.5.23's scheduling objects (CPU, no weights); record it.",
    ),
    "sim": LazyCommand(
        "tracekit.cli.record_cmd:record_sim_command",
        "Run a workload through the embedded engine and record a trace bundle.",
    ),
    "vllm": LazyCommand(
        "tracekit.cli.vllm_cmd:record_vllm_command",
        "Run a workload through the real vLLM scheduler (CPU, no weights) and record a bundle.",
    ),
}


class CommandLine(FixHintGroup, LazyGroup):
    """The ``tracekit`` group: lazily imported commands whose usage errors end with the fix."""


@click.group(
    cls=CommandLine,
    context_settings=CONTEXT_SETTINGS,
    lazy_commands=COMMANDS,
    help="Replay, compare and qualify KV-cache preemption policies on scheduler traces.\n\n"
    + exit_status_help(),
)
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """The ``tracekit`` command (its help, with the exit statuses, is made above)."""


@cli.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS, lazy_commands=RECORD_COMMANDS)
def record() -> None:
    """Record decision traces (from the embedded engine, or by importing existing logs)."""
