"""The experiment matrix end to end on a tiny configuration, and its recorded bundles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.engine import EngineConfig
from tracekit.errors import ConfigError
from tracekit.experiment import (
    MatrixSpec,
    matrix_cells,
    run_matrix,
)
from tracekit.replay.contexts import build_contexts, iter_run_chunks
from tracekit.trace.bundle import open_trace
from tracekit.trace.validate import validate_trace

# 2 strategies x 1 rate x 3 runs x 60 requests, on the published engine configuration.
TINY = MatrixSpec(
    strategies=("preempt-evict", "static-random"), rates=(3.8,), runs=3, num_requests=60
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("matrix") / "tiny"
    seen: list[tuple[int, int]] = []
    result = run_matrix(TINY, out, progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 6) and seen[-1] == (6, 6)
    return out, result


def test_layout_and_bundles(tiny: tuple[Path, object]) -> None:
    out, _ = tiny
    for name in (
        "matrix.json",
        "runs.parquet",
        "summary.parquet",
        "summary.json",
        "comparison.parquet",
        "claims.parquet",
        "comparison.md",
        "comparison.html",
    ):
        assert (out / name).is_file(), name  # fmt: skip
    for run in range(3):
        manifest = json.loads((out / "traces" / f"run{run}" / "manifest.json").read_text("utf-8"))
        assert manifest["seed"] == 42 + run and manifest["num_requests"] == 60
    report = validate_trace(out / "bundles")
    assert report.status == "ok", report
    dataset = open_trace(out / "bundles")
    assert len(dataset) == 6
    for bundle in dataset:
        manifest = bundle.manifest
        assert manifest["host_path"] == "experiment" and manifest["engine"] == "embedded-vllm"
        assert manifest["strategy"] in TINY.strategies
        assert manifest["clock"] == "cost-model"
        assert manifest["engine_config"]["num_blocks"] == 600
        assert manifest["engine_config"]["max_num_seqs"] == 32
        assert manifest["engine_config"]["cost_model"] == "a6000-llama3-8b"
        assert manifest["final_state"]["policy_metrics"]["strategy"] == manifest["strategy"]
        if manifest["strategy"] == "static-random":
            assert manifest["strategy_config"]["static_random_seed"] == manifest["seed"]
    matrix = json.loads((out / "matrix.json").read_text("utf-8"))
    assert matrix["spec"]["runs"] == 3 and matrix["runs_recorded"] == 6 and matrix["wall_s"] > 0


def test_decision_rows_of_the_experiment_path(tiny: tuple[Path, object]) -> None:
    out, _ = tiny
    decisions = open_trace(out / "bundles").scan("decisions").collect()
    native = decisions.filter(pl.col("outcome") == "builtin")
    hooks = decisions.filter(pl.col("outcome") == "selected")
    assert native.height > 0
    assert native.get_column("decision_reason").null_count() == native.height
    assert set(hooks.get_column("decision_reason").unique()) <= {"proactive", "srpt"}
    assert hooks.get_column("requesting_request_id").null_count() == hooks.height
    assert (native.get_column("applied_victim_id") == native.get_column("builtin_victim_id")).all()


def test_runs_and_summary_with_a_hand_computed_ci(tiny: tuple[Path, object]) -> None:
    out, result = tiny
    runs = pl.read_parquet(out / "runs.parquet")
    assert runs.height == 6 and set(runs.get_column("run_index")) == {0, 1, 2}
    # Throughput of each static-random run by hand: finished requests / last finish time.
    throughputs = []
    for run in range(3):
        bundle = out / "bundles" / "static-random" / "rate3.8" / f"run{run}"
        requests = pl.read_parquet(bundle / "requests.parquet")
        assert requests.height == 60 and set(requests.get_column("status")) == {"finished"}
        throughputs.append(60 / requests.get_column("finish_s").max())
    mean = sum(throughputs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in throughputs) / 2)
    half = 4.303 * sd / math.sqrt(3)  # the original's t for n = 3
    summary = pl.read_parquet(out / "summary.parquet")
    row = summary.filter(pl.col("strategy") == "static-random").row(0, named=True)
    assert row["num_runs"] == 3
    assert row["throughput_rps_mean"] == pytest.approx(mean, rel=1e-12)
    assert row["throughput_rps_ci95"] == pytest.approx(half, rel=1e-12)
    assert_frame_equal(summary, result.summary)  # type: ignore[attr-defined]
    document = json.loads((out / "summary.json").read_text("utf-8"))
    cell = next(a for a in document["aggregations"] if a["strategy"] == "static-random")
    assert cell["throughput_rps"] == {"mean": pytest.approx(mean), "ci95": pytest.approx(half)}
    assert cell["slo"] == "TTFT<=300ms" and cell["request_rate"] == 3.8


def test_comparison_and_claims_of_a_partial_matrix(tiny: tuple[Path, object]) -> None:
    out, _ = tiny
    comparison = pl.read_parquet(out / "comparison.parquet")
    ours = comparison.filter(pl.col("ours_mean").is_not_null())
    assert set(ours.get_column("strategy")) == {"preempt-evict", "static-random"}
    pe = ours.filter(pl.col("strategy") == "preempt-evict")
    assert pe.get_column("ours_vs_pe").to_list() == [0.0, 0.0, 0.0, 0.0]
    claims = pl.read_parquet(out / "claims.parquet")
    # Only claims about preempt-evict vs static-random at 3.8 could be checked: none is.
    assert claims.get_column("holds").null_count() == claims.height
    markdown = (out / "comparison.md").read_text("utf-8")
    assert "Absolute numbers are not comparable" in markdown
    assert "<section" in (out / "comparison.html").read_text("utf-8")


def test_experiment_bundles_replay_unchanged(tiny: tuple[Path, object]) -> None:
    out, _ = tiny
    bundle = open_trace(out / "bundles" / "static-random" / "rate3.8" / "run0").bundles[0]
    contexts = [c for chunk in iter_run_chunks(bundle, 10_000) for c in build_contexts(chunk)]
    decisions = pl.read_parquet(bundle.path / "decisions.parquet")
    assert len(contexts) == decisions.height > 0
    for context, row in zip(contexts, decisions.iter_rows(named=True), strict=True):
        assert context.builtin_victim_id == row["builtin_victim_id"]
        assert context.requesting_request_id == (row["requesting_request_id"] or "")


def test_resume_keeps_complete_bundles(tiny: tuple[Path, object], tmp_path: Path) -> None:
    out, result = tiny
    again = run_matrix(TINY, out, resume=True)
    matrix = json.loads((out / "matrix.json").read_text("utf-8"))
    assert matrix["runs_recorded"] == 0
    assert_frame_equal(again.runs, result.runs)  # type: ignore[attr-defined]


def test_parallel_runs_give_the_same_results(tmp_path: Path) -> None:
    spec = MatrixSpec(strategies=("bidkv",), rates=(5.7,), runs=2, num_requests=30)
    serial = run_matrix(spec, tmp_path / "serial", jobs=1)
    parallel = run_matrix(spec, tmp_path / "parallel", jobs=2)
    # Run ids differ: they hash the trace file paths, which differ between the two folders.
    columns = [c for c in serial.runs.columns if c not in ("bundle", "run_id")]
    assert_frame_equal(serial.runs.select(columns), parallel.runs.select(columns))


def test_cells_and_spec_checks(tmp_path: Path) -> None:
    cells = matrix_cells(TINY, tmp_path)
    assert len(cells) == 6
    assert cells[0].bundle == tmp_path / "bundles" / "preempt-evict" / "rate3.8" / "run0"
    assert cells[0].trace == tmp_path / "traces" / "run0" / "mixed_rate3.8.json"
    assert [c.seed for c in cells] == [42, 42, 43, 43, 44, 44]
    with pytest.raises(ConfigError, match="strategies must be distinct names"):
        MatrixSpec(strategies=("bidkv", "oracle-dp"))
    with pytest.raises(ConfigError, match="rates must be positive"):
        MatrixSpec(rates=(0.0,))
    with pytest.raises(ConfigError, match="scheduling policy fcfs"):
        run_matrix(
            MatrixSpec(
                strategies=("bidkv",), rates=(1.0,), runs=1, num_requests=5,
                engine_config=EngineConfig(scheduling_policy="priority"),
            ),
            tmp_path / "bad",
        )  # fmt: skip


def test_resume_goes_through_the_sweep_mechanism(tmp_path: Path) -> None:
    spec = MatrixSpec(strategies=("preempt-evict",), rates=(3.8,), runs=2, num_requests=20)
    out = tmp_path / "m"
    first = run_matrix(spec, out)
    # The refusal comes before anything is written: no file below out changes.
    stamps = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="already exists; pass --resume"):
        run_matrix(spec, out)
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    assert after == stamps
    # A bundle left incomplete (a killed run) is recorded again; the complete one is kept.
    manifest = out / "bundles" / "preempt-evict" / "rate3.8" / "run1" / "manifest.json"
    kept = out / "bundles" / "preempt-evict" / "rate3.8" / "run0" / "requests.parquet"
    before = kept.stat().st_mtime_ns
    payload = json.loads(manifest.read_text("utf-8"))
    manifest.write_text(json.dumps({**payload, "complete": False}), "utf-8")
    again = run_matrix(spec, out, resume=True)
    assert json.loads((out / "matrix.json").read_text("utf-8"))["runs_recorded"] == 1
    assert json.loads(manifest.read_text("utf-8"))["complete"] is True
    assert kept.stat().st_mtime_ns == before
    assert_frame_equal(again.runs, first.runs)


def test_detached_experiment_runs_return_their_send_times(tmp_path: Path) -> None:
    """What a Ray node does with an experiment run: the sidecar file comes back too."""
    from tracekit.experiment import matrix_plan
    from tracekit.sweep.task import SweepTask, execute_detached, publish_files, publish_sidecar

    spec = MatrixSpec(strategies=("preempt-evict",), rates=(3.8,), runs=1, num_requests=20)
    run_matrix(spec, tmp_path / "a")
    (planned,) = matrix_plan(spec, tmp_path / "a")
    task = SweepTask(0, planned.path, planned.run, planned.run_id,
                     recorder=planned.recorder, sidecar=planned.sidecar)  # fmt: skip
    outcome = execute_detached(task)
    assert outcome.status == "done" and outcome.files and outcome.sidecar
    assert planned.sidecar is not None
    publish_sidecar(tmp_path / "b" / planned.sidecar, outcome.sidecar)
    publish_files(tmp_path / "b" / planned.path, outcome.files)
    for name in (planned.sidecar, f"{planned.path}/requests.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_experiment_run_takes_a_pool(tmp_path: Path) -> None:
    """``experiment run`` takes ``--pool``, as ``experiment traces`` does (it once had none)."""
    import polars as pl
    from click.testing import CliRunner

    from tracekit.cli import cli

    pool = tmp_path / "pool.csv"
    pl.DataFrame(
        {
            "request_id": [f"p{i}" for i in range(40)],
            "arrival_s": [float(i) for i in range(40)],
            "prompt_tokens": [100 + 7 * i for i in range(40)],
            "output_tokens": [20 + i for i in range(40)],
        }
    ).write_csv(pool)
    out = tmp_path / "m"
    args = [
        "experiment", "run", "--out", str(out), "--strategies", "preempt-evict", "--rates", "3.8",
        "--runs", "1", "--num-requests", "20", "--pool", str(pool),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads(next((out / "traces").rglob("manifest.json")).read_text("utf-8"))
    assert manifest["pool"]["source"] == str(pool) and manifest["pool"]["num_rows"] == 40
    assert json.loads((out / "matrix.json").read_text("utf-8"))["spec"]["pool_path"] == str(pool)
