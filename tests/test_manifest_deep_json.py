"""Deeply nested JSON given to ``manifest validate`` is a one-line error, not a RecursionError."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import cli


def test_deeply_nested_manifest_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    result = CliRunner().invoke(cli, ["manifest", "validate", str(path)])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert str(path) in lines[0] and "nested too deeply" in lines[0]
