"""Option bundles shared by the commands that run workloads (record, replay, qualify).

Each bundle is a decorator that adds the same flags, with the same names and help, to every
command that takes them (in the way sqlite-utils shares ``output_options``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tracekit.cli.common import EXIT_BAD_INPUT, LibraryError, ignored_option
from tracekit.cli.params import (
    MAX_RATE,
    RATE,
    SEED,
    Choice,
    Count,
    Number,
    count,
    deprecated_alias,
    seconds,
)
from tracekit.defaults import (
    DEFAULT_TARGET,
    DEFAULT_TOLERANCE,
    DEFAULT_TPOT_S,
    DEFAULT_TTFT_S,
    MAX_TIME_S,
    OVERSIZE_MODES,
    check_slo_target,
)
from tracekit.engine_options import (
    COST_MODEL_NAMES,
    ENGINE_CHOICES,
    ENGINE_OPTIONS,
    ENGINE_RANGES,
    ENGINE_SCOPES,
    VLLM_MODE_DEFAULTS,
    EngineOption,
)
from tracekit.errors import ConfigError

# The library is imported where the commands run, not here: an option's declaration reads only
# tracekit.defaults and tracekit.engine_options, so that --help imports no library.
if TYPE_CHECKING:
    from tracekit.capacity.search import Probe
    from tracekit.engine.config import EngineConfig
    from tracekit.workloads import Workload
    from tracekit.workloads.load_spec import LoadSpec

F = TypeVar("F", bound=Callable[..., Any])

#: Off a terminal, a running stage prints a status line at least this often (seconds).
HEARTBEAT_S = 10.0

__all__ = [
    "CapacityProgress",
    "Progress",
    "StageProgress",
    "capacity_search_options",
    "engine_options",
    "engine_options_of",
    "field_defaults",
    "latency_option",
    "paper_latency_option",
    "load_options",
    "load_settings",
    "oversize_option",
    "run_inputs",
    "slo_option",
    "slo_options",
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
    # ":" alone keeps everything: a slip, not a window.
    ok = sep and (start_text or end_text) and math.isfinite(start) and 0 <= start <= MAX_TIME_S
    ok = ok and (end is None or start < end <= MAX_TIME_S)
    if not ok:
        raise click.BadParameter(
            f"expected START:END in seconds with 0 <= START < END <= {MAX_TIME_S:g}, got "
            f"{value!r}; "
            "pass e.g. --window 0:600, or --window 60: for everything after 60 s"
        )
    return (start, end)


#: A good value of each SLO option, in its unit: the fix its error offers when it has no default.
_SLO_EXAMPLES = {"ttft": DEFAULT_TTFT_S, "tpot": DEFAULT_TPOT_S}


def slo_target(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Callback of the SLO options: :func:`tracekit.defaults.check_slo_target`.

    The fix it offers is the option's own default (``--slo-tpot-s`` 0.1, not 2.0).
    """
    if value is None:
        return None
    option = param.opts[0]
    example = param.default if isinstance(param.default, int | float) else None
    if example is None:
        example = next((v for k, v in _SLO_EXAMPLES.items() if f"-{k}-" in option), None)
    try:
        return check_slo_target(option, value, example=example)
    except ConfigError as error:
        raise LibraryError(str(error), EXIT_BAD_INPUT) from error


def slo_option(which: str, default: float | None, help: str, **kwargs: Any) -> Callable[[F], F]:
    """``--slo-{which}-s``: a latency target in seconds, finite and > 0 (one spelling everywhere).

    click's ``float`` and :func:`slo_target`, so that every command refuses a bad target in the
    same one line; the range is stated in the help.
    """
    return click.option(
        f"--slo-{which}-s",
        f"slo_{which}_s",
        type=float,
        default=default,
        show_default=default is not None,
        callback=slo_target,
        metavar="SECONDS",
        help=f"{help} (seconds: a finite number > 0).",
        **kwargs,
    )


#: The SLO targets of the commands that judge attainment (capacity, qualify).
slo_options = _stack(
    slo_option("ttft", DEFAULT_TTFT_S, "A request meets the SLO with TTFT <= this"),
    slo_option("tpot", DEFAULT_TPOT_S, "... and TPOT <= this"),
)


