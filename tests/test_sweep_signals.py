"""Ctrl-C during a sweep: no half-written run is left, and a re-run completes the rest."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_helpers import TINY_TABLES, hidden_leftovers, matches_now, write_matrix

from tracekit.sweep import run_sweep
from tracekit.sweep.task import bundle_state

# 4 strategies x 3 rates x 2 repeats = 24 runs of about 0.1 s, but the sleepy policy's runs
# take SWEEP_TEST_SLEEP seconds: with 2 jobs, one of them is in flight when Ctrl-C comes.
MATRIX = (
    """
strategies = ["builtin", "sweep_helpers:SleepyPolicy", "bidkv", "pe"]
rate_scale = [1.0, 2.0, 3.0]
repeats = 2
"""
    + TINY_TABLES
)
SLEEPY = "runs/workload=azure_conv_sample/rate=1.0/strategy=sweep_helpers-SleepyPolicy"

SCRIPT = """
import sys
from tracekit.sweep import StderrProgress, SweepInterrupted, run_sweep

try:
    result = run_sweep(sys.argv[1], sys.argv[2], jobs=2, progress=StderrProgress(interval_s=0))
except SweepInterrupted as stop:
    print(stop.result.render())
    sys.exit(130)
print(result.render())
sys.exit(result.exit_code)
"""


def _complete_runs(out: Path) -> list[Path]:
    """Published bundles only: a run in flight also has a manifest (saying incomplete) in its
    hidden partial folder, which pathlib's ``**`` matches too; waiting on those pressed Ctrl-C
    before any run had finished (on 2 loaded cores the twice-aborts case failed every time)."""
    return [
        p
        for p in matches_now(out, "runs/**/manifest.json")
        if not any(part.startswith(".") for part in p.relative_to(out).parts)
    ]


def _interrupt(matrix: Path, out: Path, presses: int, sleep_s: float) -> tuple[int, str]:
    """Start a sweep in its own process group; press Ctrl-C once a run is done and one sleeps."""
    env = {**os.environ, "SWEEP_TEST_SLEEP": str(sleep_s)}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(matrix), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (_complete_runs(out) and matches_now(out, f"{SLEEPY}/*/.*")):
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the sweep did not get going within 60 s"
            time.sleep(0.02)
        for _ in range(presses):
            # What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
            os.killpg(process.pid, signal.SIGINT)
            time.sleep(0.2)
        output, _ = process.communicate(timeout=60)
        return process.returncode, output
    finally:
        # A failed check must not leave the sweep running (or its pipe open) for later tests.
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


def _check_clean(out: Path) -> list[Path]:
    """No hidden or partial folder anywhere; every run folder holds a complete bundle."""
    assert hidden_leftovers(out) == []
    bundles = sorted(p.parent for p in out.glob("runs/**/manifest.json"))
    assert all(bundle_state(b)[0] == "complete" for b in bundles)
    assert sorted(p for p in out.glob("runs/*/*/*/*/*") if p.is_dir()) == bundles
    return bundles


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("presses", "sleep_s"), [(1, 1.5), (2, 120.0)], ids=["once-finishes", "twice-aborts"]
)
def test_ctrl_c_leaves_only_complete_runs_and_a_rerun_finishes(
    tmp_path: Path, presses: int, sleep_s: float
) -> None:
    matrix = write_matrix(tmp_path, MATRIX)
    out = tmp_path / "out"
    started = time.monotonic()
    code, output = _interrupt(matrix, out, presses, sleep_s)
    assert code == 130, output
    assert time.monotonic() - started < 60  # the 120 s run was aborted, not waited for
    # The sleepy run is in flight; the other worker's quick run may have just ended, and its
    # successor is then never started (on 2 loaded cores this happens): 1 or 2 are running.
    assert re.search(r"stopping: waiting for [12] running run\(s\) to finish", output), output
    assert "interrupted: re-run the same command" in output
    done = _check_clean(out)
    payload = json.loads((out / "sweep.json").read_text())
    assert payload["interrupted"] is True
    statuses = {r["path"]: r["status"] for r in payload["runs"]}
    assert sorted(p for p, s in statuses.items() if s == "done") == sorted(
        b.relative_to(out).as_posix() for b in done
    )
    assert set(statuses.values()) == {"done", "interrupted"}
    # Once: the sleeping run was let finish. Twice: it was aborted and left nothing behind.
    sleepy = statuses[f"{SLEEPY}/config=small/repeat=0"]
    assert sleepy == ("done" if presses == 1 else "interrupted")
    assert 0 < len(done) < 24
    result = run_sweep(matrix, out, jobs=1)
    assert result.exit_code == 0
    assert result.count("skipped") == len(done)
    assert result.count("done") == 24 - len(done)
    assert len(_check_clean(out)) == 24
