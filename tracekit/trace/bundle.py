"""Finding and opening trace bundles and datasets.

``open_trace(path)`` accepts a bundle folder (it holds ``manifest.json``) or a dataset folder (any
depth of bundles below it), checks every manifest's format and schema version, and scans each
table across all bundles as one polars ``LazyFrame`` (nothing is loaded until collected). Bundles
of an older readable version (:data:`~tracekit.trace.schema.READABLE_VERSIONS`) scan with the
current schema's columns: the ones their version lacks are null.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from tracekit.errors import TraceSchemaError
from tracekit.trace.schema import READABLE_VERSIONS, SCHEMA_VERSION, added_columns, trace_schema

__all__ = ["Bundle", "TraceDataset", "check_parquet", "find_bundle_dirs", "open_trace"]

MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class Bundle:
    """One recorded run on disk."""

    path: Path
    manifest: dict[str, Any]

    @property
    def run_id(self) -> str:
        """The run's id."""
        return str(self.manifest["run_id"])

    @property
    def schema_version(self) -> int:
        """The trace schema version the bundle was written with (the current one if unreadable)."""
        version = self.manifest.get("schema_version")
        # int(): a boolean true compares equal to 1 and is reported by validate, not here.
        return int(version) if version in READABLE_VERSIONS else SCHEMA_VERSION

    @property
    def complete(self) -> bool:
        """Whether the recorder closed the bundle (false: killed, still running, or unreadable).

        The one completeness rule: readers, resuming sweeps and the experiment matrix all ask it.
        """
        return self.manifest.get("complete") is True

    @classmethod
    def peek(cls, folder: str | Path) -> Bundle | None:
        """The bundle at ``folder`` without format checks, or ``None`` when the folder is absent.

        A missing or unreadable manifest gives an empty one, so the bundle is not
        :attr:`complete`. For resuming, where a half-written folder is expected; readers use
        :func:`open_trace`, which checks every manifest.
        """
        path = Path(folder)
        if not path.exists():
            return None
        try:
            manifest = json.loads((path / MANIFEST).read_text("utf-8"))
        except (OSError, ValueError):
            manifest = {}
        return cls(path, manifest if isinstance(manifest, dict) else {})

    def table_files(self, table: str) -> list[Path]:
        """Parquet files of ``table`` (one file, or live part files), in order."""
        single = self.path / f"{table}.parquet"
        if single.is_file():
            return [single]
        folder = self.path / table
        return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []

    def has_table(self, table: str) -> bool:
        """Whether the bundle holds ``table``."""
        return bool(self.table_files(table))


def find_bundle_dirs(path: Path) -> list[Path]:
    """Bundle folders at or below ``path``, sorted for a stable order."""
    if (path / MANIFEST).is_file():
        return [path]
    found = sorted(p.parent for p in path.rglob(MANIFEST) if not p.parent.name.startswith("."))
    # Bundles never nest: a folder with a manifest is a bundle, not a dataset.
    return [p for p in found if not any(q != p and q in p.parents for q in found)]


