"""The report's sections: each returns its HTML (text escaped) and the charts it embeds.

Every section (:class:`tracekit.report.page_parts.Section`) has an anchor, a title, a
plain-language caption and a body of tables and charts, laid out from the finished frames of a
:class:`~tracekit.report.inputs.ReportInputs`. The legacy-versus-typed section lives in
:mod:`tracekit.report.diff_section`.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.report import charts
from tracekit.report.diff_section import diff_section
from tracekit.report.headroom_section import headroom_section
from tracekit.report.inputs import ReportInputs
from tracekit.report.load_section import load_section
from tracekit.report.markup import (
    Column,
    esc,
    fmt_bool,
    fmt_float,
    fmt_int,
    fmt_pct,
    fmt_signed_pct,
    fmt_value,
    html_table,
)
from tracekit.report.page_parts import Section, badge
from tracekit.report.verdict_section import effectiveness_html, rule_html

__all__ = ["Section", "build_sections"]


def _verdicts(q: dict[str, Any]) -> Section:
    section = Section(
        "verdicts",
        "Verdicts",
        "Three separate questions. Lifecycle: how far the candidate got, from installed to "
        "actually choosing victims at run time. Functional compatibility: whether it ran "
        "safely (every check must pass). Effectiveness: whether it made serving better than the "
        "built-in victim rule, per load, judged on every endpoint against its registered "
        "margin with intervals corrected for the number of comparisons in the report.",
    )
    cards = []
    for key, title in (
        ("installed", "installed"),
        ("configured", "configured"),
        ("enabled", "enabled"),
        ("runtime_effective", "runtime-effective"),
    ):
        label = q["lifecycle"][key]
        state = "yes" if label["reached"] else "no"
        cards.append(
            f'<div class="card {"ok" if label["reached"] else "bad"}"><div class="card-title">'
            f"{esc(title)} {badge(state, 'ok' if label['reached'] else 'bad')}</div>"
            f'<div class="card-body">{esc(label["evidence"])}</div></div>'
        )
    section.html('<h3>Lifecycle</h3><div class="cards">' + "".join(cards) + "</div>")
    gate = q["functional_compatibility"]
    passed = gate["status"] == "passed"
    section.html(
        f"<h3>Functional compatibility gate "
        f"{badge(gate['status'], {'passed': 'ok', 'not-run': 'warn'}.get(gate['status'], 'bad'))}"
        "</h3>"
    )
    if not passed:
        items = "".join(f"<li>{esc(r)}</li>" for r in gate["reasons"])
        section.html(f'<ul class="reasons">{items}</ul>')
    checks = pl.DataFrame(
        gate["checks"], schema={"name": pl.String, "passed": pl.Boolean, "detail": pl.String}
    ).with_columns(
        pl.when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("fail")).alias("cls")
    )
    section.html(
        html_table(
            checks,
            [Column("name", "check"), Column("passed", "passed", fmt_bool), Column("detail")],
            row_class="cls",
        )
    )
    section.html("<h3>Effectiveness</h3>")
    section.note(
        "Rule: a strategy is harmful in a load when some endpoint got worse beyond its margin "
        "(its whole interval past the margin); beneficial when a primary endpoint improved "
        "beyond its margin and every endpoint's interval stays above minus its margin; "
        "equivalent when every interval lies inside its margins; otherwise inconclusive, with "
        "the number of repeats of the same size that would decide it at the observed variance. "
        "Overloaded loads (built-in SLO attainment under 50%) are not judged; a strategy that "
        "chose the built-in victim in every decision is identical to built-in."
    )
    section.html(rule_html(q))
    section.html(effectiveness_html(q))
    return section


def _deltas(view: ReportInputs, strategies: list[str]) -> Section:
    section = Section(
        "deltas",
        "Changes on every endpoint",
        "Each point is a strategy's mean paired change against the built-in rule over the "
        "repeats (the same requests ran under both), in units of the endpoint's margin and "
        "signed so that right is better; the bar is its corrected interval. A bar wholly right "
        "of the green +1 line is better beyond the margin, wholly left of the red -1 line "
        "worse beyond it, and inside both equivalent.",
    )
    intervals = view.intervals
    if intervals.height == 0 or intervals["gain_low"].is_null().all():
        section.note("No paired changes to show.")
        return section
    shown = [s for s in strategies if s != view.baseline]
    endpoints = intervals["endpoint"].unique(maintain_order=True).to_list()
    section.chart(
        "changes",
        charts.delta_chart(intervals, shown, endpoints),
        "paired changes in margins per load, endpoint and strategy",
    )
    return section


def _latency(view: ReportInputs, strategies: list[str]) -> Section:
    section = Section(
        "latency",
        "Latency distributions",
        "Cumulative share of finished requests (all repeats pooled) that got their first token "
        "(TTFT) or finished (end-to-end) within a given time. A curve further left and higher is "
        "better; the gap at the top shows the slow tail.",
    )
    section.chart(
        "ecdf",
        charts.latency_ecdf_chart(view.latency_ecdf, strategies),
        "latency ECDFs per strategy",
    )
    return section


def _reference_repeat(view: ReportInputs) -> str:
    """The runs the per-run charts show, in words (``qualify.json``'s ``reference``)."""
    reference = view.inputs.get("reference") or {}
    if "repeat" not in reference:
        return "repeat 0"
    where = f"repeat {reference['repeat']}"
    if reference.get("load"):
        where = f"{reference['load']}, {where}"
    return (
        f"{where} (the repeat whose built-in run made the most victim decisions, "
        f"{reference.get('decisions', 0)})"
    )


def _kv(view: ReportInputs) -> Section:
    candidate = view.candidate
    shown = [view.baseline, candidate]
    section = Section(
        "kv",
        "KV-cache usage over time",
        f"KV-cache usage during {_reference_repeat(view)} under the built-in rule and under "
        f"{candidate}: the line "
        "is the mean usage per time bucket and the band its range; each red tick "
        "at the top is one preemption decision (hover for the victim and the reason). "
        "Stretches without steps (the engine was idle) are drawn as straight lines.",
    )
    kv = view.kv_usage
    if kv.height == 0:
        section.note("Repeat 0 has no run of the baseline or the candidate.")
        return section
    section.chart("usage", charts.kv_usage_chart(kv, shown), "KV usage over time")
    return section


def _preemptions(view: ReportInputs, strategies: list[str]) -> Section:
    section = Section(
        "starvation",
        "Preemptions per request",
        "How many requests were preempted once, twice, ... (all repeats). Long tails mean some "
        "requests are preempted again and again (starvation). The count axis is compressed "
        "(symlog) so that small bars stay visible next to the never-preempted majority.",
    )
    section.chart(
        "histogram",
        charts.preemption_histogram_chart(view.preemption_histogram, strategies),
        "histogram of preemptions per request",
    )
    worst = view.most_preempted
    if worst.height:
        section.html(
            html_table(
                worst,
                [
                    Column("request_id", "request"),
                    Column("strategy"),
                    Column("repeat", "repeat", fmt_int, True),
                    Column("num_preemptions", "preemptions", fmt_int, True),
                    Column("recomputed_tokens", "recomputed tokens", fmt_int, True),
                    Column("e2e_s", "end-to-end (s)", fmt_float(2), True),
                ],
                caption="Most-preempted requests",
            )
        )
    return section


def _recomputed(view: ReportInputs, strategies: list[str]) -> Section:
    section = Section(
        "recompute",
        "Recomputed tokens",
        "Tokens whose KV cache was thrown away by preemptions (discarded), and of them those "
        "computed again (truly recomputed: not served back by the prefix cache), the wasted "
        "work. Bars are the mean per run over every load, dots the individual runs; the table "
        "gives the means per run of each load.",
    )
    section.chart(
        "tokens",
        charts.recomputed_chart(view.recomputed, strategies),
        "recomputed tokens per strategy",
    )
    section.html(
        html_table(
            view.recomputed_summary,
            [
                Column("load"),
                Column("strategy"),
                Column("runs", "runs", fmt_int, True),
                Column("recomputed_tokens", "discarded tokens (mean per run)", fmt_float(0), True),
                Column(
                    "truly_recomputed_tokens",
                    "truly recomputed (mean per run)",
                    fmt_float(0),
                    True,
                ),
                Column("recompute_tax", "recompute tax (mean per run)", fmt_pct, True),
                Column("preemptions", "preemptions (mean per run)", fmt_float(1), True),
                Column(
                    "requests_preempted", "requests preempted (mean per run)", fmt_float(1), True
                ),
            ],
            caption="Means per run, by load (lightest first) and strategy",
        )
    )
    return section


def _agreement(view: ReportInputs, strategies: list[str]) -> Section:
    section = Section(
        "agreement",
        "Victim agreement (open-mode replay)",
        "Every strategy was asked again about each decision of the baseline runs, with the exact "
        "recorded context. A cell is the share of decisions where the two strategies picked the "
        "same victim; 100% means they are interchangeable on this workload.",
    )
    agreement = view.agreement
    if agreement is None:
        section.note("replay/agreement.parquet is absent: the open-mode replay did not run.")
    else:
        section.chart(
            "heatmap", charts.agreement_chart(agreement, strategies), "victim agreement heatmap"
        )
    counts, victims = view.replay_counts, view.replay_victims
    if counts is not None and victims is not None:
        decisions = view.replay_decisions
        section.html(
            html_table(
                counts,
                [
                    Column(
                        c,
                        _REPLAY_HEADERS.get(c, c.replace("_", " ")),
                        fmt=_column_format(counts, c),
                        numeric=counts.schema[c].is_numeric(),
                    )
                    for c in counts.columns
                ],
                caption=f"Open-mode replay per strategy ({fmt_int(decisions)} recorded decisions)",
            )
        )
        if victims.height:
            section.html(
                html_table(
                    victims,
                    [
                        Column("strategy"),
                        Column("request_id", "request"),
                        Column("count", "times picked", fmt_int, True),
                    ],
                    caption="Most-picked victims in the replay",
                )
            )
    return section


# Headers of the open-mode replay summary's columns (others show their names).
_REPLAY_HEADERS = {
    "agreement_rate": "same victim as recorded",
    "abstentions_liveness": "abst.: liveness",
    "abstentions_cascade": "abst.: cascade",
    "abstentions_other": "abst.: other",
    "invalid_selections": "invalid",
    "disabled_decisions": "disabled",
    "picked_requester": "picked requester",
    "requester_rate": "requester rate",
    "tokens_freed": "tokens freed",
    "recorded_tokens_freed": "recorded tokens freed",
    "tokens_ratio": "tokens freed vs recorded",
}


def _column_format(frame: pl.DataFrame, column: str) -> Any:
    dtype = frame.schema[column]
    if dtype.is_integer():
        return fmt_int
    if dtype.is_float():
        if column.endswith("_pct"):
            return fmt_signed_pct
        if "rate" in column or "share" in column:
            return fmt_pct
        return fmt_float(3)
    return fmt_value


def _counters(view: ReportInputs, strategies: list[str]) -> Section:
    section = Section(
        "counters",
        "Policy calls and outcomes",
        "What the engine's host counted for each policy, summed over the repeats: calls, "
        "victims selected, abstentions (the policy declined, so the built-in victim was used) by "
        "reason, gate fallbacks (the policy's gates returned the default victim), invalid ids "
        "and failures. The last two must be 0.",
    )
    counters = view.counters
    if counters.height == 0:
        section.note("No policy ran: only the baseline is in cells.parquet.")
        return section
    section.chart("bars", charts.counter_chart(counters, strategies), "policy counters")
    wide = counters.pivot(on="counter", index="strategy", values="value", sort_columns=False)
    section.html(
        html_table(
            wide,
            [Column("strategy")]
            + [Column(c, f"{c} (total)", fmt_int, True) for c in wide.columns if c != "strategy"],
            caption=f"Totals over every run of every load and repeat ({view.cells.height} runs)",
        )
    )
    return section


def _runs(view: ReportInputs) -> Section:
    section = Section(
        "runs",
        "Runs",
        "Every closed-loop run behind the charts: one row per repeat and strategy, with its "
        "serving metrics (times in seconds) and the policy's counters.",
    )
    f3 = fmt_float(3)
    # With a load plan each run has a load, and client aborts are counted.
    columns = view.cells.columns
    by_load = ["load_order"] if "load_order" in columns else []
    load_column = [Column("load")] if "load" in columns else []
    aborted = [Column("aborted", "aborted", fmt_int, True)] if "aborted" in columns else []
    section.html(
        html_table(
            view.cells.sort(*by_load, "repeat", "strategy"),
            [
                *load_column,
                Column("repeat", "repeat", fmt_int, True),
                Column("strategy"),
                Column("host_path", "host"),
                Column("requests", "requests", fmt_int, True),
                Column("finished", "finished", fmt_int, True),
                *aborted,
                Column("throughput_rps", "req/s", f3, True),
                Column("output_tokens_per_s", "out tok/s", fmt_float(1), True),
                Column("ttft_p50_s", "TTFT p50", f3, True),
                Column("ttft_p95_s", "TTFT p95", f3, True),
                Column("e2e_p50_s", "E2E p50", f3, True),
                Column("e2e_p95_s", "E2E p95", f3, True),
                Column("slo_attainment", "SLO", fmt_pct, True),
                Column("preemptions", "preempt.", fmt_int, True),
                Column("recomputed_tokens", "recomputed", fmt_int, True),
                Column("calls", "calls", fmt_int, True),
                Column("selections", "sel.", fmt_int, True),
                Column("abstentions", "abst.", fmt_int, True),
                Column("failures", "fail.", fmt_int, True),
            ],
        )
    )
    return section


def _cache(view: ReportInputs, strategies: list[str]) -> Section | None:
    """Prefix caching: hit rate over time and recomputed tokens split (None: no cache hits)."""
    if view.cache_hits is None and view.cache_split is None:
        return None
    section = Section(
        "prefix-cache",
        "Prefix cache",
        "With prefix caching, a preempted request's blocks stay cached until they are reused, "
        "so part of what it recomputes comes back from the cache for free. The line is the "
        "share of the tokens admitted requests needed that the cache served, over time "
        f"({_reference_repeat(view)}); the table splits recomputed tokens into cache hits and "
        "truly recomputed tokens (means per run).",
    )
    if view.cache_hits is not None:
        section.chart(
            "hit-rate",
            charts.cache_hit_rate_chart(view.cache_hits, strategies),
            "prefix-cache hit rate over time",
        )
    if view.cache_split is not None:
        section.html(
            html_table(
                view.cache_split,
                [
                    Column("strategy"),
                    Column(
                        "recomputed_tokens", "recomputed tokens (mean per run)", fmt_float(0), True
                    ),
                    Column(
                        "from_cache_tokens",
                        "of which cache hits (mean per run)",
                        fmt_float(0),
                        True,
                    ),
                    Column(
                        "truly_recomputed_tokens",
                        "truly recomputed (mean per run)",
                        fmt_float(0),
                        True,
                    ),
                    Column("cache_hit_tokens", "all cache hits (mean per run)", fmt_float(0), True),
                ],
            )
        )
    return section


def build_sections(view: ReportInputs) -> list[Section]:
    """Every section of the report, in page order.

    Parameters
    ----------
    view
        The finished frames and the qualification document of one results folder.

    Returns
    -------
    list of Section
        Verdicts, changes, latency, KV usage, starvation, recomputation, agreement, counters,
        legacy versus typed, runs.
    """
    strategies = list(view.strategies)
    verdicts = _verdicts(view.qualification)
    load = load_section(view)
    recomputed = _recomputed(view, strategies)
    sections = [
        verdicts,
        *([load] if load is not None else []),
        _deltas(view, strategies),
        _latency(view, strategies),
        _kv(view),
        _preemptions(view, strategies),
        recomputed,
        _agreement(view, strategies),
        _counters(view, strategies),
        diff_section(view),
        # The headroom section appears only when the oracle ran (qualify --oracle).
        *([headroom_section(view.headroom)] if view.headroom is not None else []),
        _runs(view),
    ]
    # Prefix caching (trace v2), right after recomputation, only when a run hit the cache.
    cache = _cache(view, strategies)
    if cache is not None:
        sections.insert(sections.index(recomputed) + 1, cache)
    return sections
