"""Loader for the original BidKV's frozen traces: JSON lines of token ids and arrival offsets.

One JSON object a line (docs/workloads.md, "Original BidKV frozen trace (bidkv-trace)")::

    {"request_id": "mixed-0000", "prompt_tokens": [128000, 9906, ...], "max_new_tokens": 128,
     "arrival_offset_ms": 263.1, "workload": "mixed", "slo_ttft_ms": 500.0, "metadata": {}}

Rules:

* ``request_id`` is kept (it must be unique).
* ``arrival_s`` = ``arrival_offset_ms / 1000``; the offsets are already relative to the run start
  and are kept (no re-basing).
* ``prompt_tokens`` = the length of the ``prompt_tokens`` id list (>= 1 id).
* ``output_tokens`` = ``max_tokens`` = ``max_new_tokens`` (>= 1). The frozen trace records no
  real output length, only the cap, so the replay assumes every request generates up to its
  cap: the cap is the only length there is.
* ``priority`` = 0. ``workload``, ``slo_ttft_ms`` and ``metadata`` are not part of the table.
* The workload name is the file stem, as in the original ``FrozenTrace``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.workloads._columns import (
    integer_column,
    number_column,
)
from tracekit.workloads._errors import (
    describe_value,
    workload_error,
)
from tracekit.workloads._readers import (
    ROW,
    check_columns,
    jsonl_locator,
    read_ndjson_records,
)
from tracekit.workloads.detect import WorkloadFormat
from tracekit.workloads.model import Workload, assemble_workload

__all__ = ["BIDKV_TRACE_COLUMNS", "read_bidkv_trace"]

#: Required keys of each line.
BIDKV_TRACE_COLUMNS = ("request_id", "prompt_tokens", "max_new_tokens", "arrival_offset_ms")

_WHAT = "a BidKV frozen trace (JSON lines)"


def _prompt_lengths(frame: pl.DataFrame, path: Path) -> pl.Series:
    ids = frame.get_column("prompt_tokens")
    dtype = ids.dtype
    if not (isinstance(dtype, pl.List) and (dtype.inner.is_integer() or dtype.inner == pl.Null)):
        raise workload_error(
            path,
            field="prompt_tokens",
            expected="a list of token ids on every line",
            found=f"values of type {dtype}",
            fix="write prompt_tokens as a JSON array of integers",
        )
    lengths = ids.list.len().cast(pl.Int64)
    bad = (ids.is_null() | (lengths == 0)).fill_null(True)
    if bad.any():
        position = bad.arg_true()[0]
        raise workload_error(
            path,
            where=jsonl_locator(path)(int(frame.get_column(ROW)[position])),
            field="prompt_tokens",
            expected="a non-empty list of token ids",
            found=describe_value(ids[position].to_list() if ids[position] is not None else None),
            fix="correct or remove that line",
        )
    return lengths.rename("prompt_tokens")


def _request_ids(frame: pl.DataFrame, path: Path) -> pl.Series:
    ids = frame.get_column("request_id")
    if ids.dtype != pl.String and not ids.dtype.is_integer() and ids.dtype != pl.Null:
        raise workload_error(
            path,
            field="request_id",
            expected="a string on every line",
            found=f"values of type {ids.dtype}",
            fix="write request_id as a JSON string",
        )
    ids = ids.cast(pl.String)
    bad = ids.is_null() | (ids.str.strip_chars() == "")
    if bad.any():
        position = bad.arg_true()[0]
        raise workload_error(
            path,
            where=jsonl_locator(path)(int(frame.get_column(ROW)[position])),
            field="request_id",
            expected="a non-empty request id",
            found=describe_value(ids[position]),
            fix="give that line a request_id",
        )
    return ids


def read_bidkv_trace(path: str | Path) -> Workload:
    """Read an original BidKV frozen trace (JSON lines) into a checked workload.

    Parameters
    ----------
    path
        The trace file.

    Returns
    -------
    Workload
        Format ``"bidkv-trace"``, named after the file stem.

    Raises
    ------
    tracekit.errors.WorkloadError
        For an empty file, a line that is not a JSON object, a missing key, an empty or
        non-integer ``prompt_tokens`` list, ``max_new_tokens`` < 1, a negative or non-numeric
        ``arrival_offset_ms``, or duplicate request ids.
    """
    path = Path(path)
    raw = read_ndjson_records(path, what=_WHAT)
    check_columns(raw, path, BIDKV_TRACE_COLUMNS, what=_WHAT)
    locate = jsonl_locator(path)
    frame = pl.DataFrame(
        [
            _request_ids(raw, path),
            number_column(raw, "arrival_offset_ms", path, locate, minimum=0),
            _prompt_lengths(raw, path),
            integer_column(raw, "max_new_tokens", path, locate, minimum=1),
        ]
    ).select(
        "request_id",
        (pl.col("arrival_offset_ms") / 1000.0).alias("arrival_s"),
        "prompt_tokens",
        pl.col("max_new_tokens").alias("output_tokens"),
        pl.col("max_new_tokens").alias("max_tokens"),
        pl.lit(0, dtype=pl.Int64).alias("priority"),
    )
    return assemble_workload(path, format=WorkloadFormat.BIDKV_TRACE.value, frame=frame, options={})
