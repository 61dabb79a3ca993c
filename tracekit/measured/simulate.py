"""A measured run simulated on the embedded engine: per-request token times and step make-up.

:func:`simulate_run` replays a :class:`~tracekit.workloads.measured.MeasuredRun`'s workload
(its requests at their measured send times, with their measured lengths) through the embedded
engine with a step-time model, then walks the engine's step records once to recover, for every
request, the end time of each step that produced one of its tokens (so its TTFT, its
inter-token gaps and its end-to-end latency), and for every step its make-up in the calibrated
model's terms (:data:`tracekit.latency.calibrated.TERMS`). The walk follows the engine's own
rules (``docs/latency.md``, "The engine clock"): a scheduled request's computed tokens advance by
its scheduled tokens, restart from zero when it is preempted and from its cache hit when it is
admitted; it produces a token at the end of a step after which all of its tokens so far are
computed. Each step's make-up, priced by the model, gives back the engine's own step duration
(checked in ``tests/test_measured.py``).

Per-request overheads outside the step loop (``RequestOverheads``: HTTP, tokenisation and the
server's queues before the engine; the stream's end after the last step) are added to the
engine's latencies here, not in the engine: they delay every request alike and do not change the
schedule. A calibrated model's residual spread is added to the simulated latencies afterwards
(:mod:`tracekit.measured.spread`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.engine.config import EngineConfig
from tracekit.engine.engine import EngineResult, run_engine
from tracekit.engine.hosts import BuiltinHost
from tracekit.engine.request import engine_requests
from tracekit.latency.calibrated import TERMS
from tracekit.workloads.measured import MeasuredRun

__all__ = ["RequestOverheads", "SimulatedRun", "simulate_run", "walk_steps"]


@dataclass(frozen=True, slots=True)
class RequestOverheads:
    """Time a request spends outside the engine's step loop, added to its latencies.

    Attributes
    ----------
    ttft_s
        Fixed time before the engine sees a request and after its first token leaves the
        engine (HTTP, the API server's queues, detokenising and streaming the token).
    ttft_per_prompt_token_s
        Per prompt token before the engine (tokenisation, input processing).
    e2e_s
        Fixed time after the last token's step (the stream's end), added to the latency only.
    e2e_per_output_token_s
        Per output token after the first, added to the latency only: time the tokens'
        delivery loses outside the steps (detokenising and streaming each token).
    """

    ttft_s: float = 0.0
    ttft_per_prompt_token_s: float = 0.0
    e2e_s: float = 0.0
    e2e_per_output_token_s: float = 0.0

    @classmethod
    def from_dict(cls, doc: Any) -> RequestOverheads:
        """From :meth:`as_dict`'s mapping (missing keys are 0)."""
        doc = doc or {}
        return cls(*(float(doc.get(f.name, 0.0)) for f in dataclasses.fields(cls)))

    def as_dict(self) -> dict[str, float]:
        """The figures, seconds."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SimulatedRun:
    """One measured run replayed on the engine.

    Attributes
    ----------
    requests
        One row per request: ``request_id``, ``ok`` (served: not rejected or aborted),
        ``output_tokens``, ``ttft_s``, ``e2e_s`` (overheads included), ``itl_s`` (the gaps
        between its tokens), and, for calibration, ``arrival_s``, ``prompt_tokens``,
        ``first_step``/``first_frac`` (the step under way when it arrived and the share of that
        step after its arrival), ``token_step`` (the step producing its first token) and
        ``last_step`` (its last token's step).
    steps
        One row per executed step: ``step``, ``time_s``, ``duration_s``, ``idle`` (nothing
        scheduled) and the make-up :data:`TERMS` (``intercept`` is 1 for a busy step).
    result
        The engine's own result.
    """

    requests: pl.DataFrame
    steps: pl.DataFrame
    result: EngineResult


def walk_steps(
    result: EngineResult, prompts: dict[str, int]
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[int, float]]]]:
    """The make-up of each step of ``result`` and each request's token steps.

    Returns
    -------
    steps
        One mapping per step record (its index, start, duration, idle flag and :data:`TERMS`).
    tokens
        request id -> ``[(step index, step end time), ...]``, one entry per produced token.
    """
    computed: dict[str, int] = {}
    produced: dict[str, int] = {}
    tokens: dict[str, list[tuple[int, float]]] = {}
    victims: dict[int, list[str]] = {}
    for d in result.decisions:
        victims.setdefault(d.step, []).append(d.victim_id)
    rows = []
    for position, step in enumerate(result.steps):
        for victim in victims.get(step.step, ()):
            computed[victim] = 0
        for request_id, hit in step.cache_hits.items():
            computed[request_id] = computed.get(request_id, 0) + hit
        prefill = decode = kv = pairs = 0
        end = step.time_s + step.duration_s
        for request_id, n in step.num_scheduled_tokens.items():
            before = computed.get(request_id, 0)
            after = before + n
            computed[request_id] = after
            out = produced.get(request_id, 0)
            total = prompts[request_id] + out
            kv += after
            if n == 1 and out and after == total:
                decode += 1
            else:
                prefill += n
                pairs += n * before + n * (n + 1) // 2
            if after >= total:
                produced[request_id] = out + 1
                tokens.setdefault(request_id, []).append((position, end))
        busy = bool(step.num_scheduled_tokens)
        rows.append(
            {
                "step": position,
                "time_s": step.time_s,
                "duration_s": step.duration_s,
                "idle": not busy,
                "intercept": 1 if busy else 0,
                "num_prefill_tokens": prefill,
                "num_decode_seqs": decode,
                "kv_tokens_read": kv,
                "num_sequences": len(step.num_scheduled_tokens),
                "prefill_attention_pairs": pairs,
            }
        )
    return rows, tokens


def simulate_run(
    run: MeasuredRun,
    config: EngineConfig,
    *,
    overheads: RequestOverheads | None = None,
) -> SimulatedRun:
    """Replay ``run``'s workload on the engine with ``config`` (its ``latency`` model).

    Parameters
    ----------
    run
        The measured run (its :meth:`~MeasuredRun.workload`: send times, measured lengths,
        failed requests cancelled).
    config
        The engine configuration; ``config.latency`` names the step-time model.
    overheads
        Per-request time outside the step loop, added to TTFT and latency.
    """
    overheads = overheads or RequestOverheads()
    workload = run.workload()
    requests = list(engine_requests(workload))
    result = run_engine(requests, config, BuiltinHost())
    prompts = {r.request_id: r.prompt_tokens for r in requests}
    step_rows, tokens = walk_steps(result, prompts)
    schema = {
        "step": pl.Int64,
        "time_s": pl.Float64,
        "duration_s": pl.Float64,
        "idle": pl.Boolean,
        **{t: pl.Int64 for t in TERMS},
    }
    steps = pl.DataFrame(step_rows, schema=schema)
    starts = [row["time_s"] for row in step_rows]
    ends = [row["time_s"] + row["duration_s"] for row in step_rows]
    rows = []
    for record in result.requests:
        own = tokens.get(record.request_id, [])
        served = record.status.startswith("finished") and bool(own)
        arrival = record.arrival_s
        # The step under way when the request arrived (the first whose end is after it) and
        # the share of it still to run: the request waits for that share, then every step.
        first = bisect.bisect_right(ends, arrival)
        frac = 1.0
        if first < len(step_rows) and step_rows[first]["duration_s"] > 0:
            frac = min(1.0, max(0.0, (ends[first] - arrival) / step_rows[first]["duration_s"]))
            if starts[first] >= arrival:
                frac = 1.0
        before = overheads.ttft_s + overheads.ttft_per_prompt_token_s * record.prompt_tokens
        times = [t for _, t in own]
        # Per output token after the first: each gap is as much longer.
        per_token = overheads.e2e_per_output_token_s
        times = [t + i * per_token for i, t in enumerate(times)] if per_token else times
        rows.append(
            {
                "request_id": record.request_id,
                "ok": served,
                "arrival_s": arrival,
                "prompt_tokens": record.prompt_tokens,
                "output_tokens": len(own) if served else 0,
                "ttft_s": times[0] - arrival + before if served else None,
                "e2e_s": times[-1] - arrival + before + overheads.e2e_s if served else None,
                "itl_s": [b - a for a, b in itertools.pairwise(times)] if served else [],
                "first_step": first,
                "first_frac": frac,
                "token_step": own[0][0] if served else None,
                "last_step": own[-1][0] if served else None,
            }
        )
    frame = pl.DataFrame(
        rows,
        schema={
            "request_id": pl.String,
            "ok": pl.Boolean,
            "arrival_s": pl.Float64,
            "prompt_tokens": pl.Int64,
            "output_tokens": pl.Int64,
            "ttft_s": pl.Float64,
            "e2e_s": pl.Float64,
            "itl_s": pl.List(pl.Float64),
            "first_step": pl.Int64,
            "first_frac": pl.Float64,
            "token_step": pl.Int64,
            "last_step": pl.Int64,
        },
    )
    return SimulatedRun(frame, steps, result)


def replay_runs(
    runs: Sequence[MeasuredRun], config: EngineConfig, overheads: RequestOverheads | None = None
) -> list[SimulatedRun]:
    """:func:`simulate_run` of each run."""
    return [simulate_run(run, config, overheads=overheads) for run in runs]
