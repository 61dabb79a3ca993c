"""Trace schema v2: the prefix-cache columns, checked against a run worked out by hand.

The run (block size 4, 7 usable blocks, vLLM 0.32 FCFS, prefix caching on, synchronous):

* A and B arrive at 0 with 10-token prompts whose first 8 tokens are the same content (one
  content id over 8 tokens: two full shared blocks); A stops after 12 output tokens, B after 8.
* Step 0: A is admitted with no hit (3 blocks; blocks 0-1 get cached). B hits A's two cached
  blocks (8 tokens, capped below its 10 tokens) and takes 1 new block. Step hits: 8.
* Each step after adds one token to each. At step 7 both need a fifth block and one is free:
  A (first in the queue) takes it, B's allocation fails and FCFS preempts the tail, B itself.
  Candidates: A holds 5 blocks, 3 only its own (blocks 0-1 are shared, reference count 2);
  B holds 4, 2 its own. Freed: 2 blocks = 8 tokens, although B had 16 computed tokens (the
  token-count estimate). B's 16 computed tokens are thrown away (recomputed_tokens 16); its two
  own blocks were full, so they stay cached in the free queue, B's last block at the head.
* Steps 8-10: B (17 tokens) would hit 4 blocks, 2 of them free (evictable), and needs 1 more for
  its whole sequence: 1 + 2 > 2 free, so it waits.
* Step 11: A needs its sixth block and takes the head of the free queue: B's last block, now
  evicted (1). B then hits 3 blocks, 1 evictable, needs 2 more: 2 + 1 > 1 free, waits. A
  finishes (12 outputs).
* Step 12: B hits its first 3 blocks (12 tokens: the resume's hit), takes 2 new blocks (the
  one unhashed free block, then the head of the hashed queue: A's block 4, evicted: 1), computes
  the last 5 tokens and samples its eighth output. Step hits: 12.

So requests: A cached 0 at first schedule, no resume; B cached 8, resume 12 (of its 16 recomputed
tokens, 12 came from the cache and 4 were truly recomputed). Steps: hits 8 at step 0 and 12 at
step 12 (sum 20 = 0 + 8 + 12); evictions 1 at steps 11 and 12.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from trace_helpers import (
    HAND_CACHE_CONFIG,
    engine_config,
    hand_cache_requests,
    record_engine_bundle,
)

from tracekit.cli import cli
from tracekit.engine import EngineRequest
from tracekit.trace.bundle import open_trace
from tracekit.trace.validate import validate_trace


@pytest.fixture(scope="module")
def hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("v2") / "bundle"
    return record_engine_bundle(out, engine_config(**HAND_CACHE_CONFIG), hand_cache_requests())


def test_hand_worked_requests(hand: Path) -> None:
    requests = open_trace(hand).scan("requests").sort("request_id").collect()
    got = requests.select(
        "request_id",
        "num_preemptions",
        "recomputed_tokens",
        "num_cached_tokens",
        "resume_cached_tokens",
        "output_tokens",
    ).rows()
    assert got == [("A", 0, 0, 0, 0, 12), ("B", 1, 16, 8, 12, 8)]


def test_hand_worked_decision_and_candidates(hand: Path) -> None:
    data = open_trace(hand)
    decisions = data.scan("decisions").collect()
    assert decisions.select(
        "seq", "step", "applied_victim_id", "freed_blocks", "freed_tokens"
    ).rows() == [(0, 7, "B", 2, 8)]
    candidates = data.scan("candidates").sort("position").collect()
    assert candidates.select(
        "request_id", "num_computed_tokens", "num_blocks_held", "num_blocks_exclusive"
    ).rows() == [("A", 16, 5, 3), ("B", 16, 4, 2)]


def test_hand_worked_steps(hand: Path) -> None:
    steps = open_trace(hand).scan("steps").sort("step").collect()
    assert steps.height == 13
    hits = dict(steps.select("step", "cache_hit_tokens").rows())
    evicted = dict(steps.select("step", "cached_blocks_evicted").rows())
    assert {s: h for s, h in hits.items() if h} == {0: 8, 12: 12}
    assert {s: e for s, e in evicted.items() if e} == {11: 1, 12: 1}


def test_hand_worked_bundle_is_valid(hand: Path) -> None:
    manifest = json.loads((hand / "manifest.json").read_text())
    assert manifest["schema_version"] == 3  # (v2's prefix-cache columns, and v3's ignore_eos)
    report = validate_trace(hand)
    assert report.exit_code == 0, report.bundles[0].problems


def test_prefix_caching_off_is_well_defined(tmp_path: Path) -> None:
    """Without prefix caching nothing hits and every held block is the holder's own.

    Same run, caching off: step 0 admits A (3 blocks) and B (3 blocks: no sharing), 1 free. At
    step 3 both need a fourth block (13 tokens): A takes the last, B preempts itself and frees
    its 3 blocks (12 tokens of capacity, its 12 computed tokens).
    """
    config = engine_config(**{**HAND_CACHE_CONFIG, "enable_prefix_caching": False})
    # C's 30-token prompt is over max_model_len (28): rejected, never scheduled.
    rejected = EngineRequest("C", 0.0, 30, 1, 1)
    out = record_engine_bundle(tmp_path / "off", config, [*hand_cache_requests(), rejected])
    data = open_trace(out)
    steps = data.scan("steps").collect()
    assert steps.get_column("cache_hit_tokens").to_list() == [0] * steps.height
    assert steps.get_column("cached_blocks_evicted").to_list() == [0] * steps.height
    candidates = data.scan("candidates").collect()
    assert (candidates["num_blocks_held"] == candidates["num_blocks_exclusive"]).all()
    first = data.scan("decisions").collect().row(0, named=True)
    assert (first["step"], first["applied_victim_id"], first["freed_blocks"]) == (3, "B", 3)
    assert first["freed_tokens"] == 12
    requests = data.scan("requests").sort("request_id").collect()
    assert requests.get_column("num_cached_tokens").to_list() == [0, 0, None]
    assert requests.get_column("resume_cached_tokens").to_list() == [0, 0, 0]
    assert validate_trace(out).exit_code == 0
    from tracekit.trace.inspect import inspect_trace

    (summary,) = inspect_trace(out)
    assert summary["cached_tokens_first_schedule"] == 0
    assert summary["truly_recomputed_tokens"] == summary["recomputed_tokens"] == 12


def test_validate_flags_a_freed_count_that_is_not_the_victims(hand: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(hand, bad)
    path = bad / "decisions.parquet"
    frame = pl.read_parquet(path).with_columns(freed_blocks=pl.lit(4, pl.Int64))
    frame.write_parquet(path)
    report = validate_trace(bad)
    assert report.exit_code == 1
    problems = "\n".join(report.bundles[0].problems)
    assert "decisions.freed_blocks is not the applied victim's candidates.num_blocks_exclusive" in (
        problems
    )
    assert "decisions.freed_tokens is not freed_blocks * engine_config.block_size (4)" in problems


def test_validate_flags_hits_that_do_not_add_up(hand: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(hand, bad)
    path = bad / "requests.parquet"
    frame = pl.read_parquet(path).with_columns(resume_cached_tokens=pl.lit(0, pl.Int64))
    frame.write_parquet(path)
    report = validate_trace(bad)
    assert report.exit_code == 1
    assert any("sum to 8, steps.cache_hit_tokens to 20" in p for p in report.bundles[0].problems), (
        report.bundles[0].problems
    )


def test_cli_validate_exit_codes(hand: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(hand)])
    assert result.exit_code == 0, result.output


V1_FIXTURE = Path(__file__).resolve().parents[1] / "traces/vllm-fixtures/vllm-0.32.0/azure-fcfs"


def test_a_committed_v1_bundle_still_validates_and_reads_with_null_cache_columns() -> None:
    manifest = json.loads((V1_FIXTURE / "manifest.json").read_text())
    assert manifest["schema_version"] == 1
    assert validate_trace(V1_FIXTURE).exit_code == 0
    data = open_trace(V1_FIXTURE)
    candidates = data.scan("candidates").collect()
    assert candidates.height > 0
    assert candidates.get_column("num_blocks_exclusive").null_count() == candidates.height
    steps = data.scan("steps").collect()
    assert steps.get_column("cache_hit_tokens").null_count() == steps.height


def test_a_dataset_mixing_v1_and_v2_scans_as_v2(hand: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(V1_FIXTURE, tmp_path / "a-v1")
    shutil.copytree(hand, tmp_path / "b-v2")
    requests = open_trace(tmp_path).scan("requests").collect()
    v1_rows = json.loads((V1_FIXTURE / "manifest.json").read_text())["tables"]["requests"]["rows"]
    assert requests.height == v1_rows + 2
    # Bundle order is kept: the v1 rows (null hits) first, then the hand-worked run's.
    assert requests.get_column("num_cached_tokens").to_list()[v1_rows:] == [0, 8]
    assert requests.get_column("num_cached_tokens").null_count() == v1_rows
    assert validate_trace(tmp_path).exit_code == 0


def test_a_v1_bundle_with_a_v2_column_is_malformed(tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "v1"
    shutil.copytree(V1_FIXTURE, bad)
    path = bad / "steps.parquet"
    pl.read_parquet(path).with_columns(cache_hit_tokens=pl.lit(0, pl.Int64)).write_parquet(path)
    report = validate_trace(bad)
    assert report.exit_code == 2
    assert report.bundles[0].problems == [
        f"{path}: column(s) 'cache_hit_tokens' are not in table 'steps' of trace schema v1; "
        "rewrite the file with only the schema's columns or re-record the bundle"
    ]


def test_an_unknown_schema_version_is_one_line_exit_2(hand: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "v4"
    shutil.copytree(hand, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["schema_version"] = 4
    (bad / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        f"Error: {bad / 'manifest.json'}: field 'schema_version' is 4, this tracekit reads "
        "versions 1, 2 and 3; use the tracekit version that wrote it or re-record"
    ]


def test_open_replay_sets_the_estimate_against_the_actual_tokens_freed(
    hand: Path, tmp_path: Path
) -> None:
    """The one decision: builtin preempts B, whose 16 computed tokens suggest 16 freed tokens;
    its 2 exclusive blocks free 8. A strategy that picks A would estimate 16 and free 12."""
    from tracekit.replay import replay_open
    from tracekit.strategies import parse_strategy_list

    result = replay_open(hand, parse_strategy_list("builtin"), tmp_path / "out")
    row = result.summary.row(0, named=True)
    assert row["freed_known_decisions"] == 1
    assert (row["estimated_tokens_freed"], row["actual_tokens_freed"]) == (16, 8)
    assert row["freed_actual_ratio"] == 0.5
    assert "8/16 (0.500)" in result.text
    rows = pl.read_parquet(tmp_path / "out" / "replay_decisions.parquet")
    assert rows.select("victim_tokens_freed", "victim_tokens_freed_actual").row(0) == (16, 8)
    assert rows.get_column("recorded_tokens_freed_actual").to_list() == [8]


def test_open_replay_of_a_v1_bundle_has_no_actual(tmp_path: Path) -> None:
    from tracekit.replay import replay_open
    from tracekit.strategies import parse_strategy_list

    result = replay_open(V1_FIXTURE, parse_strategy_list("builtin"), tmp_path / "out")
    row = result.summary.row(0, named=True)
    assert row["freed_known_decisions"] == 0
    assert row["actual_tokens_freed"] is None and row["freed_actual_ratio"] is None
    assert row["decisions"] == 21


def test_inspect_splits_recomputed_tokens_into_cache_hits_and_true_recompute(hand: Path) -> None:
    """B threw away 16 tokens, 12 came back from the cache: 4 truly recomputed. Hit rate: the
    admissions asked for 10 + 10 + 17 = 37 tokens, 20 of them hits (vLLM hits / queries)."""
    from tracekit.trace.inspect import inspect_trace, render_inspection

    (summary,) = inspect_trace(hand)
    assert summary["recomputed_tokens"] == 16
    assert summary["recomputed_from_cache_tokens"] == 12
    assert summary["truly_recomputed_tokens"] == 4
    assert summary["cached_tokens_first_schedule"] == 8
    assert (summary["cache_hit_tokens"], summary["cached_blocks_evicted"]) == (20, 2)
    assert summary["cache_hit_rate"] == pytest.approx(20 / 37)
    assert "truly_recomputed_tokens" in render_inspection([summary])


def test_inspect_of_a_v1_bundle_leaves_the_cache_figures_out() -> None:
    from tracekit.trace.inspect import CACHE_KEYS, inspect_trace

    (summary,) = inspect_trace(V1_FIXTURE)
    assert summary["recomputed_tokens"] > 0
    assert not set(CACHE_KEYS) & set(summary)


def test_open_replay_splits_the_recorded_recompute(hand: Path, tmp_path: Path) -> None:
    from tracekit.replay import replay_open
    from tracekit.strategies import parse_strategy_list

    result = replay_open(hand, parse_strategy_list("builtin"), tmp_path / "out")
    assert "  cache-hand: 16 = 12 + 4" in result.text
    described = json.loads((tmp_path / "out" / "replay.json").read_text())
    assert described["recorded_recompute"] == [
        {
            "run_id": "cache-hand",
            "recomputed_tokens": 16,
            "recomputed_from_cache_tokens": 12,
            "truly_recomputed_tokens": 4,
        }
    ]


def test_query_reads_v1_and_v2_bundles_together(hand: Path, tmp_path: Path) -> None:
    import shutil

    from tracekit.trace.query import run_query

    shutil.copytree(V1_FIXTURE, tmp_path / "a-v1")
    shutil.copytree(hand, tmp_path / "b-v2")
    frame = run_query(
        tmp_path,
        "SELECT count(*) AS steps, count(cache_hit_tokens) AS known, "
        "sum(cache_hit_tokens) AS hits FROM steps",
    )
    v1_steps = json.loads((V1_FIXTURE / "manifest.json").read_text())["tables"]["steps"]["rows"]
    assert frame.row(0) == (v1_steps + 13, 13, 20)


def test_hand_worked_admissions(hand: Path) -> None:
    """A's first schedule (no hit), B's (8 tokens) at step 0, B's resume (12) at step 12."""
    admissions = open_trace(hand).scan("admissions").sort("request_id", "admission").collect()
    assert admissions.select("request_id", "admission", "step", "cached_tokens").rows() == [
        ("A", 0, 0, 0),
        ("B", 0, 0, 8),
        ("B", 1, 12, 12),
    ]


def test_validate_flags_admissions_that_do_not_add_up(hand: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(hand, bad)
    path = bad / "admissions.parquet"
    pl.read_parquet(path).with_columns(cached_tokens=pl.lit(1, pl.Int64)).write_parquet(path)
    report = validate_trace(bad)
    assert report.exit_code == 1
    assert any(
        "admissions.cached_tokens sum to 3, steps.cache_hit_tokens to 20" in p
        for p in report.bundles[0].problems
    ), report.bundles[0].problems
