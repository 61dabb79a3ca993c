"""The live re-recording's comparison (tracekit.sglang.rerecord), without SGLang.

A committed fixture's own records, streamed back as the driver sends them, match; one field
changed in one step record, a missing step or another request outcome is reported, naming it.
The live test (tests/test_sglang_live.py) runs the same comparison on SGLang's new records.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.sglang.protocol import scenario_message
from tracekit.sglang.record import request_rows
from tracekit.sglang.rerecord import _check

ROOT = Path(__file__).resolve().parents[1]
NAME = "mooncake-noradix-length"  # 279 steps, rejected and finished requests
BUNDLE = ROOT / FIXTURES_DIR / NAME


def _stream() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The fixture's scenario, and its records as the driver streams them (run index 3)."""
    fixture = FIXTURES[NAME]
    scenario = scenario_message(3, fixture.config, request_rows(fixture.load_workload(ROOT)))
    step_s = fixture.config.step_s
    lines = lzma.decompress((BUNDLE / "sglang-steps.jsonl.xz").read_bytes()).decode()
    messages: list[dict[str, Any]] = []
    for line in lines.splitlines():
        record = json.loads(line)
        record["run"] = 3
        text = json.dumps(record, separators=(",", ":"))
        messages.append({"kind": "step", "run": 3, "text": text[text.index(',"step"') + 1 :]})
    # The requests' messages, back from the committed table (steps clock: times are steps).
    for row in pl.read_parquet(BUNDLE / "requests.parquet").iter_rows(named=True):
        rejected = row["status"] == "rejected"
        messages.append(
            {
                "kind": "request",
                "run": 3,
                "request_id": row["request_id"],
                "first_step": None if rejected else round(row["first_scheduled_s"] / step_s),
                "first_token_step": None if rejected else round(row["first_token_s"] / step_s) - 1,
                "finish_step": None if rejected else round(row["finish_s"] / step_s) - 1,
                "output_tokens": row["output_tokens"],
                "finish_reason": "rejected" if rejected else "FINISH_MATCHED_TOKEN",
                "retractions": row["num_preemptions"],
            }
        )
    messages.append({"kind": "end", "run": 3})
    return scenario, messages


def test_the_committed_records_streamed_back_match() -> None:
    scenario, messages = _stream()
    check = _check(NAME, BUNDLE, scenario, iter(messages))
    assert check.difference is None
    assert check.num_steps == 279


def test_a_changed_field_of_one_step_is_named() -> None:
    scenario, messages = _stream()
    index = next(
        i for i, m in enumerate(messages) if m["kind"] == "step" and '"waiting":["' in m["text"]
    )
    record = json.loads("{" + messages[index]["text"])
    record["waiting"] = [*record["waiting"][::-1], "someone"]
    text = json.dumps(record, separators=(",", ":"))
    messages[index] = {**messages[index], "text": text[1:]}
    difference = _check(NAME, BUNDLE, scenario, iter(messages)).difference
    assert difference is not None
    assert f"step record {index} (step {record['step']})" in difference
    assert "waiting: committed" in difference and "someone" in difference
    assert "reqs:" not in difference  # only what differs


def test_a_missing_step_or_another_outcome_is_reported() -> None:
    scenario, messages = _stream()
    last_step = max(i for i, m in enumerate(messages) if m["kind"] == "step")
    shorter = messages[:last_step] + messages[last_step + 1 :]
    assert _check(NAME, BUNDLE, scenario, iter(shorter)).difference == (
        f"{NAME}: 278 steps recorded, 279 committed"
    )
    finished = next(
        i for i, m in enumerate(messages) if m["kind"] == "request" and m["output_tokens"]
    )
    messages[finished] = {**messages[finished], "output_tokens": 10_000}
    difference = _check(NAME, BUNDLE, scenario, iter(messages)).difference
    rid = messages[finished]["request_id"]
    assert difference is not None and f"request {rid}: output_tokens" in difference


def test_another_scenario_is_reported() -> None:
    scenario, messages = _stream()
    changed = {**scenario, "config": {**scenario["config"], "kv_tokens": 1}}
    difference = _check(NAME, BUNDLE, changed, iter(messages)).difference
    assert difference is not None and "sglang-scenario.json" in difference
