"""``tracekit fidelity``: two recordings of one run, compared step by step, whichever engine.

:func:`compare_fidelity` checks both bundles whole, then runs the comparison of their engine:
the SGLang one (:func:`tracekit.sglang.fidelity.compare_sglang_fidelity`) when either bundle was
recorded by ``tracekit record sglang``, the vLLM one
(:func:`tracekit.vllm.fidelity.compare_vllm_fidelity`) otherwise. It is the one module of the
base that imports the engines' packages (``tests/test_real_engine_base.py`` checks it).
"""

from __future__ import annotations

import os

from tracekit.sglang.fidelity import SglangFidelityReport, compare_sglang_fidelity
from tracekit.sglang.record import is_sglang_bundle
from tracekit.trace.schema import trace_schema
from tracekit.trace.validate import open_checked
from tracekit.trace.values import ALL_COLUMNS
from tracekit.vllm.fidelity import FidelityReport, compare_vllm_fidelity

__all__ = ["compare_fidelity"]


def compare_fidelity(
    first: str | os.PathLike[str], second: str | os.PathLike[str]
) -> FidelityReport | SglangFidelityReport:
    """Compare two recordings of one run step by step; report the first difference.

    Parameters
    ----------
    first
        A bundle recorded by ``tracekit record sim`` (the embedded engine), or any bundle.
    second
        A bundle of the same run recorded by ``tracekit record vllm`` or ``record sglang``
        (the real engine), or any bundle.

    Returns
    -------
    FidelityReport or SglangFidelityReport
        ``matched`` and ``exit_code``; on a mismatch, where and what.

    Raises
    ------
    FidelityInputError
        The bundles are not recordings of one run (workload, scheduling settings or strategy
        differ), a path holds several bundles, or a recording is incomplete.
    TraceSchemaError
        A bundle cannot be read.
    """
    # Every table is compared step by step: each is checked whole first (either path).
    for path in (first, second):
        open_checked(path, dict.fromkeys(trace_schema().tables, ALL_COLUMNS))
    if is_sglang_bundle(first) or is_sglang_bundle(second):  # SGLang recordings: their own path
        return compare_sglang_fidelity(first, second)
    return compare_vllm_fidelity(first, second)
