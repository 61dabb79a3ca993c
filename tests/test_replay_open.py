"""Open-mode replay: outputs, agreement counting, determinism, atomic writes and bad inputs.

The small hand-written bundles come from ``replay_helpers.py``, shared with ``test_replay_open_*``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal
from replay_helpers import HAND, cand, column, ctx, read_rows, write_trace

from tracekit.errors import ConfigError, TraceSchemaError
from tracekit.replay import OUTPUT_FILES, replay_open, summarize
from tracekit.replay.contexts import build_contexts, iter_run_chunks
from tracekit.strategies import ALL_STRATEGIES, parse_strategy_list, resolve_strategy
from tracekit.trace import open_trace


@pytest.fixture
def hand_trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "trace", HAND)


def test_agreement_counted_on_a_hand_built_trace(hand_trace: Path, tmp_path: Path) -> None:
    specs = parse_strategy_list("builtin,largest-first,pe")
    result = replay_open(hand_trace, specs, tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    assert rows.height == 9
    # Rows are ordered by seq, then strategy in the order given.
    assert rows["seq"].to_list() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert rows["strategy"].to_list()[:3] == ["builtin", "largest-first", "pe"]
    assert column(rows, "largest-first", "applied_victim_id") == ["b", "a", "z"]
    assert column(rows, "largest-first", "agrees_with_recorded") == [False, False, True]
    assert column(rows, "largest-first", "picked_requester") == [False, True, False]
    assert column(rows, "largest-first", "victim_tokens_freed") == [300, 400, 30]
    assert column(rows, "builtin", "recorded_tokens_freed") == [200, 50, 30]
    assert column(rows, "builtin", "outcome") == ["builtin"] * 3
    assert column(rows, "builtin", "raw_result_type") == ["not-called"] * 3
    assert column(rows, "pe", "raw_result") == ["c", "b", "z"]

    summary = {r["strategy"]: r for r in result.summary.iter_rows(named=True)}
    assert summary["builtin"]["agreement_rate"] == 1.0
    assert summary["builtin"]["calls"] == 0
    assert summary["largest-first"]["agreements"] == 1
    assert summary["largest-first"]["agreement_rate"] == pytest.approx(1 / 3)
    assert summary["largest-first"]["calls"] == summary["largest-first"]["selections"] == 3
    assert summary["largest-first"]["picked_requester"] == 1
    assert summary["largest-first"]["tokens_freed"] == 730
    assert summary["largest-first"]["recorded_tokens_freed"] == 280
    assert summary["largest-first"]["tokens_ratio"] == pytest.approx(730 / 280)
    assert summary["pe"]["tokens_ratio"] == 1.0
    # Ties in count are broken by run and request id.
    assert [v["request_id"] for v in summary["largest-first"]["top_victims"]] == ["a", "b", "z"]
    assert summary["largest-first"]["top_victims"][0] == {
        "run_id": "run-a",
        "request_id": "a",
        "count": 1,
    }

    agreement = {(r[0], r[1]): r[2] for r in result.agreement.iter_rows()}
    assert agreement[("builtin", "pe")] == 1.0
    assert agreement[("builtin", "largest-first")] == pytest.approx(1 / 3)
    assert agreement[("largest-first", "builtin")] == pytest.approx(1 / 3)
    assert agreement[("pe", "pe")] == 1.0
    assert result.agreement.height == 9


def test_outputs_are_written_and_described(hand_trace: Path, tmp_path: Path) -> None:
    result = replay_open(hand_trace, parse_strategy_list("builtin,bidkv"), tmp_path / "out")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    assert_frame_equal(pl.read_parquet(out / "summary.parquet"), result.summary, check_exact=True)
    agreement = pl.read_parquet(out / "agreement.parquet")
    assert_frame_equal(agreement, result.agreement, check_exact=True)
    assert (out / "summary.txt").read_text() == result.text
    assert "pairwise agreement" in result.text
    summary = json.loads((out / "summary.json").read_text())
    assert [s["strategy"] for s in summary["strategies"]] == ["builtin", "bidkv"]
    assert len(summary["agreement"]) == 4
    manifest = json.loads((out / "replay.json").read_text())
    assert manifest["mode"] == "open"
    assert manifest["decisions"] == 3
    assert manifest["evaluations"] == 6
    assert manifest["runs"][0]["run_id"] == "run-a"
    assert manifest["runs"][0]["fast_path"] == ["builtin", "bidkv"]
    assert manifest["strategies"][1]["settings"]["utility_strategy"] == "bidkv"
    assert result.decisions == 3 and result.evaluations == 6
    # Readers see plain strings (the writer's dictionary encoding is not exposed).
    schema = pq.read_schema(out / "replay_decisions.parquet")
    assert str(schema.field("outcome").type) == "string"
    assert schema.names == [
        "run_id",
        "seq",
        "strategy",
        "raw_result",
        "raw_result_type",
        "outcome",
        "applied_victim_id",
        "decision_reason",
        "victim_tokens_freed",
        "recorded_tokens_freed",
        "agrees_with_recorded",
        "picked_requester",
        "victim_tokens_freed_actual",
        "recorded_tokens_freed_actual",
    ]


def test_summarize_of_the_written_table_equals_the_streamed_summary(
    hand_trace: Path, tmp_path: Path
) -> None:
    result = replay_open(hand_trace, parse_strategy_list("all"), tmp_path / "out", chunk_rows=2)
    summary, agreement = summarize(read_rows(tmp_path / "out"))
    assert_frame_equal(summary, result.summary, check_exact=True)
    assert_frame_equal(agreement, result.agreement, check_exact=True)


def test_outputs_are_byte_identical_for_the_same_inputs(hand_trace: Path, tmp_path: Path) -> None:
    specs = parse_strategy_list("all")
    replay_open(hand_trace, specs, tmp_path / "one")
    replay_open(hand_trace, specs, tmp_path / "two")
    for name in OUTPUT_FILES:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_chunk_size_changes_nothing_but_row_groups(hand_trace: Path, tmp_path: Path) -> None:
    specs = parse_strategy_list("all")
    replay_open(hand_trace, specs, tmp_path / "one", chunk_rows=1)
    replay_open(hand_trace, specs, tmp_path / "big", chunk_rows=1000)
    assert_frame_equal(read_rows(tmp_path / "one"), read_rows(tmp_path / "big"), check_exact=True)
    assert pq.ParquetFile(tmp_path / "one" / "replay_decisions.parquet").num_row_groups == 3


def test_limit_replays_a_prefix_of_the_dataset(tmp_path: Path) -> None:
    write_trace(tmp_path / "data" / "a", HAND, run_id="run-a")
    write_trace(tmp_path / "data" / "b", HAND, run_id="run-b")
    result = replay_open(tmp_path / "data", [resolve_strategy("pe")], tmp_path / "out", limit=4)
    rows = read_rows(tmp_path / "out")
    assert result.decisions == 4
    assert rows.select("run_id", "seq").rows() == [
        ("run-a", 0),
        ("run-a", 1),
        ("run-a", 2),
        ("run-b", 0),
    ]
    assert (
        replay_open(tmp_path / "data", [resolve_strategy("pe")], tmp_path / "z", limit=0).decisions
        == 0
    )


def test_null_requester_becomes_the_empty_string(tmp_path: Path) -> None:
    # Recorded with no requester: the typed context gets "", so bidkv's cascade rule never
    # fires (here it would: "b" frees 90% of the top's tokens) and no victim is the requester.
    trace = write_trace(tmp_path / "t", [ctx([cand("a", 1000), cand("b", 900, arrival=1.0)])])
    bundle = open_trace(trace).bundles[0]
    (chunk,) = iter_run_chunks(bundle, 10)
    (context,) = build_contexts(chunk)
    assert context.requesting_request_id == ""
    assert context.builtin_victim_id == "b"
    assert context.candidates == (cand("a", 1000), cand("b", 900, arrival=1.0))
    replay_open(trace, [resolve_strategy("bidkv")], tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    assert rows["outcome"].to_list() == ["selected"]
    assert rows["applied_victim_id"].to_list() == ["a"]
    assert rows["picked_requester"].to_list() == [False]


def test_unknown_strategy_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown"):
        parse_strategy_list("bidkv,no-such-strategy")
    with pytest.raises(ConfigError, match="cannot load"):
        resolve_strategy("no_such_module_xyz:Policy")


def test_a_folder_without_bundles_is_a_trace_schema_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceSchemaError, match="no trace bundle"):
        replay_open(tmp_path / "empty", parse_strategy_list("all"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("labels", "message"),
    [(["x", "x"], "more than once"), (["x"], "label")],
)
def test_bad_labels_are_config_errors(
    hand_trace: Path, tmp_path: Path, labels: list[str], message: str
) -> None:
    specs = parse_strategy_list("pe,builtin")
    with pytest.raises(ConfigError, match=message):
        replay_open(hand_trace, specs, tmp_path / "out", labels=labels)


def test_no_strategy_and_bad_numbers_are_config_errors(hand_trace: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no strategy"):
        replay_open(hand_trace, [], tmp_path / "out")
    with pytest.raises(ConfigError, match="workers"):
        replay_open(hand_trace, parse_strategy_list("pe"), tmp_path / "out", workers=0)
    with pytest.raises(ConfigError, match="chunk_rows"):
        replay_open(hand_trace, parse_strategy_list("pe"), tmp_path / "out", chunk_rows=0)


def test_labels_name_two_configurations_of_one_strategy(hand_trace: Path, tmp_path: Path) -> None:
    specs = [
        resolve_strategy("bidkv"),
        resolve_strategy("bidkv", {"utility_cascade_gain_ratio": 10.0}),
    ]
    result = replay_open(hand_trace, specs, tmp_path / "out", labels=["bidkv", "bidkv-r10"])
    assert result.summary["strategy"].to_list() == ["bidkv", "bidkv-r10"]


def test_an_existing_output_folder_is_refused_unless_overwritten(
    hand_trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        replay_open(hand_trace, parse_strategy_list("pe"), out)
    # overwrite replaces only a folder replay wrote (its marker file): not this one.
    with pytest.raises(ConfigError, match="not a replay folder written by tracekit replay"):
        replay_open(hand_trace, parse_strategy_list("pe"), out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    mine = tmp_path / "mine"
    replay_open(hand_trace, parse_strategy_list("pe"), mine)
    replay_open(hand_trace, parse_strategy_list("pe,bidkv"), mine, overwrite=True)
    assert sorted(p.name for p in mine.iterdir()) == sorted(OUTPUT_FILES)
    assert "bidkv" in (mine / "summary.txt").read_text("utf-8")


def test_an_error_mid_replay_leaves_no_output(tmp_path: Path) -> None:
    # The second run's candidates do not match its decisions: found only when replayed.
    write_trace(tmp_path / "data" / "a", HAND, run_id="run-a")
    broken = write_trace(tmp_path / "data" / "b", HAND, run_id="run-b")
    table = pl.read_parquet(broken / "candidates.parquet").filter(pl.col("seq") != 1)
    table.write_parquet(broken / "candidates.parquet")
    with pytest.raises(TraceSchemaError, match="decision seq 1 has 0 candidate"):
        replay_open(tmp_path / "data", parse_strategy_list("all"), tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_a_bundle_without_candidates_is_refused(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t", HAND)
    (trace / "candidates.parquet").unlink()
    with pytest.raises(TraceSchemaError, match="candidates"):
        replay_open(trace, parse_strategy_list("pe"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_caveats_of_imported_bundles_are_reported(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t", HAND)
    manifest = json.loads((trace / "manifest.json").read_text())
    manifest["missing_fields"] = {"decisions": ["requesting_request_id"]}
    (trace / "manifest.json").write_text(json.dumps(manifest))
    replay_open(trace, parse_strategy_list("pe"), tmp_path / "out")
    (run,) = json.loads((tmp_path / "out" / "replay.json").read_text())["runs"]
    assert run["caveats"] == {"missing_fields": {"decisions": ["requesting_request_id"]}}


def test_progress_reports_decisions(hand_trace: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    replay_open(
        hand_trace,
        parse_strategy_list("pe"),
        tmp_path / "out",
        chunk_rows=2,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(2, 3), (3, 3)]


def test_two_workers_write_what_one_writes(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write_trace(tmp_path / "data" / name, HAND, run_id=f"run-{name}")
    specs = parse_strategy_list("all")
    one = replay_open(tmp_path / "data", specs, tmp_path / "one")
    two = replay_open(tmp_path / "data", specs, tmp_path / "two", workers=2)
    for name in ("replay_decisions.parquet", "summary.parquet", "agreement.parquet"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert one.text == two.text


def test_a_trace_without_decisions_gives_an_empty_summary(tmp_path: Path) -> None:
    result = replay_open(
        write_trace(tmp_path / "t", []), parse_strategy_list("all"), tmp_path / "o"
    )
    assert result.decisions == 0
    assert read_rows(tmp_path / "o").height == 0
    assert result.summary["decisions"].to_list() == [0] * len(ALL_STRATEGIES)
    assert result.summary["agreement_rate"].null_count() == len(ALL_STRATEGIES)
    assert result.agreement["agree_rate"].null_count() == len(ALL_STRATEGIES) ** 2
