"""replay checks its trace before replaying: a deleted table is one line and exit 2, no output.

A deleted ``decisions.parquet`` used to give an all-dash summary (open mode) and exit 0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_a_deleted_decisions_table_is_refused(
    mode: str, tmp_path: Path, write_bundle: Callable[..., Path]
) -> None:
    trace = write_bundle(tmp_path / "trace")
    (trace / "decisions.parquet").unlink()
    out = tmp_path / "out"
    args = ["replay", str(trace), "--strategy", "bidkv", "--mode", mode, "--out", str(out)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {trace / 'decisions.parquet'}: table 'decisions'")
    assert len(result.output.splitlines()) == 1
    assert not out.exists()
