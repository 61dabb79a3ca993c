"""``tracekit record sglang``: record a workload from SGLang 0.5.23's real scheduling objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import Progress, workload_options, workload_settings
from tracekit.cli.output import output_options
from tracekit.cli.record_cmd import emit_bundle, record
from tracekit.engine.config import RETRACTION_POLICIES
from tracekit.errors import ConfigError
from tracekit.recording.sim import load_run_workload
from tracekit.sglang.protocol import SCHEDULE_POLICIES, SglangConfig
from tracekit.sglang.record import record_sglang

_DEFAULT = SglangConfig()


@record.command("sglang", context_settings=CONTEXT_SETTINGS)
@workload_options
@click.option(
    "--kv-tokens",
    type=click.IntRange(min=1),
    default=_DEFAULT.kv_tokens,
    show_default=True,
    help="Size of the KV token pool (page size 1).",
)
@click.option(
    "--max-running-requests",
    type=click.IntRange(min=1),
    default=_DEFAULT.max_running_requests,
    show_default=True,
    help="SGLang --max-running-requests.",
)
@click.option(
    "--chunked-prefill-size",
    type=click.IntRange(min=0),
    default=_DEFAULT.chunked_prefill_size,
    show_default=True,
    help="SGLang --chunked-prefill-size; 0 turns chunking off.",
)
@click.option(
    "--max-prefill-tokens",
    type=click.IntRange(min=1),
    default=_DEFAULT.max_prefill_tokens,
    show_default=True,
    help="SGLang --max-prefill-tokens: the prefill token budget of one step.",
)
@click.option(
    "--context-length",
    type=click.IntRange(min=2),
    default=_DEFAULT.max_context_len,
    show_default=True,
    help="SGLang --context-length; longer prompts are rejected.",
)
@click.option(
    "--radix-cache/--no-radix-cache",
    default=True,
    show_default=True,
    help="SGLang's radix cache (on by default in SGLang; --no-radix-cache is "
    "--disable-radix-cache).",
)
@click.option(
    "--retraction-policy",
    type=click.Choice(RETRACTION_POLICIES),
    default=_DEFAULT.retraction_policy,
    show_default=True,
    help="SGLang --retraction-policy (priority also turns on priority scheduling).",
)
@click.option(
    "--schedule-policy",
    type=click.Choice(SCHEDULE_POLICIES),
    default=_DEFAULT.schedule_policy,
    show_default=True,
    help="SGLang --schedule-policy.",
)
@click.option(
    "--step-s",
    type=click.FloatRange(min=0.0, min_open=True),
    default=_DEFAULT.step_s,
    show_default=True,
    help="Seconds per step of the steps clock that places arrivals.",
)
@click.option(
    "--sglang-venv",
    type=click.Path(path_type=Path),
    default=None,
    help="The SGLang environment (default: $BIDKV_SGLANG_VENV, then "
    "~/.cache/bidkv/sglang-cpu-venv).",
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
        try:
            config = SglangConfig(
                kv_tokens=options["kv_tokens"],
                max_running_requests=options["max_running_requests"],
                chunked_prefill_size=options["chunked_prefill_size"] or None,
                max_prefill_tokens=options["max_prefill_tokens"],
                max_context_len=options["context_length"],
                radix_cache=options["radix_cache"],
                retraction_policy=options["retraction_policy"],
                schedule_policy=options["schedule_policy"],
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
