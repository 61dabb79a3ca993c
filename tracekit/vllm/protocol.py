"""The messages between the recorder and the vLLM driver: one JSON object per line.

Standard library only (both sides import it). The parent writes one **scenario** per line to the
driver's standard input; the driver answers on its own channel (the original standard output; it
sends everything else that writes to standard output to standard error) with, in order:

``hello`` (once, after importing vLLM)
    ``protocol``, ``vllm_version``, ``vllm_package``, ``torch_version``, ``python``, ``import_s``.
``decision``, ``step``, ``request``, ``log`` (per run, in engine order)
    ``run`` (the scenario's index) and ``r``, the record as a list (see the ``*_to_wire``
    functions); ``log`` has ``line``, one line the policy logged.
``end`` (per run)
    ``run``, ``num_steps``, ``end_s``, ``final_state``, ``vllm_config`` (the configuration the
    real scheduler ran with) and ``timing`` (``wall_s``, ``scheduler_s``: time inside
    ``schedule()`` and ``update_from_output()``, ``setup_s``).
``error`` (instead of ``end`` when a run fails)
    ``run``, ``message``, ``traceback``.

Within a step the order is the embedded engine's: the step's decisions, the step, then the
requests that finished in it. Floats go through JSON unchanged (``repr`` round-trips).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.engine.config import EngineConfig
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest, request_fields
from tracekit.hosts.preemption_policy import PreemptionCandidate
from tracekit.real_engine.serve import check_protocol

__all__ = [
    "PROTOCOL_VERSION",
    "RawResult",
    "Scenario",
    "decision_from_wire",
    "decision_to_wire",
    "dumps",
    "request_from_wire",
    "request_to_wire",
    "step_from_wire",
    "step_to_wire",
]

PROTOCOL_VERSION = 1


@dataclass(frozen=True, slots=True)
class Scenario:
    """One run for the driver: requests, engine configuration and victim strategy.

    Parameters
    ----------
    index
        The run's index in the batch; every answer carries it as ``run``.
    config
        The engine configuration (``mode`` must be ``"vllm"``).
    requests
        The workload, in any order (the driver sorts by arrival, then position).
    strategy
        ``{"name", "kind", "settings"}`` of a :class:`tracekit.strategies.StrategySpec`.
    host_path
        ``typed``, ``legacy`` or ``builtin``.
    shim
        Put the host in the loop through the shim. False (only for the built-in strategy)
        observes the unmodified scheduler.
    """

    index: int
    config: EngineConfig
    requests: tuple[EngineRequest, ...]
    strategy: Mapping[str, Any] = field(
        default_factory=lambda: {"name": "builtin", "kind": "builtin", "settings": {}}
    )
    host_path: str = "builtin"
    shim: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The scenario as a JSON-compatible message."""
        return {
            "kind": "scenario",
            "protocol": PROTOCOL_VERSION,
            "run": self.index,
            "config": dataclasses.asdict(self.config),
            "requests": [
                [*request_fields(r)]
                # The content model only when present, so old scenarios read the same.
                + ([list(r.content_ids), r.content_block_tokens] if r.content_ids else [])
                for r in self.requests
            ],
            "strategy": dict(self.strategy),
            "host_path": self.host_path,
            "shim": self.shim,
        }

    @classmethod
    def from_wire(cls, message: Mapping[str, Any]) -> Scenario:
        """Parse a scenario message; ``ValueError`` on a bad one."""
        if message.get("kind") != "scenario":
            raise ValueError(f"expected a scenario message, got kind {message.get('kind')!r}")
        check_protocol(message, PROTOCOL_VERSION)
        requests = tuple(
            EngineRequest(*row[:6], tuple(row[6]), row[7]) if len(row) > 6 else EngineRequest(*row)
            for row in message["requests"]
        )
        return cls(
            index=int(message["run"]),
            config=EngineConfig(**message["config"]),
            requests=requests,
            strategy=dict(message["strategy"]),
            host_path=str(message["host_path"]),
            shim=bool(message["shim"]),
        )


class RawResult:
    """A policy's non-string, non-None result after the trip: only its ``repr`` survives."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawResult) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def dumps(message: Mapping[str, Any]) -> str:
    """One message as one line of compact JSON (no trailing newline)."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False)


def _raw_to_wire(raw: object) -> list[Any]:
    if raw is None:
        return ["none", None]
    if isinstance(raw, str):
        return ["str", raw]
    return ["other", repr(raw)]


def _raw_from_wire(wire: Sequence[Any]) -> object:
    kind, value = wire
    if kind == "none":
        return None
    if kind == "str":
        return value
    return RawResult(value)


def decision_to_wire(record: DecisionRecord) -> list[Any]:
    """A decision as a JSON list (candidates as lists in ``PreemptionCandidate`` order).

    It ends with the candidates' ``(blocks held, blocks only it holds)``, and the blocks and
    tokens the preemption freed (``DecisionRecord``).
    """
    return [
        record.seq,
        record.step,
        record.time_s,
        record.requesting_request_id,
        record.kv_cache_usage,
        [dataclasses.astuple(c) for c in record.candidates],
        record.builtin_victim_id,
        _raw_to_wire(record.raw_result),
        record.outcome,
        record.victim_id,
        record.decision_reason,
        record.counters,
        [list(b) for b in record.candidate_blocks],
        record.freed_blocks,
        record.freed_tokens,
    ]


def decision_from_wire(wire: Sequence[Any]) -> DecisionRecord:
    """The inverse of :func:`decision_to_wire`."""
    (
        seq,
        step,
        time_s,
        requester,
        usage,
        candidates,
        builtin,
        raw,
        outcome,
        victim,
        reason,
        counters,
        blocks,
        freed_blocks,
        freed_tokens,
    ) = wire
    return DecisionRecord(
        seq=seq,
        step=step,
        time_s=time_s,
        requesting_request_id=requester,
        kv_cache_usage=usage,
        candidates=tuple(PreemptionCandidate(*c) for c in candidates),
        builtin_victim_id=builtin,
        raw_result=_raw_from_wire(raw),
        outcome=outcome,
        victim_id=victim,
        decision_reason=reason,
        counters=counters,
        candidate_blocks=tuple((int(held), int(own)) for held, own in blocks),
        freed_blocks=freed_blocks,
        freed_tokens=freed_tokens,
    )


def step_to_wire(record: StepRecord) -> list[Any]:
    """A step as a JSON list; the scheduled tokens as ``[[request_id, tokens], ...]`` in order."""
    return [
        record.step,
        record.time_s,
        record.duration_s,
        record.num_running,
        record.num_waiting,
        record.kv_blocks_used,
        record.kv_blocks_total,
        record.num_prefill_tokens,
        record.num_decode_tokens,
        record.num_preemptions,
        list(record.num_scheduled_tokens.items()),
    ]


def step_from_wire(wire: Sequence[Any]) -> StepRecord:
    """The inverse of :func:`step_to_wire`."""
    *fields, scheduled = wire
    return StepRecord(*fields, dict(scheduled))


def request_to_wire(record: RequestRecord) -> list[Any]:
    """A finished or rejected request as a JSON list (``RequestRecord`` field order)."""
    return list(dataclasses.astuple(record))


def request_from_wire(wire: Sequence[Any]) -> RequestRecord:
    """The inverse of :func:`request_to_wire`."""
    return RequestRecord(*wire)


def scenario_lines(scenarios: Iterable[Scenario]) -> Iterable[str]:
    """The scenarios as the driver reads them: one JSON line each, newline included."""
    for scenario in scenarios:
        yield dumps(scenario.to_wire()) + "\n"
