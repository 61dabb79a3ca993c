"""``tracekit validate``: check a bundle or dataset against the schema and its invariants.

Validation streams: every table is read in batches of at most :data:`BATCH_ROWS` rows (row group
by row group), and what a check needs beyond one batch is carried over as a few scalars (the
previous seq, step, time and counters) or, for the checks between tables, a few bytes per
decision or request (candidate counts, 64-bit hashes of the victims' and requests' ids, and in
version 2 the freed-block count), so memory grows with the number of decisions at about 33 bytes
each, never with a whole table.

Findings are of two kinds. *Malformed* input exits 2: a manifest field of the wrong type, a table
the manifest lists but that is gone, a table with a missing or unknown column or a column of the
wrong type (its rows are then not checked). *Invalid* rows exit 1: a value that breaks an
invariant of the format. A bundle whose recorder never closed it (``complete: false``) is
*truncated*: its flushed rows are checked like any other, and it exits 3 when nothing else is
wrong. Each finding is one line that names the file, the field and the fix.

A bundle is checked against the schema version its manifest names (``schema_version``): a
version-1 bundle against ``schemas/trace-v1.json``, strictly (no version-2 column may appear), a
version-2 bundle against ``schemas/trace-v2.json``, with the prefix-cache invariants of
docs/trace-format.md, "Prefix caching" (each checked where the recorder filled both sides).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import TraceSchemaError
from tracekit.trace.bundle import MANIFEST, Bundle, TraceDataset, open_trace
from tracekit.trace.schema import SCHEMA_VERSION, TableSpec, trace_schema
from tracekit.trace.values import (
    CALLED,
    KEYS,
    RERECORD,
    Reads,
    block_size,
    check_values,
    manifest_number_problems,
    row_rules,
)

__all__ = [
    "BATCH_ROWS",
    "BundleReport",
    "ValidationReport",
    "check_bundle",
    "check_readable",
    "open_checked",
    "validate_trace",
]

# Rows read at a time; the writers' row groups hold 65,536 rows.
BATCH_ROWS = 65_536

Status = Literal["ok", "truncated", "invalid", "malformed"]


@dataclass(slots=True)
class BundleReport:
    """What validation found in one bundle."""

    path: Path
    run_id: str
    complete: bool
    rows: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    malformed: bool = False

    @property
    def status(self) -> Status:
        """``malformed``, else ``invalid`` if any invariant fails, else ``truncated``/``ok``."""
        if self.malformed:
            return "malformed"
        if self.problems:
            return "invalid"
        return "ok" if self.complete else "truncated"


@dataclass(slots=True)
class ValidationReport:
    """Validation results for every bundle of a trace or dataset."""

    bundles: list[BundleReport]

    @property
    def status(self) -> Status:
        """The worst status over all bundles."""
        statuses = {b.status for b in self.bundles}
        for status in ("malformed", "invalid", "truncated"):
            if status in statuses:
                return status  # type: ignore[return-value]
        return "ok"

    @property
    def exit_code(self) -> int:
        """0 valid, 1 invalid, 2 malformed (unreadable as a trace), 3 truncated."""
        return {"ok": 0, "invalid": 1, "malformed": 2, "truncated": 3}[self.status]


# --- findings -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    file: Path
    count: int
    first: str
    fix: str


class _Findings:
    """Offending rows per message, counted over every batch: the count and the first row."""

    def __init__(self) -> None:
        self._tallies: dict[str, _Tally] = {}

    def add(self, file: Path, message: str, keys: pl.Series, fix: str) -> None:
        """Count ``keys`` (the offending rows' key values) under ``message``."""
        if not keys.len():
            return
        tally = self._tallies.get(message)
        if tally is None:
            self._tallies[message] = _Tally(file, keys.len(), f"{keys.name} {keys[0]!r}", fix)
        else:
            tally.count += keys.len()

    def flag(
        self,
        file: Path,
        frame: pl.DataFrame,
        bad: pl.Expr,
        key: str,
        message: str,
        fix: str = RERECORD,
    ) -> None:
        """Count the rows of ``frame`` where ``bad`` is true."""
        self.add(file, message, frame.filter(bad.fill_null(False)).get_column(key), fix)

    def lines(self) -> list[str]:
        """One line per message: file, what, how many rows, the first, and the fix."""
        return [
            f"{t.file}: {message}: {t.count} row(s), the first at {t.first}; {t.fix}"
            for message, t in self._tallies.items()
        ]


# --- manifest and file structure (malformed) ----------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _manifest_problems(bundle: Bundle) -> list[str]:
    """Manifest fields of the wrong type (``open_trace`` has checked presence and version)."""
    m = bundle.manifest
    names = set(trace_schema(bundle.schema_version).tables)
    checks: list[tuple[str, bool, str]] = [
        ("complete", isinstance(m.get("complete"), bool), "true or false"),
        ("schema_version", _is_int(m.get("schema_version")), f"the integer {SCHEMA_VERSION}"),
        (
            "run_id",
            isinstance(m.get("run_id"), str) and bool(m.get("run_id")),
            "a non-empty string",
        ),
        (
            "tables",
            isinstance(m.get("tables"), dict)
            and all(
                name in names
                and isinstance(entry, dict)
                and _is_int(entry.get("rows"))
                and entry["rows"] >= 0
                and isinstance(entry.get("files"), list)
                and all(isinstance(f, str) for f in entry["files"])
                for name, entry in m["tables"].items()
            ),
            "an object: table name -> {rows: integer >= 0, files: [names]}",
        ),
        ("seed", m.get("seed") is None or _is_int(m.get("seed")), "an integer or null"),
        (
            "time_scaling",
            m.get("time_scaling") is None
            or (_is_number(m.get("time_scaling")) and m["time_scaling"] > 0),
            "a positive number or null",
        ),
        (
            "engine_config",
            m.get("engine_config") is None or isinstance(m.get("engine_config"), dict),
            "an object or null",
        ),
        (
            "latency",
            "latency" not in m
            or (
                isinstance(m["latency"], dict)
                and all(isinstance(m["latency"].get(k), str) for k in ("spec", "kind", "name"))
            ),
            "an object with string spec, kind and name (docs/latency.md)",
        ),
        (
            "missing_tables",
            "missing_tables" not in m
            or (
                isinstance(m["missing_tables"], list)
                and all(isinstance(t, str) and t in names for t in m["missing_tables"])
            ),
            "a list of table names",
        ),
    ]
    problems = [
        f"{bundle.path / MANIFEST}: field {name!r} is {m.get(name)!r}, expected {expected}; "
        f"correct the manifest or {RERECORD}"
        for name, ok, expected in checks
        if not ok
    ]
    return problems + _unlisted_tables(bundle) + manifest_number_problems(bundle)


def _unlisted_tables(bundle: Bundle) -> list[str]:
    """Tables the manifest's ``tables`` field leaves out: on disk, or required and closed.

    Without its entry a table's row count cannot be checked, so an emptied or swapped table
    would pass.
    """
    listed = bundle.manifest.get("tables")
    if not isinstance(listed, dict):
        return []  # reported as a field of the wrong type
    schema = trace_schema(bundle.schema_version)
    declared_missing = bundle.manifest.get("missing_tables") or ()
    problems = []
    for name, spec in schema.tables.items():
        if name in listed:
            continue
        on_disk = bool(bundle.table_files(name))
        required = bundle.complete and not spec.optional and name not in declared_missing
        if on_disk or required:
            problems.append(
                f"{bundle.path / MANIFEST}: field 'tables' has no entry {name!r} "
                f"({'the table is on disk' if on_disk else 'a closed bundle holds it'}); "
                f"restore the manifest or {RERECORD}"
            )
    return problems


def _is_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_dictionary(actual):
        actual = actual.value_type
    if pa.types.is_string(expected):
        return (
            pa.types.is_string(actual)
            or pa.types.is_large_string(actual)
            or pa.types.is_string_view(actual)
        )
    return bool(actual.equals(expected))


def _open_parquet(file: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(file)
    except Exception as exc:  # pyarrow raises several types for truncated or foreign files
        raise TraceSchemaError(
            f"{file}: not a readable Parquet file ({type(exc).__name__}: {exc}); "
            f"the file is truncated or corrupt: {RERECORD}"
        ) from None


def _column_problems(file: Path, spec: TableSpec, version: int = SCHEMA_VERSION) -> list[str]:
    """Missing, unknown and mistyped columns of a Parquet file of ``spec`` (schema ``version``)."""
    source = _open_parquet(file)
    try:
        schema = source.schema_arrow
    finally:
        source.close()
    expected = {f.name: f.type for f in spec.arrow_schema}
    names = {c.name: c.type for c in spec.columns}
    problems = []
    missing = [c for c in expected if c not in schema.names]
    if missing:
        problems.append(
            f"{file}: missing column(s) {', '.join(map(repr, missing))} of table {spec.name!r}; "
            f"the file does not follow trace schema v{version}: {RERECORD}"
        )
    unknown = [c for c in schema.names if c not in expected]
    if unknown:
        problems.append(
            f"{file}: column(s) {', '.join(map(repr, unknown))} are not in table {spec.name!r} "
            f"of trace schema v{version}; rewrite the file with only the schema's "
            f"columns or {RERECORD}"
        )
    for f in schema:
        if f.name in expected and not _is_type(f.type, expected[f.name]):
            problems.append(
                f"{file}: column {f.name!r} has type {f.type}, trace schema v{version} "
                f"says {names[f.name]}; rewrite the column as {names[f.name]} or {RERECORD}"
            )
    return problems


def _expects_table(bundle: Bundle, name: str) -> bool:
    """Whether ``bundle`` should hold table ``name``: required and closed, or listed with files."""
    listed = bundle.manifest.get("tables")
    entry = listed.get(name) if isinstance(listed, dict) else None
    if isinstance(entry, dict) and entry.get("files"):
        return True
    spec = trace_schema(bundle.schema_version).table(name)
    declared_missing = bundle.manifest.get("missing_tables") or ()
    return bundle.complete and not spec.optional and (name not in declared_missing)


def _missing_table_problem(bundle: Bundle, name: str) -> str:
    listed = bundle.manifest.get("tables")
    entry = listed.get(name) if isinstance(listed, dict) else None
    rows = entry.get("rows") if isinstance(entry, dict) else None
    said = f" (the manifest lists {rows} rows)" if rows is not None else ""
    return (
        f"{bundle.path / f'{name}.parquet'}: table {name!r} is missing{said}; restore the file "
        f"or {RERECORD}"
    )


def _structure_problems(bundle: Bundle) -> tuple[list[str], dict[str, list[Path]]]:
    """Missing tables and bad columns, and the files of each table whose columns are right."""
    problems: list[str] = []
    usable: dict[str, list[Path]] = {}
    version = bundle.schema_version
    for name, spec in trace_schema(version).tables.items():
        files = bundle.table_files(name)
        if not files:
            if _expects_table(bundle, name):
                problems.append(_missing_table_problem(bundle, name))
            continue
        found = [p for f in files for p in _column_problems(f, spec, version)]
        found += _listed_files_missing(bundle, name)
        problems.extend(found)
        if not found:
            usable[name] = files
    return problems, usable


def _listed_files_missing(bundle: Bundle, name: str) -> list[str]:
    """Files the manifest lists for table ``name`` that are not on disk."""
    listed = bundle.manifest.get("tables")
    entry = listed.get(name) if isinstance(listed, dict) else None
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, list):
        return []
    return [
        f"{bundle.path / f}: file of table {name!r} listed in the manifest is missing; restore "
        f"it or {RERECORD}"
        for f in files
        if isinstance(f, str) and not (bundle.path / f).is_file()
    ]


def check_readable(bundle: Bundle) -> None:
    """Raise ``TraceSchemaError`` (one line) for the first malformed part of ``bundle``.

    A manifest field of the wrong type (or a table it leaves out, an engine configuration that
    describes no engine), a table that is gone, a table with a missing, unknown or mistyped
    column, a table whose row count disagrees with the manifest (read from the Parquet
    footers); the rows themselves are not read.
    """
    problems = _manifest_problems(bundle)
    structure, usable = _structure_problems(bundle)
    problems += structure
    for name, files in usable.items():
        problems += _row_count_problems(bundle, name, files)[1]
    if problems:
        raise TraceSchemaError(problems[0])


def check_bundle(bundle: Bundle, reads: Reads) -> None:
    """The check of every reader: :func:`check_readable`, then the values it reads.

    Raises ``TraceSchemaError`` (one line) for the first malformed part, row count that
    disagrees with the manifest, or value that breaks a row rule in a column of ``reads``
    (:func:`tracekit.trace.values.check_values`).
    """
    check_readable(bundle)
    check_values(bundle, reads)


def open_checked(path: str | Path, reads: Reads) -> TraceDataset:
    """:func:`~tracekit.trace.bundle.open_trace` with :func:`check_bundle` on every bundle."""
    dataset = open_trace(path)
    for bundle in dataset:
        check_bundle(bundle, reads)
    return dataset


# --- row checks (invalid) -----------------------------------------------------------------


def _batches(files: list[Path], columns: list[str]) -> Iterator[tuple[Path, pl.DataFrame]]:
    """The rows of ``files`` in stored order, at most :data:`BATCH_ROWS` at a time."""
    for file in files:
        source = _open_parquet(file)
        try:
            for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                yield file, frame
        except TraceSchemaError:
            raise
        except Exception as exc:
            raise TraceSchemaError(
                f"{file}: a row group cannot be read ({type(exc).__name__}: {exc}); the file is "
                f"corrupt: {RERECORD}"
            ) from None
        finally:
            source.close()


def _check_values(
    findings: _Findings,
    file: Path,
    frame: pl.DataFrame,
    spec: TableSpec,
    run_id: str,
    block_size: int | None = None,
) -> None:
    """The row rules every reader shares (:func:`tracekit.trace.values.row_rules`)."""
    key = KEYS[spec.name]
    for rule in row_rules(spec, run_id, block_size=block_size):
        findings.flag(file, frame, rule.bad, key, rule.message)


def _id_hash(ids: pl.Series) -> pl.Series:
    """64-bit hashes of ids (one seed for the whole run, so equal ids hash equal)."""
    return ids.hash(seed=0)


def _check_requests(
    findings: _Findings, files: list[Path], spec: TableSpec, run_id: str, hits: _CacheHits
) -> None:
    hashes = []
    cached = "num_cached_tokens" in spec.column_names
    for file, frame in _batches(files, spec.column_names):
        _check_values(findings, file, frame, spec, run_id)
        if cached:
            # A request never scheduled has no first-schedule hit (null): it counts 0.
            hits.add(
                "requests",
                file,
                frame.with_columns(
                    pl.when(pl.col("resume_cached_tokens").is_not_null())
                    .then(pl.col("num_cached_tokens").fill_null(0))
                    .alias("num_cached_tokens")
                ),
                ["num_cached_tokens", "resume_cached_tokens"],
            )
        hashes.append(_id_hash(frame.get_column("request_id")))
    if not hashes:
        return
    every = pl.concat(hashes)
    repeated = every.filter(every.is_duplicated()).unique()
    del every, hashes
    if not repeated.len():
        return
    # A second pass names the repeated ids (hashes alone could collide; ids are compared).
    seen: set[str] = set()
    for file, frame in _batches(files, ["request_id"]):
        ids = frame.get_column("request_id")
        repeats = []
        for rid in ids.filter(_id_hash(ids).is_in(repeated)).to_list():
            if rid in seen:
                repeats.append(rid)
            seen.add(rid)
        findings.add(
            file,
            "requests.request_id is not unique",
            pl.Series("request_id", repeats, dtype=pl.String),
            f"each request needs its own id: {RERECORD}",
        )


@dataclass(slots=True)
class _DecisionState:
    """What the decisions stream hands on: per-decision columns and the carried scalars."""

    count: int = 0
    parts: list[pl.DataFrame] = field(default_factory=list)
    per_decision: pl.DataFrame | None = None
    last_step: int | None = None
    last_time: float | None = None
    first_counters: dict[str, int] | None = None
    first_outcomes: dict[str, int] | None = None
    sums: dict[str, int] = field(default_factory=dict)


_COUNTERS = {
    "calls": pl.col("outcome").is_in(CALLED),
    "selections": pl.col("outcome") == "selected",
    "abstentions": pl.col("outcome") == "abstained",
    "failures": pl.col("outcome").is_in(("invalid", "exception")),
    "invalid_selections": pl.col("outcome") == "invalid",
}


def _check_decisions(
    findings: _Findings,
    files: list[Path],
    spec: TableSpec,
    run_id: str,
    block_size: int | None = None,
) -> _DecisionState:
    state = _DecisionState()
    freed = "freed_blocks" in spec.column_names
    for file, frame in _batches(files, spec.column_names):
        _check_values(findings, file, frame, spec, run_id, block_size)
        n = frame.height
        start = state.count
        frame = frame.with_columns(
            pl.int_range(start, start + n, dtype=pl.Int64).alias("expected"),
            pl.col("time_s").shift(1, fill_value=state.last_time).alias("prev_time"),
            pl.col("step").shift(1, fill_value=state.last_step).alias("prev_step"),
        )
        findings.flag(
            file,
            frame,
            pl.col("seq") != pl.col("expected"),
            "seq",
            "decisions.seq is not contiguous from 0 in stored order (0, 1, 2, ...)",
            f"decisions must be stored in seq order without gaps (replay needs it): {RERECORD}",
        )
        findings.flag(
            file,
            frame,
            (pl.col("time_s") < pl.col("prev_time")) | (pl.col("step") < pl.col("prev_step")),
            "seq",
            "decisions.time_s or step decreases",
        )
        _check_counters(findings, file, frame, state)
        # What the candidates check needs, by stored row (which is the seq when valid).
        state.parts.append(
            frame.select(
                pl.col("num_candidates").fill_null(-1),
                pl.col("applied_victim_id").hash(seed=0).alias("applied"),
                pl.col("builtin_victim_id").hash(seed=0).alias("builtin"),
                (pl.col("freed_blocks") if freed else pl.lit(None, pl.Int64)).alias("freed"),
            )
        )
        state.count += n
        if n:
            state.last_time = frame.get_column("time_s")[-1]
            state.last_step = frame.get_column("step")[-1]
    state.per_decision = pl.concat(state.parts, rechunk=False) if state.parts else None
    state.parts = []
    return state


def _check_counters(
    findings: _Findings, file: Path, frame: pl.DataFrame, state: _DecisionState
) -> None:
    """Counter increments since the first decision must equal the outcomes counted since then.

    Counters may start above 0 (a live recorder attached to a running controller).
    """
    if not frame.height:
        return
    flags = frame.select(**{name: expr.cast(pl.Int64) for name, expr in _COUNTERS.items()})
    if state.first_counters is None:
        # A null here is reported as a null; 0 stands in for it.
        state.first_counters = {name: frame.get_column(name)[0] or 0 for name in _COUNTERS}
        state.first_outcomes = {name: flags.get_column(name)[0] or 0 for name in _COUNTERS}
        state.sums = dict.fromkeys(_COUNTERS, 0)
    assert state.first_outcomes is not None
    for name in _COUNTERS:
        running = flags.get_column(name).cum_sum() + state.sums[name]
        expected = running - state.first_outcomes[name] + state.first_counters[name]
        findings.add(
            file,
            f"decisions.{name} is inconsistent with the outcomes",
            frame.get_column("seq").filter(frame.get_column(name) != expected),
            RERECORD,
        )
        state.sums[name] = int(running[-1])


@dataclass(slots=True)
class _CacheHits:
    """Hit tokens summed over the requests and over the steps (they must agree in a full run).

    A table's sum is None once a row leaves it unknown (null): the totals are then not compared.
    """

    sums: dict[str, int | None] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)

    def add(self, table: str, file: Path, frame: pl.DataFrame, columns: list[str]) -> None:
        """Add the hit columns of one batch of ``table``."""
        self.files.setdefault(table, file)
        if table in self.sums and self.sums[table] is None:
            return
        values = frame.select(columns)
        if values.null_count().sum_horizontal().item():
            self.sums[table] = None
            return
        total = int(values.sum().sum_horizontal().item() or 0)
        self.sums[table] = (self.sums.get(table) or 0) + total

    def check(self, report: BundleReport) -> None:
        """Report requests, steps and admissions whose hit totals differ (closed bundles)."""
        requests, steps = self.sums.get("requests"), self.sums.get("steps")
        admissions = self.sums.get("admissions")
        if requests is not None and steps is not None and requests != steps:
            report.problems.append(
                f"{self.files['requests']}: requests.num_cached_tokens + resume_cached_tokens "
                f"sum to {requests}, steps.cache_hit_tokens to {steps}; every admission's hit "
                f"counts once in each: {RERECORD}"
            )
        if admissions is not None and steps is not None and admissions != steps:
            report.problems.append(
                f"{self.files['admissions']}: admissions.cached_tokens sum to {admissions}, "
                f"steps.cache_hit_tokens to {steps}; every admission's hit counts once in "
                f"each: {RERECORD}"
            )


