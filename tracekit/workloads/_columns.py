"""Column parsers shared by the loaders: numbers, token counts and wall-clock timestamps.

Each parser checks a whole source column at once and, when a value is bad, raises a one-line
error naming the first bad record's location, the source field, and the value found.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.workloads._errors import describe_value, workload_error
from tracekit.workloads._readers import ROW, Locator

__all__ = [
    "TIMESTAMP_LAYOUT",
    "integer_column",
    "number_column",
    "row_ids",
    "seconds_since_earliest",
    "timestamp_column",
    "timestamp_expr",
]


def number_column(
    frame: pl.DataFrame,
    column: str,
    path: Path,
    locate: Locator,
    *,
    minimum: float | None = None,
    integral: bool = False,
    nullable: bool = False,
) -> pl.Series:
    """Parse a source column as numbers and check them, row by row but in one expression.

    Parameters
    ----------
    frame
        The source frame, with the :data:`ROW` column.
    column
        The source column; strings, integers and floats are accepted.
    path
        The workload file, for messages.
    locate
        Turns a :data:`ROW` value into a location for messages.
    minimum
        Smallest allowed value, or ``None`` for no bound.
    integral
        Require whole numbers (``12`` or ``12.0``, not ``12.5``).
    nullable
        Allow empty values; they stay null in the result.

    Returns
    -------
    pl.Series
        The column as Float64 (``integral=False``) or Int64 (``integral=True``).
    """
    source = frame.get_column(column)
    dtype = source.dtype
    if dtype == pl.String:
        parsed = source.str.strip_chars().cast(pl.Float64, strict=False)
    elif dtype.is_numeric() and dtype != pl.Boolean:
        parsed = source.cast(pl.Float64)
    elif dtype == pl.Null:
        parsed = pl.repeat(None, frame.height, dtype=pl.Float64, eager=True)
    else:
        raise workload_error(
            path,
            field=column,
            expected="numbers",
            found=f"values of type {dtype}",
            fix=f"write {column!r} as a plain number in every record",
        )
    bad = (parsed.is_null() & (source.is_not_null() | (not nullable))) | parsed.is_nan()
    bad = bad | parsed.is_infinite()
    if integral:
        # Values are parsed through Float64, which holds every integer exactly only below 2**53;
        # no token count or priority comes near that, so larger values are rejected as bad.
        bad = bad | (parsed != parsed.floor()) | (parsed.abs() >= 2.0**53)
    if minimum is not None:
        bad = bad | (parsed < minimum)
    if bad.any():
        position = bad.arg_true()[0]
        value = source[position]
        expected = "an integer" if integral else "a number"
        if minimum is not None:
            expected += f" >= {minimum:g}"
        raise workload_error(
            path,
            where=locate(int(frame.get_column(ROW)[position])),
            field=column,
            expected=expected,
            found=describe_value(value),
            fix="correct or remove that record",
        )
    return (parsed.cast(pl.Int64) if integral else parsed).rename(column)


def integer_column(
    frame: pl.DataFrame,
    column: str,
    path: Path,
    locate: Locator,
    *,
    minimum: int | None = None,
    nullable: bool = False,
) -> pl.Series:
    """Parse a source column as whole numbers; see :func:`number_column`.

    Parameters
    ----------
    frame
        The source frame, with the :data:`ROW` column.
    column
        The source column.
    path
        The workload file, for messages.
    locate
        Turns a :data:`ROW` value into a location for messages.
    minimum
        Smallest allowed value, or ``None`` for no bound.
    nullable
        Allow empty values; they stay null in the result.

    Returns
    -------
    pl.Series
        Int64 values.
    """
    return number_column(
        frame, column, path, locate, minimum=minimum, integral=True, nullable=nullable
    )


#: Human description of the timestamp layouts :func:`timestamp_column` accepts.
TIMESTAMP_LAYOUT = "a timestamp like '2023-11-16 18:15:46.6805900'"


def timestamp_expr(column: str) -> pl.Expr:
    """Parse wall-clock timestamp strings into naive nanosecond datetimes (null if unparseable).

    Accepts ``YYYY-MM-DD HH:MM:SS`` with any number of fractional digits (the Azure traces have 7,
    one more than :func:`datetime.datetime.fromisoformat` takes before Python 3.11), a ``T``
    instead of the space, and an optional UTC offset or ``Z`` (converted to UTC, then dropped).

    Parameters
    ----------
    column
        The String column to parse.

    Returns
    -------
    pl.Expr
        A ``Datetime("ns")`` expression.
    """
    text = pl.col(column).str.strip_chars().str.replace("T", " ", literal=True)
    naive = text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False)
    aware = (
        text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f%#z", time_unit="ns", strict=False)
        .dt.convert_time_zone("UTC")
        .dt.replace_time_zone(None)
    )
    return pl.coalesce(naive, aware).alias(column)


def timestamp_column(frame: pl.DataFrame, column: str, path: Path, locate: Locator) -> pl.Series:
    """Parse and check a column of wall-clock timestamps; see :func:`timestamp_expr`.

    Parameters
    ----------
    frame
        The source frame, with the :data:`ROW` column, ``column`` holding strings.
    column
        The timestamp column.
    path
        The workload file, for messages.
    locate
        Turns a :data:`ROW` value into a location for messages.

    Returns
    -------
    pl.Series
        ``Datetime("ns")`` values, none null.
    """
    source = frame.get_column(column)
    if source.dtype != pl.String:
        source = source.cast(pl.String)
        frame = frame.with_columns(source)
    parsed = frame.select(timestamp_expr(column)).to_series()
    bad = parsed.is_null()
    if bad.any():
        position = bad.arg_true()[0]
        raise workload_error(
            path,
            where=locate(int(frame.get_column(ROW)[position])),
            field=column,
            expected=TIMESTAMP_LAYOUT,
            found=describe_value(source[position]),
            fix="correct or remove that record",
        )
    return parsed


def seconds_since_earliest(timestamps: pl.Expr) -> pl.Expr:
    """Return seconds elapsed since the earliest timestamp, as Float64.

    Parameters
    ----------
    timestamps
        A ``Datetime("ns")`` expression.

    Returns
    -------
    pl.Expr
        ``(t - min(t))`` in seconds; exact to the nanosecond before the float conversion.
    """
    return (timestamps - timestamps.min()).dt.total_nanoseconds().cast(pl.Float64) / 1e9


def row_ids(prefix: str) -> pl.Expr:
    """Return request ids ``<prefix>-<source position, zero-padded to 6 digits>``.

    Parameters
    ----------
    prefix
        E.g. ``"azure"``.

    Returns
    -------
    pl.Expr
        A String expression over the :data:`ROW` column.
    """
    return pl.format(f"{prefix}-{{}}", pl.col(ROW).cast(pl.String).str.zfill(6))
