"""A ``record sim`` stopped by SIGKILL, SIGTERM or Ctrl-C leaves readable rows (docs/guarantees.md,
"Interruption").

The run writes into the hidden ``.OUT.partial-PID`` folder: complete Parquet part files and a
manifest that says ``complete: false``, refreshed at each flush. ``tracekit validate`` on that
folder exits 3 (truncated) and its rows can be read; the next run into the same ``OUT`` removes
the stale folder (its process is dead) and publishes a complete bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from tracekit.cli import cli
from tracekit.trace.rows import RequestRow
from tracekit.trace.schema import trace_schema
from tracekit.trace.writer import BundleWriter

ROOT = Path(__file__).resolve().parents[1]
HOUR = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
CLI = [sys.executable, "-m", "tracekit"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SOURCE_DATE_EPOCH": "1700000000"}


def _record(workload: Path, out: Path, *more: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "record", "sim", "--workload", str(workload), "--out", str(out), *more],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _flushed(partial: Path) -> int:
    """Rows the partial folder's manifest lists (0 while it has none or no manifest)."""
    try:
        manifest = json.loads((partial / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        return 0
    return sum(int(table["rows"]) for table in manifest["tables"].values())


def _stop_after_first_flush(out: Path, signum: int) -> tuple[Path, subprocess.Popen[bytes], str]:
    process = _record(HOUR, out)
    partial = out.with_name(f".{out.name}.partial-{process.pid}")
    deadline = time.monotonic() + 120
    try:
        # Kill once something was flushed (about 2 s into the run on an idle machine).
        while _flushed(partial) == 0:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no rows were flushed into the partial folder"
            time.sleep(0.05)
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return partial, process, err.decode()


def _validate(path: Path) -> Result:
    # In this process: the command's exit status and output are what a fresh one gives.
    return CliRunner().invoke(cli, ["validate", str(path)])


@pytest.mark.e2e
@pytest.mark.parametrize(
    "signum",
    [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
    ids=["SIGKILL", "SIGTERM", "SIGINT"],
)
def test_stopped_record_sim_leaves_readable_rows_and_next_run_cleans_up(
    tmp_path: Path, signum: int
) -> None:
    out = tmp_path / "run"
    partial, process, err = _stop_after_first_flush(out, signum)
    assert not out.exists()
    assert partial.is_dir(), sorted(p.name for p in tmp_path.iterdir())
    manifest = json.loads((partial / "manifest.json").read_text("utf-8"))
    assert manifest["complete"] is False

    checked = _validate(partial)
    assert checked.exit_code == 3, checked.output

    # What was flushed can be read as any bundle: the manifest lists complete Parquet files.
    rows = 0
    for name, table in manifest["tables"].items():
        files = [partial / f for f in table["files"]]
        frame = pl.read_parquet(files) if files else pl.DataFrame()
        assert frame.height == table["rows"], name
        rows += frame.height
    assert rows > 0
    if signum != signal.SIGKILL:
        # SIGTERM and Ctrl-C flush the buffered rows too (requests, decisions: not yet full),
        # and exit 130: interrupted (docs/index.md, "Conventions"; it was 2, bad input).
        assert process.returncode == 130
        assert manifest["tables"]["requests"]["rows"] > 0
        # Its message names the partial folder and how to check it, without a traceback.
        assert "Traceback" not in err, err
        assert partial.name in err and "validate" in err, err

    # The next run into the same OUT removes the stale folder of the dead process (a slice of
    # the sample: what is checked is the clean-up and the complete bundle, not its size).
    again = _record(SAMPLE, out, "--limit", "100")
    _, again_err = again.communicate(timeout=300)
    assert again.returncode == 0, again_err.decode()
    assert not partial.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert _validate(out).exit_code == 0
    assert json.loads((out / "manifest.json").read_text("utf-8"))["complete"] is True


def test_live_partial_folder_of_a_running_process_is_kept(tmp_path: Path) -> None:
    """Only dead processes' folders are removed: a concurrent run's folder is left alone."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = tmp_path / f".run.partial-{sleeper.pid}"
        alive.mkdir()
        dead = tmp_path / ".run.partial-999999999"
        dead.mkdir()
        (dead / "manifest.json").write_text("{}", "utf-8")
        other = tmp_path / ".other.partial-999999999"
        other.mkdir()
        with BundleWriter(tmp_path / "run", {"run_id": "r"}, tables=["requests"]):
            pass
        assert alive.is_dir()
        assert not dead.exists()
        assert other.is_dir()
    finally:
        sleeper.kill()
        sleeper.wait()


def _request(i: int) -> RequestRow:
    return RequestRow("r", f"r{i}", i, float(i), 10, 5, 5, 0, None, None, None, "finished", 5, 0, 0)


def test_atomic_bundle_is_byte_identical_to_one_streamed_file(tmp_path: Path) -> None:
    """Part files merged at close give the bytes of one file streamed row group by row group."""
    rows = [_request(i) for i in range(25)]
    with BundleWriter(
        tmp_path / "run", {"run_id": "r"}, tables=["requests"], row_group_rows=10
    ) as w:
        for row in rows:
            w.append("requests", row)
    schema = trace_schema().table("requests").arrow_schema
    reference = tmp_path / "reference.parquet"
    with pq.ParquetWriter(reference, schema, compression="zstd") as writer:
        for start in range(0, 25, 10):
            chunk = rows[start : start + 10]
            arrays = [
                pa.array([row[i] for row in chunk], type=field.type)
                for i, field in enumerate(schema)
            ]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema), row_group_size=10)
    got = (tmp_path / "run" / "requests.parquet").read_bytes()
    assert hashlib.sha256(got).digest() == hashlib.sha256(reference.read_bytes()).digest()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "manifest.json",
        "requests.parquet",
    ]


@pytest.mark.e2e
def test_every_flushed_state_of_a_run_validates_as_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a kill at any request boundary leaves is a truncated bundle (exit 3), not invalid.

    Small row groups make every table flush many times and independently; a decision's crash
    copy waits until its candidates are flushed, so no listed decision lacks its candidates.
    """
    import functools
    import shutil

    from tracekit.engine.config import make_engine_config
    from tracekit.recording import sim
    from tracekit.strategies import resolve_strategy
    from tracekit.trace.validate import validate_trace
    from tracekit.workloads import load_workload

    monkeypatch.setattr(sim, "BundleWriter", functools.partial(BundleWriter, row_group_rows=32))
    out = tmp_path / "run"
    partial = out.with_name(f".run.partial-{os.getpid()}")
    snapshots: list[Path] = []

    def snapshot(done: int, total: int) -> None:
        if done % 50 == 0:
            copy = tmp_path / f"snap-{done}"
            shutil.copytree(partial, copy, ignore=shutil.ignore_patterns(".*"))
            snapshots.append(copy)

    run = sim.SimRun(
        load_workload(SAMPLE, limit=200),
        make_engine_config(num_blocks=300, max_model_len=4608, clock="cost-model"),
        resolve_strategy("builtin"),
        "typed",
    )
    sim.record_sim(run, out, progress=snapshot)
    assert validate_trace(out).status == "ok"
    listed_decisions = 0
    for copy in snapshots:
        report = validate_trace(copy)
        assert report.status == "truncated", (copy.name, report)
        manifest = json.loads((copy / "manifest.json").read_text("utf-8"))
        listed_decisions += manifest["tables"]["decisions"]["rows"]
    assert len(snapshots) >= 3 and listed_decisions > 0


def test_a_decision_is_listed_only_once_its_candidates_are(tmp_path: Path) -> None:
    """Tables flush on their own; a decision's crash copy waits for its last candidate."""
    from tracekit.trace.rows import CandidateRow, DecisionRow

    def candidate(seq: int, position: int) -> CandidateRow:
        return CandidateRow("r", seq, position, f"q{position}", 0, 0.0, 8, 1, 8, 0, 4, None, None)

    def decision(seq: int, count: int) -> DecisionRow:
        return DecisionRow(
            "r", seq, seq, float(seq), None, 0.9, "fcfs", count, "q0", "q0", "str",
            "selected", "q0", None, seq + 1, seq + 1, 0, 0, 0, True,
        )  # fmt: skip

    def listed(table: str) -> int:
        manifest = json.loads((partial / "manifest.json").read_text("utf-8"))
        return int(manifest["tables"][table]["rows"])

    out = tmp_path / "run"
    partial = out.with_name(f".run.partial-{os.getpid()}")
    writer = BundleWriter(
        out, {"run_id": "r"}, tables=["decisions", "candidates"], row_group_rows=4
    )
    # Candidates per decision: 1, 1, 1, 6 -> candidate parts of 4 rows end inside decision 3.
    for seq, count in enumerate([1, 1, 1, 6]):
        for position in range(count):
            writer.append("candidates", candidate(seq, position))
        writer.append("decisions", decision(seq, count))
    assert listed("candidates") == 8  # the 9th, decision 3's last, is still in memory
    assert listed("decisions") == 0  # so decision 3 (and its part) is not listed yet
    writer.append("candidates", candidate(4, 0))
    writer.append("decisions", decision(4, 1))
    assert listed("decisions") == 0
    for position in range(1, 4):
        writer.append("candidates", candidate(5, position - 1))
    assert listed("candidates") == 12 and listed("decisions") == 4
    writer.close()
    assert listed_rows(out) == {"decisions": 5, "candidates": 13}


def listed_rows(bundle: Path) -> dict[str, int]:
    manifest = json.loads((bundle / "manifest.json").read_text("utf-8"))
    return {name: table["rows"] for name, table in manifest["tables"].items()}
