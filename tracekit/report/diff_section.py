"""The report's legacy-versus-typed section: verdict, classes, timeline, first divergence.

Lays out what :mod:`tracekit.qualify.diff_frames` took from ``diff/diff.json`` (``tracekit.diff``'s
report: the differences with their classes, the first divergence with both contexts side by side)
and the conformance checks of the qualification document.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.report import charts
from tracekit.report.inputs import ReportInputs
from tracekit.report.markup import Column, esc, fmt_bool, fmt_int, fmt_value, html_table
from tracekit.report.page_parts import Section, badge

__all__ = ["diff_section"]


def _side_by_side(legacy: dict[str, Any], typed: dict[str, Any], fields: list[str]) -> str:
    keys = sorted(set(legacy) | set(typed), key=lambda k: (k not in fields, k))
    rows = pl.DataFrame(
        {
            "field": keys,
            "legacy": [fmt_value(legacy.get(k)) for k in keys],
            "typed": [fmt_value(typed.get(k)) for k in keys],
            "cls": ["diff" if k in fields else "" for k in keys],
        }
    )
    return html_table(rows, [Column("field"), Column("legacy"), Column("typed")], row_class="cls")


def _candidates(side: dict[str, Any], differing: set[tuple[int, str]], title: str) -> str:
    candidates = side.get("candidates") or []
    if not candidates:
        return ""
    # In the order given (qualify puts position first, then the contract's fields).
    columns = [c for c in candidates[0] if not c.startswith("sglang_")]
    # Field names are long words joined by "_": let a header wrap only after an underscore.
    head = "".join(f"<th>{esc(c).replace('_', '_<wbr>')}</th>" for c in columns)
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"diff" if (cand.get("position"), c) in differing else ""}">'
            f"{esc(fmt_value(cand.get(c)))}</td>"
            for c in columns
        )
        + "</tr>"
        for cand in candidates
    )
    return (
        f'<div class="table-wrap"><table class="candidates"><caption>{esc(title)}</caption>'
        f"<thead><tr>{head}</tr>"
        f"</thead><tbody>{rows}</tbody></table></div>"
    )


def diff_section(view: ReportInputs) -> Section:
    """The legacy-versus-typed section.

    Parameters
    ----------
    view
        The finished inputs of the page (diff frames, and the qualification document for the
        conformance checks).

    Returns
    -------
    Section
        Verdict, difference classes, the decision timeline, the first differing decision and
        the first divergence of the contexts side by side, and the conformance checks.
    """
    section = Section(
        "diff",
        "Legacy versus typed host",
        "The candidate was recorded through the legacy VictimSelector host and the typed "
        "preemption-policy host on the same requests. Differences the typed contract explains "
        "(it tells the policy who is asking and lets it abstain) are expected; any other "
        "difference means the integrations behave differently. On the timeline, the dashed line "
        "is the first divergence of the contexts: from there on the two runs follow different "
        "histories, so later decisions are not compared.",
    )
    verdict = view.diff_verdict
    if verdict is None:
        section.note("diff/diff.json is absent: the legacy-versus-typed comparison did not run.")
    else:
        section.html(f"<p>Verdict: {badge(verdict, 'ok' if view.diff_equivalent else 'bad')}</p>")
        if view.diff_classes.height:
            section.html(
                html_table(
                    view.diff_classes,
                    [
                        Column("kind", "class"),
                        Column("contract", "explained by the contracts", fmt_bool),
                        Column("count", "count", fmt_int, True),
                        Column("cause"),
                    ],
                )
            )
        timeline = view.diff_timeline
        first = view.first_difference or {}
        divergence = first.get("divergence")
        if timeline is not None and timeline.height:
            section.chart(
                "timeline",
                charts.diff_timeline_chart(
                    timeline, None if divergence is None else int(divergence["seq"])
                ),
                "legacy and typed decisions with their differences",
            )
        decision = first.get("decision")
        if decision is not None:
            section.html(f"<h3>First differing decision: seq {esc(decision.get('seq'))}</h3>")
            kind = "ok" if decision.get("contract") else "bad"
            section.html(
                f"<p>{badge(str(decision.get('kind')), kind)} {esc(decision.get('detail', ''))}</p>"
            )
            section.html(
                _side_by_side(
                    dict(decision.get("legacy") or {}),
                    dict(decision.get("typed") or {}),
                    list(decision.get("fields") or []),
                )
            )
        if divergence is not None:
            section.html(f"<h3>First divergence of the contexts: seq {esc(divergence['seq'])}</h3>")
            section.html(f"<p>{esc(divergence.get('detail', ''))}</p>")
            legacy = divergence.get("legacy") or {}
            typed = divergence.get("typed") or {}
            section.html(
                _side_by_side(
                    dict(legacy.get("context") or {}),
                    dict(typed.get("context") or {}),
                    list(divergence.get("context_fields") or []),
                )
            )
            differing = {
                (c.get("position"), c.get("field")) for c in divergence.get("differing_cells") or []
            }
            section.html(
                '<div class="pair">'
                + _candidates(legacy, differing, "legacy candidates")
                + _candidates(typed, differing, "typed candidates")
                + "</div>"
            )
    checks = view.qualification.get("conformance") or []
    section.html("<h3>Conformance checks</h3>")
    if not checks:
        section.note("conformance.json is absent or lists no check.")
    else:
        frame = pl.DataFrame(
            checks, schema={"name": pl.String, "passed": pl.Boolean, "detail": pl.String}
        ).with_columns(
            pl.when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("fail")).alias("cls")
        )
        section.html(
            html_table(
                frame,
                [Column("name", "check"), Column("passed", "passed", fmt_bool), Column("detail")],
                row_class="cls",
            )
        )
    return section
