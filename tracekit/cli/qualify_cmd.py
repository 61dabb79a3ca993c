"""``tracekit qualify`` and ``tracekit report``: the end-to-end job and its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.analysis.serving import SloTargets
from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import (
    StageProgress,
    engine_options,
    engine_settings,
    load_options,
    load_settings,
    policy_options,
    slo_target,
    warn_rejections,
    workload_options,
    workload_settings,
)
from tracekit.cli.output import emit, output_options
from tracekit.engine.config import make_engine_config
from tracekit.qualify import QualifyPlan, run_qualify, write_report
from tracekit.qualify.job import check_results_folder, verdict_exit_code
from tracekit.qualify.loads import describe_loads, parse_fractions, plan_loads
from tracekit.recording.sim import load_run_workload
from tracekit.strategies import parse_policy_config, parse_strategy_list, resolve_strategy
from tracekit.workloads.load_spec import apply_load


@click.command(context_settings=CONTEXT_SETTINGS)
@workload_options
@load_options
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
@click.option(
    "--slo-ttft-s", type=float, default=SloTargets().ttft_s, show_default=True, callback=slo_target
)
@click.option(
    "--slo-tpot-s", type=float, default=SloTargets().tpot_s, show_default=True, callback=slo_target
)
@click.option(
    "--load-plan",
    type=click.Choice(["capacity", "single"]),
    default="capacity",
    show_default=True,
    help="capacity: measure the saturation point, then qualify at 0.6, 0.9, 1.0 and 1.2 of it "
    "plus a concurrency-8 cell (docs/qualify.md); single: one cell, the workload as given.",
)
@click.option(
    "--load-fractions",
    default="0.6,0.9,1.0,1.2",
    show_default=True,
    metavar="F,F,...",
    help="Fractions of the measured capacity of the capacity plan's rate cells.",
)
@click.option(
    "--load-concurrency",
    type=click.IntRange(min=0),
    default=8,
    show_default=True,
    help="Users of the capacity plan's closed-loop cell (0: no such cell).",
)
@overwrite_option("a results folder qualify wrote")
@click.option(
    "--oracle",
    is_flag=True,
    help="Also run the hindsight oracle on repeat 0 (headroom section; docs/oracle.md).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes recording the runs (default: the number of cores; 1 runs in this "
    "process). Results are identical for any number.",
)
@out_option(required=True)
@output_options("paths of the results")
def qualify(**options: Any) -> None:
    """Qualify a policy end to end and write the HTML report (docs/qualify.md).

    Records the built-in baseline and every strategy in closed loop over the repeats, the
    candidate through the legacy and typed hosts (diff and conformance), replays every strategy
    in open mode on the baseline's decisions, and renders OUT/report.html. Prints its path.
    Exit status: 0 GO, 1 NO-GO (a finding, as diff's differences), 2 bad input.
    """
    with library_errors():
        # The results folder is checked before the capacity search (seconds to minutes), so a
        # refused --out costs nothing; run_qualify checks it again before writing.
        check_results_folder(
            options["out"], [options["workload_path"]], overwrite=options["overwrite"]
        )
        loaded = load_run_workload(options["workload_path"], **workload_settings(options))
        spec = load_settings(options)
        workload = apply_load(loaded, spec, seed=options["seed"])
        config = make_engine_config(**engine_settings(options))
        warn_rejections(workload, config)
        policy_config = parse_policy_config(options["policy_config"])
        strategies = parse_strategy_list(options["strategies"], policy_config, seed=options["seed"])
        candidate = resolve_strategy(options["candidate"], policy_config, seed=options["seed"])
        slo = SloTargets(options["slo_ttft_s"], options["slo_tpot_s"])
        loads = None
        if options["load_plan"] == "capacity":
            loads = plan_loads(
                loaded, config, spec=spec, slo=slo, seed=options["seed"],
                fractions=parse_fractions(options["load_fractions"]),
                concurrency=options["load_concurrency"] or None,
            )  # fmt: skip
            click.echo(describe_loads(loads), err=True)
        plan = QualifyPlan(
            workload, config, tuple(strategies), candidate, repeats=options["repeats"],
            repeat_kind=options["repeat_by"], seed=options["seed"], slo=slo, loads=loads,
            oracle=options["oracle"],
        )  # fmt: skip
        results = run_qualify(
            plan, options["out"], stage=StageProgress(), overwrite=options["overwrite"],
            jobs=options["jobs"],
        )  # fmt: skip
    emit(
        options["as_json"],
        lambda: {"out": str(results), "report": str(results / "report.html"),
                 "files": sorted(p.name for p in results.iterdir())},
        lambda: str(results / "report.html"),
    )  # fmt: skip
    raise SystemExit(verdict_exit_code(results))  # 1: NO-GO, a finding


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("results", type=click.Path(file_okay=False, path_type=Path))
@out_option(
    folder=False,
    default=None,
    help="HTML file (default RESULTS/report.html); qualification.json is written beside it.",
)
@overwrite_option("a report page and qualification.json that report wrote")
def report(results: Path, out: Path | None, overwrite: bool) -> None:
    """Render the offline HTML report and qualification.json of a qualify or sweep folder.

    RESULTS/report.html and RESULTS/qualification.json are re-rendered in place; elsewhere an
    existing file is refused without --overwrite (docs/guarantees.md).
    """
    with library_errors():
        click.echo(write_report(results, out, overwrite=overwrite))
