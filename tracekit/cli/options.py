"""Option bundles shared by the commands that run workloads (record, replay, qualify).

Each bundle is a decorator that adds the same flags, with the same names and help, to every
command that takes them (in the way sqlite-utils shares ``output_options``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tracekit.analysis.serving import check_slo_target
from tracekit.capacity.rejections import find_rejections
from tracekit.cli.common import EXIT_BAD_INPUT, LibraryError
from tracekit.engine.clock import COST_MODEL_PRESETS
from tracekit.engine.config import (
    CLOCKS,
    ENGINE_DEFAULTS,
    ENGINE_MODES,
    RETRACTION_POLICIES,
    SCHEDULING_POLICIES,
    SGLANG_DEFAULTS,
    VLLM_VERSIONS,
    EngineConfig,
)
from tracekit.errors import ConfigError
from tracekit.workloads import Workload
from tracekit.workloads.client import ClientModel
from tracekit.workloads.load_spec import LoadSpec

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "Progress",
    "StageProgress",
    "engine_options",
    "field_defaults",
    "latency_option",
    "paper_latency_option",
    "load_options",
    "load_settings",
    "warn_rejections",
    "policy_options",
    "workload_options",
]


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(function: F) -> F:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


def _parse_window(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    start_text, sep, end_text = value.partition(":")
    try:
        start = float(start_text or 0)
        end = float(end_text) if end_text else None
    except ValueError:
        start = end = math.nan
    ok = sep and math.isfinite(start) and start >= 0 and (end is None or end > start)
    if not ok or (end is not None and not math.isfinite(end)):
        raise click.BadParameter(
            f"expected START:END in seconds with 0 <= START < END, got {value!r}; "
            "pass e.g. --window 0:600, or --window 60: for everything after 60 s"
        )
    return (start, end)


def slo_target(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Callback of the SLO options: :func:`tracekit.analysis.serving.check_slo_target`."""
    if value is None:
        return None
    try:
        return check_slo_target(f"--{param.name.replace('_', '-')}", value)  # type: ignore[union-attr]
    except ConfigError as error:
        raise LibraryError(str(error), EXIT_BAD_INPUT) from error


workload_options = _stack(
    click.option(
        "--workload",
        "workload_path",
        type=click.Path(dir_okay=False, path_type=Path),
        required=True,
        help="Workload file (Azure CSV, Mooncake JSONL, BidKV trace, vidur CSV, CSV/Parquet).",
    ),
    click.option("--format", "workload_format", default=None, help="Override format detection."),
    click.option("--limit", type=int, default=None, help="Keep the first N requests."),
    click.option(
        "--window",
        callback=_parse_window,
        default=None,
        metavar="START:END",
        help="Keep arrivals in [START, END) seconds, re-based to 0.",
    ),
    click.option(
        "--rate-scale", type=float, default=1.0, show_default=True, help="2.0 = twice the rate."
    ),
    click.option("--priority-seed", type=int, default=None, help="Assign seeded priorities 0..2."),
    # Token content (docs/workloads.md, "Token content"): a synthetic shared prompt prefix.
    click.option(
        "--shared-prefix-tokens",
        type=int,
        default=None,
        help="Give every request a shared prompt prefix of N tokens (prefix caching).",
    ),
    click.option(
        "--prefix-groups",
        type=int,
        default=None,
        help="Number of distinct shared prefixes, drawn per request (default 1).",
    ),
    click.option(
        "--prefix-seed",
        type=int,
        default=0,
        show_default=True,
        help="Seed of the prefix-group draws.",
    ),
)


def field_defaults(cls: type) -> dict[str, Any]:
    """A dataclass's plain field defaults by name: options take their defaults from here."""
    return {
        field.name: field.default
        for field in dataclasses.fields(cls)
        if field.default is not dataclasses.MISSING
    }


def _default(field: str) -> str:
    vllm, sglang = ENGINE_DEFAULTS[field], SGLANG_DEFAULTS[field]
    if vllm == sglang:
        return f"default {vllm}"
    if field == "max_num_seqs":
        return f"default {vllm}; in sglang mode SGLang's, from the pool ({sglang} by default)"
    return f"default {vllm}; {sglang} in sglang mode"


# -- --latency: the step-time model (docs/latency.md) ------------------------------------------


#: Commands whose scheduler is not the embedded one (``record vllm``): roofline only.
_ROOFLINE_ONLY = frozenset({"vllm"})


