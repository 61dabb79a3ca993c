"""Step-by-step comparison of the engine's SGLang mode with a real-SGLang recording.

:func:`engine_steps` re-runs a recorded scenario (:func:`tracekit.sglang.record.
read_sglang_scenario`) on the embedded engine in SGLang mode and describes every step as the
recorder does; :func:`first_mismatch` walks both step streams and returns the first difference:
the step index, the kind of batch, the scheduled requests (ids, order, new tokens and radix-cache
hit tokens), the retraction victims, ``new_token_ratio`` after the step and the waiting queue
after the step (its order included, so the waiting-queue position of retracted requests is
checked). Like ``tracekit/vllm/cache_hits.py`` for vLLM, it is how the SGLang mode was fixed rule
by rule; ``tests/test_engine_sglang_fixtures.py`` requires no mismatch on every fixture.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
from tracekit.engine.hosts import VictimHost
from tracekit.engine.outputs import StepRecord
from tracekit.engine.sglang import SglangScheduler
from tracekit.real_engine.comparison import same_value
from tracekit.sglang.protocol import SglangConfig, SglangStep, unordered_requeue
from tracekit.sglang.record import read_sglang_scenario, read_sglang_steps

__all__ = [
    "EngineStep",
    "StepMismatch",
    "compare_bundle",
    "engine_config",
    "engine_requests",
    "engine_steps",
    "first_mismatch",
]


@dataclass(frozen=True, slots=True)
class EngineStep:
    """One engine step in the recorder's terms."""

    step: int
    mode: str
    # (request id, new tokens, cached tokens before the step), in batch order.
    reqs: tuple[tuple[str, int, int], ...]
    victims: tuple[str, ...]
    new_token_ratio: float
    waiting: tuple[str, ...]
    # Requests preempted at admission (PrefillAdder.preempt_to_schedule), in requeue order.
    preempted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StepMismatch:
    """The first difference between a recording and the engine."""

    index: int
    step: int
    field: str
    recorded: Any
    engine: Any
    context: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """A short text description."""
        lines = [
            f"first mismatch at step {self.step} (record {self.index}), field {self.field}:",
            f"  sglang: {self.recorded}",
            f"  engine: {self.engine}",
        ]
        lines += [f"  {k}: {v}" for k, v in self.context.items()]
        return "\n".join(lines)


def engine_config(config: SglangConfig) -> EngineConfig:
    """The engine configuration an SGLang configuration is (:meth:`SglangConfig.engine_config`)."""
    return config.engine_config()


def engine_requests(rows: Sequence[Sequence[Any]]) -> list[EngineRequest]:
    """Scenario rows as engine requests (``prefix_hash_ids`` become 512-token content ids)."""
    return [
        EngineRequest(
            str(r[0]),
            float(r[1]),
            int(r[2]),
            int(r[3]),
            int(r[4]),
            int(r[5]),
            tuple(int(h) for h in (r[6] or ())),
            ignore_eos=bool(r[7]) if len(r) > 7 else False,
        )
        for r in rows
    ]


class _Observer:
    """Snapshots the scheduler after every step (``on_step`` runs after the outputs)."""

    def __init__(self) -> None:
        self.scheduler: SglangScheduler | None = None
        self.steps: list[EngineStep] = []
        self.cached: dict[str, int] = {}

    def on_step(self, record: StepRecord) -> None:
        s = self.scheduler
        assert s is not None
        mode = "prefill" if record.num_prefill_tokens else "decode"
        reqs = tuple(
            (rid, n, s.last_cached.get(rid, 0) if mode == "prefill" else 0)
            for rid, n in record.num_scheduled_tokens.items()
        )
        self.steps.append(
            EngineStep(
                record.step,
                mode,
                reqs,
                tuple(v for victims, _ in s.last_retractions for v in victims),
                s.new_token_ratio,
                tuple(r.request_id for r in s.waiting),
                tuple(s.last_preempted),
            )
        )

    def on_decision(self, record: object) -> None:
        return None

    def on_request(self, record: object) -> None:
        return None


def engine_steps(
    config: SglangConfig, rows: Sequence[Sequence[Any]], host: VictimHost | None = None
) -> list[EngineStep]:
    """Run the scenario on the engine's SGLang mode; one :class:`EngineStep` per step."""
    observer = _Observer()

    def factory(cfg: EngineConfig, h: VictimHost | None, on_decision: Any) -> SglangScheduler:
        observer.scheduler = SglangScheduler(cfg, h or BuiltinHost(), on_decision)
        return observer.scheduler

    run_engine(
        engine_requests(rows),
        engine_config(config),
        host,
        observer,
        collect=False,
        scheduler_factory=factory,
        calm_leaps=False,  # (the observer reads the scheduler after every step)
    )
    return observer.steps


def first_mismatch(
    recorded: Sequence[SglangStep], engine: Sequence[EngineStep]
) -> StepMismatch | None:
    """The first step where the engine differs from the recording, or None."""
    for i, (a, b) in enumerate(zip(recorded, engine, strict=False)):
        context = {"sglang waiting": list(a.waiting), "engine waiting": list(b.waiting)}
        if a.step != b.step:
            return StepMismatch(i, a.step, "step index", a.step, b.step, context)
        if a.mode != b.mode:
            return StepMismatch(i, a.step, "mode", a.mode, b.mode, context)
        ra = [(r.request_id, r.new_tokens) for r in a.reqs]
        rb = [(r[0], r[1]) for r in b.reqs]
        if ra != rb:
            context["admission stop"] = a.admission_stop
            return StepMismatch(i, a.step, "scheduled", ra, rb, context)
        if a.mode == "prefill":
            ha = [(r.request_id, r.cached_tokens) for r in a.reqs]
            hb = [(r[0], r[2]) for r in b.reqs]
            if ha != hb:
                return StepMismatch(i, a.step, "cached tokens", ha, hb, context)
        if tuple(a.victims) != b.victims:
            return StepMismatch(i, a.step, "victims", list(a.victims), list(b.victims), context)
        # SGLang requeues one arrival's preemptions in a set's order (unordered_requeue): the
        # engine's (running-batch order) is compared with it as a set, also in the queue.
        waiting_a, preempted_a = unordered_requeue(a.waiting, a.preempted_ids)
        waiting_b, preempted_b = unordered_requeue(b.waiting, b.preempted)
        if preempted_a != preempted_b:
            return StepMismatch(
                i, a.step, "preempted", list(a.preempted_ids), list(b.preempted), context
            )
        if not same_value(a.new_token_ratio, b.new_token_ratio):
            return StepMismatch(
                i, a.step, "new_token_ratio", a.new_token_ratio, b.new_token_ratio, context
            )
        if waiting_a != waiting_b:
            return StepMismatch(i, a.step, "waiting", list(a.waiting), list(b.waiting), context)
    if len(recorded) != len(engine):
        n = min(len(recorded), len(engine))
        step = recorded[n].step if n < len(recorded) else engine[n].step
        return StepMismatch(n, step, "number of steps", len(recorded), len(engine))
    return None


def compare_bundle(bundle: str | os.PathLike[str]) -> tuple[int, StepMismatch | None]:
    """Re-run a :func:`~tracekit.sglang.record.record_sglang` bundle on the engine.

    Returns the number of recorded steps and the first mismatch (None when every step matches).
    """
    config, rows = read_sglang_scenario(bundle)
    recorded = read_sglang_steps(bundle)
    return len(recorded), first_mismatch(recorded, engine_steps(config, rows))
