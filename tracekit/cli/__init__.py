"""The ``tracekit`` command line: thin click commands over library functions.

Each command parses its options, calls one library function, and renders the result. Library
errors (``TracekitError``) become a one-line error here and nowhere else. One module per
command family; this module assembles the group.
"""

from __future__ import annotations

import click

from tracekit import __version__
from tracekit.cli.calibrate_cmd import calibrate
from tracekit.cli.capacity_cmd import capacity
from tracekit.cli.common import CONTEXT_SETTINGS, FixHintGroup
from tracekit.cli.diff_cmd import diff
from tracekit.cli.experiment_cmd import experiment
from tracekit.cli.latency_cmd import latency
from tracekit.cli.manifest_cmd import manifest
from tracekit.cli.oracle_cmd import oracle
from tracekit.cli.qualify_cmd import qualify, report
from tracekit.cli.record_cmd import record
from tracekit.cli.replay_cmd import replay
from tracekit.cli.sweep_cmd import sweep
from tracekit.cli.trace_cmd import inspect, query, validate
from tracekit.cli.vllm_cmd import fidelity, outputs

# Registers ``record sglang`` on the record group.
from tracekit.cli import sglang_cmd  # noqa: F401  isort: skip

__all__ = ["cli"]


@click.group(cls=FixHintGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Replay, compare and qualify KV-cache preemption policies on scheduler traces.

    Exit status of every command: 0 done; 1 a finding (validate, diff, a qualify NO-GO,
    fidelity, a sweep run, manifest validate, experiment traces --mode verify); 2 bad input (a
    missing or unreadable path, a refused --out, a bad option value, configuration or
    workload); 3 a truncated recording (validate); 130 interrupted (Ctrl-C or SIGTERM).
    """


for command in (
    manifest, validate, inspect, query, record, replay, diff, fidelity, qualify, report, sweep,
    experiment, calibrate, latency, capacity, outputs,
):  # fmt: skip
    cli.add_command(command)
cli.add_command(oracle)  # tracekit oracle (docs/oracle.md)