def _read_manifest(folder: Path) -> dict[str, Any]:
    file = folder / MANIFEST
    try:
        manifest = json.loads(file.read_text("utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceSchemaError(
            f"{file}: manifest is not valid JSON (line {exc.lineno}: {exc.msg}); "
            "re-record the bundle or restore the file"
        ) from None
    except UnicodeDecodeError:
        raise TraceSchemaError(
            f"{file}: manifest is not UTF-8 text; re-record the bundle or restore the file"
        ) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TraceSchemaError(
            f"{file}: cannot read the manifest ({reason}); check its permissions, or restore it"
        ) from None
    except RecursionError:
        raise TraceSchemaError(
            f"{file}: manifest nests too deeply to read; re-record the bundle"
        ) from None
    if not isinstance(manifest, dict):
        raise TraceSchemaError(f"{file}: manifest must be a JSON object; re-record the bundle")
    if manifest.get("format") != "tracekit.trace":
        raise TraceSchemaError(
            f"{file}: field 'format' is {manifest.get('format')!r}, expected 'tracekit.trace'; "
            "this is not a tracekit trace bundle"
        )
    version = manifest.get("schema_version")
    if version not in READABLE_VERSIONS:
        *older, newest = map(str, READABLE_VERSIONS)
        readable = f"{', '.join(older)} and {newest}" if older else newest
        raise TraceSchemaError(
            f"{file}: field 'schema_version' is {version!r}, this tracekit reads versions "
            f"{readable}; use the tracekit version that wrote it or re-record"
        )
    missing = [k for k in trace_schema(int(version)).manifest_required if k not in manifest]
    if missing:
        raise TraceSchemaError(
            f"{file}: manifest lacks required field(s) {', '.join(missing)}; re-record the bundle"
        )
    _check_tables_field(file, manifest.get("tables"))
    return manifest


def _check_tables_field(file: Path, tables: Any) -> None:
    """Refuse a ``tables`` field that is not ``{table: {"files": [...], "rows": n}}``."""
    if tables is None:
        return
    fix = 'expected an object such as {"requests": {"files": [...], "rows": 10}}; re-record'
    if not isinstance(tables, dict):
        raise TraceSchemaError(f"{file}: field 'tables' is {_short(tables)}; {fix}")
    for name, entry in tables.items():
        if not isinstance(entry, dict):
            raise TraceSchemaError(f"{file}: field 'tables.{name}' is {_short(entry)}; {fix}")
        rows = entry.get("rows")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
            raise TraceSchemaError(
                f"{file}: field 'tables.{name}.rows' is {_short(rows)}; expected a row count "
                "(an integer >= 0); re-record the bundle"
            )
        files = entry.get("files")
        if files is not None and not (
            isinstance(files, list) and all(isinstance(f, str) for f in files)
        ):
            raise TraceSchemaError(
                f"{file}: field 'tables.{name}.files' is {_short(files)}; expected a list of "
                "file names; re-record the bundle"
            )


def _short(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (for one-line errors)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True, slots=True)
class TraceDataset:
    """One or more bundles, scanned together.

    Attributes
    ----------
    root
        The folder opened.
    bundles
        Every run once, in path order.
    copies
        ``(copy, kept)`` for each bundle left out because it records a run already in
        ``bundles`` again (see :func:`open_trace`).
    """

    root: Path
    bundles: tuple[Bundle, ...]
    copies: tuple[tuple[Path, Path], ...] = ()

    def __iter__(self) -> Iterator[Bundle]:
        return iter(self.bundles)

    def __len__(self) -> int:
        return len(self.bundles)

    def files(self, table: str) -> list[Path]:
        """Every Parquet file of ``table`` across the dataset."""
        return [f for b in self.bundles for f in b.table_files(table)]

    def scan(self, table: str) -> pl.LazyFrame:
        """All rows of ``table`` across the dataset as one lazy frame with the schema's dtypes.

        Files of an older schema version get the columns it lacks as nulls (unknown).
        """
        spec = trace_schema().table(table)
        # Consecutive bundles of one version scan together, so rows keep the bundles' order.
        runs: list[tuple[int, list[Path]]] = []
        for bundle in self.bundles:
            if not runs or runs[-1][0] != bundle.schema_version:
                runs.append((bundle.schema_version, []))
            runs[-1][1].extend(bundle.table_files(table))
        frames = []
        for version, files in runs:
            if not files:
                continue
            if table not in trace_schema(version).tables:
                continue  # a table the bundle's version does not have (so it has no files)
            old = trace_schema(version).table(table)
            for file in files:
                check_parquet(file, old.column_names, version)
            frame = pl.scan_parquet(files, schema=old.polars_schema)
            if version != SCHEMA_VERSION:
                frame = frame.with_columns(
                    pl.lit(None, dtype=spec.polars_schema[c.name]).alias(c.name)
                    for c in added_columns(table, version)
                ).select(spec.column_names)
            frames.append(frame)
        if not frames:
            return pl.LazyFrame(schema=spec.polars_schema)
        # One version (the usual case) keeps the single scan, and with it the files' order.
        return frames[0] if len(frames) == 1 else pl.concat(frames)

    def runs(self) -> pl.DataFrame:
        """One row per run with the manifest's scalar fields (nested ones as JSON text)."""
        rows = []
        for bundle in self.bundles:
            row = {}
            for key, value in bundle.manifest.items():
                row[key] = (
                    json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value
                )
            row["path"] = str(bundle.path)
            rows.append(row)
        return pl.DataFrame(rows, infer_schema_length=None)


def check_parquet(file: Path, expected: list[str], version: int = SCHEMA_VERSION) -> None:
    """Fail with a one-line error if ``file`` is not readable Parquet with the schema's columns.

    ``version`` is the bundle's schema version, named in the error.
    """
    try:
        names = pq.read_schema(file).names
    except Exception as exc:  # pyarrow raises several types for truncated or foreign files
        raise TraceSchemaError(
            f"{file}: not a readable Parquet file ({type(exc).__name__}: {exc}); "
            "the file is truncated or corrupt: re-record the bundle"
        ) from None
    missing = [c for c in expected if c not in names]
    if missing:
        raise TraceSchemaError(
            f"{file}: missing column(s) {', '.join(missing)}; the file does not follow trace "
            f"schema v{version}: re-record it with this tracekit"
        )


def open_trace(path: str | Path) -> TraceDataset:
    """Open a bundle or a dataset folder, checking every manifest.

    Every run is read once: a bundle that records a run of the dataset again (same run id,
    same manifest but for ``created_at`` and ``labels``, same table files; ``tracekit qualify``
    keeps the candidate's typed run of its reference repeat under ``runs/`` and under
    ``diff/typed``) is
    left out and listed in :attr:`TraceDataset.copies`. Another bundle with a run id already
    seen is an error.
    """
    root = Path(path)
    if not root.exists():
        raise TraceSchemaError(f"{root}: no such file or folder; pass a trace bundle or dataset")
    if not root.is_dir():
        raise TraceSchemaError(
            f"{root}: is a file; pass the bundle folder that holds {MANIFEST} and the tables"
        )
    dirs = find_bundle_dirs(root)
    if not dirs:
        raise TraceSchemaError(
            f"{root}: no trace bundle found ({MANIFEST} missing); record one with "
            "'tracekit record sim' or pass the right folder"
        )
    seen: dict[str, Bundle] = {}
    kept: list[Bundle] = []
    copies: list[tuple[Path, Path]] = []
    for bundle in (Bundle(d, _read_manifest(d)) for d in dirs):
        first = seen.get(bundle.run_id)
        if first is None:
            seen[bundle.run_id] = bundle
            kept.append(bundle)
        elif _same_recording(first, bundle):
            copies.append((bundle.path, first.path))
        else:
            raise TraceSchemaError(
                f"{bundle.path / MANIFEST}: field 'run_id' {bundle.run_id!r} repeats the run in "
                f"{first.path}, with other contents; each bundle of a dataset needs its own run"
            )
    return TraceDataset(root, tuple(kept), tuple(copies))


# Fields of a manifest that differ between two recordings of one run: when it was made, and
# the labels of the job that made it.
_PER_COPY = frozenset({"created_at", "labels"})


def _same_recording(a: Bundle, b: Bundle) -> bool:
    """Whether ``b`` records the run of ``a`` again (a qualify folder's ``diff/typed``).

    The same run id (a hash of workload, engine, strategy and seed), the same manifest but for
    its time and labels, both complete, and the same files of the same sizes.
    """
    if not (a.complete and b.complete):
        return False
    if {k: v for k, v in a.manifest.items() if k not in _PER_COPY} != {
        k: v for k, v in b.manifest.items() if k not in _PER_COPY
    }:
        return False
    tables = a.manifest.get("tables")
    names = tables if isinstance(tables, dict) else {}
    sizes = [
        tuple(f.stat().st_size for f in bundle.table_files(name))
        for name in names
        for bundle in (a, b)
    ]
    return sizes[0::2] == sizes[1::2]
