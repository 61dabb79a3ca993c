"""The report's Altair charts, one function per chart, each from a finished frame.

Functions take the frames of :mod:`tracekit.qualify.frames` (or
:func:`tracekit.qualify.effectiveness.interval_frame`) and return an Altair chart; they compute
nothing but encodings. ``strategies`` fixes the order and colours of strategies across charts.
"""

from __future__ import annotations

import altair as alt
import polars as pl

__all__ = [
    "LABEL_COLOURS",
    "agreement_chart",
    "cache_hit_rate_chart",
    "counter_chart",
    "delta_chart",
    "diff_timeline_chart",
    "kv_usage_chart",
    "latency_ecdf_chart",
    "preemption_histogram_chart",
    "recomputed_chart",
]

WIDTH = 620
WIDE = 940
LABEL_COLOURS = {
    "beneficial": "#1a7f37",
    "harmful": "#cf222e",
    "equivalent": "#0969da",
    "inconclusive": "#6e7781",
    "identical to built-in": "#8c959f",
    "overloaded": "#bf8700",
}
_OUTCOME_COLOURS = {
    "selected": "#8c959f",
    "abstained": "#0969da",
    "builtin": "#d0d7de",
    "disabled": "#bf8700",
    "invalid": "#cf222e",
    "exception": "#a40e26",
}


def _strategy_colour(strategies: list[str]) -> alt.Color:
    return alt.Color("strategy:N", title="strategy", scale=alt.Scale(domain=strategies))


def delta_chart(
    intervals: pl.DataFrame, strategies: list[str], endpoints: list[str]
) -> alt.FacetChart:
    """Every endpoint's paired change in units of its margin, per load and strategy.

    Parameters
    ----------
    intervals
        :func:`tracekit.qualify.effectiveness.interval_frame`.
    strategies
        Strategy order (rows of each panel).
    endpoints
        Endpoint order (columns).

    Returns
    -------
    altair.FacetChart
        One row of panels per load (lightest first), one column per endpoint; in each, the
        mean gain (point) and its corrected interval (bar) per strategy, right is better, with
        the margins as dashed lines at -1 and +1 (beyond +-4 the marks are clamped).
    """
    frame = intervals.filter(pl.col("gain_low").is_not_null()).with_columns(
        *[pl.col(c).round(3) for c in ("gain_mean", "gain_low", "gain_high", "mean", "low", "high")]
    )
    loads = frame.sort("order")["load"].unique(maintain_order=True).to_list()
    x = alt.X(
        "gain_low:Q",
        title="gain in margins (right is better)",
        scale=alt.Scale(domain=[-4, 4], clamp=True),
    )
    y = alt.Y("strategy:N", sort=strategies, title=None)
    colour = alt.Color(
        "label:N",
        title="label",
        scale=alt.Scale(domain=list(LABEL_COLOURS), range=list(LABEL_COLOURS.values())),
        legend=alt.Legend(orient="bottom", direction="horizontal", labelLimit=300),
    )
    tooltip = [
        alt.Tooltip("load:N"),
        alt.Tooltip("strategy:N"),
        alt.Tooltip("endpoint:N"),
        alt.Tooltip("mean:Q", title="mean change", format="+.2f"),
        alt.Tooltip("low:Q", title="interval low", format="+.2f"),
        alt.Tooltip("high:Q", title="interval high", format="+.2f"),
        alt.Tooltip("unit:N"),
        alt.Tooltip("margin:Q"),
        alt.Tooltip("verdict:N"),
        alt.Tooltip("label:N"),
    ]
    base = alt.Chart()
    bars = base.mark_errorbar(ticks=True, thickness=2).encode(
        x=x, x2="gain_high:Q", y=y, color=colour
    )
    points = base.mark_point(filled=True, size=50).encode(
        x=alt.X("gain_mean:Q", scale=alt.Scale(domain=[-4, 4], clamp=True)),
        y=y,
        color=colour,
        tooltip=tooltip,
    )
    rules = alt.Chart().mark_rule(color="#444").encode(x=alt.datum(0))
    low = alt.Chart().mark_rule(color="#cf222e", strokeDash=[4, 3]).encode(x=alt.datum(-1))
    high = alt.Chart().mark_rule(color="#1a7f37", strokeDash=[4, 3]).encode(x=alt.datum(1))
    return (
        alt.layer(rules, low, high, bars, points, data=frame)
        .properties(width=110, height=16 * max(1, len(strategies)) + 10)
        .facet(
            row=alt.Row("load:N", sort=loads, title=None),
            column=alt.Column("endpoint:N", sort=endpoints, title=None),
        )
    )


