"""Running sweeps locally: determinism, resuming, failure isolation, cells.parquet, progress."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import polars as pl
import pytest
from sweep_helpers import SMOKE, TINY, bundle_files, hidden_leftovers, write_matrix

from tracekit.analysis.serving import serving_metrics
from tracekit.errors import ConfigError
from tracekit.sweep import StderrProgress, load_matrix, plan_sweep, run_sweep
from tracekit.sweep.executors import WORKER_DIED, ProcessExecutor, SerialExecutor, make_executor
from tracekit.sweep.guards import sweep_lock
from tracekit.sweep.progress import ProgressCounter, format_duration, render_progress
from tracekit.sweep.task import (
    SweepTask,
    bundle_state,
    execute_detached,
    execute_task,
    publish_files,
)
from tracekit.trace import open_trace
from tracekit.trace.bundle import Bundle
from tracekit.trace.validate import validate_trace

EPOCH = "1700000000"
# Columns the qualification report reads (tracekit.qualify.results.CELL_COLUMNS).
REPORT_COLUMNS = (
    "repeat", "strategy", "host_path", "run_id", "bundle", "cell", "requests", "finished",
    "all_finished", "throughput_rps", "output_tokens_per_s", "ttft_p95_s", "e2e_p95_s",
    "preemptions", "recomputed_tokens", "calls", "selections", "abstentions", "failures",
    "invalid_selections", "liveness_abstentions", "cascade_abstentions", "gate_fallbacks",
    "policy_enabled",
)  # fmt: skip


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The smoke matrix swept with 1 job (in process) and with 2 worker processes."""
    root = tmp_path_factory.mktemp("smoke")
    outs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SOURCE_DATE_EPOCH", EPOCH)
        for jobs in (1, 2):
            result = run_sweep(SMOKE, root / f"jobs{jobs}", jobs=jobs)
            assert result.exit_code == 0 and result.count("done") == 30
            assert result.executor == ("serial" if jobs == 1 else "processes")
            outs[jobs] = root / f"jobs{jobs}"
    return outs


def test_two_jobs_give_byte_identical_results_to_one(smoke: dict[int, Path]) -> None:
    one, two = bundle_files(smoke[1]), bundle_files(smoke[2])
    assert sorted(one) == sorted(two)
    assert sum(name.endswith("manifest.json") for name in one) == 30
    assert [name for name in one if one[name] != two[name]] == []


def test_the_sweep_folder_is_a_dataset_every_reader_accepts(smoke: dict[int, Path]) -> None:
    out = smoke[1]
    dataset = open_trace(out)
    assert len(dataset) == 30
    assert validate_trace(out).exit_code == 0
    # No partial folder, no lock left: only the marker that says a sweep wrote the folder.
    assert (out / ".tracekit-sweep").is_file() and hidden_leftovers(out) == []
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    last = runs[-1]
    assert (last["strategy"], last["rate"], last["repeat"]) == ("bidkv", 2.0, 2)
    manifest = json.loads((out / last["path"] / "manifest.json").read_text())
    assert manifest["created_at"] == "2023-11-14T22:13:20+00:00"
    assert manifest["time_scaling"] == 2.0
    assert manifest["strategy_config"]["utility_preempt_weight"] == 1.0
    assert manifest["workload"]["options"]["repeat_window"][0] > 0


