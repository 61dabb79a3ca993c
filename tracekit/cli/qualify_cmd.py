"""``tracekit qualify`` and ``tracekit report``: the end-to-end job and its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import (
    CONTEXT_SETTINGS,
    ignored_option,
    library_errors,
    option_given,
    out_option,
    overwrite_option,
)
from tracekit.cli.options import (
    CapacityProgress,
    StageProgress,
    capacity_search_options,
    engine_options,
    load_options,
    load_settings,
    oversize_option,
    policy_options,
    run_inputs,
    slo_options,
    warn_rejections,
    workload_options,
)
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import Choice, Number, count, jobs_option
from tracekit.defaults import DEFAULT_ALPHA, DEFAULT_REPEATS
from tracekit.errors import ConfigError


def _check_fractions(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse bad --load-fractions while parsing, before the capacity search and every run."""
    from tracekit.qualify.loads import parse_fractions

    with library_errors():
        parse_fractions(value)
    return value


#: The options the capacity plan alone reads (parameter names).
_CAPACITY_PLAN_OPTIONS = (
    "load_fractions", "load_concurrency", "capacity_target", "capacity_tolerance",
)  # fmt: skip


@click.command(context_settings=CONTEXT_SETTINGS)
@workload_options
@oversize_option
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
@click.option(
    "--repeats",
    type=count(3, 1000),
    default=DEFAULT_REPEATS,
    show_default=True,
    help='Paired repeats per load cell (3 to 1000; docs/qualify.md, "Repeats").',
)
@click.option(
    "--repeat-by",
    type=Choice(["auto", "windows", "seeds"]),
    default="auto",
    show_default=True,
    help="windows: disjoint time windows of the workload; seeds: all of it with seeds s, s+1, "
    "...; auto: seeds where the arrivals are generated (each repeat draws its own), else windows.",
)
@slo_options
@click.option(
    "--load-plan",
    type=Choice(["capacity", "single"]),
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
    callback=_check_fractions,
    help="Fractions of the measured capacity of the capacity plan's rate cells.",
)
@click.option(
    "--load-concurrency",
    type=count(0),
    default=8,
    show_default=True,
    help="Users of the capacity plan's closed-loop cell (0: no such cell).",
)
@capacity_search_options(
    "capacity-",
    target_help="SLO attainment that defines the knee (tracekit capacity's --target).",
    tolerance_help="Precision of the capacity search (tracekit capacity's --tolerance).",
)
@click.option(
    "--margin",
    "margins",
    multiple=True,
    metavar="NAME=VALUE",
    help="An endpoint's practical margin (repeatable), e.g. ttft_p99=10 (docs/report.md).",
)
@click.option(
    "--primary",
    default=None,
    metavar="NAME,...",
    help="The endpoints whose improvement counts as a benefit (default: docs/report.md).",
)
@click.option(
    "--alpha",
    type=Number(0.0, 1.0, low_open=True, high_open=True),
    default=DEFAULT_ALPHA,
    show_default=True,
    help="Family-wise error rate of the report's labels.",
)
@click.option(
    "--aa-control/--no-aa-control",
    default=True,
    show_default=True,
    help="Run the A/A control (static-random against itself with another seed).",
)
@overwrite_option("a results folder qualify wrote")
@click.option(
    "--oracle",
    is_flag=True,
    help="Also run the hindsight oracle on the reference repeat (headroom; docs/oracle.md).",
)
@jobs_option("recording the runs")
@out_option(required=True)
@output_options("paths of the results")
def qualify(**options: Any) -> None:
    """Qualify a policy end to end and write the HTML report (docs/qualify.md).

    Measures the saturation point, records the built-in baseline, every strategy and the A/A
    control in closed loop over the repeats of every load cell, the candidate through the legacy
    and typed hosts (diff and conformance), replays every strategy in open mode, and renders
    OUT/report.html. Prints the verdict line and the report's path; exits 0 on GO, 1 on NO-GO,
    2 on bad input.
    """
    from tracekit.analysis.serving import SloTargets
    from tracekit.qualify import QualifyPlan, run_qualify
    from tracekit.qualify.endpoints import VerdictRule, parse_margins, parse_primary
    from tracekit.qualify.job import check_results_folder
    from tracekit.qualify.loads import describe_loads, parse_fractions, plan_loads
    from tracekit.qualify.outcome import exit_code, outcome_document, read_qualification
    from tracekit.report.html import prefetch_javascript_bundle
    from tracekit.strategies import parse_policy_config, parse_strategy_list, resolve_strategy
    from tracekit.workloads.load_spec import apply_load

    with library_errors(), StageProgress() as progress:
        # The report's script bundle builds on the second core during the capacity search.
        prefetch_javascript_bundle()
        # The results folder is checked before the capacity search (seconds to minutes), so a
        # refused --out costs nothing; run_qualify checks it again before writing.
        check_results_folder(
            options["out"], [options["workload_path"]], overwrite=options["overwrite"]
        )
        searched = options["load_plan"] == "capacity"
        if not searched:
            # The single plan runs the workload as given: the capacity plan's options are unread.
            for name in _CAPACITY_PLAN_OPTIONS:
                if option_given(name):
                    option = f"--{name.replace('_', '-')}"
                    raise ignored_option(option, "--load-plan capacity", "--load-plan single")
        config, loaded = run_inputs(options)
        spec = load_settings(options, searched=searched)
        workload = apply_load(loaded, spec, seed=options["seed"])
        warn_rejections(workload, config)
        policy_config = parse_policy_config(options["policy_config"])
        strategies = parse_strategy_list(options["strategies"], policy_config, seed=options["seed"])
        try:
            candidate = resolve_strategy(options["candidate"], policy_config, seed=options["seed"])
        except ConfigError as error:  # the strategies' message names --strategy
            raise ConfigError(str(error).replace("--strategy", "--candidate", 1)) from None
        slo = SloTargets(options["slo_ttft_s"], options["slo_tpot_s"])
        rule = VerdictRule().with_settings(
            parse_margins(options["margins"]), parse_primary(options["primary"]), options["alpha"]
        )
        loads = None
        if options["load_plan"] == "capacity":
            probes = CapacityProgress(
                progress, options["capacity_target"], options["capacity_tolerance"]
            )
            loads = plan_loads(
                loaded, config, spec=spec, slo=slo, seed=options["seed"],
                target=options["capacity_target"], tolerance=options["capacity_tolerance"],
                fractions=parse_fractions(options["load_fractions"]),
                concurrency=options["load_concurrency"] or None, progress=probes,
            )  # fmt: skip
            probes.finish()
            click.echo(describe_loads(loads), err=True)
        plan = QualifyPlan(
            workload, config, tuple(strategies), candidate, repeats=options["repeats"],
            repeat_kind=options["repeat_by"], seed=options["seed"], slo=slo, loads=loads,
            oracle=options["oracle"], rule=rule, aa_control=options["aa_control"],
            base_workload=loaded, load_spec=spec,
        )  # fmt: skip
        results = run_qualify(
            plan, options["out"], stage=progress, overwrite=options["overwrite"],
            jobs=options["jobs"],
        )  # fmt: skip
        document = read_qualification(results)
    emit(
        options["as_json"],
        lambda: outcome_document(results, document),
        lambda: f"{document['headline']['text']}\n{results / 'report.html'}",
    )
    raise SystemExit(exit_code(document))


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("results", type=click.Path(file_okay=False, path_type=Path))
@out_option(
    folder=False,
    default=None,
    help="HTML file (default RESULTS/report.html); qualification.json is written beside it.",
)
@overwrite_option("a report page and qualification.json that report wrote")
@output_options("paths written and the headline")
def report(results: Path, out: Path | None, overwrite: bool, as_json: bool) -> None:
    """Render the offline HTML report and qualification.json of a qualify or sweep folder.

    RESULTS/report.html and RESULTS/qualification.json are re-rendered in place; elsewhere an
    existing file is refused without --overwrite (docs/guarantees.md).
    """
    from tracekit.qualify import QUALIFICATION_NAME, write_report

    with library_errors():
        page = write_report(results, out, overwrite=overwrite)
    verdicts = page.with_name(QUALIFICATION_NAME)
    emit(
        as_json,
        lambda: {
            "report": str(page),
            "qualification": str(verdicts),
            "headline": json.loads(verdicts.read_text("utf-8")).get("headline"),
        },
        lambda: str(page),
    )
