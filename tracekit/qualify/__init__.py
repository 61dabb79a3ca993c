"""``tracekit qualify``: the end-to-end qualification job (:mod:`~tracekit.qualify.job`).

``docs/qualify.md`` describes what it runs and the folder it writes.
"""

from tracekit.qualify.job import QualifyPlan, run_qualify

__all__ = ["QualifyPlan", "run_qualify"]