def test_cells_parquet_has_one_cell_per_point_and_partition_columns(
    smoke: dict[int, Path],
) -> None:
    out = smoke[1]
    cells = pl.read_parquet(out / "cells.parquet")
    assert set(REPORT_COLUMNS) <= set(cells.columns)
    assert cells.columns[:14] == [
        "repeat", "strategy", "host_path", "run_id", "bundle", "cell", "workload", "rate",
        "config", "engine", "policy", "rate_unit", "rate_scale", "seed",
    ]  # fmt: skip
    # 2 rates x 2 policy points = 4 cells of 3 strategies x 3 repeats.
    assert cells.height == 36
    per_cell = cells.group_by("cell", "workload", "rate", "config", "policy").len()
    assert per_cell.height == 4 and per_cell["len"].to_list() == [9] * 4
    assert sorted(cells["cell"].unique().to_list()) == [
        f"azure_conv_sample|rate={rate}|small|utility_preempt_weight={w}"
        for rate in ("1.0", "2.0")
        for w in ("0.3", "1.0")
    ]
    # The baseline's run is shared by the cells of both policy points.
    builtin = cells.filter(pl.col("strategy") == "builtin")
    assert builtin.height == 12 and builtin["run_id"].n_unique() == 6
    assert all("/config=small/" in b for b in builtin["bundle"].to_list())
    # Partition columns agree with the bundle folders.
    for row in cells.iter_rows(named=True):
        folder = dict(part.split("=", 1) for part in row["bundle"].split("/")[1:])
        assert folder["workload"] == row["workload"]
        assert float(folder["rate"]) == row["rate"]
        assert int(folder["repeat"]) == row["repeat"]
        assert folder["config"] in (row["config"], row["engine"])
    # Metrics are those of the bundle behind each row.
    first = cells.row(0, named=True)
    metrics = serving_metrics(open_trace(out / first["bundle"]).scan("requests")).row(0, named=True)
    assert first["preemptions"] == metrics["preemptions"]
    assert first["ttft_p95_s"] == metrics["ttft_p95_s"]
    assert set(cells["rate_unit"].to_list()) == {"scale"}


def test_sweep_json_records_matrix_seeds_and_status(smoke: dict[int, Path]) -> None:
    payload = json.loads((smoke[2] / "sweep.json").read_text())
    assert payload["format"] == "tracekit.sweep"
    assert payload["executor"] == {"name": "processes", "workers": 2}
    assert payload["summary"] == {"done": 30, "skipped": 0, "failed": 0, "interrupted": 0}
    assert payload["strategies"] == ["builtin", "pe", "bidkv"] and payload["candidate"] == "bidkv"
    assert payload["matrix"]["repeats"] == {"count": 3, "kind": "windows"}
    run = payload["runs"][0]
    assert run["status"] == "done" and run["error"] is None and run["duration_s"] > 0
    assert run["seed"] == 0 and len(run["cells"]) == 2
    repeats = payload["plan"]["workloads"][0]["repeats"]
    assert [r["num_requests"] for r in repeats] == [24, 36, 60]


