"""The real-SGLang recorder's project side, without SGLang: messages, token ids, bundle rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tracekit.engine.clock import StepsClock
from tracekit.sglang import driver
from tracekit.sglang.protocol import (
    PROTOCOL_VERSION,
    SglangConfig,
    scenario_message,
    step_from_wire,
)
from tracekit.sglang.record import STEPS_FILE, _write_bundle, bundle_rows, read_sglang_steps
from tracekit.trace.schema import trace_schema
from tracekit.trace.validate import validate_trace

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SglangConfig(kv_tokens=300, max_context_len=400, step_s=0.5)
REQUESTS = [
    ("a", 0.0, 10, 3, 3, 0, None),
    ("b", 0.0, 16, 2, 4, 0, None),
    ("c", 0.0, 12, 2, 2, 0, None),
]


def _step(step: int, mode: str, reqs: list, **extra: object) -> dict:
    message = {
        "kind": "step",
        "run": 0,
        "step": step,
        "arrived": [],
        "free_tokens": 200,
        "evictable_tokens": 0,
        "running": [],
        "mode": mode,
        "reqs": reqs,
        "retractions": [],
        "admission": None,
        "new_token_ratio": 0.7,
        "waiting": [],
        "chunked": None,
        "finished": [],
    }
    message.update(extra)
    return message


# A retraction of two victims from a batch of three, as the driver reports it: b goes first
# (equal outputs, longest prompt), then c; both are appended to the waiting queue.
RETRACTION = {
    "candidates": [["a", 10, 2, 0, 0], ["b", 16, 2, 0, 0], ["c", 12, 2, 0, 0]],
    "keep_order": ["a", "c", "b"],
    "victims": ["b", "c"],
    "aborted": [],
    "kept": ["a"],
    "new_token_ratio_before": 0.69,
    "new_token_ratio_after": 0.35,
    "free_tokens_before": 3,
    "tokens_gained": 30,
    "waiting_positions": [0, 1],
    "waiting_len": 2,
}
MESSAGES = [
    _step(
        0,
        "prefill",
        [["a", 10, 0, 0, 0], ["b", 16, 0, 0, 0], ["c", 12, 0, 0, 0]],
        arrived=["a", "b", "c"],
    ),
    _step(
        1,
        "decode",
        [["a", 1, 0, 1, 0], ["b", 1, 0, 1, 0], ["c", 1, 0, 1, 0]],
        running=["a", "b", "c"],
    ),
    _step(
        2,
        "decode",
        [["a", 1, 0, 2, 0]],
        running=["a"],
        retractions=[RETRACTION],
        waiting=["b", "c"],
        new_token_ratio=0.35,
        finished=["a"],
    ),
    {
        "kind": "request",
        "run": 0,
        "request_id": "a",
        "arrival_step": 0,
        "first_step": 0,
        "first_token_step": 0,
        "finish_step": 2,
        "output_tokens": 3,
        "finish_reason": "FINISH_MATCHED_TOKEN",
        "retractions": 0,
    },
    {
        "kind": "request",
        "run": 0,
        "request_id": "b",
        "arrival_step": 0,
        "first_step": 0,
        "first_token_step": 0,
        "finish_step": 5,
        "output_tokens": 4,
        "finish_reason": "FINISH_LENGTH",
        "retractions": 1,
    },
]


def test_driver_and_recorder_speak_one_protocol() -> None:
    assert driver.PROTOCOL_VERSION == PROTOCOL_VERSION


def test_driver_imports_only_the_standard_library() -> None:
    # -S: no site-packages at all, so any third-party import at module level fails.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-S", "-c", "import tracekit.sglang.driver, tracekit.sglang.protocol"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("arrival_s", "step_s", "first"),
    [
        # Whole steps, and a float's noise either side of one (the noise a windowed Mooncake
        # row carries: 920.05 s less the window's 912 s).
        (0.0, 0.05, 0),
        (0.15, 0.05, 3),
        (8.05, 0.05, 161),
        (8.050000000000068, 0.05, 162),
        (16.100000000000023, 0.05, 323),
        (0.1 + 0.2, 0.05, 7),
        (0.30000000000000004, 0.1, 4),
        (0.049999999999999996, 0.05, 1),
        (2.5, 0.5, 5),
    ],
)
def test_driver_admits_an_arrival_at_the_engine_clocks_step(
    arrival_s: float, step_s: float, first: int
) -> None:
    # The driver feeds SGLang's queue on the engine's steps clock: the same first step, to the
    # bit, or the recording and the engine part at the step in between.
    clock = StepsClock(step_s)
    assert clock.visible_step(arrival_s) == first
    assert driver._first_step(arrival_s, step_s) == first
    clock.step = first - 1
    assert first == 0 or not clock.is_visible(arrival_s)
    clock.step = first
    assert clock.is_visible(arrival_s)


def test_scenario_message_is_json_and_keeps_hash_ids() -> None:
    message = scenario_message(3, CONFIG, [("x", 1, 5, 2, 2, 0, (7, 8)), *REQUESTS])
    again = json.loads(json.dumps(message))
    assert again["run"] == 3 and again["protocol"] == PROTOCOL_VERSION
    assert again["requests"][0] == ["x", 1.0, 5, 2, 2, 0, [7, 8], False]
    assert again["requests"][1][6] is None
    assert again["config"]["kv_tokens"] == 300


def test_config_rejects_unknown_policies() -> None:
    with pytest.raises(ValueError, match="retraction_policy"):
        SglangConfig(retraction_policy="lifo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kv_tokens"):
        SglangConfig(kv_tokens=0)


def test_prompt_tokens_share_prefixes_only_through_hash_ids() -> None:
    x = driver.prompt_token_ids(0, 600, [7, 8])
    y = driver.prompt_token_ids(1, 700, [7, 8, 9])
    z = driver.prompt_token_ids(2, 600, [9])
    plain = driver.prompt_token_ids(3, 600, None)
    assert len(x) == 600 and len(y) == 700 and len(set(x)) == 600
    assert x == y[:600]  # the same two blocks, cut at 600 tokens
    assert x[0] != z[0] and x[0] != plain[0]  # other content differs from its first token
    assert not set(plain) & set(driver.prompt_token_ids(4, 600, None))


def test_step_from_wire_parses_a_retraction() -> None:
    step = step_from_wire(MESSAGES[2])
    (r,) = step.retractions
    assert step.victims == ("b", "c")
    assert [c.request_id for c in r.candidates] == ["a", "b", "c"]
    assert r.keep_order == ("a", "c", "b")
    assert step.num_decode_tokens == 1 and step.num_prefill_tokens == 0
    prefill = step_from_wire(MESSAGES[0])
    assert prefill.num_prefill_tokens == 38
    with pytest.raises(ValueError, match="malformed"):
        step_from_wire({"kind": "step", "step": 1})


def test_bundle_rows_one_decision_per_victim_with_the_batch_as_it_then_is() -> None:
    tables = bundle_rows("r", CONFIG, REQUESTS, MESSAGES)
    columns = {n: trace_schema().table(n).column_names for n in tables}
    decisions = [dict(zip(columns["decisions"], row, strict=True)) for row in tables["decisions"]]
    assert [d["applied_victim_id"] for d in decisions] == ["b", "c"]
    assert [d["num_candidates"] for d in decisions] == [3, 2]
    assert decisions[0]["step"] == 2 and decisions[0]["time_s"] == 1.0
    assert decisions[0]["kv_usage"] == pytest.approx(297 / 300)
    candidates = [dict(zip(columns["candidates"], r, strict=True)) for r in tables["candidates"]]
    second = [c["request_id"] for c in candidates if c["seq"] == 1]
    assert second == ["a", "c"]  # b is gone, batch order kept
    # KV of a decoding request: prompt plus every output but the newest.
    assert candidates[1]["num_computed_tokens"] == 16 + 1
    steps = [dict(zip(columns["steps"], r, strict=True)) for r in tables["steps"]]
    assert [s["scheduled_prefill_tokens"] for s in steps] == [38, 0, 0]
    assert [s["scheduled_decode_tokens"] for s in steps] == [0, 3, 1]
    assert [s["num_preemptions"] for s in steps] == [0, 0, 2]
    assert steps[2]["num_waiting"] == 2 and steps[0]["num_running"] == 3
    requests = {r[1]: dict(zip(columns["requests"], r, strict=True)) for r in tables["requests"]}
    # The trace format's status words (schemas/trace-v1.json), whatever the finish reason.
    assert requests["a"]["status"] == "finished"
    assert requests["a"]["first_token_s"] == 0.5 and requests["a"]["finish_s"] == 1.5
    assert requests["b"]["status"] == "finished"
    assert requests["b"]["recomputed_tokens"] == 17 and requests["b"]["num_preemptions"] == 1
    assert len(tables["scheduled"]) == 7
    # Each request's ignore_eos as the scenario sent it (protocol 1 rows have none: off).
    assert {r: q["ignore_eos"] for r, q in requests.items()} == dict.fromkeys(requests, False)
    flagged = [(*REQUESTS[0], True), *REQUESTS[1:]]
    again = bundle_rows("r", CONFIG, flagged, MESSAGES)["requests"]
    assert {row.request_id: row.ignore_eos for row in again} == {"a": True, "b": False}


def test_written_bundle_validates_and_keeps_every_step(tmp_path: Path) -> None:
    from tracekit.workloads.model import assemble_workload

    source = tmp_path / "w.csv"
    source.write_text("x\n", "utf-8")
    frame = pl.DataFrame(
        [
            {
                "request_id": r[0],
                "arrival_s": r[1],
                "prompt_tokens": r[2],
                "output_tokens": r[3],
                "max_tokens": r[4],
                "priority": r[5],
            }
            for r in REQUESTS
        ]
    )
    workload = assemble_workload(source, format="test", frame=frame, options={})
    from tracekit.sglang.record import _manifest

    end = {"kind": "end", "run": 0, "num_steps": 3, "sglang_config": {"version": "0.5.23"}}
    manifest = _manifest(workload, CONFIG, "r", "sglang-0.5.23", {"python": "3.11"}, end)
    c_done = {**MESSAGES[-1], "request_id": "c", "output_tokens": 2, "finish_step": 6}
    out = _write_bundle(tmp_path / "b", manifest, REQUESTS, CONFIG, [*MESSAGES, c_done, end], False)
    report = validate_trace(out)
    assert report.status == "ok", report
    steps = read_sglang_steps(out)
    assert [s.step for s in steps] == [0, 1, 2]
    assert (out / STEPS_FILE).read_text("utf-8").count("\n") == 3
    manifest_json = json.loads((out / "manifest.json").read_text("utf-8"))
    assert manifest_json["engine"] == "sglang-0.5.23"
    assert manifest_json["sglang"]["version"] == "0.5.23"
    # Compressed as the fixtures are, read the same, and replaceable by a new recording.
    from tracekit.sglang.record import compress_steps

    compress_steps(out)
    assert not (out / STEPS_FILE).exists() and read_sglang_steps(out) == steps
    again = [*MESSAGES, c_done, end]
    assert _write_bundle(out, manifest, REQUESTS, CONFIG, again, True) == out
    assert read_sglang_steps(out) == steps


def test_record_sglang_refuses_a_bad_option_before_running(tmp_path: Path) -> None:
    """Bad option values exit 2 with click's usage message; nothing is written."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    data = Path(__file__).resolve().parent / "data" / "workloads" / "azure_small.csv"
    out = tmp_path / "out"
    for bad in (["--retraction-policy", "random"], ["--kv-tokens", "0"]):
        args = ["record", "sglang", "--workload", str(data), "--out", str(out), *bad]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert not out.exists()
