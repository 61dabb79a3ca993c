"""``tracekit record sglang``: record a workload from SGLang 0.5.23's real scheduling objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import Progress, engine_range, workload_options, workload_settings
from tracekit.cli.output import output_options
from tracekit.cli.params import Choice, count
from tracekit.cli.record_cmd import emit_bundle
from tracekit.engine.config import RETRACTION_POLICIES
from tracekit.errors import ConfigError
from tracekit.real_engine.environment import SGLANG
from tracekit.recording.sim import load_run_workload
from tracekit.sglang.protocol import SCHEDULE_POLICIES, SglangConfig
from tracekit.sglang.record import record_sglang
from tracekit.workloads import apply_ignore_eos

_DEFAULT = SglangConfig()


@click.command("sglang", context_settings=CONTEXT_SETTINGS)
@workload_options
@click.option(
    "--kv-tokens",
    type=count(),
    default=_DEFAULT.kv_tokens,
    show_default=True,
    help="Size of the KV token pool (page size 1).",
)
@click.option(
    "--max-running-requests",
    type=count(),
    default=None,
    help="SGLang --max-running-requests (default SGLang's, derived from the pool and the "
    f"context length: {_DEFAULT.max_running_requests} with the default ones).",
)
@click.option(
    "--chunked-prefill-size",
    type=count(0),
    default=_DEFAULT.chunked_prefill_size,
    show_default=True,
    help="SGLang --chunked-prefill-size (SGLang's default on the A6000); 0 turns chunking off.",
)
@click.option(
    "--max-prefill-tokens",
    type=count(),
    default=_DEFAULT.max_prefill_tokens,
    show_default=True,
    help="SGLang --max-prefill-tokens: the prefill token budget of one step.",
)
@click.option(
    "--context-length",
    type=count(2),
    default=_DEFAULT.max_context_len,
    show_default=True,
    help="SGLang --context-length; prompts of min(context, pool) - 6 tokens or more are rejected.",
)
@click.option(
    "--radix-cache/--no-radix-cache",
    default=_DEFAULT.radix_cache,
    show_default=True,
    help="SGLang's radix cache (on by default in SGLang; --no-radix-cache is "
    "--disable-radix-cache).",
)
@click.option(
    "--retraction-policy",
    type=Choice(RETRACTION_POLICIES),
    default=_DEFAULT.retraction_policy,
    show_default=True,
    help="SGLang --retraction-policy (priority needs --enable-priority-scheduling).",
)
@click.option(
    "--overlap-schedule/--disable-overlap-schedule",
    default=_DEFAULT.overlap_schedule,
    show_default=True,
    help="SGLang's overlap event loop (its default), or its normal loop.",
)
@click.option(
    "--enable-priority-scheduling",
    is_flag=True,
    default=False,
    help="SGLang --enable-priority-scheduling: the waiting queue by priority, then arrival.",
)
@click.option(
    "--schedule-low-priority-values-first",
    is_flag=True,
    default=False,
    help="SGLang --schedule-low-priority-values-first (off: a larger value is more important).",
)
@click.option(
    "--disable-priority-preemption",
    is_flag=True,
    default=False,
    help="SGLang --disable-priority-preemption (off: priority scheduling preempts running "
    "requests at admission).",
)
@click.option(
    "--priority-scheduling-preemption-threshold",
    type=engine_range("priority_scheduling_preemption_threshold"),
    default=_DEFAULT.priority_scheduling_preemption_threshold,
    show_default=True,
    help="SGLang --priority-scheduling-preemption-threshold.",
)
@click.option(
    "--ignore-eos",
    is_flag=True,
    default=False,
    help="Send every request with ignore_eos (it runs to its max_tokens), as SGLang's "
    "bench_serving does by default.",
)
@click.option(
    "--schedule-policy",
    type=Choice(SCHEDULE_POLICIES),
    default=_DEFAULT.schedule_policy,
    show_default=True,
    help="SGLang --schedule-policy.",
)
@click.option(
    "--step-s",
    type=engine_range("step_s"),
    default=_DEFAULT.step_s,
    show_default=True,
    help="Seconds per step of the steps clock that places arrivals.",
)
@click.option(
    "--sglang-venv",
    type=click.Path(path_type=Path),
    default=None,
    help=SGLANG.venv_help,
)
@out_option(required=True, help="Bundle to create.")
@overwrite_option("a trace bundle")
@output_options("bundle path and its inspection")
def record_sglang_command(**options: Any) -> None:
    """Run a workload through SGLang 0.5.23's scheduling objects (CPU, no weights); record it.

    Needs the environment made by scripts/install-sglang-cpu.sh (see docs/sglang-recorder.md).
    The bundle has the steps, scheduled, decisions (one per retracted request, with the
    candidate batch), candidates and requests tables, plus sglang-steps.jsonl (every step whole)
    and sglang-scenario.json (what was run), which tracekit fidelity compares with the engine.
    """
    with library_errors():
        workload = load_run_workload(options["workload_path"], **workload_settings(options))
        if options["ignore_eos"]:
            workload = apply_ignore_eos(workload)
        try:
            config = SglangConfig(
                kv_tokens=options["kv_tokens"],
                max_running_requests=options["max_running_requests"],
                chunked_prefill_size=options["chunked_prefill_size"],
                max_prefill_tokens=options["max_prefill_tokens"],
                max_context_len=options["context_length"],
                radix_cache=options["radix_cache"],
                retraction_policy=options["retraction_policy"],
                schedule_policy=options["schedule_policy"],
                overlap_schedule=options["overlap_schedule"],
                enable_priority_scheduling=options["enable_priority_scheduling"],
                schedule_low_priority_values_first=options["schedule_low_priority_values_first"],
                disable_priority_preemption=options["disable_priority_preemption"],
                priority_scheduling_preemption_threshold=options[
                    "priority_scheduling_preemption_threshold"
                ],
                step_s=options["step_s"],
            )
        except ValueError as error:
            raise ConfigError(f"SGLang configuration: {error}") from None
        (bundle,) = record_sglang(
            [workload],
            [options["out"]],
            config=config,
            venv=options["sglang_venv"],
            progress=Progress(f"record sglang {config.retraction_policy}"),
            overwrite=options["overwrite"],
        )
        emit_bundle(bundle, options["as_json"])