def latency_ecdf_chart(ecdf: pl.DataFrame, strategies: list[str]) -> alt.FacetChart:
    """ECDFs of TTFT and end-to-end latency per strategy (log latency axis).

    Parameters
    ----------
    ecdf
        :func:`tracekit.qualify.frames.latency_ecdf_frame`.
    strategies
        Strategy order and colours.

    Returns
    -------
    altair.FacetChart
        One panel per metric.
    """
    frame = ecdf.filter(pl.col("latency_s") > 0)
    return (
        alt.Chart(frame)
        .mark_line(interpolate="step-after", strokeWidth=1.8)
        .encode(
            x=alt.X("latency_s:Q", title="latency (s, log scale)", scale=alt.Scale(type="log")),
            y=alt.Y("share:Q", title="share of finished requests", axis=alt.Axis(format="%")),
            color=_strategy_colour(strategies),
            tooltip=[
                "strategy:N",
                "metric:N",
                alt.Tooltip("latency_s:Q", title="latency s", format=".3f"),
                alt.Tooltip("share:Q", format=".1%"),
            ],
        )
        .properties(width=330, height=220)
        .facet(column=alt.Column("metric:N", title=None, sort=["TTFT", "end-to-end"]))
        .resolve_scale(x="independent")
    )


def kv_usage_chart(kv: pl.DataFrame, strategies: list[str]) -> alt.FacetChart:
    """KV-cache usage over time (mean line, min-max band) with one tick per preemption.

    Parameters
    ----------
    kv
        :func:`tracekit.qualify.frames.kv_usage_frame`.
    strategies
        The runs shown (rows), in order.

    Returns
    -------
    altair.FacetChart
        One row per run; the x axis (seconds) is shared.
    """
    shown = [s for s in strategies if s in set(kv["strategy"].to_list())]
    x = alt.X("time_s:Q", title="time (s)")
    band = (
        alt.Chart()
        .mark_area(opacity=0.25, color="#4c78a8")
        .encode(x=x, y=alt.Y("usage_min:Q"), y2="usage_max:Q")
        .transform_filter(alt.datum.kind == "usage")
    )
    line = (
        alt.Chart()
        .mark_line(color="#4c78a8", strokeWidth=1.2)
        .encode(
            x=x,
            y=alt.Y(
                "usage:Q",
                title="KV usage",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1.05]),
            ),
        )
        .transform_filter(alt.datum.kind == "usage")
    )
    ticks = (
        alt.Chart()
        .mark_tick(color="#cf222e", thickness=1.5, size=12)
        .encode(
            x=x,
            y=alt.value(4),
            tooltip=[
                alt.Tooltip("time_s:Q", title="time s", format=".2f"),
                alt.Tooltip("victim:N", title="victim"),
                "outcome:N",
                "reason:N",
                alt.Tooltip("usage:Q", title="KV usage", format=".1%"),
            ],
        )
        .transform_filter(alt.datum.kind == "preemption")
    )
    return (
        alt.layer(band, line, ticks, data=kv)
        .properties(width=WIDE, height=120)
        .facet(
            row=alt.Row(
                "strategy:N",
                sort=shown,
                title=None,
                header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold"),
            )
        )
    )


def preemption_histogram_chart(histogram: pl.DataFrame, strategies: list[str]) -> alt.Chart:
    """Requests by number of preemptions, per strategy (symlog count axis).

    Parameters
    ----------
    histogram
        :func:`tracekit.qualify.frames.preemption_histogram_frame`.
    strategies
        Strategy order and colours.

    Returns
    -------
    altair.Chart
        Grouped bars.
    """
    largest = int(histogram["requests"].max() or 1)
    ticks = [0] + [v for v in (1, 3, 10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000,
                               300_000, 1_000_000) if v <= largest * 1.5]  # fmt: skip
    return (
        alt.Chart(histogram)
        .mark_bar()
        .encode(
            x=alt.X(
                "preemptions:O", title="times a request was preempted", axis=alt.Axis(labelAngle=0)
            ),
            xOffset=alt.XOffset("strategy:N", sort=strategies),
            y=alt.Y(
                "requests:Q",
                title="requests (symlog scale)",
                scale=alt.Scale(type="symlog"),
                axis=alt.Axis(values=ticks, format=",.0f", formatType="number"),
            ),
            color=_strategy_colour(strategies),
            tooltip=[
                "strategy:N",
                "preemptions:O",
                "requests:Q",
                alt.Tooltip("share:Q", format=".1%"),
            ],
        )
        .properties(width=WIDTH, height=220)
    )


