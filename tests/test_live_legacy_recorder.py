"""The legacy-host recording wrapper delegates unchanged and records what it saw."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bidkv.adapters.vllm_hust.selector import BidkvVictimSelector
from tracekit.errors import ConfigError
from tracekit.hosts.victim_selector import SchedulingPolicy
from tracekit.recording.live import RecordingVictimSelector
from tracekit.trace import open_trace
from tracekit.trace.validate import validate_trace


def request(rid: str, computed: int, arrival: float) -> SimpleNamespace:
    # Shaped like a vLLM Request: max_tokens lives in sampling_params.
    return SimpleNamespace(
        request_id=rid, priority=0, arrival_time=arrival, num_prompt_tokens=computed,
        num_output_tokens=0, num_computed_tokens=computed, num_preemptions=0,
        sampling_params=SimpleNamespace(max_tokens=64),
    )  # fmt: skip


def test_wrapper_returns_the_inner_choice_and_records_it(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "live"
    monkeypatch.setenv("TRACEKIT_RECORD_DIR", str(out))
    monkeypatch.setenv(
        "TRACEKIT_RECORD_POLICY", "bidkv.adapters.vllm_hust.selector:BidkvVictimSelector"
    )
    monkeypatch.setenv("TRACEKIT_RECORD_RUN_ID", "legacy-live")
    config = SimpleNamespace(additional_config={"enable_utility_victim_selection": True})
    wrapper = RecordingVictimSelector.from_vllm_config(config)
    reference = BidkvVictimSelector.from_vllm_config(config)
    running = [request("a", 1000, 0.0), request("b", 300, 1.0), request("c", 100, 2.0)]
    for now in (1.0, 2.0):
        got = wrapper.pick_victim(running, SchedulingPolicy.FCFS, kv_utilization=0.97, now_s=now)
        want = reference.pick_victim(running, SchedulingPolicy.FCFS, kv_utilization=0.97, now_s=now)
        assert got is want  # the same request object, unchanged
    assert wrapper.export_metrics() == reference.export_metrics()
    wrapper.close()
    assert validate_trace(out).status == "ok"
    decisions = open_trace(out).scan("decisions").collect()
    # a frees the most tokens per unit of disruption: U(a) = 1000 / 1.0 beats b and c.
    assert decisions["applied_victim_id"].to_list() == ["a", "a"]
    assert decisions["builtin_victim_id"].to_list() == ["c", "c"]
    assert decisions["requesting_request_id"].to_list() == [None, None]
    candidates = open_trace(out).scan("candidates").collect()
    assert candidates["max_tokens"].to_list() == [64] * 6


def test_wrapper_needs_an_inner_selector(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRACEKIT_RECORD_DIR", str(tmp_path / "x"))
    monkeypatch.delenv("TRACEKIT_RECORD_POLICY", raising=False)
    with pytest.raises(ConfigError, match="TRACEKIT_RECORD_POLICY"):
        RecordingVictimSelector.from_vllm_config(None)