def capacity_search_options(prefix: str, target_help: str, tolerance_help: str) -> Callable[[F], F]:
    """The capacity search's ``--{prefix}target`` and ``--{prefix}tolerance`` options."""
    return _stack(
        click.option(
            f"--{prefix}target",
            type=Number(0.0, 1.0, low_open=True),
            default=DEFAULT_TARGET,
            show_default=True,
            help=target_help,
        ),
        click.option(
            f"--{prefix}tolerance",
            type=Number(0.0, 1.0, low_open=True, high_open=True),
            default=DEFAULT_TOLERANCE,
            show_default=True,
            help=tolerance_help,
        ),
    )


workload_options = _stack(
    click.option(
        "--workload",
        "workload_path",
        type=click.Path(dir_okay=False, path_type=Path),
        required=True,
        help="Workload file (Azure CSV, Mooncake JSONL, BidKV trace, vidur CSV, CSV/Parquet).",
    ),
    click.option(
        "--workload-format",
        "workload_format",
        default=None,
        help="The workload's format, instead of detecting it.",
    ),
    # --format means the output format (query); the workload's was --format before.
    deprecated_alias("--format", "--workload-format", "workload_format"),
    click.option("--limit", type=count(), default=None, help="Keep the first N requests."),
    click.option(
        "--window",
        callback=_parse_window,
        default=None,
        metavar="START:END",
        help="Keep arrivals in [START, END) seconds, re-based to 0.",
    ),
    click.option(
        "--rate-scale",
        type=Number(0.0, MAX_RATE, low_open=True),
        default=1.0,
        show_default=True,
        help="2.0 = twice the rate.",
    ),
    click.option("--priority-seed", type=SEED, default=None, help="Assign seeded priorities 0..2."),
    # Token content (docs/workloads.md, "Token content"): a synthetic shared prompt prefix.
    click.option(
        "--shared-prefix-tokens",
        type=count(),
        default=None,
        help="Give every request a shared prompt prefix of N tokens (prefix caching).",
    ),
    click.option(
        "--prefix-groups",
        type=count(),
        default=None,
        help="Number of distinct shared prefixes, drawn per request (default 1).",
    ),
    click.option(
        "--prefix-seed",
        type=SEED,
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


def engine_range(field: str) -> Count | Number:
    """The option type of engine setting ``field``: its range in ``ENGINE_RANGES``."""
    low, high = ENGINE_RANGES[field]
    if isinstance(low, int) and isinstance(high, int):
        return Count(low, high)
    # The watermark is a fraction kept free: 1.0 would admit nothing.
    return Number(low, high, high_open=field == "watermark")


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


def _engine_option(option: EngineOption) -> Callable[[F], F]:
    """The click option of one engine setting, made from its declaration (``ENGINE_OPTIONS``)."""
    if option.field == "latency":
        return latency_option
    settings: dict[str, Any] = {"default": None, "help": option.help_text}
    if option.field == "cost_model":
        settings["type"] = Choice(sorted(COST_MODEL_NAMES))
    elif option.field in ENGINE_CHOICES:
        settings["type"] = Choice(ENGINE_CHOICES[option.field])
    elif option.field in ENGINE_RANGES:
        settings["type"] = engine_range(option.field)
    if option.shown:
        settings.update(default=VLLM_MODE_DEFAULTS[option.field], show_default=True)
    if option.is_flag:
        settings["is_flag"] = True
    # --engine-mode's value is options["engine_mode"]; every other one's is its field's.
    name = "engine_mode" if option.field == "mode" else option.field
    return click.option(option.flag, name, **settings)


#: The engine options of every command that runs the engine: one per ``ENGINE_OPTIONS`` entry.
engine_options = _stack(*(_engine_option(option) for option in ENGINE_OPTIONS))


def engine_options_of(fields: Collection[str]) -> Callable[[F], F]:
    """The engine options of ``fields`` alone, as ``engine_options`` makes them."""
    return _stack(*(_engine_option(option) for option in ENGINE_OPTIONS if option.field in fields))


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
        type=Choice(["typed", "legacy"]),
        default="typed",
        show_default=True,
        help="Engine contract the policy is called through.",
    ),
    click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of every choice."),
)


