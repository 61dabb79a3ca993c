"""Builders shared by the engine tests, imported from this folder (on the path in tests).

``make_engine`` and ``make_requests`` follow vLLM's own test helpers (``v1/core/utils.py`` in
vLLM's test folder: ``create_scheduler(num_blocks=...)``, ``create_requests(...)``): tiny block
counts force preemption, and each scenario states its arithmetic in comments. With
``num_blocks=11`` block 0 is the null block, so 10 blocks of 16 tokens (160 tokens) are usable.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, EngineResult, run_engine
from tracekit.engine.hosts import VictimHost
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import engine_requests
from tracekit.vllm.fixtures import FIXTURES, PREFIX_CACHING_FIXTURES
from tracekit.vllm.protocol import Scenario

ROOT = Path(__file__).resolve().parents[1]

Spec = tuple  # (request_id, arrival_s, prompt_tokens, output_tokens[, priority[, max_tokens]])


def make_engine(
    num_blocks: int = 11,
    *,
    block_size: int = 16,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 1000,
    max_model_len: int | None = None,
    **overrides: object,
) -> EngineConfig:
    """A small engine on the steps clock with 1-second steps (step k starts at k seconds).

    Prefix caching off and synchronous scheduling unless overridden: the hand-worked runs of
    the tests were worked for vLLM's plain ``Scheduler`` (tests/test_engine_async.py works the
    async ones).
    """
    if max_model_len is None:
        max_model_len = (num_blocks - 1) * block_size
    return EngineConfig(
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        **{  # type: ignore[arg-type]
            "clock": "steps",
            "step_s": 1.0,
            "enable_prefix_caching": False,
            "async_scheduling": False,
            **overrides,
        },
    )


class StepWatcher:
    """An engine observer that calls ``on_step(record)`` for every step and ignores the rest."""

    def __init__(self, on_step: Callable[[StepRecord], None]) -> None:
        self.on_step = on_step

    def on_decision(self, record: DecisionRecord) -> None:
        """Decisions are ignored."""

    def on_request(self, record: RequestRecord) -> None:
        """Requests are ignored."""


def make_requests(*specs: Spec) -> list[EngineRequest]:
    """Requests from ``(id, arrival_s, prompt, output[, priority[, max_tokens]])`` tuples."""
    requests = []
    for spec in specs:
        request_id, arrival_s, prompt, output = spec[:4]
        priority = spec[4] if len(spec) > 4 else 0
        max_tokens = spec[5] if len(spec) > 5 else output
        requests.append(EngineRequest(request_id, arrival_s, prompt, output, max_tokens, priority))
    return requests


def run_checked(
    config: EngineConfig, requests: list[EngineRequest], host: VictimHost | None = None
) -> EngineResult:
    """Run with the per-step consistency check on."""
    return run_engine(requests, config, host or BuiltinHost(), check_consistency=True)


def scheduled(result: EngineResult) -> dict[int, dict[str, int]]:
    """Step index -> scheduled tokens per request."""
    return {s.step: s.num_scheduled_tokens for s in result.steps}


def victims(result: EngineResult) -> list[tuple[int, str, str]]:
    """``(step, requester, victim)`` of every decision, in order."""
    return [(d.step, d.requesting_request_id, d.victim_id) for d in result.decisions]


def by_id(result: EngineResult) -> dict:
    return {r.request_id: r for r in result.requests}


def random_content(seed: int, n: int) -> list[EngineRequest]:
    """Requests in four content groups (two 256-token content blocks each), a fifth without."""
    rng = random.Random(seed)
    requests = []
    for i in range(n):
        group = rng.randrange(4)
        content = (group, group + 10) if rng.random() < 0.8 else ()
        requests.append(
            EngineRequest(
                f"r{i}",
                round(i * 0.03, 3),
                rng.randrange(20, 700),
                rng.randrange(1, 150),
                400,
                rng.randrange(3),
                content,
                256,
            )
        )
    return requests


def async_scenarios(release: str) -> list[Scenario]:
    """The scenarios compared with the real AsyncScheduler (tests/test_vllm_async_live.py).

    Random content workloads under KV pressure; some requests end at ``max_tokens``.

    Requests that end at ``max_tokens`` exercise the async rule that skips a request whose last
    token is in flight; the others stop at their target length, one step after their last
    scheduled decode, as a stop token does under async scheduling.
    """
    out = []
    for seed, (policy, num_blocks) in enumerate(
        [("fcfs", 120), ("priority", 120), ("fcfs", 400), ("priority", 90)]
    ):
        rng = random.Random(seed)
        requests = [
            dataclasses.replace(r, max_tokens=rng.randrange(1, 150)) if rng.random() < 0.4 else r
            for r in random_content(seed, 100)
        ]
        for prefix_caching in (False, True):
            config = EngineConfig(
                num_blocks=num_blocks,
                max_num_seqs=16,
                max_model_len=1400,
                max_num_batched_tokens=512,
                long_prefill_token_threshold=128 if seed % 2 else 0,
                scheduling_policy=policy,  # type: ignore[arg-type]
                vllm_version=release,  # type: ignore[arg-type]
                clock="steps",
                step_s=0.05,
                enable_prefix_caching=prefix_caching,
                async_scheduling=True,
            )
            out.append(Scenario(len(out), config, tuple(requests)))
    return out


def prefix_scenarios(release: str) -> list[Scenario]:
    """The scenarios compared with the real scheduler with prefix caching on.

    The prefix-caching fixtures' workloads, and random content workloads under FCFS and
    PRIORITY (tests/test_vllm_prefix_live.py).
    """
    out = []
    for name in PREFIX_CACHING_FIXTURES:
        fixture = FIXTURES[name]
        requests = tuple(engine_requests(fixture.load_workload(ROOT)))
        out.append(Scenario(len(out), fixture.engine_config(release), requests))
    for seed, (policy, num_blocks) in enumerate(
        [("fcfs", 120), ("priority", 120), ("fcfs", 400), ("priority", 90)]
    ):
        config = EngineConfig(
            num_blocks=num_blocks,
            max_num_seqs=16,
            max_model_len=1400,
            max_num_batched_tokens=512,
            scheduling_policy=policy,  # type: ignore[arg-type]
            vllm_version=release,  # type: ignore[arg-type]
            clock="steps",
            step_s=0.05,
            enable_prefix_caching=True,
            async_scheduling=False,  # synchronous; tests/test_vllm_async_live.py covers async
        )
        out.append(Scenario(len(out), config, tuple(random_content(seed, 100))))
    return out


def record_values(records: list[Any]) -> list[tuple]:
    """Every field of each record, in order (``dataclasses.astuple`` without its deep copies).

    The records' own ``==`` leaves some fields out (cache hits, evictions, blocks); this does
    not. The dicts inside are compared as they are, not copied: ``astuple`` copied every step's
    scheduled tokens, most of the time of the tests that compare whole runs.
    """
    if not records:
        return []
    names = [f.name for f in dataclasses.fields(records[0])]
    return [tuple(getattr(record, name) for name in names) for record in records]


def assert_same_results(a: EngineResult, b: EngineResult) -> None:
    """Two runs' totals and every field of their records are equal.

    For a run with calm leaps against the step-by-step run; the fields outside the records'
    ``==`` (cache hits, evictions, blocks) are compared too.
    """
    assert (a.num_steps, a.end_s, a.num_preemptions, a.num_aborted, a.num_decisions) == (
        b.num_steps,
        b.end_s,
        b.num_preemptions,
        b.num_aborted,
        b.num_decisions,
    )
    for kind in ("steps", "requests", "decisions"):
        assert record_values(getattr(a, kind)) == record_values(getattr(b, kind)), kind
