"""The real-vLLM recorder attaches the driver's ``cache`` messages to their steps (no vLLM)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tracekit.engine.outputs import StepRecord
from tracekit.vllm.protocol import step_to_wire
from tracekit.vllm.record import VllmDriverError, _consume


class _Observer:
    def __init__(self) -> None:
        self.steps: list[StepRecord] = []

    def on_step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def on_decision(self, record: Any) -> None:
        pass

    def on_request(self, record: Any) -> None:
        pass


def _step(n: int) -> dict[str, Any]:
    return {"kind": "step", "run": 0, "r": step_to_wire(StepRecord.make_empty(n, n * 0.05, 64))}


def test_cache_messages_become_the_steps_hits() -> None:
    messages = [
        _step(1),
        {"kind": "cache", "run": 0, "step": 1, "hits": {"a": 32, "b": 0}},
        _step(2),
        _step(3),
        {"kind": "cache", "run": 0, "step": 3, "hits": {"a": 16}},
        {"kind": "end", "run": 0},
    ]
    observer = _Observer()
    end = _consume(0, iter(messages), observer, io.StringIO())  # type: ignore[arg-type]
    assert end["kind"] == "end"
    assert [s.step for s in observer.steps] == [1, 2, 3]
    assert [s.cache_hits for s in observer.steps] == [{"a": 32, "b": 0}, {}, {"a": 16}]


def test_a_cache_message_of_another_step_is_an_error() -> None:
    messages = [_step(1), {"kind": "cache", "run": 0, "step": 2, "hits": {"a": 32}}]
    with pytest.raises(VllmDriverError, match="cache hits of no step"):
        _consume(0, iter(messages), _Observer(), io.StringIO())  # type: ignore[arg-type]
