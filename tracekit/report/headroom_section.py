"""The report's headroom section: how far each strategy is from the hindsight oracle.

Lays out what ``tracekit oracle`` computed (:mod:`tracekit.oracle.job`; docs/oracle.md): the
greedy oracle's gain over the built-in rule (the headroom), each strategy's share of it in
closed loop, each strategy's regret on the reference run's decisions, and the decisions where
the built-in rule loses the most. The frames arrive finished in :class:`HeadroomInputs`; this
module computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.report.markup import MISSING, Column, esc, fmt_int, html_table
from tracekit.report.page_parts import Section

__all__ = ["HeadroomInputs", "headroom_section"]


@dataclass(frozen=True, slots=True)
class HeadroomInputs:
    """The oracle's finished outputs.

    Attributes
    ----------
    summary
        ``oracle.json``: settings, headroom, per-strategy regret, most-lost decisions.
    closed
        ``closed.parquet``: one row per closed-loop run (``strategy, objective,
        recomputed_tokens, e2e_sum_s, slo_misses, gain_over_builtin, share_of_headroom``).
    """

    summary: dict[str, Any]
    closed: pl.DataFrame


def _num(value: Any) -> str:
    """A score: whole numbers without decimals, others with two."""
    if value is None:
        return MISSING
    value = float(value)
    return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"


def _pct(value: Any) -> str:
    if value is None:
        return MISSING
    return f"{100 * float(value):.0f}%"


def headroom_section(headroom: HeadroomInputs | None) -> Section:
    """The headroom section (a note when the oracle did not run).

    Parameters
    ----------
    headroom
        The oracle's outputs, or None.

    Returns
    -------
    Section
        The headroom line, the closed-loop table with each strategy's share, the regret table
        and the decisions where the built-in rule loses the most.
    """
    section = Section(
        "headroom",
        "Headroom: victim choice against the hindsight oracle",
        "At every victim decision of the built-in rule's run, the engine was forked and every "
        "candidate tried, with the built-in rule for later decisions, over a bounded window. "
        "The greedy oracle takes the best candidate at every decision of its own run: a "
        "practical upper bound for any victim policy on this workload (not a proven optimum). "
        "Headroom is the built-in rule's result minus the oracle's; a strategy's share is its "
        "own gain over the built-in rule divided by the headroom. Lower objective is better.",
    )
    if headroom is None:
        section.note("oracle/ is absent: the oracle did not run (tracekit qualify --oracle).")
        return section
    summary = headroom.summary
    settings = summary.get("settings") or {}
    objective = str(settings.get("objective", "recomputed"))
    value = summary.get("headroom")
    base = summary.get("builtin_objective")
    if value is None or base is None:
        section.note("The greedy oracle did not run: no headroom.")
    else:
        rel = f" ({100 * value / base:.0f}% of the built-in rule's)" if base else ""
        section.html(
            f"<p>Objective <b>{esc(objective)}</b>, windows of at most "
            f"{esc(settings.get('horizon'))} steps: built-in {esc(_num(base))}, oracle "
            f"{esc(_num(summary.get('oracle_objective')))}, headroom "
            f"<b>{esc(_num(value))}</b>{esc(rel)}.</p>"
        )
    closed = headroom.closed.with_columns(
        pl.col("share_of_headroom").map_elements(_pct, return_dtype=pl.String).alias("share")
    )
    section.html("<h3>Closed loop</h3>")
    section.html(
        html_table(
            closed,
            [
                Column("strategy"),
                Column("objective", objective, _num, True),
                Column("recomputed_tokens", "recomputed tokens", fmt_int, True),
                Column("slo_misses", "SLO misses", fmt_int, True),
                Column("share", "share of headroom", str, True),
            ],
        )
    )
    regret = pl.DataFrame(
        summary.get("strategies") or [],
        schema={
            "strategy": pl.String,
            "total_regret": pl.Float64,
            "mean_regret": pl.Float64,
            "best_choice_rate": pl.Float64,
        },
    ).with_columns(
        pl.col("best_choice_rate").map_elements(_pct, return_dtype=pl.String).alias("best")
    )
    section.html(
        f"<h3>Regret on the built-in rule's {esc(summary.get('num_decisions'))} decisions</h3>"
    )
    section.html(
        html_table(
            regret,
            [
                Column("strategy"),
                Column("total_regret", "total regret", _num, True),
                Column("mean_regret", "mean regret", _num, True),
                Column("best", "best candidate chosen", str, True),
            ],
        )
    )
    lost = pl.DataFrame(
        summary.get("most_lost") or [],
        schema={
            "seq": pl.Int64,
            "step": pl.Int64,
            "time_s": pl.Float64,
            "builtin_victim_id": pl.String,
            "best_victim_id": pl.String,
            "builtin_regret": pl.Float64,
        },
    )
    section.html("<h3>Decisions where the built-in rule loses the most</h3>")
    if lost.height == 0:
        section.note("No decision was evaluated.")
    else:
        section.html(
            html_table(
                lost,
                [
                    Column("seq", "decision", fmt_int, True),
                    Column("step", "step", fmt_int, True),
                    Column("time_s", "time (s)", lambda v: f"{float(v):,.2f}", True),
                    Column("builtin_victim_id", "built-in victim"),
                    Column("best_victim_id", "best victim"),
                    Column("builtin_regret", "regret", _num, True),
                ],
            )
        )
    return section
