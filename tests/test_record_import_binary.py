"""A binary file given to ``record import`` is a one-line error, not a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import cli


def test_binary_file_is_refused_in_one_line(tmp_path: Path) -> None:
    source = tmp_path / "events.jsonl"
    source.write_bytes(bytes(range(256)) * 4)
    out = tmp_path / "bundle"
    result = CliRunner().invoke(cli, ["record", "import", str(source), "--out", str(out)])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert str(source) in lines[0] and "UTF-8" in lines[0]
    assert not out.exists()
