"""``--overwrite`` exists wherever a command writes, and every message that names it is true.

``accuracy --out`` on an existing file said "pass --overwrite", but accuracy had no such option;
``experiment traces`` (which replaced its own folder without being asked), ``experiment run``
and ``sweep`` had none either. One meaning everywhere (docs/guarantees.md, "Existing files"):
replace only what the command wrote, and only once the new one is complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracekit.sweep.run
from tracekit.cli import cli
from tracekit.cli.common import leaf_commands
from tracekit.sweep.run import SweepInterrupted, SweepResult

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "data" / "bench-results" / "vllm-bench-rate8.json"


def invoke(*args: object) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_every_command_with_out_has_overwrite() -> None:
    missing = [
        name
        for name, command in leaf_commands(cli)
        if any("--out" in getattr(p, "opts", ()) for p in command.params)
        and not any("--overwrite" in getattr(p, "opts", ()) for p in command.params)
    ]
    assert missing == []


def test_accuracy_out_is_replaced_only_with_overwrite_and_only_its_own(tmp_path: Path) -> None:
    out = tmp_path / "accuracy.json"
    first = invoke("accuracy", BENCH, "--out", out)
    assert first.exit_code in (0, 1), first.output  # 1: a metric outside --target, a finding
    document = json.loads(out.read_text("utf-8"))
    assert document["format"] == "tracekit.accuracy" and document["version"] == 1
    written = out.read_bytes()
    again = invoke("accuracy", BENCH, "--out", out)
    assert again.exit_code == 2
    assert "already exists" in again.output and "pass --overwrite" in again.output
    assert out.read_bytes() == written
    replaced = invoke("accuracy", BENCH, "--out", out, "--overwrite")
    assert replaced.exit_code == first.exit_code, replaced.output
    assert json.loads(out.read_text("utf-8"))["format"] == "tracekit.accuracy"
    mine = tmp_path / "mine.json"
    mine.write_text('{"mine": true}\n')
    refused = invoke("accuracy", BENCH, "--out", mine, "--overwrite")
    assert refused.exit_code == 2 and "left alone" in refused.output
    assert mine.read_text() == '{"mine": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accuracy.json", "mine.json"]


RUN = ["experiment", "run", "--runs", "1", "--num-requests", "5", "--rates", "1",
       "--strategies", "preempt-evict", "--jobs", "1"]  # fmt: skip


def test_experiment_run_overwrite_records_every_run_again(tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    assert invoke(*RUN, "--out", out).exit_code == 0
    (manifest,) = out.glob("bundles/**/manifest.json")
    before = manifest.stat().st_ino
    again = invoke(*RUN, "--out", out)
    assert again.exit_code == 2 and "--overwrite to record them all again" in again.output
    both = invoke(*RUN, "--out", out, "--resume", "--overwrite")
    assert both.exit_code == 2 and "pass one" in both.output
    assert manifest.stat().st_ino == before
    replaced = invoke(*RUN, "--out", out, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    (renewed,) = out.glob("bundles/**/manifest.json")
    assert renewed.stat().st_ino != before  # a new bundle, renamed into place
    assert not [p for p in out.rglob(".*partial*")]


def test_sweep_overwrite_records_every_run_again(tmp_path: Path, tiny_matrix: Path) -> None:
    out = tmp_path / "sweep"
    first = invoke("sweep", tiny_matrix, "--out", out, "--jobs", "1", "--json")
    assert first.exit_code == 0, first.output
    runs = json.loads(first.stdout)["runs"]
    resumed = invoke("sweep", tiny_matrix, "--out", out, "--jobs", "1", "--json")
    assert json.loads(resumed.stdout)["counts"]["skipped"] == runs
    redone = invoke("sweep", tiny_matrix, "--out", out, "--jobs", "1", "--json", "--overwrite")
    assert redone.exit_code == 0, redone.output
    counts = json.loads(redone.stdout)["counts"]
    assert (counts["done"], counts["skipped"]) == (runs, 0)


def test_an_interrupted_sweep_ends_with_one_error_line(
    tmp_path: Path, tiny_matrix: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopped(plan: Any, out: Path, *args: Any, **kwargs: Any) -> SweepResult:
        raise SweepInterrupted(
            SweepResult(out, (), None, out / "sweep.json", "serial", 0.1, interrupted=True)
        )

    # The command imports the executor when it runs: patched where it lives.
    monkeypatch.setattr(tracekit.sweep.run, "execute_plan", stopped)
    result = invoke("sweep", tiny_matrix, "--out", tmp_path / "out", "--jobs", "1")
    assert result.exit_code == 130
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: interrupted by Ctrl-C;") and "re-run the same command" in last
