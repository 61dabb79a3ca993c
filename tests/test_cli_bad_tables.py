"""diff and fidelity on damaged bundles: one line and exit 2, never a report or a traceback.

NaN in ``kv_usage``, ``time_s`` or ``arrival_time`` is refused before the diff (its report
used to crash on ``int(nan)``, then reported a difference, exit 1); an extra column or a
column of the wrong type is found by ``check_readable``
before polars reads the table (it used to raise a polars SchemaError); ``"engine_config": "x"``
is one line.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.vllm.fixtures import fixture_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = fixture_dir(ROOT, "0.32.0", "synthetic-priority")
SMALL = ["--limit", "120", "--num-blocks", "300", "--max-model-len", "4608", "--strategy", "bidkv"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pair")
    sample = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
    for host in ("legacy", "typed"):
        args = ["record", "sim", "--workload", str(sample), *SMALL, "--host", host,
                "--out", str(root / host)]  # fmt: skip
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return root / "legacy", root / "typed"


def damaged(
    source: Path, target: Path, table: str, change: Callable[[pl.DataFrame], pl.DataFrame]
) -> Path:
    shutil.copytree(source, target)
    frame = pl.read_parquet(target / f"{table}.parquet")
    change(frame).write_parquet(target / f"{table}.parquet")
    return target


def invoke(*args: Path | str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize(
    "table, column",
    [("decisions", "kv_usage"), ("decisions", "time_s"), ("candidates", "arrival_time")],
)
def test_diff_refuses_nan(pair: tuple[Path, Path], tmp_path: Path, table: str, column: str) -> None:
    """A damaged table is bad input (exit 2, one line), not a difference (exit 1, as it was)."""
    legacy, typed = pair
    nan = pl.lit(float("nan")).alias(column)
    broken = damaged(typed, tmp_path / "typed", table, lambda f: f.with_columns(nan))
    result = invoke("diff", legacy, broken)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {broken / f'{table}.parquet'}: ")
    assert f"{table}.{column} is NaN or infinite" in result.output
    assert len(result.output.splitlines()) == 1


BAD_TABLES = {
    "extra column": (lambda f: f.with_columns(pl.lit(1).alias("zzz")), "'zzz' are not in table"),
    "wrong type": (lambda f: f.with_columns(pl.col("time_s").cast(pl.Utf8)), "column 'time_s'"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_diff_refuses_a_mistyped_table(pair: tuple[Path, Path], tmp_path: Path, case: str) -> None:
    change, message = BAD_TABLES[case]
    legacy, typed = pair
    broken = damaged(typed, tmp_path / "typed", "steps", change)
    result = invoke("diff", legacy, broken)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {broken / 'steps.parquet'}: ")
    assert message in result.output and len(result.output.splitlines()) == 1


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_fidelity_refuses_a_mistyped_table(tmp_path: Path, case: str) -> None:
    change, message = BAD_TABLES[case]
    broken = damaged(FIXTURE, tmp_path / "vllm", "steps", change)
    result = invoke("fidelity", FIXTURE, broken)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.splitlines()) == 1


def test_fidelity_refuses_an_engine_config_that_is_not_an_object(tmp_path: Path) -> None:
    broken = tmp_path / "vllm"
    shutil.copytree(FIXTURE, broken)
    manifest = json.loads((broken / "manifest.json").read_text("utf-8"))
    manifest["engine_config"] = "x"
    (broken / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    result = invoke("fidelity", FIXTURE, broken)
    assert result.exit_code == 2, result.output
    assert "engine_config" in result.output and len(result.output.splitlines()) == 1


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
@pytest.mark.parametrize("command", ["oracle", "validate", "inspect"])
def test_every_reader_refuses_a_mistyped_table(
    pair: tuple[Path, Path], tmp_path: Path, case: str, command: str
) -> None:
    """oracle read what fitted and exited 0; validate and inspect must say it too (exit 2)."""
    change, message = BAD_TABLES[case]
    broken = damaged(pair[1], tmp_path / "typed", "steps", change)
    out = tmp_path / "out"
    args = [command, broken] + (["--out", out, "--no-greedy"] if command == "oracle" else [])
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    if command != "validate":  # validate lists its findings under a header line
        assert len(result.output.splitlines()) == 1
    assert not out.exists()
