"""Streaming writer of trace bundles.

Rows are the typed rows of :mod:`tracekit.trace.rows` (one class per table, built by field name).
They are buffered per table and written as Parquet row groups (zstd) once a group is full, so
memory stays bounded however long the run. Two modes:

``atomic`` (recorders of simulated runs)
    Everything goes into a hidden sibling folder ``.OUT.partial-PID`` that is renamed to the
    output path only when the run completes; a run that fails with an error leaves no output
    folder at all. While the run goes on, each full row group is a complete part file
    (``<table>/part-NNNNN.parquet``) and the folder's manifest says ``complete: false``, so a
    process killed mid-run (SIGKILL, SIGTERM, Ctrl-C) leaves every flushed row readable and
    ``tracekit validate .OUT.partial-PID`` exits 3. The same row groups are streamed into each
    table's single file (hidden until the end, when it becomes ``<table>.parquet``: the bytes of
    an uninterrupted run do not depend on the part files, which are then deleted). A later
    writer of the same output removes partial folders whose process is dead.
``live`` (recorders inside real engines, which may be killed at any moment)
    Each flush writes a complete Parquet part file (``<table>/part-NNNNN.parquet``) and the
    manifest says ``complete: false`` until :meth:`BundleWriter.close`; a process killed mid-run
    leaves every flushed row readable, and ``tracekit validate`` reports the bundle as truncated.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit import safe_output
from tracekit.errors import TracekitError
from tracekit.trace.rows import ROW_TYPES, TraceRow
from tracekit.trace.schema import SCHEMA_VERSION, TableSpec, TraceSchema, trace_schema

__all__ = [
    "DEFAULT_ROW_GROUP_ROWS",
    "BundleWriter",
    "RecordingInterrupted",
    "bundle_mark",
    "remove_stale_partials",
]

DEFAULT_ROW_GROUP_ROWS = 65_536
COMPRESSION = "zstd"
_append = list.append
# Part files of an atomic bundle are only read if the run is killed: fast to write beats small.
_CRASH_COPY: dict[str, Any] = {"compression": "lz4", "use_dictionary": False}


class RecordingInterrupted(TracekitError):
    """A recording stopped by a signal; its flushed rows were kept in the partial folder."""

    #: The command line's exit status for it (docs/index.md, "Conventions").
    exit_code = 130


def remove_stale_partials(out: str | os.PathLike[str]) -> list[Path]:
    """Remove ``.OUT.partial-PID`` folders of ``out`` whose process is no longer running.

    A folder of a running process (another recorder of the same output) is never touched
    (:func:`tracekit.safe_output.remove_stale_staging`). Returns the folders removed.
    """
    return safe_output.remove_stale_staging(out)


# What a bundle folder may hold besides its tables: the recorders' own files (a folder holding
# anything else is not one a recorder wrote, and --overwrite leaves it alone).
BUNDLE_SIDE_FILES = ("policy.log",)


def bundle_mark(command: str, side_files: Sequence[str] = ()) -> safe_output.Mark:
    """The mark of a bundle ``command`` wrote: a trace manifest, and only bundle files.

    The files are the manifest, each table's file or folder of part files (and the table file
    being streamed), :data:`BUNDLE_SIDE_FILES` and ``side_files``.
    """
    names = {safe_output.BUNDLE_MANIFEST, *BUNDLE_SIDE_FILES, *side_files}
    for table in trace_schema().tables:
        names |= {table, f"{table}.parquet", f".{table}.parquet.streaming"}

    def check(folder: Path) -> str | None:
        if not safe_output.is_trace_bundle(folder):
            return f"not a trace bundle written by {command} (no trace manifest)"
        try:
            others = sorted(p.name for p in folder.iterdir() if p.name not in names)
        except OSError as error:
            return f"cannot be listed ({(error.strerror or str(error)).lower()})"
        if others:
            return f"holds files {command} did not write ({', '.join(others[:3])})"
        return None

    return safe_output.Mark(command, check)


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
        (folder / spec.name).mkdir(parents=True, exist_ok=True)
        # Atomic mode: the table's single file, streamed a row group at a time.
        self._streamed = folder / f".{spec.name}.parquet.streaming"
        self._writer: pq.ParquetWriter | None = None
        # Rows in the listed files (atomic mode: in crash copies until publish).
        self.listed = 0
        # Atomic decisions: crash copies held back until their candidates are copied too.
        self.hold_copies = False
        self.held: list[pa.Table] = []
        self._seq = spec.column_names.index("seq") if "seq" in spec.column_names else None
        # Seqs below this have all their rows flushed (candidates: the last flushed seq).
        self.complete_below = 0

    def append(self, row: TraceRow) -> None:
        if type(row) is not self.row_type:
            raise TracekitError(
                f"table {self.spec.name!r} takes {self.row_type.__name__} rows, got "
                f"{type(row).__name__}; build the row with tracekit.trace.rows"
            )
        # One value onto each column buffer, looped in C (the row's type fixes its length).
        list(map(_append, self.buffers, row))
        self.pending += 1

    def flush(self) -> bool:
        """Write the buffered rows as one part file; False when there was nothing to write.

        Atomic mode also streams them, as one row group, into the table's single file (hidden
        until :meth:`publish`); its part files are crash copies, cheap to encode (lz4, no
        dictionary), that :meth:`publish` deletes.
        """
        if not self.pending:
            return False
        arrays = [
            pa.array(buffer, type=field.type)
            for buffer, field in zip(self.buffers, self.schema, strict=True)
        ]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if self.live:
            self.copy(table, compression=COMPRESSION)
        else:
            if self._writer is None:
                self._writer = pq.ParquetWriter(
                    self._streamed, self.schema, compression=COMPRESSION
                )
            self._writer.write_table(table, row_group_size=self.row_group_rows)
            if self._seq is not None:
                self.complete_below = self.buffers[self._seq][-1]
            if self.hold_copies:
                self.held.append(table)
            else:
                self.copy(table, **_CRASH_COPY)
        self.rows += self.pending
        self.pending = 0
        self.buffers = [[] for _ in self.buffers]
        return True

    def copy(self, table: pa.Table, **options: Any) -> None:
        """Write ``table`` as the next part file and list it."""
        name = f"{self.spec.name}/part-{len(self.files):05d}.parquet"
        tmp = self.folder / f"{name}.tmp"
        pq.write_table(table, tmp, **options)
        os.replace(tmp, self.folder / name)
        self.files.append(name)
        self.listed += table.num_rows

    def release(self, below: int | None) -> None:
        """Copy the held tables whose seqs are all below ``below`` (None: all of them)."""
        while self.held:
            table = self.held[0]
            if below is not None and table.column("seq")[-1].as_py() >= below:
                return
            self.copy(self.held.pop(0), **_CRASH_COPY)

    def publish(self) -> None:
        """Atomic mode: close the table's single file and drop the crash copies."""
        self.flush()
        name = f"{self.spec.name}.parquet"
        if self._writer is None:
            # An empty table is still a file with the schema, so readers never guess.
            pq.write_table(self.schema.empty_table(), self._streamed, compression=COMPRESSION)
        else:
            self._writer.close()
            self._writer = None
        os.replace(self._streamed, self.folder / name)
        shutil.rmtree(self.folder / self.spec.name)
        self.files = [name]
        self.held = []
        self.listed = self.rows


