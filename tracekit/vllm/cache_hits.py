"""Prefix-cache hits, step by step, of the real scheduler and of the embedded engine.

``tracekit fidelity`` compares the hits recorded in bundles (trace v2: ``record vllm`` writes the
driver's hits). This compares the two schedulers' whole message streams in memory, no bundle: the
driver's (``tracekit.vllm.driver``: ``step``, ``decision``, ``request`` and, with prefix caching
on, ``cache`` messages, ``{"step", "hits": {req_id: tokens}, "evicted": blocks}`` for every step
that admitted a request or evicted a cached block) against the same messages built from the
embedded engine run on the same scenario. Equal streams mean equal steps, scheduled-token maps,
decisions (with each candidate's blocks and the blocks freed), request outcomes, cache hits and
evictions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from tracekit.engine.engine import run_engine
from tracekit.engine.hosts import BuiltinHost
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.scheduler import make_vllm_scheduler
from tracekit.vllm.protocol import Scenario, decision_to_wire, request_to_wire, step_to_wire

__all__ = ["StreamMismatch", "driver_streams", "engine_stream", "first_mismatch"]

_COMPARED = ("step", "decision", "request", "cache")


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    # Through JSON, as the driver's messages travel (tuples become lists).
    return json.loads(json.dumps(message))  # type: ignore[no-any-return]


def engine_stream(scenario: Scenario) -> list[dict[str, Any]]:
    """The messages the driver would send for ``scenario``, from the embedded engine.

    Only the built-in victim rule (``scenario.shim`` false).
    """
    if scenario.shim:
        raise ValueError("engine_stream covers the built-in victim rule only")
    messages: list[dict[str, Any]] = []
    made: list[Any] = []

    def factory(config, host, on_decision):  # type: ignore[no-untyped-def]
        made.append(make_vllm_scheduler(config, host or BuiltinHost(), on_decision))
        return made[0]

    class _Observer:
        def on_step(self, record: StepRecord) -> None:
            messages.append({"kind": "step", "r": step_to_wire(record)})
            if scenario.config.enable_prefix_caching and (
                record.cache_hits or record.num_evicted_blocks
            ):
                messages.append(
                    {
                        "kind": "cache",
                        "step": record.step,
                        "hits": dict(record.cache_hits),
                        "evicted": record.num_evicted_blocks,
                    }
                )

        def on_decision(self, record: DecisionRecord) -> None:
            messages.append({"kind": "decision", "r": decision_to_wire(record)})

        def on_request(self, record: RequestRecord) -> None:
            messages.append({"kind": "request", "r": request_to_wire(record)})

    run_engine(
        list(scenario.requests),
        scenario.config,
        None,
        _Observer(),
        collect=False,
        scheduler_factory=factory,
    )
    return [_plain(m) for m in messages]


def driver_streams(
    scenarios: Sequence[Scenario], venv: str | os.PathLike[str] | None = None
) -> dict[int, list[dict[str, Any]]]:
    """Each scenario's compared messages from the real scheduler (one driver process)."""
    from tracekit.vllm.record import VllmDriverError, run_driver

    streams: dict[int, list[dict[str, Any]]] = {s.index: [] for s in scenarios}
    for message in run_driver(scenarios, venv=venv):
        kind = message.get("kind")
        if kind == "error":
            raise VllmDriverError(f"{message['message']}\n{message.get('traceback', '')[-3000:]}")
        if kind in _COMPARED:
            streams[message["run"]].append({k: v for k, v in message.items() if k != "run"})
    return streams


class StreamMismatch:
    """Where two message streams first differ."""

    def __init__(self, index: int, expected: Any, found: Any) -> None:
        self.index = index
        self.expected = expected
        self.found = found

    def __repr__(self) -> str:
        return (
            f"message {self.index}: expected {json.dumps(self.expected)[:400]}, "
            f"found {json.dumps(self.found)[:400]}"
        )


def first_mismatch(
    expected: list[dict[str, Any]], found: list[dict[str, Any]]
) -> StreamMismatch | None:
    """The first difference between two streams, or ``None`` when they are equal."""
    for index, (a, b) in enumerate(zip(expected, found, strict=False)):
        if a != b:
            return StreamMismatch(index, a, b)
    if len(expected) != len(found):
        n = min(len(expected), len(found))
        return StreamMismatch(
            n, expected[n] if n < len(expected) else None, found[n] if n < len(found) else None
        )
    return None
