"""``tracekit query``: SQL over a bundle or dataset with DuckDB, read-only.

Every trace table becomes a view over its Parquet files across the whole dataset (``requests``,
``decisions``, ``candidates``, ``steps``, and ``scheduled`` where recorded), plus ``runs`` with
one row per manifest. The connection may read only the dataset's folder and cannot write
anywhere; only ``SELECT`` (and ``EXPLAIN``) statements are accepted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import duckdb
import polars as pl

from tracekit.errors import ConfigError
from tracekit.trace.bundle import open_trace
from tracekit.trace.schema import trace_schema

__all__ = ["OutputFormat", "connect_trace", "run_query", "write_query_result"]

OutputFormat = Literal["table", "csv", "json", "parquet"]
_ALLOWED = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def connect_trace(path: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one read-only view per trace table of ``path``."""
    dataset = open_trace(path)
    con = duckdb.connect(":memory:")
    for table in trace_schema().tables.values():
        files = dataset.files(table.name)
        # Scanning checks every file's footer and columns: a truncated file is a one-line error.
        dataset.scan(table.name)
        if files:
            con.execute(
                f"CREATE VIEW {table.name} AS SELECT * FROM read_parquet({_sql_list(files)})"
            )
        else:
            columns = ", ".join(
                f"CAST(NULL AS {_DUCK_TYPES[c.type]}) AS {c.name}" for c in table.columns
            )
            con.execute(f"CREATE VIEW {table.name} AS SELECT {columns} LIMIT 0")
    con.register("runs_frame", dataset.runs())
    con.execute("CREATE TABLE runs AS SELECT * FROM runs_frame")
    con.unregister("runs_frame")
    # From here on the connection reads only the dataset and writes nothing.
    root = str(Path(dataset.root).resolve())
    con.execute(f"SET allowed_directories = ['{root.replace(chr(39), chr(39) * 2)}/']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


_DUCK_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "float64": "DOUBLE", "bool": "BOOLEAN"}


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


def write_query_result(frame: pl.DataFrame, fmt: OutputFormat, out: Path | None) -> str | None:
    """Render ``frame`` as ``fmt``; return the text, or write ``out`` atomically and return None.

    ``parquet`` needs ``out``; the other formats are printed when ``out`` is None.
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
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return None