def _spelling(option: EngineOption, value: Any) -> str:
    """The spelling of ``option`` that gives ``value`` (``--no-radix-cache`` for False)."""
    on, _, off = option.flag.partition("/")
    return off if off and value is False else on


def _ignored(option: EngineOption, options: dict[str, Any]) -> LibraryError | None:
    """Why the given ``option`` would change nothing here (:data:`ENGINE_SCOPES`), or None."""
    scope = ENGINE_SCOPES.get(option.field)
    value = options.get(option.field)
    if scope is None or value is None:
        return None
    what, which = scope
    current = options["engine_mode"] if what == "mode" else options["clock"]
    if current == which:
        return None
    flag = "--engine-mode" if what == "mode" else "--clock"
    return ignored_option(_spelling(option, value), f"{flag} {which}", f"{flag} {current}")


def engine_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The engine bundle's values keyed by ``EngineConfig`` field.

    Raises :class:`~tracekit.cli.common.LibraryError` (exit 2) for an option given where the
    engine mode or the clock would ignore it (``--watermark`` in sglang mode, ``--step-s``
    under the cost-model clock, ...: :data:`~tracekit.engine.config.ENGINE_SCOPES`).
    """
    for option in ENGINE_OPTIONS:
        refusal = _ignored(option, options)
        if refusal is not None:
            raise refusal
    settings = {o.field: options.get(o.field) for o in ENGINE_OPTIONS if o.field != "mode"}
    return {"mode": options["engine_mode"], **settings}


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


# --- load generator: client models; see docs/workloads.md, "Client models" --------------------

load_options = _stack(
    click.option(
        "--arrivals",
        default="recorded",
        show_default=True,
        metavar="recorded|poisson|gamma:B|constant",
        help="Arrival process; generated kinds follow vllm bench serve (seeded by --seed).",
    ),
    click.option(
        "--rate", type=RATE, default=None, help="Requests per second of generated --arrivals."
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
        type=count(),
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
        type=count(),
        default=None,
        help="At most N requests in flight; the rest wait at the client (client queue time).",
    ),
    click.option(
        "--concurrency",
        type=count(),
        default=None,
        help="Closed loop: N users, each sending its next request when its last one ends.",
    ),
    click.option(
        "--think-time-s",
        type=seconds(zero=True),
        default=0.0,
        show_default=True,
        help="Closed loop: a user's pause between a finish and its next request.",
    ),
    click.option(
        "--ttft-timeout-s",
        type=seconds(zero=False),
        default=None,
        help="Abort a request with no first token this long after it was sent.",
    ),
)


def load_settings(options: dict[str, Any], *, searched: bool = False) -> LoadSpec:
    """The load bundle's values as a checked ``tracekit.workloads.LoadSpec``.

    ``searched``: a capacity search sets the rate itself, from ``--rate`` as its first probe,
    so ``--rate inf`` (every request at 0, no rate to start from) is refused there.

    Raises :class:`~tracekit.cli.common.LibraryError` (exit 2) with the one-line message of a
    bad value.
    """
    from tracekit.workloads.client import ClientModel
    from tracekit.workloads.load_spec import LoadSpec

    if options["rate"] == math.inf and searched:
        raise LibraryError(
            "--rate inf: the capacity search sets the rate itself, and --rate is only the rate "
            "it starts from; pass a finite --rate, or drop it (the search starts at the "
            "workload's own rate)",
            EXIT_BAD_INPUT,
        )
    if options["rate"] == math.inf:
        # A documented value (vLLM's default --request-rate), said aloud: no arrival process.
        click.echo("note: --rate inf sends every request at time 0 (vLLM's --request-rate inf)",
                   err=True)  # fmt: skip
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


#: What the loader does with prompts the engine would refuse (docs/workloads.md, "Oversize
#: prompts"): keep them (the engine rejects them), drop them, or cap them.
oversize_option = click.option(
    "--oversize-prompts",
    type=click.Choice(OVERSIZE_MODES),
    default="reject",
    show_default=True,
    help="Prompts of at least --max-model-len tokens: reject (the engine refuses them), drop "
    "them from the workload, or cap them at max_model_len - 1 tokens.",
)


def run_inputs(options: dict[str, Any]) -> tuple[EngineConfig, Workload]:
    """The engine configuration and the workload of ``options``, its prompts fitted to it.

    The load options are not applied yet: capacity and qualify search on the loaded workload
    as read, so each command applies them itself (:func:`load_settings`).
    """
    from tracekit.engine.config import make_engine_config
    from tracekit.recording.sim import load_run_workload
    from tracekit.workloads.prompt_limit import fit_prompts

    config = make_engine_config(**engine_settings(options))
    workload = fit_prompts(
        load_run_workload(options["workload_path"], **workload_settings(options)),
        config.max_model_len,
        options["oversize_prompts"],
    )
    return config, workload


def warn_rejections(workload: Workload, config: EngineConfig) -> None:
    """Print on stderr how many requests ``config`` refuses (nothing when none is)."""
    from tracekit.capacity.rejections import find_rejections

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


class CapacityProgress:
    """The capacity search as a stage of a :class:`StageProgress`: probes made of expected."""

    def __init__(self, stage: Callable[[str, int, int], None], target: float, tolerance: float):
        self.stage = stage
        self.target = target
        self.tolerance = tolerance
        self.probes: list[Probe] = []

    def __call__(self, probe: Probe) -> None:
        """Count one probe."""
        from tracekit.capacity.search import expected_probes

        self.probes.append(probe)
        total = expected_probes(self.probes, self.target, self.tolerance)
        # The estimate only grows past the probes made when the search is not over.
        self.stage("capacity search", len(self.probes), max(total, len(self.probes) + 1))

    def finish(self) -> None:
        """The search is over."""
        self.stage("capacity search", len(self.probes), len(self.probes))


class StageProgress:
    """Progress of a multi-stage job on stderr: one bar (or start/end lines) per stage.

    Off a terminal (stderr piped or sent to a file) a stage may run for minutes between its start
    and end lines, so a heartbeat thread also prints a status line whenever nothing was printed
    for ``interval_s`` seconds: the stage, its count, the time spent and an estimate of the time
    left (items left times the mean time per finished item). Use it as a context manager, or
    call :meth:`close`, to stop the thread.
    """

    def __init__(self, *, enabled: bool | None = None, interval_s: float = HEARTBEAT_S) -> None:
        self.enabled = True if enabled is None else enabled
        self.interval_s = interval_s
        self._bars: dict[str, Progress] = {}
        self._lock = threading.Lock()
        self._current: tuple[str, int, int, float] | None = None  # stage, done, total, start
        self._printed = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Show ``done`` of ``total`` for ``stage``."""
        now = time.monotonic()
        with self._lock:
            bar = self._bars.get(stage)
            new = bar is None
            if bar is None:
                bar = self._bars[stage] = Progress(f"{stage:18}", enabled=self.enabled)
            start = now if new or self._current is None else self._current[3]
            if new or done >= total:
                self._printed = now  # Progress prints a line at a stage's start and end
            self._current = None if done >= total else (stage, done, total, start)
            bar(done, total)
        if self.enabled and not bar.interactive and self._thread is None and done < total:
            self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
            self._thread.start()

    def status_line(self, now: float | None = None) -> str | None:
        """The heartbeat's line for the running stage (``None`` when no stage runs)."""
        from tracekit.sweep.progress import format_duration

        with self._lock:
            current = self._current
        if current is None:
            return None
        stage, done, total, start = current
        now = time.monotonic() if now is None else now
        elapsed = now - start
        if done > 0:
            left = f"about {format_duration(elapsed * (total - done) / done)} left"
        else:
            left = "time left not known until one finishes"
        return f"{stage}: {done}/{total} done, {format_duration(elapsed)} so far, {left}"

    def _beat(self) -> None:
        # Wake a little before the interval is up (never more than a second early), so that no
        # gap between two lines exceeds it whatever the thread's scheduling delay.
        early = min(1.0, self.interval_s / 20)
        while True:
            due = self._printed + self.interval_s - early
            if self._stop.wait(max(0.01, due - time.monotonic())):
                return
            now = time.monotonic()
            if now < self._printed + self.interval_s - early:
                continue  # a stage line was printed meanwhile
            line = self.status_line(now)
            if line is not None:
                click.echo(line, err=True)
            self._printed = now

    def close(self) -> None:
        """Stop the heartbeat thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
