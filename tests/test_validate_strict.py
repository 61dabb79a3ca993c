"""``tracekit validate`` and ``inspect`` on malformed bundles, and validation by row group.

Malformed input (a manifest field of the wrong type, a table with an unknown column or a column
of the wrong type, a table the manifest lists but that is gone) is a finding that exits 2; a
value that breaks an invariant (NaN times, negative counts, decisions out of order) exits 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from trace_helpers import write_bundle

import tracekit.trace.validate as validate_module
from tracekit.cli import cli
from tracekit.errors import TraceSchemaError
from tracekit.replay.contexts import iter_run_chunks
from tracekit.trace import open_trace
from tracekit.trace.validate import validate_trace


def _rewrite(bundle: Path, table: str, change: Callable[[pl.DataFrame], pl.DataFrame]) -> Path:
    """Rewrite ``table`` of ``bundle`` through ``change`` (same row count: the manifest holds)."""
    file = bundle / f"{table}.parquet"
    frame = change(pl.read_parquet(file))
    pq.write_table(frame.to_arrow(), file)
    return file


def _set(frame: pl.DataFrame, column: str, row: int, value: object) -> pl.DataFrame:
    values = frame[column].to_list()
    values[row] = value
    return frame.with_columns(pl.Series(column, values, dtype=frame.schema[column]))


def _edit_manifest(bundle: Path, **fields: object) -> None:
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(fields)
    path.write_text(json.dumps(manifest))


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_line_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: ")
    assert result.output.count("\n") == 1, result.output
    for word in words:
        assert word in result.output, (word, result.output)


# --- unexpected columns: validate reports them (exit 2), inspect gives one line (exit 2) ------


@pytest.mark.parametrize(
    ("table", "change", "words"),
    [
        ("steps", lambda f: f.with_columns(pl.lit(1).alias("extra")), ["'extra'", "steps"]),
        (
            "decisions",
            lambda f: f.with_columns(pl.col("time_s").cast(pl.String)),
            ["'time_s'", "float64", "string"],
        ),
        (
            "candidates",
            lambda f: f.with_columns(pl.col("num_computed_tokens").cast(pl.Float64)),
            ["'num_computed_tokens'", "int64", "double"],
        ),
    ],
)
def test_unexpected_columns_are_findings_and_inspect_errors(
    tmp_path: Path, table: str, change: Callable[[pl.DataFrame], pl.DataFrame], words: list[str]
) -> None:
    bundle = write_bundle(tmp_path / "b")
    file = _rewrite(bundle, table, change)
    report = validate_trace(bundle)
    assert report.status == "malformed"
    assert report.exit_code == 2
    (problem,) = report.bundles[0].problems
    assert problem.startswith(f"{file}: ")
    assert "re-record" in problem or "rewrite" in problem
    for word in words:
        assert word in problem
    result = _run("validate", str(bundle))
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"malformed  {bundle} (run-a)", f"  - {problem}"]
    _one_line_error(_run("inspect", str(bundle)), str(file), *words)


def test_polars_written_strings_are_not_a_wrong_type(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    # polars writes large_string; the schema's "string" accepts every Arrow string layout.
    _rewrite(bundle, "decisions", lambda f: f)
    assert pq.read_schema(bundle / "decisions.parquet").field("run_id").type == "large_string"
    assert validate_trace(bundle).status == "ok"


# --- manifest fields of the wrong type ----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"complete": "no"}, "'complete'"),
        ({"complete": 1}, "'complete'"),
        ({"schema_version": True}, "'schema_version'"),
        ({"seed": math.nan}, "'seed'"),
        ({"time_scaling": -1.0}, "'time_scaling'"),
        ({"missing_tables": "requests"}, "'missing_tables'"),
        ({"engine_config": "x"}, "'engine_config'"),
    ],
)
def test_manifest_fields_of_the_wrong_type(tmp_path: Path, fields: dict, field: str) -> None:
    bundle = write_bundle(tmp_path / "b")
    _edit_manifest(bundle, **fields)
    report = validate_trace(bundle)
    assert report.exit_code == 2
    assert any(
        p.startswith(f"{bundle / 'manifest.json'}: field {field}")
        for p in report.bundles[0].problems
    ), report.bundles[0].problems


@pytest.mark.parametrize(
    "tables",
    ["x", {"decisions": {"rows": -2, "files": ["decisions.parquet"]}}],
)
def test_a_malformed_tables_field_stops_validation_in_one_line(
    tmp_path: Path, tables: object
) -> None:
    # The bundle reader refuses it on opening, before any table is read.
    bundle = write_bundle(tmp_path / "b")
    _edit_manifest(bundle, tables=tables)
    with pytest.raises(TraceSchemaError, match="field 'tables"):
        validate_trace(bundle)
    result = _run("validate", str(bundle))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "manifest.json" in result.output


def test_complete_no_is_not_read_as_complete(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    _edit_manifest(bundle, complete="no")
    assert validate_trace(bundle).bundles[0].complete is False


# --- values that break invariants ---------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "column", "row", "value", "message"),
    [
        ("decisions", "time_s", 0, math.nan, "decisions.time_s is NaN or infinite"),
        ("decisions", "time_s", 1, math.inf, "decisions.time_s is NaN or infinite"),
        ("decisions", "kv_usage", 0, math.nan, "decisions.kv_usage is NaN or infinite"),
        ("requests", "arrival_s", 2, math.nan, "requests.arrival_s is NaN or infinite"),
        ("requests", "arrival_s", 0, -1.0, "requests.arrival_s is negative"),
        ("requests", "target_output_tokens", 1, -(10**15), "requests.target_output_tokens is"),
        ("candidates", "num_computed_tokens", 3, -(10**15), "candidates.num_computed_tokens is"),
        ("candidates", "max_tokens", 0, -1, "candidates.max_tokens is negative"),
        ("steps", "time_s", 4, math.nan, "steps.time_s is NaN or infinite"),
        ("steps", "duration_s", 0, -0.5, "steps.duration_s is negative"),
        ("steps", "num_running", 5, -(10**15), "steps.num_running is negative"),
    ],
)
def test_bad_values_are_invalid(
    tmp_path: Path, table: str, column: str, row: int, value: object, message: str
) -> None:
    bundle = write_bundle(tmp_path / "b")
    file = _rewrite(bundle, table, lambda f: _set(f, column, row, value))
    report = validate_trace(bundle)
    assert report.status == "invalid", report.bundles[0].problems
    assert report.exit_code == 1
    hits = [p for p in report.bundles[0].problems if message in p]
    assert hits, report.bundles[0].problems
    assert hits[0].startswith(f"{file}: ")
    key = {"requests": "request_id", "steps": "step"}.get(table, "seq")
    first = pl.read_parquet(file)[key][row]
    assert f": 1 row(s), the first at {key} {first!r}; re-record the bundle" in hits[0]


def test_decisions_in_reverse_order_are_refused_as_replay_refuses_them(tmp_path: Path) -> None:
    good = write_bundle(tmp_path / "good")
    bundle = write_bundle(tmp_path / "b")
    _rewrite(bundle, "decisions", lambda f: f.reverse())
    _rewrite(bundle, "candidates", lambda f: f.sort("seq", descending=True, maintain_order=True))
    # Replay, the independent reader, accepts the original and refuses the reversed tables.
    assert len(list(iter_run_chunks(open_trace(good).bundles[0], 1000))) == 1
    with pytest.raises(TraceSchemaError, match="in order"):
        list(iter_run_chunks(open_trace(bundle).bundles[0], 1000))
    assert validate_trace(good).status == "ok"
    report = validate_trace(bundle)
    assert report.exit_code == 1
    assert any(
        "decisions.seq is not contiguous from 0 in stored order" in p
        for p in report.bundles[0].problems
    )


def test_candidates_in_reverse_order_are_refused_by_both_readers(tmp_path: Path) -> None:
    """validate refused candidates stored in reverse decision order, and replay accepted them
    (it sorted a chunk's candidates, which only works while the table fits in one chunk)."""
    bundle = write_bundle(tmp_path / "b")
    _rewrite(bundle, "candidates", lambda f: f.reverse())
    with pytest.raises(TraceSchemaError, match="'seq' decreases"):
        list(iter_run_chunks(open_trace(bundle).bundles[0], 1000))
    report = validate_trace(bundle)
    assert report.exit_code == 1
    assert any("candidates.seq decreases" in p for p in report.bundles[0].problems)
    # Positions out of order within a decision stay accepted by both.
    within = write_bundle(tmp_path / "w")
    _rewrite(within, "candidates", lambda f: f.sort("seq", "position", descending=[False, True]))
    assert len(list(iter_run_chunks(open_trace(within).bundles[0], 1000))) == 1
    assert validate_trace(within).status == "ok"


# --- a table that is gone -----------------------------------------------------------------


def test_deleted_decisions_table(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    file = bundle / "decisions.parquet"
    file.unlink()
    result = _run("validate", str(bundle))
    assert result.exit_code == 2
    assert f"  - {file}: table 'decisions' is missing" in result.output
    inspected = _run("inspect", str(bundle))
    _one_line_error(inspected, str(file), "missing")
    assert "decisions  none" not in inspected.output


# --- streaming: findings do not depend on how the rows are batched ------------------------


def _broken_bundles(tmp_path: Path) -> list[Path]:
    """Bundles whose problems straddle row boundaries: each needs state carried over rows."""
    out = [write_bundle(tmp_path / "ok")]
    # (bundle, table, column, row, value): one cell set to a value that breaks a rule.
    for name, table, column, row, value in (
        ("time", "decisions", "time_s", 0, 9.0),
        ("counter", "decisions", "calls", 1, 5),
        ("dup", "candidates", "request_id", 3, "r2"),
        ("steps", "steps", "step", 3, 2),
        ("requests", "requests", "request_id", 2, "r0"),
    ):
        bundle = write_bundle(tmp_path / name)
        _rewrite(bundle, table, lambda f, c=column, r=row, v=value: _set(f, c, r, v))
        out.append(bundle)
    return out


def test_findings_do_not_depend_on_the_batch_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundles = _broken_bundles(tmp_path)
    expected = [
        [],
        ["decisions.time_s or step decreases"],
        ["decisions.calls is inconsistent with the outcomes"],
        ["candidates.request_id repeats within a decision"],
        ["steps.step is not increasing"],
        ["requests.request_id is not unique"],
    ]
    reference = [validate_trace(b).bundles[0].problems for b in bundles]
    for problems, words in zip(reference, expected, strict=True):
        assert len(problems) == len(words), problems
        for problem, word in zip(problems, words, strict=True):
            assert word in problem
    for rows in (1, 2, 3):
        monkeypatch.setattr(validate_module, "BATCH_ROWS", rows)
        assert [validate_trace(b).bundles[0].problems for b in bundles] == reference


def _with_orphan(frame: pl.DataFrame) -> pl.DataFrame:
    """One more candidate row, of a decision seq 2 that was never stored."""
    extra = frame.tail(1).with_columns(
        pl.lit(2, pl.Int64).alias("seq"), pl.lit(0).alias("position")
    )
    return pl.concat([frame, extra.cast(frame.schema)])


@pytest.mark.parametrize(("complete", "status"), [(False, "truncated"), (True, "invalid")])
def test_orphan_candidates_are_allowed_only_in_an_unfinished_bundle(
    tmp_path: Path, complete: bool, status: str
) -> None:
    # Recorders flush candidates before their decisions, so a kill in between leaves orphans.
    bundle = write_bundle(tmp_path / "b")
    _rewrite(bundle, "candidates", _with_orphan)
    _edit_manifest(bundle, complete=complete)
    report = validate_trace(bundle)
    assert report.status == status, report.bundles[0].problems
    orphans = [p for p in report.bundles[0].problems if "refers to no decision" in p]
    assert len(orphans) == (1 if complete else 0)


def test_inspect_and_query_refuse_a_manifest_field_of_the_wrong_type(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    _edit_manifest(bundle, complete="no")
    for args in (["inspect", str(bundle)], ["query", str(bundle), "select 1"]):
        _one_line_error(_run(*args), str(bundle / "manifest.json"), "'complete'", "'no'")


@pytest.mark.parametrize("rows", [1, 2, 65_536])
def test_a_decision_without_candidate_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int
) -> None:
    monkeypatch.setattr(validate_module, "BATCH_ROWS", rows)
    bundle = write_bundle(tmp_path / "b")
    _rewrite(bundle, "candidates", lambda f: f.filter(pl.col("seq") != 0))
    problems = validate_trace(bundle).bundles[0].problems
    decisions = bundle / "decisions.parquet"
    assert problems == [
        f"{bundle / 'candidates.parquet'}: table 'candidates' has 2 rows, the manifest's field "
        "'tables' says 5; restore the file or re-record the bundle",
        f"{decisions}: candidates do not match num_candidates: 1 row(s), the first at seq 0; "
        "re-record the bundle",
        f"{decisions}: decisions.applied_victim_id is not among the decision's candidates: "
        "1 row(s), the first at seq 0; re-record the bundle",
        f"{decisions}: decisions.builtin_victim_id is not among the decision's candidates: "
        "1 row(s), the first at seq 0; re-record the bundle",
    ]
