"""Loader for the Azure LLM inference trace 2023 CSVs (conversation and code services).

The files (``AzureLLMInferenceTrace_conv.csv``, ``AzureLLMInferenceTrace_code.csv``, from
github.com/Azure/AzurePublicDataset) have one request a line::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,374,44

Rules:

* ``arrival_s`` = TIMESTAMP - the earliest TIMESTAMP, in seconds (the trace is sorted, so that
  is the first line). The 7 fractional digits are kept to the nanosecond.
* ``prompt_tokens`` = ContextTokens (> 0); ``output_tokens`` = GeneratedTokens (>= 1).
* ``max_tokens`` = ``output_tokens``: the trace records how many tokens were generated, not the
  client's cap, so the replay stops exactly where the original request stopped.
* ``request_id`` = ``azure-<line index, 0-based over data lines, 6 digits>``, e.g.
  ``azure-000000`` for the first request; ``priority`` = 0.

The code trace's bursts (many gaps under 10 ms, some requests at the same instant) are kept as
they are: equal timestamps keep their file order.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.workloads._columns import (
    integer_column,
    row_ids,
    seconds_since_earliest,
    timestamp_column,
    timestamp_expr,
)
from tracekit.workloads._readers import (
    ROW,
    check_columns,
    check_not_empty,
    check_readable,
    csv_locator,
    read_csv_strings,
)
from tracekit.workloads.detect import WorkloadFormat
from tracekit.workloads.model import Workload, assemble_workload

__all__ = ["AZURE_COLUMNS", "read_azure", "scan_azure"]

#: The source columns, in file order.
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_WHAT = "an Azure LLM inference trace CSV"


def _canonical(frame: pl.LazyFrame) -> pl.LazyFrame:
    # Input: ROW, TIMESTAMP (Datetime ns), ContextTokens and GeneratedTokens (Int64).
    return frame.select(
        row_ids("azure").alias("request_id"),
        seconds_since_earliest(pl.col("TIMESTAMP")).alias("arrival_s"),
        pl.col("ContextTokens").alias("prompt_tokens"),
        pl.col("GeneratedTokens").alias("output_tokens"),
        pl.col("GeneratedTokens").alias("max_tokens"),
        pl.lit(0, dtype=pl.Int64).alias("priority"),
    )


def scan_azure(path: str | Path) -> pl.LazyFrame:
    """Lazily read an Azure trace CSV as canonical workload columns, without row checks.

    Only the header is checked here; cells that do not parse make ``collect()`` raise a polars
    error (or, for timestamps, yield a null ``arrival_s``). Use :func:`read_azure` for a
    checked :class:`~tracekit.workloads.Workload`. Rows are in file order, not re-sorted.

    Parameters
    ----------
    path
        The trace CSV.

    Returns
    -------
    pl.LazyFrame
        The canonical columns (see :mod:`tracekit.workloads.model`).

    See Also
    --------
    read_azure : The checked, eager form.
    """
    path = Path(path)
    check_readable(path)
    raw = pl.scan_csv(path, infer_schema=False)
    check_columns(raw, path, AZURE_COLUMNS, what=_WHAT)
    typed = raw.with_row_index(ROW).select(
        ROW,
        timestamp_expr("TIMESTAMP"),
        pl.col("ContextTokens").str.strip_chars().cast(pl.Int64),
        pl.col("GeneratedTokens").str.strip_chars().cast(pl.Int64),
    )
    return _canonical(typed)


def read_azure(path: str | Path) -> Workload:
    """Read an Azure LLM inference trace 2023 CSV into a checked workload.

    Parameters
    ----------
    path
        The trace CSV (conversation or code service; no trailing newline is needed).

    Returns
    -------
    Workload
        Format ``"azure"``; ``options["time_origin"]`` records the wall-clock time of
        ``arrival_s == 0``.

    Raises
    ------
    tracekit.errors.WorkloadError
        If the file is empty, lacks a column, or a line has an unparseable timestamp or a
        token count that is missing, fractional, NaN, or too small (ContextTokens < 1,
        GeneratedTokens < 1).

    See Also
    --------
    scan_azure : The lazy, unchecked form.

    Examples
    --------
    >>> workload = read_azure("traces/azure-llm-2023/azure_conv_sample.csv")
    >>> workload.num_requests, workload.options["time_origin"]
    (1000, '2023-11-16 18:15:46.680590')
    >>> workload.frame.row(1)
    ('azure-000001', 4.314579, 396, 109, 109, 0)
    """
    path = Path(path)
    raw = read_csv_strings(path, what=_WHAT)
    check_columns(raw, path, AZURE_COLUMNS, what=_WHAT)
    check_not_empty(raw, path, what=_WHAT)
    typed = pl.DataFrame(
        [
            raw.get_column(ROW),
            timestamp_column(raw, "TIMESTAMP", path, csv_locator),
            integer_column(raw, "ContextTokens", path, csv_locator, minimum=1),
            integer_column(raw, "GeneratedTokens", path, csv_locator, minimum=1),
        ]
    )
    # Kept as text so the nanosecond digits survive the trip through JSON.
    origin = typed.select(pl.col("TIMESTAMP").min().dt.to_string("%Y-%m-%d %H:%M:%S%.f")).item()
    frame = _canonical(typed.lazy()).collect()
    options = {"time_origin": origin}
    return assemble_workload(path, format=WorkloadFormat.AZURE.value, frame=frame, options=options)