def test_resume_skips_complete_runs_and_redoes_missing_ones(
    smoke: dict[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "sweep"
    shutil.copytree(smoke[1], out)
    before = bundle_files(out)
    removed = out / "runs/workload=azure_conv_sample/rate=1.0/strategy=builtin"
    removed = removed / "config=small/repeat=1"
    shutil.rmtree(removed)
    (out / "cells.parquet").unlink()
    # A partial bundle from a killed sweep is cleaned up, not mistaken for a run.
    stale = removed.with_name(".repeat=1.partial-99999")
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    result = run_sweep(SMOKE, out, jobs=1)
    assert (result.count("done"), result.count("skipped")) == (1, 29)
    assert bundle_files(out) == before
    assert not stale.exists()
    skipped = [r for r in result.runs if r.status == "skipped"]
    assert all(r.duration_s is not None for r in skipped)  # carried over from sweep.json
    # A complete sweep re-runs nothing.
    again = run_sweep(SMOKE, out, jobs=1)
    assert again.count("skipped") == 30 and again.exit_code == 0


def test_resume_refuses_a_folder_the_changed_matrix_would_overwrite(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, TINY.replace('"builtin", "bidkv"', '"builtin"'))
    run_sweep(matrix, tmp_path / "out", jobs=1)
    matrix.write_text(matrix.read_text().replace("num_blocks = 300", "num_blocks = 400"))
    with pytest.raises(ConfigError, match=r"holds run builtin-typed-\w+, but the matrix now gives"):
        run_sweep(matrix, tmp_path / "out", jobs=1)


def test_a_failing_run_is_reported_and_the_others_complete(tmp_path: Path) -> None:
    text = 'host = "legacy"\n' + TINY.replace(
        '"builtin", "bidkv"', '"builtin", "sweep_helpers:RaisingSelector", "bidkv"'
    )
    matrix = write_matrix(tmp_path, text)
    result = run_sweep(matrix, tmp_path / "out", jobs=1)
    assert result.exit_code == 1
    assert [(r.strategy, r.status) for r in result.runs] == [
        ("builtin", "done"),
        ("sweep_helpers:RaisingSelector", "failed"),
        ("bidkv", "done"),
    ]
    failed = result.failed[0]
    assert failed.error == "RuntimeError: boom from RaisingSelector"
    assert "Traceback" in (failed.traceback or "")
    assert not (tmp_path / "out" / failed.path).exists()
    assert hidden_leftovers(tmp_path / "out") == []
    cells = pl.read_parquet(tmp_path / "out" / "cells.parquet")
    assert cells["strategy"].to_list() == ["bidkv", "builtin"]
    assert cells["host_path"].to_list() == ["legacy", "builtin"]
    payload = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert payload["runs"][1]["error"] == failed.error
    assert f"FAILED {failed.path}: RuntimeError: boom" in result.render()
    # A re-run retries only the failed run.
    again = run_sweep(matrix, tmp_path / "out", jobs=1)
    assert [r.status for r in again.runs] == ["skipped", "failed", "skipped"]


def test_a_run_that_kills_its_worker_fails_alone(tmp_path: Path) -> None:
    text = TINY.replace('"builtin", "bidkv"', '"sweep_helpers:CrashingPolicy", "builtin", "bidkv"')
    matrix = write_matrix(tmp_path, text)
    result = run_sweep(matrix, tmp_path / "out", jobs=2)
    assert [(r.strategy, r.status) for r in result.runs] == [
        ("sweep_helpers:CrashingPolicy", "failed"),
        ("builtin", "done"),
        ("bidkv", "done"),
    ]
    assert result.failed[0].error == WORKER_DIED
    assert result.exit_code == 1
    assert hidden_leftovers(tmp_path / "out") == []


def test_a_second_sweep_on_the_same_folder_is_refused(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, TINY.replace('"builtin", "bidkv"', '"builtin"'))
    out = tmp_path / "out"
    out.mkdir()
    (out / ".tracekit-sweep").write_text("{}\n")  # a running sweep marked the folder first
    lock = out / ".sweep.lock"
    import socket

    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    with pytest.raises(ConfigError, match=r"another sweep \(pid \d+\) is writing this folder"):
        run_sweep(matrix, out, jobs=1)
    # A lock whose process is gone is stale: the sweep takes it over.
    lock.write_text(json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname()}))
    assert run_sweep(matrix, out, jobs=1).exit_code == 0
    assert not lock.exists()


@pytest.mark.parametrize("pid", [0, -1, 99999999999999999999])
def test_a_lock_no_process_can_hold_is_taken_over(tmp_path: Path, pid: int) -> None:
    # Zero and -1 would make os.kill probe a process group or every process; a pid beyond
    # pid_t makes it raise OverflowError. No process can hold such a lock.
    import socket

    lock = tmp_path / ".sweep.lock"
    lock.write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
    with sweep_lock(tmp_path):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def test_executor_choice_and_bad_jobs() -> None:
    assert isinstance(make_executor(1), SerialExecutor)
    assert isinstance(make_executor(3), ProcessExecutor)
    assert make_executor(3).workers == 3
    with pytest.raises(ConfigError, match="--jobs 0: must be an integer >= 1"):
        make_executor(0)
    with pytest.raises(ConfigError, match="--ray: empty address"):
        make_executor(None, " ")


def test_ray_missing_is_reported_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tracekit.sweep.executors.importlib.util.find_spec", lambda name: None)
    matrix = write_matrix(tmp_path, TINY)
    with pytest.raises(ConfigError, match=r"--ray needs Ray, which is not installed; pip install"):
        run_sweep(matrix, tmp_path / "out", ray_address="auto")
    assert not (tmp_path / "out").exists()


def test_progress_reports_counts_and_time_left(tmp_path: Path) -> None:
    stream = io.StringIO()
    matrix = write_matrix(tmp_path, TINY)
    run_sweep(matrix, tmp_path / "out", jobs=1, progress=StderrProgress(stream, interval_s=0))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "sweep 0/2 runs: 0 done, 0 failed, 0 running, estimating time left"
    assert "sweep 1/2 runs: 1 done, 0 failed, 0 running, ~" in "\n".join(lines)
    assert lines[-1].startswith("sweep 2/2 runs: 2 done, 0 failed, 0 running, in ")