@dataclass(slots=True)
class _Groups:
    """Candidate groups checked so far: the next seq expected to have rows."""

    next_seq: int = 0


def _check_candidates(
    findings: _Findings,
    files: list[Path],
    spec: TableSpec,
    run_id: str,
    state: _DecisionState,
    decision_file: Path,
    complete: bool,
) -> None:
    """Each decision's candidates: stored together in seq order, matching the decision.

    A batch is checked up to its last seq; that seq's rows are carried into the next batch, so
    every group is whole when it is checked. An unfinished bundle may end with candidates of a
    decision that was never flushed (recorders flush candidates first).
    """
    groups = _Groups()
    carry: pl.DataFrame | None = None
    carry_file = files[0]
    last_seq: int | None = None
    for file, frame in _batches(files, spec.column_names):
        _check_values(findings, file, frame, spec, run_id)
        seqs = frame.get_column("seq")
        findings.add(
            file,
            "candidates.seq decreases (a decision's candidates are not stored together, "
            "in decision order)",
            seqs.filter((seqs < seqs.shift(1, fill_value=last_seq)).fill_null(False)),
            f"store candidates in seq order, as replay reads them: {RERECORD}",
        )
        if "num_blocks_exclusive" in spec.column_names:
            exclusive = pl.col("num_blocks_exclusive")
        else:
            exclusive = pl.lit(None, pl.Int64).alias("num_blocks_exclusive")
        part = frame.select("seq", "position", "request_id", exclusive).drop_nulls(
            ["seq", "position", "request_id"]
        )
        if carry is not None:
            part = pl.concat([carry, part])
        if not part.height:
            continue
        last_seq = part.get_column("seq")[-1]
        tail = pl.col("seq") == last_seq
        carry, carry_file = part.filter(tail), file
        _check_groups(findings, file, part.filter(~tail), state, groups, decision_file, complete)
    if carry is not None:
        _check_groups(findings, carry_file, carry, state, groups, decision_file, complete)
    _check_without_rows(findings, state, groups.next_seq, state.count, decision_file)


