"""``compare_fidelity``: the first difference, both engines' state side by side, bad inputs."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from trace_helpers import rewrite_table

from tracekit.engine import EngineConfig
from tracekit.errors import TraceSchemaError
from tracekit.real_engine.fidelity import compare_fidelity
from tracekit.recording.sim import record_sim
from tracekit.strategies import resolve_strategy
from tracekit.vllm.fidelity import FidelityInputError
from tracekit.vllm.fixtures import FIXTURE_VERSIONS, FIXTURES, fixture_dir

ROOT = Path(__file__).resolve().parents[1]
NAME = "synthetic-priority"
FIXTURE = fixture_dir(ROOT, "0.32.0", NAME)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = FIXTURES[NAME].sim_run(ROOT, "0.32")
    return record_sim(run, tmp_path_factory.mktemp("sim") / "b", record_scheduled=True)


def tampered(tmp_path: Path, table: str, change) -> Path:
    copy = tmp_path / "vllm"
    shutil.copytree(FIXTURE, copy)
    rewrite_table(copy, table, change(pl.read_parquet(copy / f"{table}.parquet")))
    return copy


def test_identical_runs_match(sim: Path) -> None:
    report = compare_fidelity(sim, FIXTURE)
    assert report.matched and report.exit_code == 0
    assert report.compared["decisions"] == 48
    assert report.render().startswith("fidelity: MATCH (embedded-vllm vs vllm-0.32.0)")
    json.dumps(report.to_dict())


def test_a_version_rule_change_is_located_with_both_states(tmp_path: Path) -> None:
    # The embedded engine with 0.33's rules against vLLM 0.32: PRIORITY self-preemption differs.
    run = FIXTURES[NAME].sim_run(ROOT, "0.33")
    sim33 = record_sim(run, tmp_path / "sim33", record_scheduled=True)
    report = compare_fidelity(sim33, FIXTURE)
    assert not report.matched and report.exit_code == 1
    mismatch = report.mismatch
    assert mismatch is not None
    assert (mismatch.kind, mismatch.step) == ("scheduled", 44)
    assert "only in A ['syn-007']" in mismatch.what
    a, b = mismatch.first_state, mismatch.second_state
    assert a is not None and b is not None
    # Same state at the start of the step; the difference is what each did in it.
    assert a.running == b.running and a.waiting == b.waiting
    assert [r[0] for r in a.running] == ["syn-000", "syn-001", "syn-003", "syn-005", "syn-007"]
    assert a.kv_blocks_used == 63 == a.kv_blocks_total
    assert [d["applied_victim_id"] for d in a.decisions] == ["syn-005"]
    text = report.render()
    assert "vllm_version differs (0.33 vs 0.32)" in text
    for label in ("running (queue order)", "waiting", "KV blocks used/usable", "decision 1"):
        assert label in text
    assert "*scheduled tokens" in text and "syn-007:1" in text
    json.dumps(report.to_dict())


def test_a_different_victim_is_a_decision_mismatch(sim: Path, tmp_path: Path) -> None:
    decisions = pl.read_parquet(FIXTURE / "decisions.parquet")
    target = decisions.row(5, named=True)
    other = next(c for c in ("syn-000", "syn-001") if c != target["applied_victim_id"])
    vllm = tampered(
        tmp_path,
        "decisions",
        # A built-in decision: the engine's own victim is the one applied (both change).
        lambda f: f.with_columns(
            pl.when(pl.col("seq") == 5).then(pl.lit(other)).otherwise(pl.col(name)).alias(name)
            for name in ("applied_victim_id", "builtin_victim_id")
        ),
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None
    assert (report.mismatch.kind, report.mismatch.step) == ("decision", target["step"])
    assert "applied_victim_id differs" in report.mismatch.what
    assert report.compared["decisions"] == 5


def test_a_step_field_and_a_request_outcome_are_compared(sim: Path, tmp_path: Path) -> None:
    vllm = tampered(
        tmp_path,
        "steps",
        lambda f: f.with_columns(
            pl.when(pl.col("step") == 100)
            .then(pl.col("kv_blocks_used") + 1)
            .otherwise(pl.col("kv_blocks_used"))
            .alias("kv_blocks_used")
        ),
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None
    assert (report.mismatch.kind, report.mismatch.step) == ("step", 100)
    assert "kv_blocks_used" in report.mismatch.what
    shutil.rmtree(vllm)
    vllm = tampered(tmp_path, "requests", lambda f: f.with_columns(pl.col("num_preemptions") + 1))
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None and report.mismatch.kind == "request"
    assert "num_preemptions" in report.mismatch.what


def test_a_shorter_run_is_a_length_mismatch(sim: Path, tmp_path: Path) -> None:
    vllm = tampered(tmp_path, "steps", lambda f: f.head(f.height - 1))
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None and report.mismatch.kind == "length"


def test_without_the_scheduled_table_steps_are_still_compared(tmp_path: Path) -> None:
    run = FIXTURES[NAME].sim_run(ROOT, "0.32")
    plain = record_sim(run, tmp_path / "plain")
    report = compare_fidelity(plain, FIXTURE)
    assert report.matched
    assert report.compared["scheduled_rows"] == 0
    assert any("scheduled table" in note for note in report.notes)


def test_recordings_of_different_runs_are_bad_input(tmp_path: Path) -> None:
    fixture = FIXTURES[NAME]
    other_config = {**fixture.config, "num_blocks": 65}
    run = fixture.sim_run(ROOT)
    config = EngineConfig(**other_config, scheduling_policy="priority", vllm_version="0.32")
    bigger = record_sim(replace(run, engine_config=config), tmp_path / "bigger")
    with pytest.raises(FidelityInputError, match="num_blocks 65 vs 64"):
        compare_fidelity(bigger, FIXTURE)
    policy = record_sim(
        replace(run, strategy=resolve_strategy("bidkv"), host_path="typed"), tmp_path / "policy"
    )
    with pytest.raises(FidelityInputError, match="different strategies"):
        compare_fidelity(policy, FIXTURE)
    other = fixture_dir(ROOT, "0.32.0", "synthetic-fcfs")
    with pytest.raises(FidelityInputError, match="scheduling_policy"):
        compare_fidelity(other, FIXTURE)
    count = len(FIXTURE_VERSIONS["0.33.0"])
    with pytest.raises(FidelityInputError, match=f"holds {count} bundles"):
        compare_fidelity(fixture_dir(ROOT, "0.33.0", "x").parent, FIXTURE)
    with pytest.raises(TraceSchemaError):
        compare_fidelity(tmp_path / "missing", FIXTURE)
