"""``tracekit query`` cannot write anything, whatever the SQL: DuckDB itself refuses.

Every route is tried twice: through the ``query`` command (which also refuses statements that
are not SELECT) and straight on the connection from ``connect_trace``, which is what enforces
the promise. After each attempt the dataset's files must be byte-identical, nothing new may
appear in the dataset or in the folder beside it, and the file outside the dataset must not
have been read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from trace_helpers import write_bundle

from tracekit.cli import cli
from tracekit.trace.query import connect_trace


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "dir"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """A dataset of one bundle, and a secret file beside it (outside the dataset)."""
    write_bundle(tmp_path / "T", run_id="one")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-42\n")
    return tmp_path / "T", secret


def _routes(t: Path, secret: Path) -> list[str]:
    steps = t / "steps.parquet"
    out = t.parent / "written.parquet"
    return [
        f"COPY (SELECT 1 AS x) TO '{steps}' (FORMAT parquet)",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{steps}' (FORMAT parquet)",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{out}' (FORMAT parquet)",
        f"COPY decisions TO '{t / 'candidates.parquet'}' (FORMAT parquet)",
        f"COPY (SELECT 1) TO '{t / 'new.csv'}'",
        f"EXPORT DATABASE '{t / 'export'}'",
        f"EXPORT DATABASE '{t.parent / 'export'}'",
        f"ATTACH '{t / 'db.duckdb'}' AS f",
        f"ATTACH '{t.parent / 'db.duckdb'}' AS f",
        f"CREATE TABLE '{t / 'x.duckdb'}'.main.t AS SELECT 1",
        f"ATTACH '{t / 'f.duckdb'}' AS f; CREATE TABLE f.t AS SELECT 1; CREATE VIEW f.v AS "
        "SELECT 1",
        "CREATE TABLE copy AS SELECT * FROM steps; CREATE VIEW v AS SELECT * FROM decisions",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "RESET enable_external_access",
        "SET GLOBAL enable_external_access = true",
        "SET lock_configuration = false",
        f"SET allowed_directories = ['{t.parent}/']",
        f"SET allowed_paths = ['{secret}']",
        "SET disabled_filesystems = ''",
        f"SET temp_directory = '{t / 'tmp'}'",
        f"SET log_query_path = '{t / 'log.txt'}'",
        f"SET profiling_output = '{t / 'profile.json'}'",
        "PRAGMA enable_profiling = 'json'",
        f"PRAGMA profiling_output = '{t / 'profile.json'}'",
        f"SELECT * FROM read_text('{secret}')",
        f"SELECT * FROM read_blob('{secret}')",
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM read_text('{t / 'manifest.json'}')",
        f"SELECT * FROM '{steps}'",
        f"SELECT * FROM glob('{t.parent}/*')",
        f"SELECT * FROM parquet_metadata('{steps}')",
        f"SELECT * FROM read_json_auto('{t / 'manifest.json'}')",
        f"CALL enable_logging(storage = 'file', storage_path = '{t / 'logs'}')",
        "SET logging_sink = 'file'",
        "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    ]


def test_no_sql_route_writes_or_reads_outside_the_views(
    world: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    t, secret = world
    # From inside the dataset, a relative spill or log folder would land in it.
    monkeypatch.chdir(t)
    before, beside = _snapshot(t), _snapshot(t.parent)
    runner = CliRunner()
    for sql in _routes(t, secret):
        result = runner.invoke(cli, ["query", str(t), sql])
        assert result.exit_code != 0, sql
        assert "TOP-SECRET" not in result.output, sql
        con = connect_trace(t)
        try:
            rows = repr(con.execute(sql).fetchall())
        except duckdb.Error as error:
            rows = str(error)
        finally:
            con.close()
        assert "TOP-SECRET" not in rows, sql
        assert _snapshot(t) == before, sql
        assert _snapshot(t.parent) == beside, sql


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN ANALYZE CREATE VIEW v AS SELECT 1",
        "EXPLAIN ANALYZE DROP VIEW decisions",
        "explain analyse create table t as select * from steps",
        "EXPLAIN (ANALYZE, FORMAT json) CREATE VIEW v AS SELECT 1",
        "/* a comment */ EXPLAIN ANALYZE /* another */ CREATE VIEW v AS SELECT 1",
        "EXPLAIN ANALYZE INSERT INTO runs SELECT * FROM runs",
        "EXPLAIN CREATE VIEW v AS SELECT 1",
    ],
)
def test_explain_analyze_runs_only_a_select(world: tuple[Path, Path], sql: str) -> None:
    """EXPLAIN ANALYZE runs the statement it explains: it must be a SELECT too.

    DuckDB classes all of these as EXPLAIN statements, and ``EXPLAIN ANALYZE CREATE VIEW``
    created the view (in memory only, but the "SELECT only" rule had a hole).
    """
    t, _ = world
    result = CliRunner().invoke(cli, ["query", str(t), sql])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: SQL: only SELECT queries are allowed")
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN SELECT count(*) FROM decisions",
        "EXPLAIN ANALYZE SELECT count(*) FROM decisions",
        "EXPLAIN (FORMAT json) SELECT 1",
        "/* why */ explain analyze with d as (select * from decisions) select count(*) from d",
    ],
)
def test_explain_of_a_select_still_runs(world: tuple[Path, Path], sql: str) -> None:
    t, _ = world
    result = CliRunner().invoke(cli, ["query", str(t), sql])
    assert result.exit_code == 0, result.output


def test_the_views_still_read_every_table(world: tuple[Path, Path]) -> None:
    t, _ = world
    con = connect_trace(t)
    counts = {
        name: con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # type: ignore[index]
        for name in ("requests", "decisions", "candidates", "steps", "scheduled", "runs")
    }
    con.close()
    assert counts == {
        "requests": 3,
        "decisions": 2,
        "candidates": 5,
        "steps": 6,
        "scheduled": 0,
        "runs": 1,
    }


def test_the_configuration_is_locked_and_access_off(world: tuple[Path, Path]) -> None:
    t, _ = world
    con = connect_trace(t)
    settings = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('enable_external_access', 'lock_configuration', 'allowed_directories', "
            "'allowed_paths')"
        ).fetchall()
    )
    con.close()
    assert settings == {
        "enable_external_access": "false",
        "lock_configuration": "true",
        "allowed_directories": "[]",
        "allowed_paths": "[]",
    }