def _check_without_rows(
    findings: _Findings, state: _DecisionState, start: int, stop: int, decision_file: Path
) -> None:
    """Decisions ``start`` to ``stop - 1`` have no candidate rows."""
    if stop <= start or state.per_decision is None:
        return
    empty = state.per_decision.slice(start, stop - start).with_row_index("seq", offset=start)
    empty = empty.with_columns(pl.col("seq").cast(pl.Int64))
    findings.flag(
        decision_file,
        empty,
        pl.col("num_candidates") != 0,
        "seq",
        "candidates do not match num_candidates",
    )
    for name in ("applied_victim_id", "builtin_victim_id"):
        findings.add(
            decision_file,
            f"decisions.{name} is not among the decision's candidates",
            empty.get_column("seq"),
            RERECORD,
        )


def _check_groups(
    findings: _Findings,
    file: Path,
    part: pl.DataFrame,
    state: _DecisionState,
    groups: _Groups,
    decision_file: Path,
    complete: bool,
) -> None:
    """Check whole groups of candidate rows (all rows of each seq in ``part``)."""
    if not part.height:
        return
    known = (pl.col("seq") >= 0) & (pl.col("seq") < state.count)
    orphan = (pl.col("seq") < 0) | (pl.col("seq") >= state.count) if complete else pl.col("seq") < 0
    findings.flag(
        file,
        part,
        orphan,
        "seq",
        "candidates.seq refers to no decision",
        f"every candidate row belongs to a stored decision: {RERECORD}",
    )
    part = part.filter(known)
    if not part.height or state.per_decision is None:
        return
    decided = state.per_decision.gather(part.get_column("seq"))
    hashes = _id_hash(part.get_column("request_id"))
    summary = (
        part.with_columns(
            (hashes == decided.get_column("applied")).alias("is_applied"),
            (hashes == decided.get_column("builtin")).alias("is_builtin"),
            decided.get_column("num_candidates").alias("expected"),
            decided.get_column("freed").alias("freed"),
        )
        .group_by("seq", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            pl.col("request_id").n_unique().alias("ids"),
            pl.col("position").n_unique().alias("positions"),
            pl.col("position").min().alias("low"),
            pl.col("position").max().alias("high"),
            pl.col("is_applied").any().alias("applied_found"),
            pl.col("is_builtin").any().alias("builtin_found"),
            pl.col("expected").first(),
            pl.col("num_blocks_exclusive").filter(pl.col("is_applied")).first().alias("victim"),
            pl.col("freed").first(),
        )
        .sort("seq")
    )
    # Decisions between the groups seen so far and these have no candidate rows at all. The
    # seqs are sorted and unique, so a gap opens where a seq is past the previous one + 1.
    gaps = summary.select(
        pl.max_horizontal(
            pl.col("seq").shift(1, fill_value=groups.next_seq - 1) + 1, groups.next_seq
        ).alias("start"),
        pl.col("seq").alias("stop"),
    ).filter(pl.col("stop") > pl.col("start"))
    for start, stop in gaps.iter_rows():
        _check_without_rows(findings, state, start, stop, decision_file)
    groups.next_seq = max(groups.next_seq, int(summary.get_column("seq").max()) + 1)  # type: ignore[arg-type]
    findings.flag(
        file,
        summary,
        pl.col("ids") != pl.col("n"),
        "seq",
        "candidates.request_id repeats within a decision",
    )
    findings.flag(
        file,
        summary,
        (pl.col("positions") != pl.col("n"))
        | (pl.col("low") != 0)
        | (pl.col("high") != pl.col("n") - 1),
        "seq",
        "candidates.position is not 0, 1, ..., num_candidates - 1 within a decision",
    )
    findings.flag(
        file,
        summary,
        pl.col("n") != pl.col("expected"),
        "seq",
        "candidates do not match num_candidates",
    )
    findings.flag(
        decision_file,
        summary,
        pl.col("freed") != pl.col("victim"),
        "seq",
        "decisions.freed_blocks is not the applied victim's candidates.num_blocks_exclusive",
    )
    for name, found in (
        ("applied_victim_id", "applied_found"),
        ("builtin_victim_id", "builtin_found"),
    ):
        findings.flag(
            decision_file,
            summary,
            ~pl.col(found),
            "seq",
            f"decisions.{name} is not among the decision's candidates",
        )


