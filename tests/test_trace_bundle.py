"""Trace bundles: atomic writing, reading with polars and DuckDB, validation and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import polars as pl
import pytest
from trace_helpers import RUN, base_manifest, write_bundle

from tracekit.errors import TracekitError, TraceSchemaError
from tracekit.trace import BundleWriter, open_trace
from tracekit.trace.inspect import inspect_trace
from tracekit.trace.rows import ROW_TYPES, ScheduledRow, StepRow
from tracekit.trace.schema import trace_schema
from tracekit.trace.validate import validate_trace


def test_bundle_round_trip_with_schema_dtypes(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    assert sorted(p.name for p in bundle.iterdir()) == [
        "candidates.parquet",
        "decisions.parquet",
        "manifest.json",
        "requests.parquet",
        "steps.parquet",
    ]
    dataset = open_trace(bundle)
    decisions = dataset.scan("decisions").collect()
    assert decisions["seq"].to_list() == [0, 1]
    # The second decision abstains, so the built-in FCFS tail r2 is applied.
    assert decisions["applied_victim_id"].to_list() == ["r0", "r2"]
    assert decisions.schema == pl.Schema(trace_schema().table("decisions").polars_schema)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert manifest["tables"]["candidates"]["rows"] == 5


def test_duckdb_reads_the_parquet_files_directly(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    rows = duckdb.sql(
        f"select outcome, count(*) from '{bundle}/decisions.parquet' group by 1 order by 1"
    ).fetchall()
    assert rows == [("abstained", 1), ("selected", 1)]


def test_failed_run_leaves_no_output(tmp_path: Path) -> None:
    out = tmp_path / "b"
    with pytest.raises(RuntimeError), BundleWriter(out, {"run_id": "x"}) as writer:
        writer.append("steps", StepRow(RUN, 0, 0.0, 0.1, 0, 0, 0, 10, 0, 0, 0))
        raise RuntimeError("engine crashed")
    assert list(tmp_path.iterdir()) == []


def test_row_classes_follow_the_trace_schema() -> None:
    schema = trace_schema()
    assert set(ROW_TYPES) == set(schema.tables)
    for name, row_type in ROW_TYPES.items():
        assert list(row_type._fields) == schema.table(name).column_names


def test_writer_refuses_untyped_rows_and_rows_of_another_table(tmp_path: Path) -> None:
    with BundleWriter(tmp_path / "b", base_manifest()) as writer:
        with pytest.raises(TracekitError, match="'steps' takes StepRow rows, got tuple"):
            writer.append("steps", (RUN, 0, 0.0, 0.1, 0, 0, 0, 10, 0, 0, 0))  # type: ignore[arg-type]
        with pytest.raises(TracekitError, match="takes StepRow rows, got ScheduledRow"):
            writer.append("steps", ScheduledRow(RUN, 0, "r0", 16))
        writer.append("steps", StepRow(RUN, 0, 0.0, 0.1, 0, 0, 0, 10, 0, 0, 0))
    steps = open_trace(tmp_path / "b").scan("steps").collect()
    assert steps["kv_blocks_total"].to_list() == [10]


def test_existing_output_is_refused(tmp_path: Path) -> None:
    out = write_bundle(tmp_path / "b")
    with pytest.raises(TracekitError, match="already exists"):
        BundleWriter(out, {})


def test_valid_bundle_validates_ok(tmp_path: Path) -> None:
    report = validate_trace(write_bundle(tmp_path / "b"))
    assert report.status == "ok", report.bundles[0].problems
    assert report.exit_code == 0


def test_dataset_of_two_runs(tmp_path: Path) -> None:
    write_bundle(tmp_path / "d" / "one", run_id="one")
    write_bundle(tmp_path / "d" / "two", run_id="two")
    dataset = open_trace(tmp_path / "d")
    assert [b.run_id for b in dataset] == ["one", "two"]
    assert dataset.scan("decisions").collect().height == 4
    assert validate_trace(tmp_path / "d").status == "ok"


def test_duplicate_run_ids_in_a_dataset_are_refused(tmp_path: Path) -> None:
    write_bundle(tmp_path / "d" / "one")
    write_bundle(tmp_path / "d" / "two", seed=1)
    with pytest.raises(TraceSchemaError, match="run_id"):
        open_trace(tmp_path / "d")
    # The same run recorded twice is read once (docs/trace-format.md, "Datasets").
    write_bundle(tmp_path / "e" / "one")
    write_bundle(tmp_path / "e" / "two")
    assert len(open_trace(tmp_path / "e")) == 1


def _decisions_with(tmp: Path, **changes: object) -> list[tuple]:
    """The helper's decisions with fields of the first row changed."""
    names = trace_schema().table("decisions").column_names
    base = open_trace(write_bundle(tmp / "base")).scan("decisions").collect()
    rows = [tuple(r) for r in base.rows()]
    first = list(rows[0])
    for name, value in changes.items():
        first[names.index(name)] = value
    rows[0] = tuple(first)
    return rows


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"seq": 5}, "not contiguous"),
        ({"applied_victim_id": "zz", "raw_result": "zz"}, "applied_victim_id is not among"),
        ({"selections": 0}, "selections is inconsistent"),
        ({"time_s": 9.0}, "time_s or step decreases"),
        ({"outcome": "maybe"}, "outcome is not one of"),
        ({"num_candidates": 2}, "do not match num_candidates"),
        ({"kv_usage": 1.5}, "kv_usage is outside"),
        ({"applied_victim_id": "r2"}, "disagrees with the outcome"),
    ],
)
def test_broken_invariants_are_reported(tmp_path: Path, changes: dict, problem: str) -> None:
    bundle = write_bundle(tmp_path / "broken", decisions=_decisions_with(tmp_path, **changes))
    report = validate_trace(bundle)
    assert report.status == "invalid"
    assert report.exit_code == 1
    assert any(problem in p for p in report.bundles[0].problems), report.bundles[0].problems


