"""Long commands are never silent: off a terminal, each stage prints a status line on stderr."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.cli.options import Progress, StageProgress


def test_record_sim_prints_stage_status_lines_on_stderr(azure_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    args = ["record", "sim", "--workload", str(azure_sample), "--limit", "20", "--out", str(out)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("record builtin: started (")
    assert lines[-1].startswith("record builtin: done ")
    assert len(lines) == 2
    assert "record builtin:" not in result.stdout


def test_a_stage_prints_one_start_and_one_end_line(capsys) -> None:  # type: ignore[no-untyped-def]
    stage = StageProgress()
    for done in range(4):
        stage("closed loop", done, 3)
    stage("open replay", 1, 1)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0].split(" in ")[0] for line in lines] == [
        "closed loop: started",
        "closed loop: done 3/3",
        "open replay: started",
        "open replay: done 1/1",
    ]


def test_disabled_progress_prints_nothing(capsys) -> None:  # type: ignore[no-untyped-def]
    Progress("x", enabled=False)(1, 1)
    assert capsys.readouterr().err == ""
