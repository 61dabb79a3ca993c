"""The decision-trace schema, read once from ``schemas/trace-v3.json`` (and the older versions).

Writers, readers and ``tracekit validate`` take every table and column from here; nothing else in
the project lists trace columns by hand. Writers write :data:`SCHEMA_VERSION`; readers accept
every version in :data:`READABLE_VERSIONS`. Each version only adds nullable columns (or optional
tables) to the one before (2: the prefix-cache columns; 3: ``requests.ignore_eos``), so an older
table reads as the current version with those columns null (unknown): :func:`added_columns`
names them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import polars as pl
import pyarrow as pa

__all__ = [
    "READABLE_VERSIONS",
    "SCHEMA_VERSION",
    "ColumnSpec",
    "TableSpec",
    "TraceSchema",
    "added_columns",
    "trace_schema",
]

SCHEMA_VERSION = 3
#: Versions a reader opens; an older bundle's tables read as the current version's.
READABLE_VERSIONS = (1, 2, 3)

_ARROW_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
}
_POLARS_TYPES: dict[str, Any] = {
    "string": pl.String,
    "int64": pl.Int64,
    "float64": pl.Float64,
    "bool": pl.Boolean,
}


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column of a trace table."""

    name: str
    type: str
    nullable: bool
    description: str


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One trace table: its columns in order, its key, and whether a bundle may omit it."""

    name: str
    description: str
    columns: tuple[ColumnSpec, ...]
    key: tuple[str, ...]
    optional: bool

    @property
    def column_names(self) -> list[str]:
        """Column names in schema order."""
        return [c.name for c in self.columns]

    @property
    def arrow_schema(self) -> pa.Schema:
        """The table's Arrow schema."""
        return pa.schema(
            [pa.field(c.name, _ARROW_TYPES[c.type], nullable=c.nullable) for c in self.columns]
        )

    @property
    def polars_schema(self) -> dict[str, Any]:
        """The table's polars schema (name -> dtype)."""
        return {c.name: _POLARS_TYPES[c.type] for c in self.columns}


@dataclass(frozen=True, slots=True)
class TraceSchema:
    """The whole trace format: manifest keys and tables."""

    version: int
    manifest_file: str
    manifest_required: tuple[str, ...]
    manifest_optional: tuple[str, ...]
    tables: dict[str, TableSpec]

    def table(self, name: str) -> TableSpec:
        """The spec of table ``name``; ``KeyError`` lists the known tables."""
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(
                f"unknown trace table {name!r}; known tables: {', '.join(self.tables)}"
            ) from None

    @property
    def required_tables(self) -> list[str]:
        """Tables every bundle has."""
        return [t.name for t in self.tables.values() if not t.optional]


@cache
def trace_schema(version: int = SCHEMA_VERSION) -> TraceSchema:
    """Load the trace schema of ``version`` from the installed ``tracekit.schemas`` package."""
    text = resources.files("tracekit.schemas").joinpath(f"trace-v{version}.json").read_text("utf-8")
    raw = json.loads(text)
    tables = {
        name: TableSpec(
            name=name,
            description=spec["description"],
            columns=tuple(ColumnSpec(**col) for col in spec["columns"]),
            key=tuple(spec["key"]),
            optional=bool(spec.get("optional", False)),
        )
        for name, spec in raw["tables"].items()
    }
    manifest = raw["manifest"]
    return TraceSchema(
        version=int(raw["version"]),
        manifest_file=manifest["file"],
        manifest_required=tuple(manifest["required"]),
        manifest_optional=tuple(manifest["optional"]),
        tables=tables,
    )


def added_columns(table: str, since: int) -> list[ColumnSpec]:
    """Columns of ``table`` in the current schema that version ``since`` lacks (all nullable).

    A reader of a version-``since`` bundle adds them as nulls: the old recorder could not see
    them.
    """
    old = set(trace_schema(since).table(table).column_names)
    return [c for c in trace_schema().table(table).columns if c.name not in old]