def test_duplicate_request_ids_are_reported(tmp_path: Path) -> None:
    rows = [(RUN, "r0", 0, 0.0, 16, 4, 4, 0, 0.0, 0.1, 5.0, "finished", 4, 0, 0) for _ in range(2)]
    report = validate_trace(write_bundle(tmp_path / "b", requests=rows))
    assert any("request_id is not unique" in p for p in report.bundles[0].problems)


def test_missing_path_and_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(TraceSchemaError, match="no such file"):
        open_trace(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceSchemaError, match="no trace bundle found"):
        open_trace(tmp_path / "empty")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: {**m, "schema_version": 99}, "schema_version"),
        (lambda m: {**m, "format": "other"}, "not a tracekit trace bundle"),
        (lambda m: {k: v for k, v in m.items() if k != "engine"}, "lacks required field"),
        # A "tables" field of the wrong shape once crashed validate.
        (lambda m: {**m, "tables": "x"}, "field 'tables' is \"x\""),
        (lambda m: {**m, "tables": {"steps": 3}}, "field 'tables.steps' is 3"),
        (lambda m: {**m, "tables": {"steps": {"rows": "9"}}}, "'tables.steps.rows' is \"9\""),
        (lambda m: {**m, "tables": {"steps": {"files": "a"}}}, "'tables.steps.files' is \"a\""),
    ],
)
def test_bad_manifests(tmp_path: Path, edit, message: str) -> None:
    bundle = write_bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps(edit(manifest)))
    with pytest.raises(TraceSchemaError, match=message) as info:
        open_trace(bundle)
    assert "manifest.json" in str(info.value)
    assert "\n" not in str(info.value)


