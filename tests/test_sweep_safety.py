"""A sweep never touches what it did not write, and its workers die with it (issue 18)."""

from __future__ import annotations

from pathlib import Path

from sweep_helpers import TINY, write_matrix

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