def _parse_latency(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check a ``--latency`` value by building its model (once per process, then cached).

    Building here refuses a missing aiconfigurator-core, an unknown system or model, or a file
    that is not a step-time model before anything is written.
    """
    if value is None:
        return None
    from tracekit.latency.spec import cached_step_time_model, parse_latency_spec

    try:
        if ctx.command.name in _ROOFLINE_ONLY and parse_latency_spec(value).kind != "roofline":
            raise click.BadParameter(
                f"{value.strip()!r}: the real scheduler's adapter keeps its own requests, so "
                "its steps' make-up is unknown to a step-time model; only roofline[:PRESET] "
                "times it"
            )
        cached_step_time_model(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--latency {value.strip()!r}: ")) from None
    return value.strip()


def _parse_paper_latency(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """``--latency`` of ``experiment run``: ``aiconfigurator`` alone is the A6000 stand-in."""
    if value is not None and value.strip().lower() == "aiconfigurator":
        from tracekit.latency.spec import A6000_STAND_IN

        value = A6000_STAND_IN
    return _parse_latency(ctx, param, value)


#: ``--latency`` of ``experiment run``: the paper's RTX A6000 is not in AIConfigurator's tables,
#: so ``aiconfigurator`` names its stand-in (``tracekit.latency.spec.A6000_STAND_IN``).
paper_latency_option = click.option(
    "--latency",
    default=None,
    metavar="SPEC",
    callback=_parse_paper_latency,
    help="Step-time model: roofline (default: the A6000 roofline), aiconfigurator (the A6000's "
    "stand-in: L40S tables, Llama-3.1-8B, vLLM), any other --latency SPEC (docs/latency.md).",
)

#: ``--latency`` on every command that runs the engine (``EngineConfig.latency``).
latency_option = click.option(
    "--latency",
    default=None,
    metavar="SPEC",
    callback=_parse_latency,
    help="Step-time model: roofline[:PRESET] (default: the --cost-model preset), "
    "aiconfigurator:SYSTEM/MODEL[@BACKEND[:VERSION]] or calibrated:FILE (docs/latency.md).",
)


engine_options = _stack(
    click.option(
        "--engine-mode",
        type=click.Choice(ENGINE_MODES),
        default=ENGINE_DEFAULTS["mode"],
        show_default=True,
    ),
    click.option(
        "--num-blocks", type=int, default=None, help=f"KV blocks ({_default('num_blocks')})."
    ),
    click.option(
        "--block-size", type=int, default=None, help=f"Tokens per block ({_default('block_size')})."
    ),
    click.option(
        "--max-num-seqs",
        type=int,
        default=None,
        help=f"Running limit ({_default('max_num_seqs')}).",
    ),
    click.option(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help=f"Token budget ({_default('max_num_batched_tokens')}).",
    ),
    click.option(
        "--watermark",
        type=float,
        default=None,
        help=f"Admission watermark ({ENGINE_DEFAULTS['watermark']}).",
    ),
    click.option(
        "--max-model-len",
        type=int,
        default=None,
        help=f"Longest sequence ({_default('max_model_len')}).",
    ),
    click.option(
        "--long-prefill-token-threshold",
        type=int,
        default=None,
        help="Cap on a long prefill's chunk "
        f"({_default('long_prefill_token_threshold')}; 0 = off, vLLM's default).",
    ),
    click.option(
        "--vllm-version",
        type=click.Choice(VLLM_VERSIONS),
        default=None,
        help="vLLM release whose scheduling rules the engine follows "
        f"({_default('vllm_version')}).",
    ),
    click.option(
        "--scheduling-policy",
        type=click.Choice(SCHEDULING_POLICIES),
        default=ENGINE_DEFAULTS["scheduling_policy"],
        show_default=True,
    ),
    click.option(
        "--clock",
        type=click.Choice(CLOCKS),
        default=ENGINE_DEFAULTS["clock"],
        show_default=True,
        help="steps: fixed step time; cost-model: modelled step times (see docs/engine.md).",
    ),
    click.option(
        "--step-s",
        type=float,
        default=None,
        help=f"Step time of the steps clock ({_default('step_s')}).",
    ),
    click.option(
        "--cost-model",
        type=click.Choice(sorted(COST_MODEL_PRESETS)),
        default=None,
        help=f"Cost-model preset ({_default('cost_model')}).",
    ),
    # --- SGLang mode (see the SGLang mode section of docs/engine.md) ---
    click.option(
        "--retraction-policy",
        type=click.Choice(RETRACTION_POLICIES),
        default=None,
        help=f"SGLang mode: retraction policy ({_default('retraction_policy')}).",
    ),
    click.option(
        "--radix-cache/--no-radix-cache",
        default=None,
        help="SGLang mode: SGLang's radix cache (default on in sglang mode, as in SGLang).",
    ),
    click.option(
        "--chunked-prefill-size",
        type=int,
        default=None,
        help="SGLang mode: --chunked-prefill-size (default SGLang's for the cost model's GPU, "
        f"{SGLANG_DEFAULTS['chunked_prefill_size']} on the A6000; 0 = no chunking).",
    ),
    click.option(
        "--overlap-schedule/--disable-overlap-schedule",
        "overlap_schedule",
        default=None,
        help="SGLang mode: SGLang's overlap event loop (default on, as SGLang runs; "
        "--disable-overlap-schedule is its normal loop).",
    ),
    click.option(
        "--enable-priority-scheduling",
        is_flag=True,
        default=None,
        help="SGLang mode: SGLang's priority scheduling (the same as --scheduling-policy "
        "priority; needed by --retraction-policy priority).",
    ),
    click.option(
        "--schedule-low-priority-values-first",
        is_flag=True,
        default=None,
        help="SGLang mode: lower priority values are more important (SGLang's default: higher).",
    ),
    click.option(
        "--disable-priority-preemption",
        is_flag=True,
        default=None,
        help="SGLang mode: no preemption of running requests at admission under priority "
        "scheduling (SGLang preempts by default).",
    ),
    click.option(
        "--priority-scheduling-preemption-threshold",
        type=int,
        default=None,
        help="SGLang mode: the priority difference a preemption at admission must exceed "
        f"({SGLANG_DEFAULTS['priority_scheduling_preemption_threshold']}).",
    ),
    latency_option,
    # vLLM features (issue 12): unset keeps the mode's default (on in vllm mode, as vLLM runs).
    click.option(
        "--prefix-caching/--no-prefix-caching",
        "enable_prefix_caching",
        default=None,
        help="vLLM automatic prefix caching (default on in vllm mode; sglang mode refuses it).",
    ),
    click.option(
        "--async-scheduling/--no-async-scheduling",
        "async_scheduling",
        default=None,
        help="vLLM async scheduling, one step ahead (default on in vllm mode, as on GPUs; "
        "sglang mode refuses it).",
    ),
)

policy_options = _stack(
    click.option(
        "--policy-config",
        default=None,
        metavar="JSON|@FILE",
        help="Settings of the production policy (docs/policy.md), inline JSON or @file.",
    ),
    click.option(
        "--host",
        "host_path",
        type=click.Choice(["typed", "legacy"]),
        default="typed",
        show_default=True,
        help="Engine contract the policy is called through.",
    ),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of every choice."),
)


def engine_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The engine bundle's values keyed by ``EngineConfig`` field."""
    return {
        "mode": options["engine_mode"],
        "num_blocks": options["num_blocks"],
        "block_size": options["block_size"],
        "max_num_seqs": options["max_num_seqs"],
        "max_num_batched_tokens": options["max_num_batched_tokens"],
        "watermark": options["watermark"],
        "max_model_len": options["max_model_len"],
        "long_prefill_token_threshold": options["long_prefill_token_threshold"],
        "vllm_version": options["vllm_version"],
        "scheduling_policy": options["scheduling_policy"],
        "clock": options["clock"],
        "step_s": options["step_s"],
        "cost_model": options["cost_model"],
        # SGLang mode.
        "retraction_policy": options.get("retraction_policy"),
        "radix_cache": options.get("radix_cache"),
        "chunked_prefill_size": options.get("chunked_prefill_size"),
        "overlap_schedule": options.get("overlap_schedule"),
        "enable_priority_scheduling": options.get("enable_priority_scheduling"),
        "schedule_low_priority_values_first": options.get("schedule_low_priority_values_first"),
        "disable_priority_preemption": options.get("disable_priority_preemption"),
        "priority_scheduling_preemption_threshold": options.get(
            "priority_scheduling_preemption_threshold"
        ),
        "latency": options.get("latency"),
        "enable_prefix_caching": options.get("enable_prefix_caching"),
        "async_scheduling": options.get("async_scheduling"),
    }


def workload_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The workload bundle's values keyed by ``load_run_workload`` argument."""
    return {
        "format": options["workload_format"],
        "limit": options["limit"],
        "window": options["window"],
        "rate_scale": options["rate_scale"],
        "priority_seed": options["priority_seed"],
        "shared_prefix_tokens": options.get("shared_prefix_tokens"),
        "prefix_groups": options.get("prefix_groups"),
        "prefix_seed": options.get("prefix_seed", 0),
    }


# --- load generator (issue 14): client models; see docs/workloads.md, "Client models" --------

load_options = _stack(
    click.option(
        "--arrivals",
        default="recorded",
        show_default=True,
        metavar="recorded|poisson|gamma:B|constant",
        help="Arrival process; generated kinds follow vllm bench serve (seeded by --seed).",
    ),
    click.option(
        "--rate", type=float, default=None, help="Requests per second of generated --arrivals."
    ),
    click.option(
        "--order",
        "request_order",
        default="recorded",
        show_default=True,
        metavar="recorded|ascending|descending|shuffled:S",
        help="Which request takes each arrival time (by prompt length, or a seeded shuffle).",
    ),
    click.option(
        "--max-tokens",
        "client_max_tokens",
        type=int,
        default=None,
        help="Client max_tokens of every request; outputs stop at min(real length, N).",
    ),
    click.option(
        "--ignore-eos",
        is_flag=True,
        default=False,
        help="Send every request with ignore_eos: it runs to its max_tokens (vllm bench serve "
        "--ignore-eos; SGLang's bench_serving default), and SGLang admits it reserving its "
        "whole output.",
    ),
    click.option(
        "--max-concurrency",
        type=int,
        default=None,
        help="At most N requests in flight; the rest wait at the client (client queue time).",
    ),
    click.option(
        "--concurrency",
        type=int,
        default=None,
        help="Closed loop: N users, each sending its next request when its last one ends.",
    ),
    click.option(
        "--think-time-s",
        type=float,
        default=0.0,
        show_default=True,
        help="Closed loop: a user's pause between a finish and its next request.",
    ),
    click.option(
        "--ttft-timeout-s",
        type=float,
        default=None,
        help="Abort a request with no first token this long after it was sent.",
    ),
)


def load_settings(options: dict[str, Any]) -> LoadSpec:
    """The load bundle's values as a checked ``tracekit.workloads.LoadSpec``.

    Raises :class:`~tracekit.cli.common.LibraryError` (exit 2) with the one-line message of a
    bad value.
    """
    try:
        client = ClientModel(
            max_concurrency=options["max_concurrency"],
            concurrency=options["concurrency"],
            think_time_s=options["think_time_s"],
            ttft_timeout_s=options["ttft_timeout_s"],
        )
        return LoadSpec(
            arrivals=options["arrivals"],
            rate=options["rate"],
            order=options["request_order"],
            max_tokens=options["client_max_tokens"],
            client=client,
            ignore_eos=bool(options.get("ignore_eos", False)),
        )
    except ConfigError as error:
        raise LibraryError(str(error), EXIT_BAD_INPUT) from error


def warn_rejections(workload: Workload, config: EngineConfig) -> None:
    """Print on stderr how many requests ``config`` refuses (nothing when none is)."""
    message = find_rejections(workload, config).warning()
    if message is not None:
        click.echo(message, err=True)


# --- end of the load generator block ------------------------------------------------------


class Progress:
    """Progress of one stage on stderr.

    On a terminal: a one-line bar, redrawn at most five times a second. Elsewhere (stderr piped
    or sent to a file): one status line when the stage starts and one when it ends, so that a
    long command is never silent. ``enabled=False`` prints nothing.
    """

    def __init__(self, label: str, *, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = True if enabled is None else enabled
        self.interactive = sys.stderr.isatty()
        self._last = 0.0
        self._start = time.monotonic()
        self._started = False
        self._finished = False

    def __call__(self, done: int, total: int) -> None:
        """Show ``done`` of ``total``."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.interactive:
            self._status(done, total, now)
            return
        if done < total and now - self._last < 0.2:
            return
        self._last = now
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "-" * (width - filled)
        elapsed = now - self._start
        click.echo(
            f"\r{self.label} [{bar}] {done}/{total} {elapsed:5.1f}s", err=True, nl=done >= total
        )

    def _status(self, done: int, total: int, now: float) -> None:
        label = self.label.strip()
        if not self._started:
            self._started = True
            self._start = now
            click.echo(f"{label}: started ({total} to do)", err=True)
        if done >= total and not self._finished:
            self._finished = True
            click.echo(f"{label}: done {done}/{total} in {now - self._start:.1f} s", err=True)


class StageProgress:
    """Progress of a multi-stage job: one bar per stage, on stderr."""

    def __init__(self, *, enabled: bool | None = None) -> None:
        self.enabled = enabled
        self._bars: dict[str, Progress] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Show ``done`` of ``total`` for ``stage``."""
        bar = self._bars.get(stage)
        if bar is None:
            bar = self._bars[stage] = Progress(f"{stage:18}", enabled=self.enabled)
        bar(done, total)
