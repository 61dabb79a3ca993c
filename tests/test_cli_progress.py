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


def test_a_long_stage_prints_a_status_line_with_the_time_left(capsys) -> None:  # type: ignore[no-untyped-def]
    # Off a terminal (pytest captures stderr) a stage that reports nothing for interval_s gets a
    # heartbeat line: its name, count, time so far and the time left at the rate so far.
    import time

    with StageProgress(interval_s=0.2) as stage:
        stage("closed-loop runs", 0, 40)
        stage("closed-loop runs", 10, 40)
        time.sleep(1.0)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "closed-loop runs: started (40 to do)"
    beats = [line for line in lines[1:] if line.startswith("closed-loop runs: 10/40 done, ")]
    assert len(beats) >= 2, lines
    # 10 of 40 took about the elapsed time, so about three times that is left.
    assert all(" so far, about " in line and line.endswith(" left") for line in beats)


def test_no_gap_between_lines_exceeds_the_interval() -> None:
    # "A line at least every 10 s": the heartbeat must not wait for a poll after the interval
    # is up (it polled once a second and so left gaps of up to 11 s).
    import time

    from tracekit.cli import options

    stamps: list[float] = []
    echo = options.click.echo
    options.click.echo = lambda *a, **k: stamps.append(time.monotonic())  # type: ignore[assignment]
    try:
        # (It wakes interval / 20 early, 0.1 s here: room for a loaded machine's scheduling.)
        with StageProgress(interval_s=2.0) as stage:
            stage("closed-loop runs", 0, 40)
            start = time.monotonic()
            stage("closed-loop runs", 1, 40)
            time.sleep(6.5)
    finally:
        options.click.echo = echo  # type: ignore[assignment]
    gaps = [b - a for a, b in zip([start, *stamps], stamps, strict=False)]
    beats = [s for s in stamps if s > start]
    assert len(beats) >= 3, stamps
    assert max(gaps) <= 2.0, gaps


def test_no_heartbeat_once_the_stage_ended(capsys) -> None:  # type: ignore[no-untyped-def]
    import time

    with StageProgress(interval_s=0.1) as stage:
        stage("report", 0, 2)
        stage("report", 2, 2)
        time.sleep(0.5)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" in ")[0] for line in lines] == [
        "report: started (2 to do)",
        "report: done 2/2",
    ]