def test_manifest_that_is_not_json(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    (bundle / "manifest.json").write_text("{not json")
    with pytest.raises(TraceSchemaError, match="not valid JSON"):
        open_trace(bundle)


def test_a_manifest_that_cannot_be_read_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chmod 000 on manifest.json once gave a traceback.

    The tests run as root, for whom chmod 000 does not stop reads: the unreadable file is
    simulated by a PermissionError from the read (and, for real, by a non-UTF-8 file).
    """
    from click.testing import CliRunner

    from tracekit.cli import cli

    bundle = write_bundle(tmp_path / "b")
    manifest = bundle / "manifest.json"
    real = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self == manifest:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "read_text", denied)
        with pytest.raises(TraceSchemaError, match=r"cannot read the manifest \(Permission denied"):
            open_trace(bundle)
        for command in (["validate", str(bundle)], ["inspect", str(bundle)]):
            result = CliRunner().invoke(cli, command)
            assert result.exit_code != 0 and "Traceback" not in result.output
            assert "cannot read the manifest" in result.output
            assert len(result.output.strip().splitlines()) == 1
    manifest.write_bytes(b"\xff\xfe{}")
    with pytest.raises(TraceSchemaError, match="manifest is not UTF-8"):
        open_trace(bundle)


def test_truncated_parquet_is_a_clear_error(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    file = bundle / "decisions.parquet"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(TraceSchemaError, match=r"decisions\.parquet: not a readable Parquet"):
        validate_trace(bundle)


def test_missing_column_is_a_clear_error(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    frame = pl.read_parquet(bundle / "steps.parquet").drop("duration_s")
    frame.write_parquet(bundle / "steps.parquet")
    with pytest.raises(TraceSchemaError, match=r"missing column.*duration_s"):
        open_trace(bundle).scan("steps")


def test_inspect_summarises_outcomes_and_preemptions(tmp_path: Path) -> None:
    (summary,) = inspect_trace(write_bundle(tmp_path / "b"))
    assert summary["decisions"] == {"selected": 1, "abstained": 1}
    assert summary["requests"] == 3
    # r0 and r1 were preempted once each (num_preemptions = 1 - i // 2), r2 never.
    assert summary["preemptions"] == 2
    assert summary["max_preemptions_per_request"] == 1
    assert summary["steps"] == 6
    assert summary["max_kv_usage"] == pytest.approx(0.8)


INNER = textwrap.dedent(
    """
    class PickFirst:
        def select_victim(self, context):
            return context.candidates[0].request_id
    """
)

KILLED_ENGINE = textwrap.dedent(
    """
    import sys, time
    from tracekit.hosts.preemption_policy import (
        PreemptionCandidate, PreemptionContext, PreemptionPolicyController)
    controller = PreemptionPolicyController("tracekit.recording.live.RecordingPolicy")
    for seq in range(105):
        cands = tuple(PreemptionCandidate(f"r{seq}-{i}", 0, float(i), 10, 1, 11, 0, 16)
                      for i in range(3))
        controller.select_victim(PreemptionContext(cands, "fcfs", cands[1].request_id, 0.99,
                                                   float(seq)))
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_live_recorder_killed_mid_run_leaves_a_truncated_readable_bundle(tmp_path: Path) -> None:
    (tmp_path / "inner_policy.py").write_text(INNER)
    out = tmp_path / "live"
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "TRACEKIT_RECORD_DIR": str(out),
        "TRACEKIT_RECORD_POLICY": "inner_policy.PickFirst",
        "TRACEKIT_RECORD_RUN_ID": "live-test",
        "TRACEKIT_RECORD_FLUSH_ROWS": "10",
        "TRACEKIT_RECORD_FLUSH_S": "3600",
    }
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_ENGINE], env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    report = validate_trace(out)
    assert report.status == "truncated", report.bundles[0].problems
    assert report.exit_code == 3
    # 105 decisions at 10 per flush: the first 100 were flushed, the last 5 died in the buffer.
    assert report.bundles[0].rows["decisions"] == 100
    decisions = open_trace(out).scan("decisions").collect()
    assert decisions["outcome"].unique().to_list() == ["selected"]
    assert decisions["calls"].to_list() == list(range(1, 101))
    first = decisions.row(0, named=True)
    assert first["raw_result"] == "r0-0"
    assert first["builtin_victim_id"] == "r0-2"
