"""``tracekit record sglang``: record a workload from SGLang 0.5.23's real scheduling objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import Progress, engine_options_of, workload_options, workload_settings
from tracekit.cli.output import output_options
from tracekit.cli.params import Choice, count
from tracekit.cli.record_cmd import emit_bundle
from tracekit.defaults import SCHEDULE_POLICIES
from tracekit.engine_options import ENGINE_OPTIONS, SGLANG_CONFIG_DEFAULTS
from tracekit.errors import ConfigError
from tracekit.real_engine.environment import SGLANG

if TYPE_CHECKING:
    from tracekit.sglang.protocol import SglangConfig

F = TypeVar("F", bound=Callable[..., Any])

#: SglangConfig's defaults (a plain copy in tracekit.engine_options, kept equal by a test).
_DEFAULT = SGLANG_CONFIG_DEFAULTS

#: The option that sets each SglangConfig field named otherwise (the rest share their names;
#: max_steps has no option).
_OPTION_OF = {"max_context_len": "context_length"}


def _setting(flag: str, kind: Any, default: Any, help: str) -> Callable[[F], F]:
    """An SGLang setting whose default ``--help`` shows (``kind`` None: click's guess)."""
    return click.option(flag, type=kind, default=default, show_default=True, help=help)


#: The SglangConfig fields that are engine settings of the same name: their options are the
#: engine's own (``ENGINE_OPTIONS``, as on ``record sim --engine-mode sglang``), unset by
#: default, which leaves SGLang's default.
ENGINE_SETTINGS = frozenset(SGLANG_CONFIG_DEFAULTS) & frozenset(
    option.field for option in ENGINE_OPTIONS
)


def sglang_config(options: dict[str, Any]) -> SglangConfig:
    """The SglangConfig of the command's options; an unset option leaves SGLang's default."""
    from tracekit.sglang.protocol import SglangConfig

    settings = {}
    for field in dataclasses.fields(SglangConfig):
        value = options.get(_OPTION_OF.get(field.name, field.name))
        if value is not None:
            settings[field.name] = value
    try:
        return SglangConfig(**settings)
    except ValueError as error:
        raise ConfigError(f"SGLang configuration: {error}") from None


@click.command("sglang", context_settings=CONTEXT_SETTINGS)
@workload_options
@_setting(
    "--kv-tokens",
    count(),
    _DEFAULT["kv_tokens"],
    "Size of the KV token pool (page size 1).",
)
@click.option(
    "--max-running-requests",
    type=count(),
    default=None,
    help="SGLang --max-running-requests (default SGLang's, derived from the pool and the "
    f"context length: {_DEFAULT['max_running_requests']} with the default ones).",
)
@_setting(
    "--max-prefill-tokens",
    count(),
    _DEFAULT["max_prefill_tokens"],
    "SGLang --max-prefill-tokens: the prefill token budget of one step.",
)
@_setting(
    "--context-length",
    count(2),
    _DEFAULT["max_context_len"],
    "SGLang --context-length; prompts of min(context, pool) - 6 tokens or more are rejected.",
)
@engine_options_of(ENGINE_SETTINGS)
@click.option(
    "--ignore-eos",
    is_flag=True,
    default=False,
    help="Send every request with ignore_eos (it runs to its max_tokens), as SGLang's "
    "bench_serving does by default.",
)
@_setting(
    "--schedule-policy",
    Choice(SCHEDULE_POLICIES),
    _DEFAULT["schedule_policy"],
    "SGLang --schedule-policy.",
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
    from tracekit.recording.sim import load_run_workload
    from tracekit.sglang.record import record_sglang
    from tracekit.workloads import apply_ignore_eos

    with library_errors():
        workload = load_run_workload(options["workload_path"], **workload_settings(options))
        if options["ignore_eos"]:
            workload = apply_ignore_eos(workload)
        config = sglang_config(options)
        (bundle,) = record_sglang(
            [workload],
            [options["out"]],
            config=config,
            venv=options["sglang_venv"],
            progress=Progress(f"record sglang {config.retraction_policy}"),
            overwrite=options["overwrite"],
        )
        emit_bundle(bundle, options["as_json"])