def _check_steps(
    findings: _Findings, files: list[Path], spec: TableSpec, run_id: str, hits: _CacheHits
) -> None:
    last_step: int | None = None
    last_time: float | None = None
    cached = "cache_hit_tokens" in spec.column_names
    for file, frame in _batches(files, spec.column_names):
        _check_values(findings, file, frame, spec, run_id)
        if cached:
            hits.add("steps", file, frame, ["cache_hit_tokens"])
        frame = frame.with_columns(
            pl.col("step").shift(1, fill_value=last_step).alias("prev_step"),
            pl.col("time_s").shift(1, fill_value=last_time).alias("prev_time"),
        )
        findings.flag(
            file,
            frame,
            (pl.col("step") <= pl.col("prev_step")) | (pl.col("time_s") < pl.col("prev_time")),
            "step",
            "steps.step is not increasing or steps.time_s decreases",
        )
        if frame.height:
            last_step = frame.get_column("step")[-1]
            last_time = frame.get_column("time_s")[-1]


def _row_count(files: list[Path]) -> int:
    total = 0
    for file in files:
        source = _open_parquet(file)
        try:
            total += source.metadata.num_rows
        finally:
            source.close()
    return total


def _row_count_problems(bundle: Bundle, name: str, files: list[Path]) -> tuple[int, list[str]]:
    """The rows of table ``name`` on disk, and a problem if the manifest says otherwise.

    A closed bundle holds exactly the rows its manifest lists. An unfinished one holds at least
    them: a recorder lists a part file after writing it, so a kill in between leaves more rows
    than listed, never fewer.
    """
    rows = _row_count(files)
    listed = bundle.manifest.get("tables")
    entry = listed.get(name) if isinstance(listed, dict) else None
    declared = entry.get("rows") if isinstance(entry, dict) else None
    if not _is_int(declared):
        return rows, []
    if declared == rows or (not bundle.complete and rows > declared):
        return rows, []
    return rows, [
        f"{files[0]}: table {name!r} has {rows} rows, the manifest's field 'tables' says "
        f"{declared}; restore the file or {RERECORD}"
    ]


