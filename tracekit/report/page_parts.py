"""Building blocks of the report's sections: :class:`Section` and small HTML helpers.

A section is an anchor, a title, a plain-language caption and a body. Charts are referenced by
id: the body holds ``<div class="chart" data-spec="...">`` and the page
(:mod:`tracekit.report.html`) embeds each chart's Vega-Lite spec in a JSON ``<script>`` element.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import altair as alt

from tracekit.report.markup import esc

__all__ = ["Section", "badge"]


@dataclass
class Section:
    """One section of the page."""

    anchor: str
    title: str
    caption: str
    body: list[str] = field(default_factory=list)
    charts: dict[str, alt.TopLevelMixin] = field(default_factory=dict)

    def chart(self, name: str, chart: alt.TopLevelMixin, alt_text: str) -> None:
        """Add a chart placeholder to the body and remember its spec."""
        chart_id = f"{self.anchor}-{name}"
        self.charts[chart_id] = chart
        self.body.append(
            f'<figure><div class="chart" id="chart-{chart_id}" data-spec="spec-{chart_id}" '
            f'role="img" aria-label="{esc(alt_text)}"></div></figure>'
        )

    def note(self, text: str) -> None:
        """Add a grey note (escaped)."""
        self.body.append(f'<p class="note">{esc(text)}</p>')

    def html(self, markup: str) -> None:
        """Add HTML built by this module (all data in it already escaped)."""
        self.body.append(markup)


def badge(text: str, kind: str) -> str:
    """A small rounded label (``kind``: ``ok``, ``bad`` or ``warn``), text escaped."""
    return f'<span class="badge {kind}">{esc(text)}</span>'
