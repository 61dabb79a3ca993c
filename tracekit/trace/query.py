"""``tracekit query``: SQL over a bundle or dataset with DuckDB, read-only.

Every trace table becomes a view over its Parquet files across the whole dataset (``requests``,
``decisions``, ``candidates``, ``steps``, and ``scheduled`` where recorded), plus ``runs`` with
one row per manifest. The connection is an otherwise empty in-memory database that cannot open
any file: DuckDB's external access is off and its configuration locked, so no statement can
write, spill, attach, install or read outside the views. ``run_query`` also accepts only one
``SELECT`` (or ``EXPLAIN``) statement, for a clearer message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import duckdb
import polars as pl
import pyarrow.dataset as pads

from tracekit.errors import ConfigError
from tracekit.trace.bundle import open_trace
from tracekit.trace.schema import trace_schema
from tracekit.trace.validate import check_readable

__all__ = ["OutputFormat", "check_output", "connect_trace", "run_query", "write_query_result"]

OutputFormat = Literal["table", "csv", "json", "parquet"]
_ALLOWED = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


# Applied, in this order, once the views exist. With external access off and nothing allowed,
# DuckDB opens no file at all (no COPY, EXPORT, ATTACH, INSTALL, read_text, spill file); the
# views read through Arrow datasets, which DuckDB scans as in-memory objects. The lock comes
# last, so that no statement can undo the others.
_LOCKDOWN = (
    "SET python_enable_replacements = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET temp_directory = ''",
    "SET allowed_directories = []",
    "SET allowed_paths = []",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


def connect_trace(path: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per trace table of ``path``, read-only.

    The connection cannot open any file: each view scans an Arrow dataset of the table's
    Parquet files, and external access is disabled and locked before it is returned. Raises
    ``TraceSchemaError`` if a bundle is malformed (see ``check_readable``).
    """
    dataset = open_trace(path)
    # A truncated file, a table that is gone or a column of the wrong type is a one-line error.
    for bundle in dataset:
        check_readable(bundle)
    con = duckdb.connect(":memory:", config={"temp_directory": ""})
    for table in trace_schema().tables.values():
        source = pads.dataset(
            [str(f) for f in dataset.files(table.name)],
            schema=table.arrow_schema,
            format="parquet",
        )
        con.register(table.name, source)
    con.register("runs_frame", dataset.runs())
    con.execute("CREATE TABLE runs AS SELECT * FROM runs_frame")
    con.unregister("runs_frame")
    for statement in _LOCKDOWN:
        con.execute(statement)
    return con


def run_query(path: str | Path, sql: str) -> pl.DataFrame:
    """Run one read-only SQL statement over the trace at ``path``; the result as a frame."""
    con = connect_trace(path)
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise ConfigError(f"SQL: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise ConfigError(f"SQL: give exactly one statement, got {len(statements)}")
    if statements[0].type not in _ALLOWED:
        raise ConfigError(
            f"SQL: only SELECT queries are allowed (the trace is read-only), got "
            f"{statements[0].type.name}"
        )
    try:
        return con.sql(sql).pl()
    except duckdb.Error as exc:
        raise ConfigError(f"SQL: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def check_output(out: Path, trace: str | Path, overwrite: bool) -> None:
    """Refuse an ``--out`` inside the dataset ``trace``, in a missing folder, or that exists.

    An existing file is replaced only with ``overwrite``; a file inside the dataset never is.
    Paths are compared after resolving symlinks.
    """
    target = out.resolve()
    root = Path(trace).resolve()
    if target == root or root in target.parents:
        raise ConfigError(
            f"--out {out}: inside the dataset {trace} that the query reads; write the result "
            "outside it"
        )
    if not target.parent.is_dir():
        raise ConfigError(f"--out {out}: the folder {out.parent} does not exist; create it first")
    if out.exists() and not overwrite:
        raise ConfigError(f"--out {out}: the file exists; pass --overwrite to replace it")


def write_query_result(
    frame: pl.DataFrame, fmt: OutputFormat, out: Path | None, overwrite: bool = False
) -> str | None:
    """Render ``frame`` as ``fmt``; return the text, or write ``out`` atomically and return None.

    ``parquet`` needs ``out``; the other formats are printed when ``out`` is None. The result is
    written to a hidden file beside ``out`` and renamed into place; an existing ``out`` is
    replaced only with ``overwrite``.
    """
    if fmt == "parquet" and out is None:
        raise ConfigError("--format parquet needs --out FILE")
    if fmt == "table":
        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=80, tbl_width_chars=200):
            text = str(frame)
    elif fmt == "csv":
        text = frame.write_csv()
    elif fmt == "json":
        text = frame.write_json()
    else:
        text = ""
    if out is None:
        return text
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        if fmt == "parquet":
            frame.write_parquet(tmp, compression="zstd")
        else:
            tmp.write_text(text, encoding="utf-8")
        if overwrite:
            os.replace(tmp, out)
        else:
            _link_new(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return None


def _link_new(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out`` unless ``out`` exists (a hard link fails rather than replace)."""
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise ConfigError(f"--out {out}: the file exists; pass --overwrite to replace it") from None
    except OSError:  # a file system without hard links: check, then rename
        if out.exists():
            raise ConfigError(
                f"--out {out}: the file exists; pass --overwrite to replace it"
            ) from None
        os.replace(tmp, out)
