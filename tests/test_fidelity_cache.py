"""``tracekit fidelity`` compares prefix-cache hits: per step, per admission and per request."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.real_engine.fidelity import compare_fidelity
from tracekit.recording.sim import record_sim
from tracekit.vllm.fixtures import FIXTURES, fixture_dir

ROOT = Path(__file__).resolve().parents[1]
NAME = "sessions-apc-priority"
FIXTURE = fixture_dir(ROOT, "0.32.0", NAME)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = FIXTURES[NAME].sim_run(ROOT, "0.32")
    return record_sim(run, tmp_path_factory.mktemp("sim") / "b", record_scheduled=True)


def tampered(tmp_path: Path, table: str, change) -> Path:  # type: ignore[no-untyped-def]
    copy = tmp_path / "vllm"
    shutil.copytree(FIXTURE, copy)
    frame = pl.read_parquet(copy / f"{table}.parquet")
    change(frame).write_parquet(copy / f"{table}.parquet")
    return copy


def shifted(frame: pl.DataFrame, column: str, delta: int, where: pl.Expr) -> pl.DataFrame:
    """``frame`` with ``delta`` added to ``column`` in the rows ``where`` selects."""
    col = pl.col(column)
    return frame.with_columns(pl.when(where).then(col + delta).otherwise(col).alias(column))


def fidelity(a: Path, b: Path):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["fidelity", str(a), str(b)], catch_exceptions=False)


def test_the_untouched_pair_matches_cache_hits_included(sim: Path) -> None:
    result = fidelity(sim, FIXTURE)
    assert result.exit_code == 0, result.output
    report = compare_fidelity(sim, FIXTURE)
    assert report.matched and not report.notes
    assert report.compared["cache_hit_steps"] == report.compared["steps"] > 0
    admissions = pl.read_parquet(FIXTURE / "admissions.parquet")
    assert report.compared["admissions"] == admissions.height
    assert admissions["cached_tokens"].sum() > 0


def test_one_changed_admission_hit_is_caught(sim: Path, tmp_path: Path) -> None:
    admissions = pl.read_parquet(FIXTURE / "admissions.parquet")
    target = admissions.filter(pl.col("cached_tokens") > 0).row(3, named=True)
    hit = (pl.col("request_id") == target["request_id"]) & (
        pl.col("admission") == target["admission"]
    )
    vllm = tampered(
        tmp_path,
        "admissions",
        lambda f: shifted(f, "cached_tokens", 16, hit),
    )
    result = fidelity(sim, vllm)
    assert result.exit_code == 1
    assert f"MISMATCH at step {target['step']} (cache)" in result.output
    assert "prefix-cache hits differ" in result.output
    expected = target["cached_tokens"]
    assert f"{target['request_id']} admission {target['admission']}: {expected} vs " in (
        result.output
    )
    assert "admissions (cached)" in result.output


def test_one_changed_step_hit_and_request_hit_are_caught(sim: Path, tmp_path: Path) -> None:
    steps = pl.read_parquet(FIXTURE / "steps.parquet")
    step = steps.filter(pl.col("cache_hit_tokens") > 0)["step"][2]
    vllm = tampered(
        tmp_path,
        "steps",
        lambda f: shifted(f, "cache_hit_tokens", -16, pl.col("step") == step),
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None and report.exit_code == 1
    assert (report.mismatch.kind, report.mismatch.step) == ("cache", step)
    assert "steps.cache_hit_tokens" in report.mismatch.what
    shutil.rmtree(vllm)
    vllm = tampered(
        tmp_path, "requests", lambda f: f.with_columns(pl.col("resume_cached_tokens") + 1)
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None and report.mismatch.kind == "cache"
    assert "resume_cached_tokens" in report.mismatch.what


def test_a_bundle_without_hits_skips_them_with_a_note(sim: Path, tmp_path: Path) -> None:
    vllm = tampered(
        tmp_path,
        "steps",
        lambda f: f.with_columns(pl.lit(None, pl.Int64).alias("cache_hit_tokens")),
    )
    report = compare_fidelity(sim, vllm)
    assert report.matched
    assert "cache_hit_steps" not in report.compared
    assert any("prefix-cache hits not compared" in note for note in report.notes)


def test_a_changed_eviction_count_is_caught(sim: Path, tmp_path: Path) -> None:
    steps = pl.read_parquet(FIXTURE / "steps.parquet")
    # The real recorder counted evictions at vLLM's BlockPool (no null), and some steps evict.
    assert steps["cached_blocks_evicted"].null_count() == 0
    step = steps.filter(pl.col("cached_blocks_evicted") > 0)["step"][0]
    vllm = tampered(
        tmp_path,
        "steps",
        lambda f: shifted(f, "cached_blocks_evicted", 1, pl.col("step") == step),
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None
    assert (report.mismatch.kind, report.mismatch.step) == ("cache", step)
    assert "cached_blocks_evicted" in report.mismatch.what


def test_changed_freed_blocks_and_candidate_blocks_are_caught(sim: Path, tmp_path: Path) -> None:
    decisions = pl.read_parquet(FIXTURE / "decisions.parquet").sort("seq")
    assert decisions.height > 0 and decisions["freed_blocks"].null_count() == 0
    # Shared prefix blocks: some candidate frees fewer blocks than it holds.
    candidates = pl.read_parquet(FIXTURE / "candidates.parquet")
    assert (candidates["num_blocks_exclusive"] < candidates["num_blocks_held"]).any()
    seq, step = decisions.row(0, named=True)["seq"], decisions.row(0, named=True)["step"]
    vllm = tampered(
        tmp_path,
        "decisions",
        # One more block freed, and its tokens (freed_tokens = freed_blocks * block_size).
        lambda f: shifted(
            shifted(f, "freed_blocks", 1, pl.col("seq") == seq),
            "freed_tokens",
            16,
            pl.col("seq") == seq,
        ),
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None and report.mismatch.step == step
    assert "freed_blocks differs" in report.mismatch.what
    shutil.rmtree(vllm)
    vllm = tampered(
        tmp_path,
        "candidates",
        lambda f: shifted(
            f, "num_blocks_exclusive", -1, (pl.col("seq") == seq) & (pl.col("position") == 0)
        ),
    )
    report = compare_fidelity(sim, vllm)
    assert report.mismatch is not None and report.mismatch.step == step
    assert "candidate_blocks differs" in report.mismatch.what
