"""``tracekit qualify``: the end-to-end job, the results reader and the verdicts.

- :mod:`~tracekit.qualify.job`: the job (runs, cells, diff, conformance, replay, report);
- :mod:`~tracekit.qualify.results`: reading a results folder;
- :mod:`~tracekit.qualify.verdicts` and :mod:`~tracekit.qualify.effectiveness`: the rules;
- :mod:`~tracekit.qualify.frames` and :mod:`~tracekit.qualify.diff_frames`: the chart data;
- :mod:`~tracekit.qualify.reporting`: ``write_report``, which hands all of it to
  :mod:`tracekit.report` to render.

``docs/qualify.md`` describes what the job runs and the folder it writes; ``docs/report.md``
the report and the verdict rules.
"""

from tracekit.qualify.job import QualifyPlan, run_qualify
from tracekit.qualify.reporting import report_inputs, write_report
from tracekit.qualify.results import Results, ResultsError, load_results
from tracekit.qualify.verdicts import (
    QUALIFICATION_NAME,
    compute_qualification,
    write_qualification,
)

__all__ = [
    "QUALIFICATION_NAME",
    "QualifyPlan",
    "Results",
    "ResultsError",
    "compute_qualification",
    "load_results",
    "report_inputs",
    "run_qualify",
    "write_qualification",
    "write_report",
]
