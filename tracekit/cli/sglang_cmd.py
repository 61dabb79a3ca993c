"""``tracekit record sglang``: record a workload from SGLang 0.5.23's real scheduling objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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

F = TypeVar("F", bound=Callable[..., Any])

_DEFAULT = SglangConfig()

#: The option that sets each SglangConfig field named otherwise (the rest share their names;
#: max_steps has no option).
_OPTION_OF = {"max_context_len": "context_length"}


def _setting(flag: str, kind: Any, default: Any, help: str) -> Callable[[F], F]:
    """An SGLang setting whose default ``--help`` shows (``kind`` None: click's guess)."""
    return click.option(flag, type=kind, default=default, show_default=True, help=help)


def _switch(flag: str, help: str) -> Callable[[F], F]:
    """An SGLang flag that is off unless given."""
    return click.option(flag, is_flag=True, default=False, help=help)


@click.command("sglang", context_settings=CONTEXT_SETTINGS)
@workload_options
@_setting(
    "--kv-tokens",
    count(),
    _DEFAULT.kv_tokens,
    "Size of the KV token pool (page size 1).",
)
@click.option(
    "--max-running-requests",
    type=count(),
    default=None,
    help="SGLang --max-running-requests (default SGLang's, derived from the pool and the "
    f"context length: {_DEFAULT.max_running_requests} with the default ones).",
)
@_setting(
    "--chunked-prefill-size",
    count(0),
    _DEFAULT.chunked_prefill_size,
    "SGLang --chunked-prefill-size (SGLang's default on the A6000); 0 turns chunking off.",
)
@_setting(
    "--max-prefill-tokens",
    count(),
    _DEFAULT.max_prefill_tokens,
    "SGLang --max-prefill-tokens: the prefill token budget of one step.",
)
@_setting(
    "--context-length",
    count(2),
    _DEFAULT.max_context_len,
    "SGLang --context-length; prompts of min(context, pool) - 6 tokens or more are rejected.",
)
@_setting(
    "--radix-cache/--no-radix-cache",
    None,
    _DEFAULT.radix_cache,
    "SGLang's radix cache (on by default in SGLang; --no-radix-cache is --disable-radix-cache).",
)
@_setting(
    "--retraction-policy",
    Choice(RETRACTION_POLICIES),
    _DEFAULT.retraction_policy,
    "SGLang --retraction-policy (priority needs --enable-priority-scheduling).",
)
@_setting(
    "--overlap-schedule/--disable-overlap-schedule",
    None,
    _DEFAULT.overlap_schedule,
    "SGLang's overlap event loop (its default), or its normal loop.",
)
@_setting(
    "--enable-priority-scheduling/--no-enable-priority-scheduling",
    None,
    _DEFAULT.enable_priority_scheduling,
    "SGLang --enable-priority-scheduling: the waiting queue by priority, then arrival "
    "(off by default, as in SGLang).",
)
@_switch(
    "--schedule-low-priority-values-first",
    "SGLang --schedule-low-priority-values-first (off: a larger value is more important).",
)
@_switch(
    "--disable-priority-preemption",
    "SGLang --disable-priority-preemption (off: priority scheduling preempts running "
    "requests at admission).",
)
@_setting(
    "--priority-scheduling-preemption-threshold",
    engine_range("priority_scheduling_preemption_threshold"),
    _DEFAULT.priority_scheduling_preemption_threshold,
    "SGLang --priority-scheduling-preemption-threshold.",
)
@_switch(
    "--ignore-eos",
    "Send every request with ignore_eos (it runs to its max_tokens), as SGLang's "
    "bench_serving does by default.",
)
@_setting(
    "--schedule-policy",
    Choice(SCHEDULE_POLICIES),
    _DEFAULT.schedule_policy,
    "SGLang --schedule-policy.",
)
@_setting(
    "--step-s",
    engine_range("step_s"),
    _DEFAULT.step_s,
    "Seconds per step of the steps clock that places arrivals.",
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
                **{
                    field.name: options[_OPTION_OF.get(field.name, field.name)]
                    for field in dataclasses.fields(SglangConfig)
                    if _OPTION_OF.get(field.name, field.name) in options
                }
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
