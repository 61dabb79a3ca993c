"""The qualification report: verdicts (``qualification.json``) and one offline HTML page.

``compute_qualification(results_dir)`` reads a folder written by ``tracekit qualify`` and returns
the verdicts: the lifecycle labels, the functional compatibility gate and the effectiveness label
of every cell and strategy. ``render_report(results_dir, out_html)`` writes the HTML report and
``qualification.json`` beside it. ``docs/report.md`` explains how to read both.
"""

from tracekit.report.html import QUALIFICATION_NAME, REPORT_NAME, render_report
from tracekit.report.results import Results, ResultsError, load_results
from tracekit.report.verdicts import compute_qualification, write_qualification

__all__ = [
    "QUALIFICATION_NAME",
    "REPORT_NAME",
    "Results",
    "ResultsError",
    "compute_qualification",
    "load_results",
    "render_report",
    "write_qualification",
]
