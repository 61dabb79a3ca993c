"""``tracekit query``: SQL over a bundle or dataset with DuckDB, read-only.

Every trace table becomes a view over its Parquet files across the whole dataset (``requests``,
``decisions``, ``candidates``, ``steps``, and ``scheduled`` where recorded), plus ``runs`` with
one row per manifest. The connection is an otherwise empty in-memory database that cannot open
any file: DuckDB's external access is off and its configuration locked, so no statement can
write, spill, attach, install or read outside the views. ``run_query`` also accepts only one
``SELECT`` (or ``EXPLAIN`` of one) statement, for a clearer message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import duckdb
import polars as pl
import pyarrow.dataset as pads

from tracekit import safe_output
from tracekit.errors import ConfigError
from tracekit.trace.bundle import open_trace
from tracekit.trace.schema import trace_schema
from tracekit.trace.validate import check_readable

__all__ = ["OutputFormat", "check_output", "connect_trace", "run_query", "write_query_result"]

OutputFormat = Literal["table", "csv", "json", "parquet"]


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
    _check_select(con, statements[0])
    try:
        return con.sql(sql).pl()
    except duckdb.Error as exc:
        raise ConfigError(f"SQL: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def _check_select(con: duckdb.DuckDBPyConnection, statement: Any) -> None:
    """Refuse anything but a SELECT, or an EXPLAIN (ANALYZE) of a SELECT.

    ``EXPLAIN ANALYZE`` runs the statement it explains, so that statement is checked too: an
    ``EXPLAIN ANALYZE CREATE VIEW ...`` would otherwise run the CREATE.
    """
    what = ""
    while statement.type == duckdb.StatementType.EXPLAIN:
        try:
            inner = con.extract_statements(_explained(statement.query))
        except duckdb.Error as exc:
            raise ConfigError(f"SQL: {str(exc).splitlines()[0]}") from None
        if len(inner) != 1:
            raise ConfigError("SQL: EXPLAIN takes exactly one statement")
        statement, what = inner[0], f"{what}EXPLAIN of "
    if statement.type != duckdb.StatementType.SELECT:
        raise ConfigError(
            f"SQL: only SELECT queries are allowed (the trace is read-only), got "
            f"{what}{statement.type.name}"
        )


def _explained(sql: str) -> str:
    """The text of the statement that the EXPLAIN statement ``sql`` explains.

    Skips comments, ``EXPLAIN``, an ``ANALYZE`` (or ``ANALYSE``) and a parenthesised option
    list such as ``(ANALYZE, FORMAT json)``, using DuckDB's own tokenizer.
    """
    every = duckdb.tokenize(sql)
    ends = [start for start, _ in every[1:]] + [len(sql)]
    pairs = [
        (start, sql[start:end].strip())
        for (start, kind), end in zip(every, ends, strict=True)
        if kind != duckdb.token_type.comment
    ]
    tokens, words = [start for start, _ in pairs], [word for _, word in pairs]
    i = 1  # past EXPLAIN
    if i < len(words) and words[i].upper() in ("ANALYZE", "ANALYSE"):
        i += 1
    if i < len(words) and words[i] == "(":
        depth = 0
        while i < len(words):
            depth += words[i].count("(") - words[i].count(")")
            i += 1
            if depth <= 0:
                break
    return sql[tokens[i] :] if i < len(tokens) else ""


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
    if out.is_symlink():
        raise ConfigError(f"--out {out}: is a symbolic link; pass the real path of a new file")
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
    # docs/guarantees.md, "Safe output": staged beside OUT and renamed; without overwrite a
    # file that appeared meanwhile is never replaced. Query results carry no mark: overwrite
    # replaces the one regular file named.
    with safe_output.staged_file(out, mark=None, overwrite=overwrite) as staging:
        if fmt == "parquet":
            frame.write_parquet(staging, compression="zstd")
        else:
            staging.write_text(text, encoding="utf-8")
    return None
