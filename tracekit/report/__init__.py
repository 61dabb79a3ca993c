"""The qualification report's page: HTML and Altair charts from finished frames.

``render_page(view, out_html)`` writes one self-contained HTML page from a
:class:`ReportInputs` (the verdicts and the small frames behind every chart and table). This
package reads no results folder and computes no verdict or statistic: ``tracekit.qualify``
does (``tracekit.qualify.write_report``), and imports go one way, qualify to report.
``docs/report.md`` explains how to read the page.
"""

from tracekit.report.html import REPORT_NAME, render_page
from tracekit.report.inputs import ReportInputs

__all__ = ["REPORT_NAME", "ReportInputs", "render_page"]
