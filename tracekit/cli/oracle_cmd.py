"""``tracekit oracle``: every victim decision of a trace against the hindsight best."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import (
    CONTEXT_SETTINGS,
    ignored_option,
    library_errors,
    option_given,
    out_option,
    overwrite_option,
    trace_argument,
)
from tracekit.cli.options import slo_option, slo_target
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import SEED, Choice, count, deprecated_alias, jobs_option
from tracekit.defaults import DEFAULT_TPOT_S, DEFAULT_TTFT_S, OBJECTIVES, ORACLE_HORIZON

if TYPE_CHECKING:
    from tracekit.trace.text import Align

DEFAULT_STRATEGIES = "builtin,lcf,mcf,static-random,sglang-default,bidkv"
#: Most steps of a rollout: 2**20, far past any request's life in a recorded run.
MAX_HORIZON = 2**20


@click.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@out_option(required=True)
@overwrite_option("a folder oracle wrote")
@click.option(
    "--objective",
    type=Choice(OBJECTIVES),
    default="recomputed",
    show_default=True,
    help="Score of a candidate: recomputed tokens, sum of end-to-end times, or SLO misses.",
)
@click.option(
    "--horizon",
    type=count(1, MAX_HORIZON),
    default=ORACLE_HORIZON,
    show_default=True,
    help="Most steps a rollout runs (it stops earlier once the requests live at the decision "
    "have finished under the built-in choice).",
)
@click.option(
    "--strategy",
    "strategies",
    default=DEFAULT_STRATEGIES,
    show_default=True,
    help="Comma-separated strategies to score (builtin, lcf, mcf, ..., module:Object) or all.",
)
@click.option("--policy-config", default=None, metavar="JSON|@FILE")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Strategies' seed.")
# The defaults are OracleSettings' (tracekit.oracle.rollout), declared in tracekit.defaults.
@slo_option("ttft", DEFAULT_TTFT_S, "Objective slo: the TTFT target")
@slo_option("tpot", DEFAULT_TPOT_S, "Objective slo: the TPOT target")
# The spelling before --slo-ttft-s/--slo-tpot-s, which qualify and capacity use.
@deprecated_alias("--ttft-s", "--slo-ttft-s", "slo_ttft_s", type=float, callback=slo_target)
@deprecated_alias("--tpot-s", "--slo-tpot-s", "slo_tpot_s", type=float, callback=slo_target)
@jobs_option("scoring the candidates' rollouts")
@click.option("--limit", type=count(), default=None, help="Evaluate the first N decisions.")
@click.option("--no-greedy", is_flag=True, help="Skip the greedy oracle's closed-loop run.")
@output_options("summary")
def oracle(**options: Any) -> None:
    """Score TRACE's victim decisions against the hindsight best (docs/oracle.md)."""
    from tracekit.oracle.job import run_oracle
    from tracekit.oracle.rollout import OracleSettings
    from tracekit.strategies import parse_policy_config, parse_strategy_list
    from tracekit.sweep.progress import StderrProgress
    from tracekit.trace.bundle import open_trace
    from tracekit.trace.validate import check_readable

    with library_errors():
        # An extra or mistyped column is one line here, not a silent read of what fits.
        if options["objective"] != "slo":
            for name in ("slo_ttft_s", "slo_tpot_s"):
                if option_given(name):
                    option = f"--{name.replace('_', '-')}"
                    raise ignored_option(
                        option, "--objective slo", f"--objective {options['objective']}"
                    )
        for bundle in open_trace(options["trace"]):
            check_readable(bundle)
        settings = OracleSettings(
            objective=options["objective"],
            horizon=options["horizon"],
            ttft_s=options["slo_ttft_s"],
            tpot_s=options["slo_tpot_s"],
        )
        policy_config = parse_policy_config(options["policy_config"])
        specs = parse_strategy_list(options["strategies"], policy_config, seed=options["seed"])
        result = run_oracle(
            options["trace"], options["out"], specs, settings, jobs=options["jobs"],
            limit=options["limit"], greedy=not options["no_greedy"],
            progress=StderrProgress(), overwrite=options["overwrite"],
        )  # fmt: skip
    emit(
        options["as_json"],
        lambda: {**result.summary, "out": str(result.out)},
        lambda: render(result.summary, str(result.out)),
    )


def render(summary: dict[str, Any], out: str) -> str:
    """The summary as text: headroom, each strategy's regret and closed-loop result."""
    from tracekit.oracle.job import ORACLE_LABEL
    from tracekit.trace.text import text_table

    lines = [
        f"oracle ({summary['settings']['objective']}, horizon "
        f"{summary['settings']['horizon']} steps): {summary['num_decisions']} decisions, "
        f"{summary['num_candidates']} candidates",
    ]
    if summary["headroom"] is not None:
        lines.append(
            f"built-in {summary['builtin_objective']:g}, {ORACLE_LABEL} "
            f"{summary['oracle_objective']:g}, headroom {summary['headroom']:g}"
        )
    closed = {row["strategy"]: row for row in summary["closed"]}
    rows = [["strategy", "total regret", "best chosen", "closed loop", "share"]]
    for row in summary["strategies"]:
        c = closed.get(row["strategy"], {})
        share = c.get("share_of_headroom")
        rows.append(
            [
                row["strategy"],
                f"{row['total_regret'] or 0:g}",
                f"{100 * (row['best_choice_rate'] or 0):.0f}%",
                f"{c.get('objective', float('nan')):g}",
                "" if share is None else f"{100 * share:.0f}%",
            ]
        )
    if ORACLE_LABEL in closed:
        rows.append([ORACLE_LABEL, "", "", f"{closed[ORACLE_LABEL]['objective']:g}", ""])
    align: list[Align] = ["left", "right", "right", "right", "right"]
    lines += [line.rstrip() for line in text_table(rows, align=align)]
    lines.append(f"wrote {out}")
    return "\n".join(lines)