def _check_bundle(bundle: Bundle) -> BundleReport:
    schema = trace_schema(bundle.schema_version)
    complete = bundle.complete
    report = BundleReport(bundle.path, bundle.run_id, complete)
    format_problems = _manifest_problems(bundle)
    structure, usable = _structure_problems(bundle)
    format_problems += structure
    if format_problems:
        report.problems = format_problems
        report.malformed = True
    findings = _Findings()
    for name, files in usable.items():
        report.rows[name], problems = _row_count_problems(bundle, name, files)
        report.problems += problems
    run = bundle.run_id
    hits = _CacheHits()
    size = block_size(bundle)
    if "requests" in usable:
        _check_requests(findings, usable["requests"], schema.table("requests"), run, hits)
    if "decisions" in usable:
        state = _check_decisions(
            findings, usable["decisions"], schema.table("decisions"), run, size
        )
        if "candidates" in usable:
            _check_candidates(
                findings,
                usable["candidates"],
                schema.table("candidates"),
                run,
                state,
                usable["decisions"][0],
                complete,
            )
    elif "candidates" in usable:
        for file, frame in _batches(usable["candidates"], schema.table("candidates").column_names):
            _check_values(findings, file, frame, schema.table("candidates"), run)
    if "steps" in usable:
        _check_steps(findings, usable["steps"], schema.table("steps"), run, hits)
    if "scheduled" in usable:
        for file, frame in _batches(usable["scheduled"], schema.table("scheduled").column_names):
            _check_values(findings, file, frame, schema.table("scheduled"), run)
    if "admissions" in usable:
        spec = schema.table("admissions")
        for file, frame in _batches(usable["admissions"], spec.column_names):
            _check_values(findings, file, frame, spec, run)
            hits.add("admissions", file, frame, ["cached_tokens"])
    report.problems.extend(findings.lines())
    if complete:
        hits.check(report)
    return report


def validate_trace(path: str | Path) -> ValidationReport:
    """Validate every bundle at or below ``path``, streaming each table by row group.

    Unreadable input (no bundle, a manifest that is not a trace manifest, a truncated Parquet
    file) raises ``TraceSchemaError``; malformed tables and broken invariants are collected as
    problems in the report.
    """
    dataset = open_trace(path)
    return ValidationReport([_check_bundle(b) for b in dataset])
