"""``tracekit qualify`` never damages the user's files (docs/guarantees.md, "Existing files").

``--overwrite`` replaces only a results folder that qualify wrote (its marker file), ``--out``
may not be the current folder, above it, or a folder holding the workload, and the hidden
staging folders of killed jobs are removed by the next job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.engine.config import make_engine_config
from tracekit.qualify import QualifyPlan, run_qualify
from tracekit.qualify.job import MARKER
from tracekit.strategies import parse_strategy_list, resolve_strategy
from tracekit.workloads import load_workload

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
SMALL = [
    "--limit", "60", "--num-blocks", "300", "--max-model-len", "4608", "--strategy", "builtin",
    "--load-plan", "single",
]  # fmt: skip


def _user_folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(SAMPLE, data / "w.csv")
    (data / "notes.txt").write_text("mine\n", "utf-8")
    return data


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_overwrite_refuses_a_folder_holding_the_workload_and_user_files(tmp_path: Path) -> None:
    data = _user_folder(tmp_path)
    before = _files(data)
    args = ["qualify", "--workload", str(data / "w.csv"), *SMALL, "--out", str(data), "--overwrite"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert "holds the input" in result.output and len(result.output.strip().splitlines()) == 1
    assert _files(data) == before and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_overwrite_refuses_a_folder_qualify_did_not_write(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n", "utf-8")
    (other / "qualify.json").write_text("{}\n", "utf-8")
    args = ["qualify", "--workload", str(SAMPLE), *SMALL, "--out", str(other), "--overwrite"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert "not a results folder written by tracekit qualify" in result.output
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt", "qualify.json"]
    # Even with the marker, a folder holding other files is left alone.
    (other / MARKER).write_text("{}\n", "utf-8")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "notes.txt" in result.output
    assert (other / "notes.txt").read_text("utf-8") == "mine\n"


@pytest.mark.parametrize("out", [".", "..", "HERE"])
def test_out_dot_and_the_current_folder_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str
) -> None:
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    shutil.copy(SAMPLE, here / "w.csv")
    out = str(here) if out == "HERE" else out
    for extra in ([], ["--overwrite"]):
        args = ["qualify", "--workload", "w.csv", *SMALL, "--out", out, *extra]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code != 0
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
        assert "current folder" in result.output
    assert sorted(p.name for p in here.iterdir()) == ["w.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_a_refused_out_costs_no_capacity_search(tmp_path: Path) -> None:
    """The results folder is refused before the load plan's capacity search runs (it printed
    its knee and load cells first, after seconds to minutes of work)."""
    data = _user_folder(tmp_path)
    small = [a for a in SMALL if a not in ("--load-plan", "single")]
    for out, extra in ((data, ["--overwrite"]), (tmp_path, [])):
        args = ["qualify", "--workload", str(data / "w.csv"), *small, "--out", str(out), *extra]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("Error: ") and len(result.output.splitlines()) == 1


def _plan() -> QualifyPlan:
    return QualifyPlan(
        load_workload(SAMPLE, limit=60), make_engine_config(num_blocks=300, max_model_len=4608),
        tuple(parse_strategy_list("builtin")), resolve_strategy("bidkv"),
    )  # fmt: skip


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_staging_folders_of_killed_jobs_are_removed_by_the_next_job(tmp_path: Path) -> None:
    stale = tmp_path / f".results.partial-{_dead_pid()}"
    (stale / "runs").mkdir(parents=True)
    (stale / "runs" / "big.bin").write_bytes(b"x" * 1000)
    live = tmp_path / f".results.partial-{os.getppid()}"  # a running job's: left alone
    live.mkdir()
    unrelated = tmp_path / ".other.partial-1"
    unrelated.mkdir()

    def stop(stage: str, done: int, total: int) -> None:
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        run_qualify(_plan(), tmp_path / "results", stage=stop)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unrelated.name])
