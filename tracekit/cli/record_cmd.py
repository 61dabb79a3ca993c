"""``tracekit record import|sim``: making traces (``record vllm`` is in ``cli.vllm``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import (
    Progress,
    engine_options,
    load_options,
    load_settings,
    oversize_option,
    policy_options,
    run_inputs,
    warn_rejections,
    workload_options,
)
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import Choice
from tracekit.defaults import EVENT_STRATEGIES


def emit_bundle(bundle: Path, as_json: bool, text: Callable[[], str] | None = None) -> None:
    """Print a recorded bundle: its inspection, or ``{"bundle": path, "runs": [...]}`` as JSON.

    ``runs`` is the list ``tracekit inspect --json`` prints.
    """
    from tracekit.trace.inspect import inspect_trace, render_inspection

    runs = inspect_trace(bundle)
    emit(
        as_json,
        lambda: {"bundle": str(bundle), "runs": runs},
        text or (lambda: render_inspection(runs)),
    )


@click.command("import", context_settings=CONTEXT_SETTINGS)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@out_option(required=True, help="Bundle to create.")
@click.option(
    "--kind",
    type=Choice(["preemption-events", "snapshots"]),
    default=None,
    help="What FILE holds (default: detected from its first record).",
)
@click.option(
    "--applied-strategy",
    type=Choice(EVENT_STRATEGIES),
    default="pe-lifo",
    show_default=True,
    help="For preemption events: the strategy the engine ran (pe-lifo = vLLM built-in).",
)
@overwrite_option("a trace bundle")
@output_options("bundle path and its inspection")
def record_import(
    file: Path, out: Path, kind: str | None, applied_strategy: str, overwrite: bool, as_json: bool
) -> None:
    """Convert the original BidKV's preemption-event JSONL or decision snapshots to a bundle."""
    from tracekit.recording.importer import import_logs

    with library_errors():
        bundle = import_logs(
            file, out, kind=kind, applied_strategy=applied_strategy, overwrite=overwrite
        )
    emit_bundle(bundle, as_json, lambda: f"wrote {bundle}")


@click.command("sim", context_settings=CONTEXT_SETTINGS)
@workload_options
@oversize_option
@load_options
@engine_options
@click.option(
    "--strategy",
    default="builtin",
    show_default=True,
    help="builtin, a policy strategy (bidkv, pe, static-random, ...) or module:Object.",
)
@policy_options
@click.option("--record-scheduled", is_flag=True, help="Also record tokens per request per step.")
@out_option(required=True, help="Bundle to create.")
@overwrite_option("a trace bundle")
@output_options("bundle path and its inspection")
def record_sim_command(**options: Any) -> None:
    """Run a workload through the embedded engine and record a trace bundle."""
    from tracekit.recording.sim import SimRun, record_sim
    from tracekit.strategies import parse_policy_config, resolve_strategy
    from tracekit.workloads.load_spec import apply_load

    with library_errors():
        config, workload = run_inputs(options)
        workload = apply_load(workload, load_settings(options), seed=options["seed"])
        warn_rejections(workload, config)
        policy_config = parse_policy_config(options["policy_config"])
        strategy = resolve_strategy(options["strategy"], policy_config, seed=options["seed"])
        run = SimRun(workload, config, strategy, options["host_path"], options["seed"])
        bundle = record_sim(
            run,
            options["out"],
            record_scheduled=bool(options["record_scheduled"]),
            progress=Progress(f"record {strategy.name}"),
            overwrite=options["overwrite"],
            stop_on_signals=True,
        )
        emit_bundle(bundle, options["as_json"])
