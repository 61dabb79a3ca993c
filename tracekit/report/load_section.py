"""The report's load section: verdicts per load level and the goodput curves.

Shown only for a results folder with a load plan (``tracekit qualify``'s default): the headline
of every load cell, offered against achieved rate, SLO attainment against load for every
strategy (the goodput curves), and the built-in rule's waiting queue over time in each cell.
Lays out finished frames only (:mod:`tracekit.qualify.load_frames`).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from tracekit.report.charts import WIDTH
from tracekit.report.inputs import ReportInputs
from tracekit.report.markup import Column, esc, fmt_float, fmt_pct, html_table
from tracekit.report.page_parts import Section

__all__ = ["load_section"]


def _goodput_chart(goodput: pl.DataFrame, strategies: list[str]) -> alt.LayerChart:
    rated = goodput.filter(pl.col("offered_rps").is_not_null())
    base = alt.Chart(rated).encode(
        x=alt.X("offered_rps:Q", title="offered rate (req/s)"),
        y=alt.Y("slo_attainment:Q", title="SLO attainment", axis=alt.Axis(format="%")),
        color=alt.Color("strategy:N", scale=alt.Scale(domain=strategies)),
        tooltip=["load", "strategy", "offered_rps", "achieved_rps", "slo_attainment"],
    )
    return (base.mark_line() + base.mark_point()).properties(width=WIDTH, height=260)


def _queue_chart(queue: pl.DataFrame, loads: list[str]) -> alt.Chart:
    return (
        alt.Chart(queue)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("time_s:Q", title="time (s)"),
            y=alt.Y("num_waiting:Q", title="waiting requests (max per bin)"),
            color=alt.Color("load:N", scale=alt.Scale(domain=loads)),
            tooltip=["load", "time_s", "num_waiting"],
        )
        .properties(width=WIDTH, height=220)
    )


def load_section(view: ReportInputs) -> Section | None:
    """The load section, or ``None`` when the folder has no load plan."""
    goodput = view.goodput
    if goodput is None or goodput.height == 0:
        return None
    section = Section(
        "load",
        "Load levels",
        "The workload ran at several loads around the measured saturation point (the largest "
        "rate at which the built-in rule meets the SLO target), plus a closed loop of users. "
        "Each load is judged on its own; a load where the built-in rule meets the SLO for less "
        "than half of its requests is overloaded and not judged.",
    )
    capacity = (view.inputs.get("capacity") or {}).get("knee")
    if capacity:
        section.note(
            f"Measured capacity: {capacity['rate']:.4g} req/s (built-in SLO attainment "
            f"{capacity['slo_attainment']:.1%}, achieved {capacity['achieved_rps']:.4g} req/s)."
        )
    items = "".join(
        f"<li>{esc(h['text'])}</li>" for h in view.qualification.get("load_headlines", [])
    )
    section.html(f'<h3>Per load</h3><ul class="load-headlines">{items}</ul>')
    strategies = [s for s in view.strategies if s in set(goodput["strategy"])]
    baseline = goodput.filter(pl.col("strategy") == view.baseline).sort("order")
    section.html(
        html_table(
            baseline,
            [
                Column("load"),
                Column("offered_rps", "offered (req/s)", fmt_float(3), numeric=True),
                Column("achieved_rps", "achieved (req/s, mean)", fmt_float(3), numeric=True),
                Column("slo_attainment", "built-in SLO attainment (mean)", fmt_pct, numeric=True),
            ],
            caption="Built-in rule per load, lightest first: means over the repeats",
        )
    )
    section.chart(
        "goodput",
        _goodput_chart(goodput, strategies),
        "SLO attainment against offered rate, per strategy",
    )
    queue = view.queue_depth
    if queue is not None and queue.height:
        loads = baseline["load"].to_list()
        section.chart("queue", _queue_chart(queue, loads), "waiting queue over time, built-in rule")
    return section
