"""Loader for plain workload tables: the canonical columns themselves, as CSV or Parquet.

Columns (extra columns are ignored):

* ``arrival_s`` (seconds from the workload start, >= 0; kept as written, then sorted),
  ``prompt_tokens`` (> 0) and ``output_tokens`` (>= 1) are required;
* ``max_tokens`` is optional; missing or empty means ``output_tokens``, and a value below
  ``output_tokens`` is an error;
* ``priority`` is optional (integer, any sign); missing or empty means 0;
* ``request_id`` is optional; missing means ``req-<data row index, 6 digits>``;
* ``prefix_hash_ids`` (a list of integers) is kept when present; it needs Parquet.

CSV locations are reported as file lines (the header is line 1); Parquet locations as rows
counted from 1.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.workloads._columns import (
    integer_column,
    number_column,
    row_ids,
)
from tracekit.workloads._errors import (
    describe_value,
    workload_error,
)
from tracekit.workloads._readers import (
    ROW,
    Locator,
    check_columns,
    check_not_empty,
    check_readable,
    csv_locator,
    parquet_error,
    parquet_locator,
    read_csv_strings,
    read_parquet_rows,
)
from tracekit.workloads.detect import WorkloadFormat, parse_format
from tracekit.workloads.model import PREFIX_HASH_IDS, Workload, assemble_workload

__all__ = ["TABLE_COLUMNS", "read_table", "scan_table"]

#: Required columns of a plain workload table.
TABLE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")

_WHAT = "a workload table"


def _table_format(path: Path, format: str | WorkloadFormat | None) -> WorkloadFormat:
    if format is not None:
        fmt = parse_format(format, path)
        if fmt not in (WorkloadFormat.CSV, WorkloadFormat.PARQUET):
            raise workload_error(
                path,
                field="format",
                expected="'csv' or 'parquet' for a plain workload table",
                found=repr(fmt.value),
                fix="use tracekit.workloads.load_workload for other formats",
            )
        return fmt
    # The caller already chose a table, so only the container is detected, not the header:
    # a table with a missing column should get a missing-column error.
    check_readable(path)
    with path.open("rb") as handle:
        magic = handle.read(4)
    if path.suffix.lower() in {".parquet", ".pq"} or magic == b"PAR1":
        return WorkloadFormat.PARQUET
    return WorkloadFormat.CSV


def scan_table(path: str | Path, *, format: str | WorkloadFormat | None = None) -> pl.LazyFrame:
    """Lazily read a plain workload table (CSV or Parquet) as canonical columns, unchecked.

    Only the columns are checked here; bad cells make ``collect()`` raise a polars error. Rows
    are in file order. Use :func:`read_table` for a checked :class:`~tracekit.workloads.Workload`.

    Parameters
    ----------
    path
        The table file.
    format
        ``"csv"`` or ``"parquet"``; detected from the extension and content by default.

    Returns
    -------
    pl.LazyFrame
        The canonical columns, with the defaults of the module docstring filled in.

    See Also
    --------
    read_table : The checked, eager form.
    """
    path = Path(path)
    fmt = _table_format(path, format)
    if fmt is WorkloadFormat.PARQUET:
        try:
            lazy = pl.scan_parquet(path)
            names = lazy.collect_schema().names()
        except (pl.exceptions.PolarsError, OSError) as error:
            raise parquet_error(path, error) from error
    else:
        check_readable(path)
        lazy = pl.scan_csv(path)
        names = lazy.collect_schema().names()
    check_columns(lazy, path, TABLE_COLUMNS, what=_WHAT)
    output = pl.col("output_tokens").cast(pl.Int64)
    columns = [
        (
            pl.col("request_id").cast(pl.String)
            if "request_id" in names
            else row_ids("req").alias("request_id")
        ),
        pl.col("arrival_s").cast(pl.Float64),
        pl.col("prompt_tokens").cast(pl.Int64),
        output.alias("output_tokens"),
        (
            pl.col("max_tokens").cast(pl.Int64).fill_null(output)
            if "max_tokens" in names
            else output.alias("max_tokens")
        ),
        (
            pl.col("priority").cast(pl.Int64).fill_null(0)
            if "priority" in names
            else pl.lit(0, dtype=pl.Int64).alias("priority")
        ),
    ]
    if PREFIX_HASH_IDS in names:
        columns.append(pl.col(PREFIX_HASH_IDS).cast(pl.List(pl.Int64)))
    return lazy.with_row_index(ROW).select(columns)


def _request_ids(raw: pl.DataFrame, path: Path, locate: Locator) -> pl.Series:
    ids = raw.get_column("request_id").cast(pl.String)
    bad = ids.is_null() | (ids.str.strip_chars() == "")
    if bad.any():
        position = bad.arg_true()[0]
        raise workload_error(
            path,
            where=locate(int(raw.get_column(ROW)[position])),
            field="request_id",
            expected="a non-empty request id",
            found=describe_value(ids[position]),
            fix="fill in the id, or drop the request_id column to number requests",
        )
    return ids.rename("request_id")


def _prefix_hash_ids(raw: pl.DataFrame, path: Path) -> pl.Series:
    column = raw.get_column(PREFIX_HASH_IDS)
    dtype = column.dtype
    if not (isinstance(dtype, pl.List) and (dtype.inner.is_integer() or dtype.inner == pl.Null)):
        raise workload_error(
            path,
            field=PREFIX_HASH_IDS,
            expected="a list-of-integers column (Parquet)",
            found=f"a column of type {dtype}",
            fix="write the table as Parquet with prefix_hash_ids as list<int64>, or drop it",
        )
    return column.cast(pl.List(pl.Int64))


def read_table(path: str | Path, *, format: str | WorkloadFormat | None = None) -> Workload:
    """Read a plain workload table (CSV or Parquet) into a checked workload.

    Parameters
    ----------
    path
        The table file.
    format
        ``"csv"`` or ``"parquet"``; detected from the extension and content by default.

    Returns
    -------
    Workload
        Format ``"csv"`` or ``"parquet"``, named after the file stem.

    Raises
    ------
    tracekit.errors.WorkloadError
        For an empty, truncated or corrupt file, a missing column, or a cell that is not a
        valid value for its column (see the module docstring).

    See Also
    --------
    scan_table : The lazy, unchecked form.
    """
    path = Path(path)
    fmt = _table_format(path, format)
    if fmt is WorkloadFormat.PARQUET:
        raw, locate = read_parquet_rows(path), parquet_locator
    else:
        raw, locate = read_csv_strings(path, what=_WHAT), csv_locator
    check_columns(raw, path, TABLE_COLUMNS, what=_WHAT)
    check_not_empty(raw, path, what=_WHAT)
    output = integer_column(raw, "output_tokens", path, locate, minimum=1)
    columns = [
        (
            _request_ids(raw, path, locate)
            if "request_id" in raw.columns
            else raw.select(row_ids("req").alias("request_id")).to_series()
        ),
        number_column(raw, "arrival_s", path, locate, minimum=0),
        integer_column(raw, "prompt_tokens", path, locate, minimum=1),
        output,
    ]
    if "max_tokens" in raw.columns:
        cap = integer_column(raw, "max_tokens", path, locate, minimum=1, nullable=True)
        cap = cap.fill_null(output)
        below = cap < output
        if below.any():
            position = below.arg_true()[0]
            raise workload_error(
                path,
                where=locate(int(raw.get_column(ROW)[position])),
                field="max_tokens",
                expected=f"a cap >= output_tokens ({output[position]})",
                found=describe_value(raw.get_column("max_tokens")[position]),
                fix="raise max_tokens or lower output_tokens on that row",
            )
        columns.append(cap.rename("max_tokens"))
    else:
        columns.append(output.rename("max_tokens"))
    if "priority" in raw.columns:
        priority = integer_column(raw, "priority", path, locate, nullable=True).fill_null(0)
    else:
        priority = pl.zeros(raw.height, dtype=pl.Int64, eager=True)
    columns.append(priority.rename("priority"))
    if PREFIX_HASH_IDS in raw.columns:
        columns.append(_prefix_hash_ids(raw, path))
    return assemble_workload(path, format=fmt.value, frame=pl.DataFrame(columns), options={})