def test_progress_rendering_and_estimate() -> None:
    snapshots = []
    counter = ProgressCounter(total=10, skipped=2, callback=snapshots.append)
    counter.started("a")
    counter.finished("a", ok=False, error="ValueError: x")
    last = snapshots[-1]
    assert (last.done, last.failed, last.running, last.pending) == (0, 1, 0, 7)
    assert last.eta_s is not None and last.eta_s >= 0
    assert render_progress(last).startswith(
        "sweep 3/10 runs: 0 done, 2 skipped, 1 failed, 0 running, ~"
    )
    stream = io.StringIO()
    StderrProgress(stream, interactive=True)(last)
    assert "FAILED a: ValueError: x" in stream.getvalue()
    durations = [format_duration(s) for s in (None, 4.4, 65, 3 * 3600 + 120)]
    assert durations == ["?", "4s", "1m05s", "3h02m"]


def test_detached_runs_publish_the_same_bundle_and_clean_orphans(tmp_path: Path) -> None:
    """What a Ray task does, without Ray: record in scratch, return the files, publish them."""
    plan = plan_sweep(load_matrix(write_matrix(tmp_path, TINY)))
    run = plan.runs[1]
    task = SweepTask(1, run.path, run.run, run.run_id, source_date_epoch=EPOCH)
    # A scratch folder of a task killed before its cleanup (its pid is beyond any pid_max).
    orphan = Path(tempfile.gettempdir()) / f"tracekit-sweep-{2**22 + 4321}-test"
    orphan.mkdir(exist_ok=True)
    light = dataclasses.replace(task, run=dataclasses.replace(task.run, workload=None))
    outcome = execute_detached(light, run.run.workload)
    assert outcome.status == "done" and outcome.files and not orphan.exists()
    publish_files(tmp_path / "a" / run.path, outcome.files)
    assert execute_task(task, tmp_path / "b").status == "done"
    assert bundle_files(tmp_path / "a") == bundle_files(tmp_path / "b")
    assert not [p for p in Path(tempfile.gettempdir()).glob(f"tracekit-sweep-{os.getpid()}-*")]


def test_bundles_the_matrix_no_longer_gives_are_reported(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, TINY)
    run_sweep(matrix, tmp_path / "out", jobs=1)
    matrix.write_text(TINY.replace('"builtin", "bidkv"', '"builtin"'))
    result = run_sweep(matrix, tmp_path / "out", jobs=1)
    assert result.count("skipped") == 1 and len(result.runs) == 1
    assert result.extra_bundles == (
        "runs/workload=azure_conv_sample/rate=1.0/strategy=bidkv/config=small/repeat=0",
    )
    assert "note: 1 bundle(s) under runs/ are not in the matrix" in result.render()
    payload = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert payload["extra_bundles"] == list(result.extra_bundles)


def test_plan_render_summarises_the_expansion() -> None:
    text = plan_sweep(load_matrix(SMOKE)).render()
    assert text.splitlines()[0] == "smoke: 30 runs in 4 cells"
    assert "  rates (rate_scale): 1.0, 2.0" in text
    assert "utility_preempt_weight=0.3" in text


def test_resume_asks_bundle_complete_and_nothing_else(tmp_path: Path) -> None:
    """bundle_state is Bundle.complete over a leniently read manifest (the one check)."""
    folder = tmp_path / "b"
    assert bundle_state(folder) == ("missing", None) and Bundle.peek(folder) is None
    folder.mkdir()
    assert bundle_state(folder) == ("incomplete", None)
    (folder / "manifest.json").write_text("{not json", "utf-8")
    assert bundle_state(folder) == ("incomplete", None)
    for flag, state in ((False, "incomplete"), ("true", "incomplete"), (True, "complete")):
        (folder / "manifest.json").write_text(json.dumps({"run_id": "r", "complete": flag}))
        bundle = Bundle.peek(folder)
        assert bundle is not None and bundle.complete is (state == "complete")
        assert bundle_state(folder) == (state, "r")
