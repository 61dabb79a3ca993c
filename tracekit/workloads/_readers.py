"""Raw readers shared by the loaders: files in, frames of *source* columns out.

Every loader reads its file into a frame of source columns first (CSV cells as strings, JSON
values as polars inferred them), checks them under their source names, and only then maps them
onto the canonical columns of :mod:`tracekit.workloads.model`. Checking under source names is
what lets an error say ``line 7, field 'ContextTokens'`` instead of ``prompt_tokens``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from tracekit.errors import WorkloadError
from tracekit.workloads._errors import first_line, workload_error

__all__ = [
    "ROW",
    "Locator",
    "check_columns",
    "check_not_empty",
    "check_readable",
    "csv_locator",
    "document_locator",
    "file_sha256",
    "jsonl_locator",
    "parquet_error",
    "parquet_locator",
    "read_csv_strings",
    "read_json_document",
    "read_ndjson_records",
    "read_parquet_rows",
]

ROW = "_row"

#: Turns a 0-based source record position into a human location ("line 7").
Locator = Callable[[int], str]


def file_sha256(path: Path) -> str:
    """Return the SHA-256 hex digest of a file's bytes, read in chunks.

    Parameters
    ----------
    path
        The file to hash.

    Returns
    -------
    str
        64 lowercase hex digits.
    """
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_readable(path: Path) -> None:
    """Raise a :class:`WorkloadError` unless ``path`` is an existing, non-empty regular file.

    Parameters
    ----------
    path
        The workload file.
    """
    if not path.is_file():
        raise workload_error(
            path,
            expected="an existing workload file",
            found="no such file" if not path.exists() else "a directory or special file",
            fix="check the path",
        )
    if path.stat().st_size == 0:
        raise workload_error(
            path,
            expected="at least one request",
            found="an empty file (0 bytes)",
            fix="point at a non-empty workload file",
        )


def read_json_document(path: Path, *, what: str, fix: str) -> object:
    """Parse a whole-file JSON document, or raise one :class:`WorkloadError` naming the file.

    Parameters
    ----------
    path
        The file (checked with :func:`check_readable` first).
    what
        What the file should be, e.g. ``"a vllm bench serve result"``.
    fix
        The fix the message proposes when the file is not JSON.

    Returns
    -------
    object
        The parsed value; its shape is the caller's to check.
    """
    check_readable(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise workload_error(
            path, expected=f"{what} (JSON)", found=f"invalid JSON ({exc})", fix=fix
        ) from None


def parquet_error(path: Path, error: BaseException) -> WorkloadError:
    """The one-line error for a Parquet file polars or Arrow cannot read (truncated, corrupt).

    Parameters
    ----------
    path
        The file.
    error
        What the reader raised; its first line is quoted (its type when it has no message).
    """
    text = str(error).strip()
    reason = text.splitlines()[0] if text else type(error).__name__
    return workload_error(
        path,
        expected="a readable Parquet file",
        found=f"a truncated or corrupt file ({reason})",
        fix="re-write the Parquet file (was the copy cut short?)",
    )


def read_parquet_rows(path: Path) -> pl.DataFrame:
    """Read a whole Parquet file with the :data:`ROW` column, or raise :func:`parquet_error`."""
    check_readable(path)
    try:
        frame = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as error:
        raise parquet_error(path, error) from error
    return frame.with_row_index(ROW)


def parquet_locator(row: int) -> str:
    """Locate Parquet row ``row`` (0-based) as ``"row N"`` (1-based)."""
    return f"row {row + 1}"


def csv_locator(row: int) -> str:
    """Locate CSV data row ``row``: the header is line 1, so data row 0 is line 2.

    Parameters
    ----------
    row
        0-based data row position, counted over every line after the header, blank ones included.

    Returns
    -------
    str
        ``"line N"``.
    """
    return f"line {row + 2}"


def document_locator(array_name: str) -> Locator:
    """Return a locator for records that sit in a JSON array of one document.

    Parameters
    ----------
    array_name
        The array's key, e.g. ``"requests"``.

    Returns
    -------
    Locator
        Maps ``i`` to ``"requests[i]"``.
    """
    return lambda row: f"{array_name}[{row}]"


def jsonl_locator(path: Path) -> Locator:
    """Return a locator for the records of a JSON-lines file, which skips blank lines.

    Parameters
    ----------
    path
        The JSON-lines file; it is only re-read when an error needs a line number.

    Returns
    -------
    Locator
        Maps the 0-based record position to ``"line N"`` (1-based, counting blank lines).
    """

    def locate(row: int) -> str:
        seen = -1
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    seen += 1
                    if seen == row:
                        return f"line {number}"
        return f"record {row + 1}"

    return locate


def read_csv_strings(path: Path, *, what: str) -> pl.DataFrame:
    """Read a CSV file with every cell as a string, plus the :data:`ROW` position column.

    Header names are stripped of surrounding blanks. Entirely blank lines (polars turns them into
    all-null rows, e.g. a trailing empty line) are dropped, keeping the positions of the rest.

    Parameters
    ----------
    path
        The CSV file.
    what
        The format's human name for messages, e.g. ``"an Azure LLM inference trace CSV"``.

    Returns
    -------
    pl.DataFrame
        String columns under their (stripped) header names and the ``_row`` column (UInt32).
    """
    check_readable(path)
    try:
        raw = pl.read_csv(path, infer_schema=False)
    except pl.exceptions.NoDataError as error:
        raise workload_error(
            path, expected=what, found="no header line", fix="point at a non-empty CSV file"
        ) from error
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as error:
        raise workload_error(
            path,
            expected=f"{what} (readable CSV)",
            found=f"a CSV parse error ({first_line(error)})",
            fix="repair the CSV (one request per line, same number of fields on every line)",
        ) from error
    raw = raw.rename({name: name.strip() for name in raw.columns})
    raw = raw.with_row_index(ROW).filter(~pl.all_horizontal(pl.exclude(ROW).is_null()))
    return raw


def read_ndjson_records(path: Path, *, what: str) -> pl.DataFrame:
    """Read a JSON-lines file with polars, plus the :data:`ROW` record-position column.

    Polars does the parsing; only when it fails is the file walked line by line with
    :func:`json.loads`, to name the first line that does not parse.

    Parameters
    ----------
    path
        The JSON-lines file.
    what
        The format's human name for messages.

    Returns
    -------
    pl.DataFrame
        One row per non-blank line, columns as polars inferred them over the whole file.
    """
    check_readable(path)
    try:
        frame = pl.read_ndjson(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError) as error:
        raise _locate_json_line_error(path, what, error) from error
    if frame.height == 0 or frame.width == 0:
        raise workload_error(
            path,
            expected=f"{what} with at least one request",
            found="no JSON objects",
            fix="point at a non-empty JSON-lines file",
        )
    return frame.with_row_index(ROW)


def _locate_json_line_error(path: Path, what: str, error: BaseException) -> WorkloadError:
    with path.open("rb") as handle:
        saw_record = False
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            saw_record = True
            try:
                value = json.loads(line.rstrip())
            except (json.JSONDecodeError, UnicodeDecodeError) as parse_error:
                return workload_error(
                    path,
                    where=f"line {number}",
                    expected="one JSON object per line",
                    found=f"invalid JSON ({parse_error.msg} at column {parse_error.colno})",
                    fix="repair or delete that line",
                )
            if not isinstance(value, dict):
                return workload_error(
                    path,
                    where=f"line {number}",
                    expected="one JSON object per line",
                    found=f"a JSON {type(value).__name__}",
                    fix="write each request as a JSON object",
                )
    if not saw_record:
        return workload_error(
            path,
            expected=f"{what} with at least one request",
            found="only blank lines",
            fix="point at a non-empty JSON-lines file",
        )
    return workload_error(
        path,
        expected=f"{what} (JSON lines with consistent value types)",
        found=f"a JSON-lines read error ({first_line(error)})",
        fix="give every field the same JSON type on every line",
    )


def check_not_empty(frame: pl.DataFrame, path: Path, *, what: str) -> None:
    """Raise a :class:`WorkloadError` when a parsed source has no request rows.

    Parameters
    ----------
    frame
        The source frame.
    path
        The workload file.
    what
        The format's human name for messages.
    """
    if frame.height == 0:
        raise workload_error(
            path,
            expected=f"{what} with at least one request",
            found="a header but no request rows",
            fix="point at a file that contains requests",
        )


def check_columns(
    frame: pl.DataFrame | pl.LazyFrame, path: Path, required: Sequence[str], *, what: str
) -> None:
    """Raise a :class:`WorkloadError` naming the first required column the source lacks.

    Parameters
    ----------
    frame
        The source frame (only its schema is read).
    path
        The workload file.
    required
        Source column names, in the order they should be reported.
    what
        The format's human name for messages.
    """
    present = [name for name in frame.collect_schema().names() if name != ROW]
    missing = [name for name in required if name not in present]
    if missing:
        shown = ", ".join(present[:8]) + (", ..." if len(present) > 8 else "")
        raise workload_error(
            path,
            field=missing[0],
            expected=f"{what} with columns {', '.join(required)}",
            found=f"no {missing[0]!r} column (columns: {shown or 'none'})",
            fix=f"add the missing column(s) {', '.join(missing)} or pass the right format",
        )
