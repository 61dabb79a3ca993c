"""docs/trace-format.md documents every table and column of the schema file."""

from __future__ import annotations

from pathlib import Path

from tracekit.schema import trace_schema

DOC = (Path(__file__).resolve().parents[1] / "docs" / "trace-format.md").read_text("utf-8")


def test_every_table_and_column_is_documented() -> None:
    schema = trace_schema()
    for table in schema.tables.values():
        assert f"### `{table.name}`" in DOC
        for column in table.columns:
            assert f"| `{column.name}` | {column.type} |" in DOC, (table.name, column.name)
    for field in schema.manifest_required:
        assert f"| `{field}` |" in DOC
