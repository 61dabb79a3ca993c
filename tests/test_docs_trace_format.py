"""docs/trace-format.md documents every table and column of the schema file."""

from __future__ import annotations

from pathlib import Path

from tracekit.trace.schema import trace_schema

DOC = (Path(__file__).resolve().parents[1] / "docs" / "trace-format.md").read_text("utf-8")


def test_every_table_and_column_is_documented() -> None:
    schema = trace_schema()
    for table in schema.tables.values():
        assert f"### `{table.name}`" in DOC
        for column in table.columns:
            assert f"| `{column.name}` | {column.type} |" in DOC, (table.name, column.name)
    for field in schema.manifest_required:
        assert f"| `{field}` |" in DOC


def test_generated_tables_section_is_up_to_date() -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "gen_trace_docs.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