class BundleWriter:
    """Write one run's trace bundle, streaming rows table by table.

    Parameters
    ----------
    out
        The bundle folder to create. It must not exist yet (unless ``overwrite``).
    manifest
        The run's manifest fields (see ``schemas/trace-v2.json``); ``format``,
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
        Replace an existing output folder (only after the new run completed, in atomic mode),
        and only a bundle a recorder wrote (:func:`bundle_mark`).
    command
        The command writing it, named in a refusal (``tracekit record sim``).
    side_files
        Files the recorder writes into the bundle besides its tables and ``policy.log``.
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
        command: str = "tracekit record",
        side_files: Sequence[str] = (),
    ) -> None:
        if row_group_rows <= 0:
            raise TracekitError(f"row_group_rows must be positive, got {row_group_rows}")
        self.out = Path(out)
        self.mode = mode
        self.overwrite = overwrite
        self.mark = bundle_mark(command, side_files)
        schema = trace_schema()
        names = list(tables) if tables is not None else schema.required_tables
        live = mode == "live"
        self.removed_partials: list[Path] = []
        if live:
            if self.out.exists() and not overwrite and any(self.out.iterdir()):
                raise TracekitError(
                    f"{self.out}: output folder already exists; choose a new --out or remove it"
                )
            self.folder = self.out
            self.folder.mkdir(parents=True, exist_ok=True)
        else:
            # docs/guarantees.md, "Safe output": checked, staged beside it, renamed at close.
            safe_output.check_folder_output(self.out, mark=self.mark, overwrite=overwrite)
            self.removed_partials = safe_output.remove_stale_staging(self.out)
        created: list[Path] = []
        try:
            if not live:
                self.folder = safe_output.make_staging(self.out, created=created)
            self._start(manifest, schema, names, live, row_group_rows, flush_interval_s)
        except BaseException:
            # Nothing of an unstarted bundle is left, even if a stop came as it was created.
            for path in created:
                safe_output.discard(path)
            raise

    def _start(
        self,
        manifest: Mapping[str, Any],
        schema: TraceSchema,
        names: list[str],
        live: bool,
        row_group_rows: int,
        flush_interval_s: float | None,
    ) -> None:
        """Open every table's sink and write the first (incomplete) manifest."""
        self.manifest: dict[str, Any] = {
            **manifest,
            "format": safe_output.BUNDLE_FORMAT,
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
        if not live and "decisions" in self._sinks and "candidates" in self._sinks:
            # A kill must not leave a listed decision whose candidates were not flushed.
            self._sinks["decisions"].hold_copies = True
        self._flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()
        self._closed = False
        # Set while files are written: a stop signal then waits (see stop_on_signals).
        self._hold = False
        self._stop: int | None = None
        self._write_manifest()

    def append(self, table: str, row: TraceRow) -> None:
        """Append one row to ``table``: an instance of its class in :mod:`tracekit.trace.rows`."""
        sink = self._sinks[table]
        sink.append(row)
        if self.mode != "live":
            # Atomic tables flush on their own, a full row group at a time (the published
            # file's groups); decisions' crash copies wait for their candidates' (see release).
            if sink.pending >= sink.row_group_rows:
                self._flush_sink(sink)
            return
        # The first table (decisions) paces live flushes; the others follow it.
        due = table == self._primary and sink.pending >= sink.row_group_rows
        if not due and self._flush_interval_s is not None:
            due = time.monotonic() - self._last_flush >= self._flush_interval_s
        if due:
            self.flush()

    def appender(self, table: str) -> Callable[[TraceRow], None]:
        """A function that appends one row to ``table``: :meth:`append` without the look-ups.

        For recorders that append millions of rows (one per engine step).
        """
        if self.mode == "live" or table not in self._sinks:
            return functools.partial(self.append, table)
        sink = self._sinks[table]
        row_type, limit = sink.row_type, sink.row_group_rows

        def append(row: TraceRow) -> None:
            if type(row) is not row_type:
                sink.append(row)  # raises the usual error
            list(map(_append, sink.buffers, row))
            sink.pending += 1
            if sink.pending >= limit:
                self._flush_sink(sink)

        return append

    def _flush_sink(self, sink: _TableSink) -> None:
        """Atomic mode: write one full row group of ``sink`` and refresh the manifest."""
        self._hold = True
        sink.flush()
        self._release_held("candidates")
        self._write_manifest()
        self._release()

    def flush(self) -> None:
        """Write every buffered row (live mode: as part files, then refresh the manifest)."""
        # Dependent tables first: a kill between the two leaves orphan candidates, never a
        # decision without its candidates.
        held, self._hold = self._hold, True
        for name, sink in self._sinks.items():
            if name != self._primary:
                sink.flush()
        self._sinks[self._primary].flush()
        self._last_flush = time.monotonic()
        self._write_manifest()
        if not held:
            self._release()

    def _release_held(self, bound: str | None) -> None:
        """Atomic mode: copy held decisions covered by the flushed candidates (or all)."""
        decisions = self._sinks.get("decisions")
        if decisions is not None and decisions.held:
            limit = None if bound is None else self._sinks[bound].complete_below
            decisions.release(limit)

    def _release(self) -> None:
        """End a write; a stop signal that arrived meanwhile takes effect now."""
        self._hold = False
        if self._stop is not None:
            raise self._interrupted(self._stop)

    def _interrupted(self, signum: int) -> RecordingInterrupted:
        where = self.folder
        return RecordingInterrupted(
            f"stopped by {signal.Signals(signum).name}: the rows recorded so far are kept in "
            f"{where} (an incomplete bundle: `tracekit validate {where}` exits 3, its tables "
            f"read as usual); the next run into {self.out} removes it, so move it away to keep it"
        )

    @contextlib.contextmanager
    def stop_on_signals(self, *signums: int) -> Iterator[BundleWriter]:
        """Turn ``signums`` (e.g. SIGTERM) into :class:`RecordingInterrupted` while recording.

        Leaving the writer's ``with`` block with that error keeps the flushed rows (see
        :meth:`suspend`). A signal that arrives while files are being written waits for the
        write to finish. Outside the main thread this does nothing (Python cannot install
        handlers there). Use it around the writer's own ``with`` block.
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handle(signum: int, frame: object) -> None:
            if self._closed:
                # Finished (or already suspended): let the signal do what it did before.
                signal.signal(signum, previous.get(signum, signal.SIG_DFL))
                os.kill(os.getpid(), signum)
            elif self._hold:
                self._stop = signum
            else:
                self._stop = signum
                raise self._interrupted(signum)

        previous = {signum: signal.signal(signum, handle) for signum in signums}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self._stop is not None:
                # Arrived while the finished bundle was being published: act on it now.
                os.kill(os.getpid(), self._stop)

    def close(self, **final_fields: Any) -> Path:
        """Finish the bundle: flush, record row counts and ``final_fields``, publish it."""
        if self._closed:
            return self.out
        self._hold = True
        try:
            if self.mode == "atomic":
                for sink in self._sinks.values():
                    sink.publish()
            else:
                for sink in self._sinks.values():
                    sink.flush()
            self.manifest.update(final_fields)
            self.manifest["complete"] = True
            self._write_manifest()
            if self.mode == "atomic":
                # An old bundle is replaced only with overwrite, once the new one is complete.
                safe_output.publish_folder(
                    self.folder, self.out, mark=self.mark, overwrite=self.overwrite
                )
        except BaseException:
            # Whatever failed (a value Parquet cannot store, the final rename), nothing is left.
            self.abort()
            raise
        self._closed = True
        self._hold = False
        return self.out

    def abort(self) -> None:
        """Drop an unfinished atomic bundle; live bundles keep what was flushed."""
        if self._closed:
            return
        self._closed = True
        self._hold = False
        self._close_streams()
        if self.mode == "atomic":
            safe_output.discard(self.folder)

    def _close_streams(self) -> None:
        for sink in self._sinks.values():
            if sink._writer is not None:
                with contextlib.suppress(Exception):
                    sink._writer.close()
                sink._writer = None

    def suspend(self) -> Path:
        """Stop here and keep what was recorded: flush every table, manifest still incomplete.

        For a run stopped from outside (a signal, Ctrl-C): the folder (the hidden partial
        folder in atomic mode) is left as a truncated bundle that ``tracekit validate`` reports
        with exit 3 and that readers open like any bundle. Returns that folder.
        """
        if not self._closed:
            self._hold = True
            self._stop = None
            self.flush()
            self._release_held(None)
            self._write_manifest()
            self._closed = True
            self._close_streams()
            self._hold = False
        return self.folder

    def _write_manifest(self) -> None:
        self.manifest["tables"] = {
            name: {"rows": sink.listed, "files": list(sink.files)}
            for name, sink in self._sinks.items()
        }
        safe_output.write_json(self.folder / "manifest.json", self.manifest)

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
        elif issubclass(exc_type, (KeyboardInterrupt, RecordingInterrupted)):
            self.suspend()
        else:
            self.abort()