def recomputed_chart(recomputed: pl.DataFrame, strategies: list[str]) -> alt.LayerChart:
    """Recomputed tokens per strategy: mean over repeats (bar) and each repeat (point).

    Parameters
    ----------
    recomputed
        :func:`tracekit.qualify.frames.recomputed_frame`.
    strategies
        Strategy order and colours.

    Returns
    -------
    altair.LayerChart
        Horizontal bars with repeat points.
    """
    y = alt.Y("strategy:N", sort=strategies, title=None)
    base = alt.Chart(recomputed)
    bars = base.mark_bar(opacity=0.55).encode(
        x=alt.X("mean(recomputed_tokens):Q", title="recomputed tokens per run"),
        y=y,
        color=alt.Color("strategy:N", scale=alt.Scale(domain=strategies), legend=None),
        tooltip=[
            "strategy:N",
            alt.Tooltip("mean(recomputed_tokens):Q", title="mean tokens", format=",.0f"),
            alt.Tooltip("mean(preemptions):Q", title="mean preemptions", format=",.1f"),
        ],
    )
    points = base.mark_point(color="#222", size=40).encode(
        x="recomputed_tokens:Q",
        y=y,
        tooltip=[
            "strategy:N",
            "repeat:O",
            alt.Tooltip("recomputed_tokens:Q", format=","),
            "preemptions:Q",
        ],
    )
    return alt.layer(bars, points).properties(width=WIDTH, height=34 * len(strategies))


def agreement_chart(agreement: pl.DataFrame, strategies: list[str]) -> alt.LayerChart:
    """Heatmap of how often two strategies pick the same victim on the same decision.

    Parameters
    ----------
    agreement
        :func:`tracekit.qualify.frames.agreement_frame`.
    strategies
        Axis order.

    Returns
    -------
    altair.LayerChart
        Cells coloured by agreement, with the rate written in each.
    """
    order = [s for s in strategies if s in set(agreement["strategy_a"].to_list())]
    order += sorted(set(agreement["strategy_a"].to_list()) - set(order))
    base = alt.Chart(agreement).encode(
        x=alt.X("strategy_b:N", sort=order, title=None, axis=alt.Axis(labelAngle=-30)),
        y=alt.Y("strategy_a:N", sort=order, title=None),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "agree_rate:Q",
            title="agreement",
            scale=alt.Scale(domain=[0, 1], scheme="blues"),
            legend=alt.Legend(format="%"),
        ),
        tooltip=["strategy_a:N", "strategy_b:N", alt.Tooltip("agree_rate:Q", format=".1%")],
    )
    text = base.mark_text(fontSize=12).encode(
        text=alt.Text("agree_rate:Q", format=".0%"),
        color=alt.condition(alt.datum.agree_rate > 0.6, alt.value("white"), alt.value("#222")),
    )
    side = 60 * len(order)
    return alt.layer(cells, text).properties(width=side, height=side)


def counter_chart(counters: pl.DataFrame, strategies: list[str]) -> alt.LayerChart:
    """Policy calls, selections, abstentions by reason, fallbacks, invalid ids and failures.

    Parameters
    ----------
    counters
        :func:`tracekit.qualify.frames.counter_frame`.
    strategies
        Strategy order and colours.

    Returns
    -------
    altair.LayerChart
        Grouped horizontal bars with their values written beside them.
    """
    order = counters.sort("order")["counter"].unique(maintain_order=True).to_list()
    shown = [s for s in strategies if s in set(counters["strategy"].to_list())]
    base = alt.Chart(counters).encode(
        y=alt.Y("counter:N", sort=order, title=None),
        yOffset=alt.YOffset("strategy:N", sort=shown),
        x=alt.X("value:Q", title="count (sum over repeats)"),
    )
    bars = base.mark_bar().encode(
        color=_strategy_colour(strategies), tooltip=["strategy:N", "counter:N", "value:Q"]
    )
    text = base.mark_text(align="left", dx=3, fontSize=10).encode(text="value:Q")
    return alt.layer(bars, text).properties(width=WIDTH - 100, height=14 * len(order) * len(shown))


