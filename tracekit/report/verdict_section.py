"""The verdict where people look: the go/no-go line, the load x strategy matrix, the rule.

Laid out from ``qualification.json`` alone (:mod:`tracekit.qualify.verdicts` computed it):

- :func:`headline_html`: the page's first line, GO or NO-GO with the loads and the reason;
- :func:`matrix_html`: one row per load (lightest first), one column per strategy, the label in
  each (with the repeats that would decide an inconclusive one);
- :func:`rule_html`: the registered endpoints, margins and error control, the A/A control's
  measured false-positive rate (a warning when it exceeds the nominal rate) and the requests the
  engine rejected;
- :func:`effectiveness_html`: every (load, strategy) with each endpoint's interval.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.report.markup import Column, esc, fmt_int, html_table

__all__ = ["effectiveness_html", "headline_html", "matrix_html", "rule_html"]

# Short forms of the labels in the matrix.
_SHORT = {"identical to built-in": "identical", "not run": "-"}


def headline_html(q: dict[str, Any]) -> str:
    """The go/no-go line ("" for documents without one)."""
    headline = q.get("headline")
    if not headline:
        return ""
    # A sweep's headline decides nothing ("none"): neither green nor red.
    kind = {"go": "ok", "no-go": "bad"}.get(headline["decision"], "warn")
    return f'<p class="headline {kind}" id="go-no-go"><strong>{esc(headline["text"])}</strong></p>'


def _label_class(label: str | None) -> str:
    return "" if label is None else "lbl-" + "".join(c if c.isalnum() else "-" for c in label)


def matrix_html(q: dict[str, Any]) -> str:
    """The load x strategy matrix of labels ("" without one)."""
    matrix = q.get("matrix")
    if not matrix or not matrix.get("loads"):
        return ""
    candidate = q.get("candidate")
    head = "<th>load</th>" + "".join(
        f'<th class="{"cand" if s == candidate else ""}">{esc(s)}</th>'
        for s in matrix["strategies"]
    )
    rows = []
    for load, labels, needed in zip(
        matrix["loads"], matrix["labels"], matrix["repeats_needed"], strict=True
    ):
        cells = []
        for label, n in zip(labels, needed, strict=True):
            text = "-" if label is None else _SHORT.get(label, label)
            if label == "inconclusive":
                text += f" (~{n} repeats)" if n else " (undecidable)"
            cells.append(f'<td class="{_label_class(label)}">{esc(text)}</td>')
        rows.append(f"<tr><th>{esc(load)}</th>{''.join(cells)}</tr>")
    return (
        '<div class="table-wrap"><table class="matrix" id="verdict-matrix">'
        "<caption>Label per load (rows, lightest first) and strategy (columns)</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def rule_html(q: dict[str, Any]) -> str:
    """The registered rule, its error control, the A/A control and the rejected requests."""
    rule = q["effectiveness"]["rule"]
    parts = []
    if "endpoints" in rule:
        frame = pl.DataFrame(
            [
                {
                    "name": e["name"],
                    "title": e["title"],
                    "better": e["better"],
                    "margin": f"{e['margin']:g}{'%' if e['unit'] == '%' else ' pp'}",
                    "scale": "% of the built-in mean" if e["scale"] == "relative" else "pp",
                    "role": "primary and guardrail" if e["primary"] else "guardrail",
                }
                for e in rule["endpoints"]
            ]
        )
        parts.append(
            html_table(
                frame,
                [
                    Column("name", "endpoint"),
                    Column("title", "what"),
                    Column("better", "better"),
                    Column("margin", "margin"),
                    Column("scale", "change in"),
                    Column("role", "role"),
                ],
                caption="Endpoints and margins (registered in qualify.json before the runs)",
            )
        )
        parts.append(
            '<p class="note">'
            + esc(
                f"Error control: {rule['comparisons']} comparisons (strategies, including the "
                f"A/A control, x loads x endpoints); each interval is a paired Student-t "
                f"interval at {rule['confidence']:.5%} (Bonferroni: 1 - {rule['alpha']:g} / "
                f"{rule['comparisons']}), so with probability at least "
                f"{1 - rule['alpha']:.0%} every interval of the report holds at once and no "
                f"label is wrong. At least {rule['min_repeats']} paired repeats are needed."
            )
            + "</p>"
        )
    aa = q.get("aa_control")
    if aa is not None:
        kind = "ok" if aa["trusted"] else "bad"
        parts.append(f'<p class="aa {kind}" id="aa-control">{esc(aa["text"])}.</p>')
    note = q.get("recomputation")
    if note:
        parts.append(f'<p class="note" id="recomputation">{esc(note)}.</p>')
    rejections = q.get("rejections")
    if rejections:
        parts.append(f'<p class="note" id="rejections">{esc(rejections["text"])}.</p>')
    return "".join(parts)


def _interval(stats: dict[str, Any]) -> str:
    unit = " pp" if stats["unit"] == "pp" else "%"
    if stats["low"] is None or stats["high"] is None:
        note = stats.get("note") or "no interval"
        return "n/a" if stats["mean"] is None else f"{stats['mean']:+.1f}{unit} ({note})"
    return f"{stats['mean']:+.1f}{unit} [{stats['low']:+.1f}, {stats['high']:+.1f}]"


def effectiveness_html(q: dict[str, Any]) -> str:
    """Every (load, strategy) entry with each endpoint's mean change and interval."""
    entries = q["effectiveness"]["cells"]
    if not entries:
        return '<p class="note">No strategy could be paired with the baseline.</p>'
    names = list(entries[0]["endpoints"])
    rows = []
    for e in entries:
        row = {
            "load": e.get("load") or e["cell"],
            "strategy": e["strategy"],
            "label": e["label"],
            "pairs": e["n"],
            "needed": e.get("repeats_needed"),
            "reason": e["reason"],
            "cls": e["label"] + (" cand" if e["strategy"] == q["candidate"] else ""),
        }
        for name in names:
            stats = e["endpoints"][name]
            row[name] = _interval(stats) + {"worse": " worse", "better": " better"}.get(
                stats["verdict"], ""
            )
        rows.append(row)
    table = pl.DataFrame(rows)
    return html_table(
        table,
        [
            Column("load"),
            Column("strategy"),
            Column("label", "label"),
            Column("pairs", "pairs", fmt_int, True),
            Column("needed", "repeats to decide", fmt_int, True),
            *[Column(n, f"{n.replace('_', ' ')} change [interval]") for n in names],
            Column("reason"),
        ],
        row_class="cls",
        caption="Mean paired change against the built-in rule per load (lightest first) and "
        "strategy, with its corrected interval; 'worse'/'better': beyond the margin",
    )
