"""``tracekit query``: DuckDB views over a bundle or dataset, read-only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result

from tracekit.cli import cli
from tracekit.errors import ConfigError
from tracekit.trace.query import run_query


@pytest.fixture
def dataset(tmp_path: Path, write_bundle: Callable[..., Path]) -> Path:
    write_bundle(tmp_path / "d" / "one", run_id="one")
    write_bundle(tmp_path / "d" / "two", run_id="two")
    return tmp_path / "d"


def _query(dataset: Path, sql: str, *options: str) -> Result:
    return CliRunner().invoke(cli, ["query", str(dataset), sql, *options])


def test_views_span_the_dataset_and_join_runs(dataset: Path) -> None:
    frame = run_query(
        dataset,
        "select r.run_id, r.strategy, count(*) as n from decisions d join runs r using (run_id) "
        "group by all order by 1",
    )
    assert frame.to_dicts() == [
        {"run_id": "one", "strategy": "builtin", "n": 2},
        {"run_id": "two", "strategy": "builtin", "n": 2},
    ]


def test_optional_table_missing_is_an_empty_view(dataset: Path) -> None:
    assert run_query(dataset, "select count(*) as n from scheduled").item() == 0


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("delete from decisions", "only SELECT queries"),
        ("select 1; select 2", "exactly one statement"),
        ("select * from nope", "SQL: Catalog Error"),
        ("copy decisions to '/tmp/x.csv'", "only SELECT queries"),
    ],
)
def test_refused_statements(dataset: Path, sql: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_query(dataset, sql)


def test_no_file_access_outside_the_dataset(
    dataset: Path, tmp_path: Path, write_bundle: Callable[..., Path]
) -> None:
    other = write_bundle(tmp_path / "elsewhere", run_id="x")
    with pytest.raises(ConfigError, match=r"disabled|Permission"):
        run_query(dataset, f"select * from '{other}/decisions.parquet'")


def test_cli_formats(dataset: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    sql = "select run_id, count(*) as n from candidates group by 1 order by 1"
    csv = runner.invoke(cli, ["query", str(dataset), sql, "--format", "csv"])
    assert csv.exit_code == 0
    assert csv.output == "run_id,n\none,5\ntwo,5\n"
    as_json = runner.invoke(cli, ["query", str(dataset), sql, "--format", "json"])
    assert json.loads(as_json.output) == [{"run_id": "one", "n": 5}, {"run_id": "two", "n": 5}]
    table = runner.invoke(cli, ["query", str(dataset), sql])
    assert "one" in table.output and "shape: (2, 2)" in table.output
    out = tmp_path / "r.parquet"
    pq = runner.invoke(cli, ["query", str(dataset), sql, "--format", "parquet", "--out", str(out)])
    assert pq.exit_code == 0
    assert pl.read_parquet(out)["n"].to_list() == [5, 5]
    missing = runner.invoke(cli, ["query", str(dataset), sql, "--format", "parquet"])
    assert missing.exit_code != 0
    assert "needs --out" in missing.output


def test_truncated_parquet_is_a_one_line_error(dataset: Path) -> None:
    file = dataset / "one" / "decisions.parquet"
    file.write_bytes(file.read_bytes()[:100])
    result = _query(dataset, "select 1")
    assert result.exit_code == 2
    assert "decisions.parquet: not a readable Parquet file" in result.output
    assert result.output.strip().count("\n") == 0


def _digests(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
@pytest.mark.parametrize(
    "target", ["one/decisions.parquet", "one/new.parquet", "result.parquet", "one/sub/x.parquet"]
)
def test_out_never_writes_inside_the_dataset(
    dataset: Path, target: str, overwrite: list[str]
) -> None:
    (dataset / "one" / "sub").mkdir()
    before = _digests(dataset)
    out = dataset / target
    result = _query(dataset, "select 1 as x", "--format", "parquet", "--out", str(out), *overwrite)
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: --out {out}: inside the dataset")
    assert result.output.strip().count("\n") == 0
    assert _digests(dataset) == before
    assert sorted(p.name for p in (dataset / "one").iterdir()) == sorted(
        [
            "candidates.parquet",
            "decisions.parquet",
            "manifest.json",
            "requests.parquet",
            "steps.parquet",
            "sub",
        ]
    )


def test_out_inside_the_dataset_through_a_symlink_is_refused(dataset: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(dataset / "one")
    before = _digests(dataset)
    result = _query(
        dataset, "select 1 as x", "--format", "csv", "--out", str(link / "decisions.parquet"),
        "--overwrite",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "inside the dataset" in result.output
    assert _digests(dataset) == before


def test_out_refuses_an_existing_file_without_overwrite(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine.csv"
    out.write_text("keep me\n")
    runner = CliRunner()
    args = ["query", str(dataset), "select 7 as x", "--format", "csv", "--out", str(out)]
    refused = runner.invoke(cli, args)
    assert refused.exit_code == 2
    assert refused.output == (
        f"Error: --out {out}: the file exists; pass --overwrite to replace it\n"
    )
    assert out.read_text() == "keep me\n"
    replaced = runner.invoke(cli, [*args, "--overwrite"])
    assert replaced.exit_code == 0
    assert out.read_text() == "x\n7\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_out_in_a_missing_folder_is_a_one_line_error(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "nope" / "r.csv"
    result = _query(dataset, "select 1", "--format", "csv", "--out", str(out))
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "folder" in result.output and str(out.parent) in result.output


def test_a_deleted_table_is_an_error_not_an_empty_view(dataset: Path) -> None:
    file = dataset / "two" / "decisions.parquet"
    file.unlink()
    result = _query(dataset, "select count(*) from decisions")
    assert result.exit_code == 2
    assert result.output == (
        f"Error: {file}: table 'decisions' is missing (the manifest lists 2 rows); restore the "
        "file or re-record the bundle\n"
    )


def test_a_column_of_the_wrong_type_is_a_one_line_error(dataset: Path) -> None:
    file = dataset / "one" / "steps.parquet"
    frame = pl.read_parquet(file).with_columns(pl.col("time_s").cast(pl.String))
    frame.write_parquet(file)
    result = _query(dataset, "select count(*) from requests")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {file}: column 'time_s' has type")
    assert result.output.count("\n") == 1


def test_bad_sql_exits_2(dataset: Path) -> None:
    result = _query(dataset, "select * from nope")
    assert result.exit_code == 2
    assert result.output.startswith("Error: SQL: Catalog Error")
