"""A sweep never touches what it did not write, and its workers die with it.

See docs/guarantees.md, "Existing files" and "Interruption".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_helpers import TINY, matches_now, write_matrix

from tracekit.sweep import run_sweep


def test_a_sweep_keeps_empty_folders_it_did_not_create(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, TINY)
    out = tmp_path / "out"
    mine = [out / "runs" / "mine", out / "runs" / "workload=x" / "empty", out / "notes"]
    for folder in mine:
        folder.mkdir(parents=True)
    result = run_sweep(matrix, out, jobs=1)
    assert result.exit_code == 0
    assert all(folder.is_dir() for folder in mine)
    # A re-run (everything skipped) keeps them too.
    assert run_sweep(matrix, out, jobs=1).count("skipped") == 2
    assert all(folder.is_dir() for folder in mine)


SCRIPT = """
import sys
from tracekit.sweep import run_sweep

run_sweep(sys.argv[1], sys.argv[2], jobs=2)
"""
# The sleepy policy's runs take SWEEP_TEST_SLEEP seconds: both workers are busy when it is killed.
SLEEPY = f"""
strategies = ["sweep_helpers:SleepyPolicy", "builtin"]
repeats = 3
{TINY.split('strategies = ["builtin", "bidkv"]', 1)[1]}
"""


def _children(pid: int) -> set[int]:
    """Every process whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


@pytest.mark.e2e
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_exit_when_the_driver_is_killed(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, SLEEPY)
    out = tmp_path / "out"
    env = {**os.environ, "SWEEP_TEST_SLEEP": "8"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    driver = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(matrix), str(out)], env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        # Both workers hold a sleepy run (its hidden partial folder exists while it sleeps).
        while len(matches_now(out, "runs/**/strategy=sweep_helpers-SleepyPolicy/*/.*")) < 2:
            assert driver.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        family = _children(driver.pid)
        workers = family
        assert len(family) >= 2  # two workers (and the resource tracker)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in workers if _alive(pid)] == []
        # Nothing new appears in OUT afterwards (the sleepy runs would end after 8 s).
        before = sorted(out.rglob("manifest.json"))
        time.sleep(9)
        assert sorted(out.rglob("manifest.json")) == before
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)


@pytest.mark.e2e
def test_a_script_without_the_main_guard_is_told_what_to_do(tmp_path: Path) -> None:
    """Spawned workers import the script again: say to add the guard, not blame a crash."""
    matrix = write_matrix(tmp_path, TINY)
    script = tmp_path / "plain.py"
    script.write_text(
        f"from tracekit.sweep import run_sweep\n\n"
        f"result = run_sweep({str(matrix)!r}, {str(tmp_path / 'out')!r}, jobs=2)\n"
        "print(result.render())\n",
        "utf-8",
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr, done.stderr
    for blame in ("another sweep", "worker process died", "bootstrapping phase"):
        assert blame not in done.stderr + done.stdout
    # Nothing is left: not even the empty sweep folder the refused call had created.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([matrix.name, "plain.py"])


def test_a_stop_while_the_lock_is_written_leaves_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM between creating .sweep.lock and writing it left an empty lock, which the next
    sweep took for one that is starting and refused (the bad-input suite's stops found it)."""
    from tracekit.sweep import guards

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("stopped by SIGTERM")

    monkeypatch.setattr(guards.json, "dumps", stopped)
    with pytest.raises(KeyboardInterrupt), guards.sweep_lock(tmp_path):
        pass
    assert list(tmp_path.iterdir()) == []
    # A SIGKILL at any instant leaves no empty lock either: the lock appears with its content
    # (a hard link to a staging file), and a killed process's staging file is removed.
    monkeypatch.undo()
    (tmp_path / "..sweep.lock.partial-99999999999999999999").write_text("{")
    with guards.sweep_lock(tmp_path):
        assert sorted(p.name for p in tmp_path.iterdir()) == [guards.LOCK_FILE]
        assert json.loads((tmp_path / guards.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert list(tmp_path.iterdir()) == []
