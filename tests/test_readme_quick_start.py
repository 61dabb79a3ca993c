"""The README's Quick start block runs as written, twice in a row, each command exiting 0.

The block's lines run one by one through bash, from a fresh folder that holds the checkout's
``traces/``, ``examples/`` and ``bidkv/`` (the block's inputs) and nothing else, with a
``tracekit`` on PATH that is this environment's; then the block runs again in the same folder
(``--overwrite`` replaces what each command wrote, the sweep resumes), but for the commands that
read nothing the block writes and write nothing (:data:`READ_ONLY_OF_SHIPPED`): their second
run would repeat the first on the same inputs. Skipped: the
``pip install`` lines (the environment is installed already; ``tests/test_packaging.py`` builds
the wheel and runs the Quick start from it outside the checkout). The ``qualify`` line runs on
a slice of the workload (the full job is the README's main command, run in
``tests/test_readme.py::test_readme_main_command_produces_the_report``). Last, ``ruff check .``
with the project's configuration passes over what the block left (``runs/``, ``replay/``,
``sweeps/``, ``reports/``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import qualify_exit

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")


def quick_start_lines() -> list[str]:
    """The Quick start's bash block, one command per line, comments dropped."""
    section = README.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    lines = []
    for raw in block.group(1).splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return lines


def test_the_block_is_what_this_test_runs() -> None:
    lines = quick_start_lines()
    assert lines[0].startswith("pip install") and lines[1].startswith("pip install")
    assert lines[2].startswith("W=")
    assert sum(line.startswith("tracekit qualify") for line in lines) == 1
    assert len([line for line in lines if line.startswith("tracekit ")]) >= 12


#: Commands that read only what ships (the sample, the manifests) and write nothing: the
#: second round leaves them out (capacity alone was a tenth of this test's time).
READ_ONLY_OF_SHIPPED = ("tracekit capacity ", "tracekit diff --conformance", "tracekit manifest ")


def test_the_commands_run_once_read_only_what_ships() -> None:
    once = [ln for ln in quick_start_lines() if ln.startswith(READ_ONLY_OF_SHIPPED)]
    assert len(once) == len(READ_ONLY_OF_SHIPPED)
    written = ("runs", "replay", "sweeps", "reports")  # where the block writes
    for line in once:
        # No output, and no input but the workload or a shipped manifest.
        words = line.split()
        assert "--out" not in words
        assert not [w for w in words if w.split("/")[0] in written], line


# Appended to the qualify line: a slice of the workload, one load cell (seconds, not minutes).
QUALIFY_SLICE = " --limit 60 --num-blocks 300 --max-model-len 4608 --load-plan single --jobs 1"


@pytest.mark.slow
def test_every_quick_start_command_exits_0_twice_in_a_row(tmp_path: Path) -> None:
    here = tmp_path / "fresh"
    here.mkdir()
    for name in ("traces", "examples", "bidkv"):
        (here / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "tracekit"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m tracekit "$@"\n', "utf-8")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    lines = [
        f"{line}{QUALIFY_SLICE}" if line.startswith("tracekit qualify") else line
        for line in quick_start_lines()
        if not line.startswith("pip install")
    ]

    def step(i: int, line: str, round_: int) -> str:
        if not line.startswith("tracekit"):
            return line
        if line.startswith("tracekit qualify"):
            # Its exit status is its verdict: 0 GO, 1 NO-GO (a finding), checked below.
            return (f'set +e\n{line}\ncode=$?\nset -e\necho "qualify exit $code" >&2\n'
                    f'[ $code -le 1 ]\necho "exit 0: round {round_} line {i}" >&2')  # fmt: skip
        return f'{line}\necho "exit 0: round {round_} line {i}" >&2'

    for round_ in (1, 2):
        run = [ln for ln in lines if round_ == 1 or not ln.startswith(READ_ONLY_OF_SHIPPED)]
        commands = sum(line.startswith("tracekit") for line in run)
        script = "set -e\n" + "\n".join(step(i, line, round_) for i, line in enumerate(run))
        result = subprocess.run(
            ["bash", "-c", script], cwd=here, env=env, capture_output=True, text=True,
            timeout=1200,
        )  # fmt: skip
        assert result.returncode == 0, f"round {round_}: {result.stderr[-3000:]}"
        done = [line for line in result.stderr.splitlines() if line.startswith("exit 0: ")]
        assert len(done) == commands, f"round {round_}"
        (verdict,) = [ln for ln in result.stderr.splitlines() if ln.startswith("qualify exit")]
        assert verdict == f"qualify exit {qualify_exit(here / 'reports' / 'mine')}"
        # What the commands wrote, where the README says.
        for path in ("runs/typed/manifest.json", "runs/legacy/manifest.json",
                     "replay/open/summary.txt", "sweeps/smoke/sweep.json",
                     "reports/mine/report.html"):  # fmt: skip
            assert (here / path).is_file(), path
        assert (here / "replay" / "closed").is_dir()
        # Nothing half-written or left over beside the outputs.
        hidden = [
            p.relative_to(here).as_posix()
            for folder in ("runs", "replay", "sweeps", "reports")
            for p in (here / folder).glob(".*")
        ]
        assert hidden == [], hidden
    # What the block left does not break the project's lint.
    for name in ("pyproject.toml", ".gitignore"):
        shutil.copy(ROOT / name, here / name)
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=here, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
