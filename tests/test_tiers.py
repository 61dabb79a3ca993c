"""The test tiers (tests/tiers.py, docs/testing.md): who is in which, and the live-tier guard.

The guard is checked in a pytest session of its own (a subprocess, outside this one's guard):
a test that starts a program of an engine's environment fails unless it is in the live tier,
whether it starts it in its body or in a module-scoped fixture.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import BROWSERS, E2E_MARKERS, LIVE_MARKERS, engine_program

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def _pytest_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["pytest"][
        "ini_options"
    ]


def test_the_default_run_is_the_fast_tier_on_every_core() -> None:
    addopts = _pytest_config()["addopts"]
    assert "-m 'not live and not e2e'" in addopts
    assert "-n auto" in addopts and "--dist loadfile" in addopts


def test_every_tier_marker_is_registered() -> None:
    registered = {line.split(":")[0] for line in _pytest_config()["markers"]}
    assert set(LIVE_MARKERS) | set(E2E_MARKERS) <= registered


def test_engine_programs_are_recognised(tmp_path: Path, monkeypatch) -> None:
    venv = tmp_path / "some-vllm"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.symlink_to(sys.executable)
    monkeypatch.setenv("BIDKV_VLLM_VENV", str(venv))
    monkeypatch.delenv("BIDKV_VLLM_VENV_EXTRA", raising=False)
    assert engine_program([str(python), "-m", "tracekit.vllm.driver"]) == str(python)
    assert engine_program(str(python)) == str(python)
    assert engine_program(["x"], executable=str(python)) == str(python)
    extra = tmp_path / "other"
    monkeypatch.setenv("BIDKV_VLLM_VENV_EXTRA", f"/nowhere{os.pathsep}{extra}")
    assert engine_program([str(extra / "bin" / "python")]) is not None
    home = Path.home() / ".cache" / "bidkv" / "sglang-cpu-venv" / "bin" / "python"
    assert engine_program([str(home), "-c", "pass"]) == str(home)
    for browser in BROWSERS:
        assert engine_program([browser, "--headless"]) is not None
        assert engine_program([f"/usr/bin/{browser}"]) is not None
    # This environment's own Python (followed links or not), bash and git are no engines.
    assert engine_program([sys.executable, "-c", "pass"]) is None
    assert engine_program(["bash", "-c", "true"]) is None
    assert engine_program("git status") is None
    assert engine_program([]) is None


SESSION = """
import subprocess, os, pytest

def start():
    subprocess.run([os.environ["FAKE_ENGINE"]], check=True)

@pytest.fixture(scope="module")
def engine_once():
    start()

def test_starts_in_its_body():
    start()

def test_starts_in_a_fixture(engine_once):
    pass

@pytest.mark.live
def test_marked_live_may(engine_once):
    start()

@pytest.mark.vllm
def test_marked_vllm_may():
    start()

def test_starts_nothing():
    subprocess.run(["true"], check=True)

@pytest.mark.e2e
def test_end_to_end():
    pass

@pytest.mark.slow
def test_slow_is_end_to_end():
    pass
"""


def _session(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "engine-venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    engine = venv / "bin" / "python"
    engine.write_text("#!/bin/sh\nexit 0\n", "utf-8")
    engine.chmod(0o755)
    (tmp_path / name).write_text(SESSION, "utf-8")
    (tmp_path / "conftest.py").write_text("from tiers import *  # noqa: F403\n", "utf-8")
    env = {
        **os.environ,
        "FAKE_ENGINE": str(engine),
        "BIDKV_VLLM_VENV": str(venv),
        "PYTHONPATH": str(TESTS),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", "-rA", name, *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_test_outside_the_live_tier_that_starts_an_engine_fails(tmp_path: Path) -> None:
    done = _session(tmp_path, "test_session.py", "-m", "not live and not e2e")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAILED test_session.py::test_starts_in_its_body" in out
    assert "ERROR test_session.py::test_starts_in_a_fixture" in out
    assert "is not in the live tier: mark it @pytest.mark.live" in out
    assert "PASSED test_session.py::test_starts_nothing" in out
    assert "1 failed, 1 passed, 4 deselected, 1 error" in out


@pytest.mark.e2e  # (three pytest sessions)
def test_the_tiers_select_their_tests(tmp_path: Path) -> None:
    def selected(name: str, marks: str) -> set[str]:
        done = _session(tmp_path, name, "-m", marks)
        assert done.returncode == 0, done.stdout + done.stderr
        return set(re.findall(r"^PASSED \S+::(\w+)", done.stdout, re.M))

    assert selected("test_session.py", "e2e") == {"test_end_to_end", "test_slow_is_end_to_end"}
    # In the live tier a test may start an engine, in its body or its fixtures.
    assert selected("test_session.py", "live") == {"test_marked_live_may", "test_marked_vllm_may"}
    # A file named test_*_live.py is live as a whole.
    assert len(selected("test_session_live.py", "live")) == 7
