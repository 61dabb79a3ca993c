"""The README's Quick start block runs as written, each command exiting 0.

The block's lines run one by one through bash, from a fresh folder that holds the checkout's
``traces/``, ``examples/`` and ``bidkv/`` (the block's inputs) and nothing else, with a
``tracekit`` on PATH that is this environment's. Skipped: the ``pip install`` lines (the
environment is installed already; ``tests/test_packaging.py`` builds the wheel and runs the
Quick start from it outside the checkout) and the ``qualify`` line, which is the README's main
command and runs in ``tests/test_readme.py::test_readme_main_command_produces_the_report``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_every_quick_start_command_exits_0(tmp_path: Path) -> None:
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
        line
        for line in quick_start_lines()
        if not line.startswith(("pip install", "tracekit qualify"))
    ]
    script = "set -e\n" + "\n".join(
        f'{line}\necho "exit 0: line {i}" >&2' if line.startswith("tracekit") else line
        for i, line in enumerate(lines)
    )
    result = subprocess.run(
        ["bash", "-c", script], cwd=here, env=env, capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0, result.stderr[-3000:]
    done = [line for line in result.stderr.splitlines() if line.startswith("exit 0: ")]
    assert len(done) == sum(line.startswith("tracekit") for line in lines)
    # What the commands wrote, where the README says.
    for path in ("runs/typed/manifest.json", "runs/legacy/manifest.json",
                 "replay/open/summary.txt", "sweeps/smoke/sweep.json"):  # fmt: skip
        assert (here / path).is_file(), path
    assert (here / "replay" / "closed").is_dir()