def diff_timeline_chart(timeline: pl.DataFrame, divergence_seq: int | None) -> alt.LayerChart:
    """Legacy and typed decisions on one axis, with the differences and the first divergence.

    Parameters
    ----------
    timeline
        :func:`tracekit.qualify.frames.diff_timeline_frame`.
    divergence_seq
        The first divergence's decision (a dashed rule), or ``None``.

    Returns
    -------
    altair.LayerChart
        Lanes ``legacy``, ``typed`` (ticks coloured by outcome) and ``difference`` (points
        coloured by class; hollow when the contracts do not explain it).
    """
    frame = timeline.with_columns(pl.lit(divergence_seq, pl.Int64).alias("divergence_seq"))
    x = alt.X("seq:Q", title="decision (seq)")
    lanes = ["legacy", "typed", "difference"]
    y = alt.Y("lane:N", sort=lanes, title=None)
    ticks = (
        alt.Chart()
        .mark_tick(thickness=2, size=18)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "label:N",
                title="decision outcome",
                scale=alt.Scale(
                    domain=list(_OUTCOME_COLOURS), range=list(_OUTCOME_COLOURS.values())
                ),
            ),
            tooltip=[
                "lane:N",
                "seq:Q",
                alt.Tooltip("time_s:Q", title="time s", format=".2f"),
                alt.Tooltip("label:N", title="outcome"),
                alt.Tooltip("detail:N", title="victim"),
            ],
        )
        .transform_filter(alt.datum.lane != "difference")
    )
    points = (
        alt.Chart()
        .mark_point(size=120, strokeWidth=2, filled=True)
        .encode(
            x=x,
            y=y,
            color=alt.Color("label:N", title="difference class", scale=alt.Scale(scheme="dark2")),
            shape=alt.Shape(
                "contract:N",
                title="explained by the contracts",
                scale=alt.Scale(domain=[True, False], range=["circle", "cross"]),
            ),
            tooltip=[
                "seq:Q",
                alt.Tooltip("time_s:Q", title="time s", format=".2f"),
                alt.Tooltip("label:N", title="class"),
                alt.Tooltip("contract:N", title="contract"),
                alt.Tooltip("detail:N", title="detail"),
            ],
        )
        .transform_filter(alt.datum.lane == "difference")
    )
    rule = (
        alt.Chart()
        .mark_rule(color="#cf222e", strokeDash=[5, 3])
        .encode(x="divergence_seq:Q")
        .transform_filter(alt.datum.lane == "difference")
    )
    return (
        alt.layer(ticks, points, rule, data=frame)
        .properties(width=WIDE - 160, height=120)
        .resolve_scale(color="independent")
    )


def cache_hit_rate_chart(hits: pl.DataFrame, strategies: list[str]) -> alt.Chart:
    """Prefix-cache hit rate over time, one line per strategy.

    Parameters
    ----------
    hits
        :func:`tracekit.qualify.frames.cache_hit_frame`.
    strategies
        Strategy order and colours.

    Returns
    -------
    altair.Chart
        Lines over time (seconds); the rate is the share of needed tokens the cache served.
    """
    return (
        alt.Chart(hits)
        .mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X("time_s:Q", title="time (s)"),
            y=alt.Y(
                "hit_rate:Q",
                title="prefix-cache hit rate",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            color=_strategy_colour(strategies),
            tooltip=[
                "strategy:N",
                alt.Tooltip("time_s:Q", title="time s", format=".2f"),
                alt.Tooltip("hit_rate:Q", title="hit rate", format=".1%"),
                alt.Tooltip("cache_hit_tokens:Q", title="hit tokens", format=","),
                alt.Tooltip("prefill_tokens:Q", title="computed prefill tokens", format=","),
            ],
        )
        .properties(width=WIDE, height=180)
    )
