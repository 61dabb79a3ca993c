"""Streaming writer of trace bundles.

Rows are the typed rows of :mod:`tracekit.trace.rows` (one class per table, built by field name).
They are buffered per table and written as Parquet row groups (zstd) once a group is full, so
memory stays bounded however long the run. Two modes:

``atomic`` (recorders of simulated runs)
    Everything goes into a hidden sibling folder that is renamed to the output path only when the
    run completes; a failed run leaves no output folder at all.
``live`` (recorders inside real engines, which may be killed at any moment)
    Each flush writes a complete Parquet part file (``<table>/part-NNNNN.parquet``) and the
    manifest says ``complete: false`` until :meth:`BundleWriter.close`; a process killed mid-run
    leaves every flushed row readable, and ``tracekit validate`` reports the bundle as truncated.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import TracekitError
from tracekit.trace.rows import ROW_TYPES, TraceRow
from tracekit.trace.schema import SCHEMA_VERSION, TableSpec, trace_schema

__all__ = ["DEFAULT_ROW_GROUP_ROWS", "BundleWriter", "write_json_atomic"]

DEFAULT_ROW_GROUP_ROWS = 65_536
COMPRESSION = "zstd"
_append = list.append


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` as sorted, indented JSON through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


class _TableSink:
    """Buffered rows of one table and the Parquet file(s) they flush to."""

    def __init__(self, spec: TableSpec, folder: Path, *, live: bool, row_group_rows: int) -> None:
        self.spec = spec
        self.row_type = ROW_TYPES[spec.name]
        self.schema = spec.arrow_schema
        self.buffers: list[list[Any]] = [[] for _ in spec.columns]
        self.rows = 0
        self.pending = 0
        self.live = live
        self.row_group_rows = row_group_rows
        self.folder = folder
        self.files: list[str] = []
        self._writer: pq.ParquetWriter | None = None
        if live:
            (folder / spec.name).mkdir(parents=True, exist_ok=True)

    def append(self, row: TraceRow) -> None:
        if type(row) is not self.row_type:
            raise TracekitError(
                f"table {self.spec.name!r} takes {self.row_type.__name__} rows, got "
                f"{type(row).__name__}; build the row with tracekit.trace.rows"
            )
        # One value onto each column buffer, looped in C (the row's type fixes its length).
        list(map(_append, self.buffers, row))
        self.pending += 1
        # Live tables flush together (see BundleWriter.append), so a kill never splits a
        # decision from its candidates across a flushed and an unflushed part.
        if not self.live and self.pending >= self.row_group_rows:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        arrays = [
            pa.array(buffer, type=field.type)
            for buffer, field in zip(self.buffers, self.schema, strict=True)
        ]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if self.live:
            name = f"{self.spec.name}/part-{len(self.files):05d}.parquet"
            tmp = self.folder / f"{name}.tmp"
            pq.write_table(table, tmp, compression=COMPRESSION)
            os.replace(tmp, self.folder / name)
            self.files.append(name)
        else:
            if self._writer is None:
                name = f"{self.spec.name}.parquet"
                self._writer = pq.ParquetWriter(
                    self.folder / name, self.schema, compression=COMPRESSION
                )
                self.files.append(name)
            self._writer.write_table(table, row_group_size=self.row_group_rows)
        self.rows += self.pending
        self.pending = 0
        self.buffers = [[] for _ in self.buffers]

    def close(self) -> None:
        self.flush()
        if not self.live and self._writer is None:
            # An empty table is still a file with the schema, so readers never guess.
            name = f"{self.spec.name}.parquet"
            pq.write_table(self.schema.empty_table(), self.folder / name, compression=COMPRESSION)
            self.files.append(name)
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class BundleWriter:
    """Write one run's trace bundle, streaming rows table by table.

    Parameters
    ----------
    out
        The bundle folder to create. It must not exist yet (unless ``overwrite``).
    manifest
        The run's manifest fields (see ``schemas/trace-v1.json``); ``format``,
        ``schema_version``, ``complete`` and ``tables`` are filled in here.
    mode
        ``"atomic"`` or ``"live"`` (see the module docstring).
    tables
        Tables to write; defaults to the schema's required tables.
    row_group_rows
        Rows per Parquet row group (and per live flush).
    flush_interval_s
        Live mode: also flush every table at least this often (seconds).
    overwrite
        Replace an existing output folder (only after the new run completed, in atomic mode).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        manifest: Mapping[str, Any],
        *,
        mode: Literal["atomic", "live"] = "atomic",
        tables: Sequence[str] | None = None,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        flush_interval_s: float | None = None,
        overwrite: bool = False,
    ) -> None:
        if row_group_rows <= 0:
            raise TracekitError(f"row_group_rows must be positive, got {row_group_rows}")
        self.out = Path(out)
        self.mode = mode
        self.overwrite = overwrite
        if self.out.exists() and not overwrite and (mode == "atomic" or any(self.out.iterdir())):
            raise TracekitError(
                f"{self.out}: output folder already exists; choose a new --out or remove it"
            )
        schema = trace_schema()
        names = list(tables) if tables is not None else schema.required_tables
        live = mode == "live"
        if live:
            self.folder = self.out
        else:
            self.folder = self.out.with_name(f".{self.out.name}.partial-{os.getpid()}")
            if self.folder.exists():
                shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=live)
        self.manifest: dict[str, Any] = {
            **manifest,
            "format": "tracekit.trace",
            "schema_version": SCHEMA_VERSION,
            "complete": False,
            "tables": {},
        }
        self._sinks = {
            name: _TableSink(
                schema.table(name), self.folder, live=live, row_group_rows=row_group_rows
            )
            for name in names
        }
        self._primary = names[0]
        self._flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()
        self._closed = False
        if live:
            self._write_manifest()

    def append(self, table: str, row: TraceRow) -> None:
        """Append one row to ``table``: an instance of its class in :mod:`tracekit.trace.rows`."""
        sink = self._sinks[table]
        sink.append(row)
        if self.mode != "live":
            return
        # The first table (decisions) paces live flushes; the others follow it.
        due = table == self._primary and sink.pending >= sink.row_group_rows
        if not due and self._flush_interval_s is not None:
            due = time.monotonic() - self._last_flush >= self._flush_interval_s
        if due:
            self.flush()

    def flush(self) -> None:
        """Write every buffered row (live mode: as part files, then refresh the manifest)."""
        # Dependent tables first: a kill between the two leaves orphan candidates, never a
        # decision without its candidates.
        for name, sink in self._sinks.items():
            if name != self._primary:
                sink.flush()
        self._sinks[self._primary].flush()
        self._last_flush = time.monotonic()
        if self.mode == "live":
            self._write_manifest()

    def close(self, **final_fields: Any) -> Path:
        """Finish the bundle: flush, record row counts and ``final_fields``, publish it."""
        if self._closed:
            return self.out
        for sink in self._sinks.values():
            sink.close()
        self.manifest.update(final_fields)
        self.manifest["complete"] = True
        self._write_manifest()
        if self.mode == "atomic":
            if self.out.exists():
                # Only reached with overwrite=True: the new run is complete, so replace the old.
                shutil.rmtree(self.out)
            os.replace(self.folder, self.out)
        self._closed = True
        return self.out

    def abort(self) -> None:
        """Drop an unfinished atomic bundle; live bundles keep what was flushed."""
        if self._closed:
            return
        self._closed = True
        if self.mode == "atomic":
            for sink in self._sinks.values():
                if sink._writer is not None:
                    sink._writer.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    def _write_manifest(self) -> None:
        self.manifest["tables"] = {
            name: {"rows": sink.rows, "files": list(sink.files)}
            for name, sink in self._sinks.items()
        }
        write_json_atomic(self.folder / "manifest.json", self.manifest)

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
