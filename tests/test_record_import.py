"""``record import``: the original BidKV's logs become trace bundles that validate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.errors import WorkloadError
from tracekit.recording.importer import detect_import_kind, import_logs
from tracekit.trace import open_trace
from tracekit.trace.validate import validate_trace


def _event(event_id: int, ts: float, ids: list[str], choices: dict[str, str | None]) -> dict:
    # The legacy logger's event layout (docs/trace-format.md, "Imports"), in running order.
    return {
        "event_id": event_id,
        "ts": ts,
        "kv_usage": 0.93,
        "num_candidates": len(ids),
        "candidates": [
            {
                "request_id": rid,
                "completion_ratio": 0.1,
                "tokens_freed": 100 + 10 * i,
                "num_prompt_tokens": 90,
                "num_output_tokens": 10 + 10 * i,
                "num_computed_tokens": 100 + 10 * i,
                "max_output_tokens": 256,
                "num_preemptions": i % 2,
                "utility_bidkv": 12.5,
                "arrival_ms": 1000.0 * i,
                "age_ms": 5.0,
            }
            for i, rid in enumerate(ids)
        ],
        "strategy_choices": choices,
    }


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "preemption_events.jsonl"
    lines = [
        _event(
            1,
            10.0,
            ["a", "b", "c"],
            {"pe-lifo": "c", "largest-first": "c", "pe-sjf": "c", "bidkv": "a"},
        ),
        _event(
            2,
            11.5,
            ["a", "b"],
            {"pe-lifo": "b", "largest-first": "b", "pe-sjf": "b", "bidkv": None},
        ),
    ]
    path.write_text("\n".join(json.dumps(e) for e in lines) + "\n")
    return path


def test_preemption_events_as_builtin_run(events_file: Path, tmp_path: Path) -> None:
    assert detect_import_kind(events_file) == "preemption-events"
    out = import_logs(events_file, tmp_path / "b")
    assert validate_trace(out).status == "ok"
    dataset = open_trace(out)
    decisions = dataset.scan("decisions").collect()
    # pe-lifo is vLLM's built-in: the FCFS tail of the running order, c then b.
    assert decisions["applied_victim_id"].to_list() == ["c", "b"]
    assert decisions["outcome"].to_list() == ["builtin", "builtin"]
    assert decisions["time_s"].to_list() == [10.0, 11.5]
    candidates = dataset.scan("candidates").collect()
    assert candidates["request_id"].to_list() == ["a", "b", "c", "a", "b"]
    assert candidates["arrival_time"].to_list() == [0.0, 1.0, 2.0, 0.0, 1.0]
    manifest = dataset.bundles[0].manifest
    assert "requesting_request_id" in manifest["missing_fields"]["decisions"]


def test_preemption_events_with_the_bidkv_strategy_applied(
    events_file: Path, tmp_path: Path
) -> None:
    out = import_logs(events_file, tmp_path / "b", applied_strategy="bidkv")
    decisions = open_trace(out).scan("decisions").collect()
    # Event 2 logged no bidkv choice, so the built-in victim stands there.
    assert decisions["applied_victim_id"].to_list() == ["a", "b"]
    assert decisions["outcome"].to_list() == ["selected", "builtin"]
    assert decisions["calls"].to_list() == [1, 1]
    assert validate_trace(out).status == "ok"


def test_snapshot_log_lines(tmp_path: Path) -> None:
    snapshot = {
        "timestamp_s": 30.0,
        "policy": "priority",
        "used_utility": True,
        "kv_utilization": 0.96,
        "running_size": 3,
        "selected_victim_id": "r7",
        "default_victim_id": "r8",
        "decision_reason": "strategy",
        "candidates": [
            {
                "rank": 2,
                "request_id": "r9",
                "utility": 144.206,
                "evict_score": 144.206,
                "tokens_freed": 180,
                "completion": 0.2,
                "num_preemptions": 0,
                "arrival_time": 2.0,
                "selected": False,
            },
            {
                "rank": 1,
                "request_id": "r7",
                "utility": 145.454,
                "evict_score": 145.454,
                "tokens_freed": 160,
                "completion": 0.1,
                "num_preemptions": 0,
                "arrival_time": 1.0,
                "selected": True,
            },
        ],
    }
    abstain = {
        **snapshot,
        "timestamp_s": 31.0,
        "decision_reason": "liveness_abstain",
        "selected_victim_id": "r8",
        "used_utility": False,
    }
    log = tmp_path / "engine.log"
    log.write_text(
        "INFO something else\n"
        f"DEBUG [BidKV][scheduler] latest_snapshot={snapshot!r}\n"
        f"DEBUG [BidKV][scheduler] latest_snapshot={abstain!r}\n"
    )
    assert detect_import_kind(log) == "snapshots"
    out = import_logs(log, tmp_path / "b")
    assert validate_trace(out).status == "ok"
    dataset = open_trace(out)
    decisions = dataset.scan("decisions").collect()
    assert decisions["outcome"].to_list() == ["selected", "abstained"]
    assert decisions["applied_victim_id"].to_list() == ["r7", "r8"]
    assert decisions["scheduling_policy"].to_list() == ["priority", "priority"]
    # Rank order first, then the default victim the top-k did not include.
    first = dataset.scan("candidates").filter(seq=0).collect()
    assert first["request_id"].to_list() == ["r7", "r9", "r8"]
    assert dataset.bundles[0].manifest["partial_candidates"] is True


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"event_id": 1, "ts": 1.0, "kv_usage": 0.9, "strategy_choices": {}}\n',
            "field 'candidates' is missing",
        ),
        ('{"ts": 1.0}\n', "neither a preemption-event log"),
        (
            '{"event_id": 1, "strategy_choices": {}, "candidates": [{"request_id": "a", '
            '"num_computed_tokens": -4}], "ts": 1, "kv_usage": 0.9}\n',
            "expected a count >= 0",
        ),
        ('{"strategy_choices": {}, "ts": 1\n', "cannot parse"),
    ],
)
def test_bad_logs_are_one_line_errors_and_leave_no_output(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(WorkloadError, match=message) as info:
        import_logs(path, tmp_path / "out")
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.jsonl"]


def test_unknown_applied_strategy(events_file: Path, tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="use one of pe-lifo"):
        import_logs(events_file, tmp_path / "b", applied_strategy="magic")


def test_a_json_list_of_other_things_is_one_line(tmp_path: Path) -> None:
    """A list whose items are not objects raised a TypeError (found by the bad-input suite)."""
    log = tmp_path / "log.json"
    log.write_text("[1, 2]\n", "utf-8")
    with pytest.raises(WorkloadError, match=r"item 1 of the JSON list is int, expected a JSON"):
        import_logs(log, tmp_path / "b")
    assert not (tmp_path / "b").exists()
