"""An --out that cannot be created is one line naming --out and the path, exit 2, and no output.

The cases: a file where a folder is needed (or a folder where a file is needed), a path whose
parent is a file, and a folder nobody can write in. Tests may run as root, where chmod does not
block writes, so the unwritable folder is /proc (Linux), plus a chmod 555 folder when not
root. One helper (``tracekit.cli.common.check_out_path``) checks every command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

# Each command with --out, its other arguments ({trace}, {workload}, {matrix}, {results} are
# real inputs), and whether --out is a folder (True) or a file (False).
COMMANDS: dict[str, tuple[list[str], bool]] = {
    "replay": (["replay", "{trace}", "--strategy", "bidkv"], True),
    "record sim": (["record", "sim", "--workload", "{workload}", "--limit", "5"], True),
    "record import": (["record", "import", "{workload}"], True),
    "record vllm": (["record", "vllm", "--workload", "{workload}", "--limit", "5"], True),
    "record sglang": (["record", "sglang", "--workload", "{workload}", "--limit", "5"], True),
    "qualify": (["qualify", "--workload", "{workload}", "--limit", "5"], True),
    "report": (["report", "{trace}"], False),
    "sweep": (["sweep", "{matrix}"], True),
    "query": (["query", "{trace}", "SELECT 1 AS x"], False),
    "experiment traces": (["experiment", "traces", "--num-requests", "2"], True),
    "experiment run": (["experiment", "run", "--runs", "1"], True),
    "oracle": (["oracle", "{trace}"], True),
    "calibrate": (["calibrate", "{trace}"], False),
    "capacity": (["capacity", "--workload", "{workload}", "--limit", "5"], False),
}


@pytest.fixture
def inputs(tmp_path: Path, write_bundle: Callable[..., Path], azure_sample: Path,
           tiny_matrix: Path) -> dict[str, str]:  # fmt: skip
    trace = write_bundle(tmp_path / "trace")
    return {"trace": str(trace), "workload": str(azure_sample), "matrix": str(tiny_matrix)}


def run(name: str, out: Path, inputs: dict[str, str]):  # type: ignore[no-untyped-def]
    args, _ = COMMANDS[name]
    args = [arg.format(**inputs) for arg in args] + ["--out", str(out)]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def snapshot(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def assert_refused(result, out: Path, before: set[Path], folder: Path) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: --out {out}: ")
    assert snapshot(folder) == before


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_parent_that_is_a_file(name: str, tmp_path: Path, inputs: dict[str, str]) -> None:
    blocker = tmp_path / "blocker.txt"
    blocker.write_text("not a folder", "utf-8")
    out = blocker / "sub" / "out"
    before = snapshot(tmp_path)
    result = run(name, out, inputs)
    assert_refused(result, out, before, tmp_path)
    assert "blocker.txt is a file" in result.output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_wrong_kind_of_path(name: str, tmp_path: Path, inputs: dict[str, str]) -> None:
    folder = COMMANDS[name][1]
    out = tmp_path / "existing"
    if folder:
        out.write_text("a file where a folder is needed", "utf-8")
    else:
        out.mkdir()
    before = snapshot(tmp_path)
    result = run(name, out, inputs)
    assert_refused(result, out, before, tmp_path)
    assert ("is a file, not a folder" if folder else "is a folder, not a file") in result.output


@pytest.mark.parametrize("kind", ["dangling", "to a folder", "to a file"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_symbolic_link(name: str, kind: str, tmp_path: Path, inputs: dict[str, str]) -> None:
    """Outputs are renamed into place, never written through a link: one line, exit 2.

    ``record sim --out`` at a dangling link used to run, fail at the final rename with a
    traceback, and leave its partial folder.
    """
    target = tmp_path / "target"
    if kind == "to a folder":
        target.mkdir()
    elif kind == "to a file":
        target.write_text("theirs", "utf-8")
    out = tmp_path / "link"
    out.symlink_to(target)
    before = snapshot(tmp_path)
    result = run(name, out, inputs)
    assert_refused(result, out, before, tmp_path)
    assert "is a symbolic link" in result.output
    assert out.is_symlink()


def _unwritable(tmp_path: Path) -> list[Path]:
    """Folders this process cannot create anything in (os.access passes /proc for root)."""
    folders = [Path("/proc")] if sys.platform == "linux" else []
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        folders.append(locked)
    return folders


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_folder_that_cannot_be_written(name: str, tmp_path: Path, inputs: dict[str, str]) -> None:
    folders = _unwritable(tmp_path)
    if not folders:
        pytest.skip("no folder this process cannot write in")
    for folder in folders:
        out = folder / "tracekit-out-test" / "out"
        before = snapshot(tmp_path)
        result = run(name, out, inputs)
        assert_refused(result, out, before, tmp_path)
        assert f"cannot write in {folder}" in result.output
        assert not out.parent.exists()


def test_every_out_option_is_checked() -> None:
    def leaves(group, prefix=""):  # type: ignore[no-untyped-def]
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from leaves(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    with_out = {
        name for name, command in leaves(cli)
        if any(param.name == "out" for param in command.params)
    }  # fmt: skip
    assert with_out == set(COMMANDS)
