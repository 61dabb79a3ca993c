"""vLLM mode's calm leaps: runs of calm decodes under async scheduling, taken in one go.

The step-by-step run is the reference (it matches the real vLLM scheduler step for step,
``tests/test_fidelity_fixtures.py``). A run with leaps must give the same step, request and
decision records (every field, those outside the records' ``==`` too) and totals, and after
each leap the scheduler must be where the step-by-step run is at that step: every running
request's counters and blocks, the step in flight, the waiting queue, and the prefix cache (its
free queue in order, its keys, its evictions). Each test also checks that leaps were taken, so
that it cannot pass by never leaping.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import assert_same_results, make_engine, random_content

from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest
from tracekit.engine.engine import EngineResult, EngineRun
from tracekit.engine.request import engine_requests
from tracekit.workloads import load_workload
from tracekit.workloads.client import ClientModel

AZURE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def _snapshot(run: EngineRun) -> tuple:
    """What the next step depends on: the scheduler's, the pool's and every request's state."""
    s: Any = run.scheduler
    pool = s.block_pool
    in_flight = run._in_flight

    def blocks(request: Any) -> tuple:
        return tuple((b.key, b.ref_cnt) for b in getattr(request, "kv_blocks", ()))

    cache: tuple = ()
    if hasattr(pool, "_free_hashed"):
        cache = (
            tuple((b.key, b.ref_cnt) for b in pool._free_unhashed),
            tuple((b.key, b.ref_cnt) for b in pool._free_hashed),
            len(pool._cached),
            pool.num_evicted,
        )
    return (
        run.clock.step,
        run.clock.now,
        run.result.num_steps,
        run.result.end_s,
        pool.num_free_blocks,
        cache,
        None if in_flight is None else (in_flight.step, tuple(in_flight.num_scheduled_tokens)),
        run._in_flight_end,
        tuple(
            (step, tuple(scheduled.items()), tuple(r.request_id for r in sampled))
            for step, (scheduled, sampled) in s._in_flight_steps.items()
        ),
        tuple(
            (
                r.request_id,
                r.num_computed_tokens,
                r.num_output_tokens,
                r.num_output_placeholders,
                r.num_blocks,
                getattr(r, "num_cached_blocks", 0),
                blocks(r),
                r.status,
            )
            for r in s.running
        ),
        tuple(r.request_id for r in s.waiting),
        s._evicted_seen,
    )


def _reference(requests: list[EngineRequest], config: EngineConfig, client=None):  # type: ignore[no-untyped-def]
    """The step-by-step run, with a snapshot after every step (by the clock's next step)."""
    run = EngineRun(requests, config, BuiltinHost(), client=client, calm_leaps=False)
    snapshots = {}
    while run.step():
        snapshots[run.clock.step] = _snapshot(run)
    run.result.num_decisions = run.num_decisions  # (as run_to_end sets it)
    return run.result, snapshots


def _leapt(
    requests: list[EngineRequest],
    config: EngineConfig,
    monkeypatch: pytest.MonkeyPatch,
    client=None,
) -> tuple[EngineResult, dict[int, tuple], int]:
    """The run with leaps (consistency checked after each), its snapshots after each leap."""
    after: dict[int, tuple] = {}
    leapt = [0]
    original = EngineRun._calm_leap

    def counted(run: EngineRun, limit: int | None) -> int:
        taken = original(run, limit)
        if taken:
            leapt[0] += taken
            after[run.clock.step] = _snapshot(run)
        return taken

    monkeypatch.setattr(EngineRun, "_calm_leap", counted)
    run = EngineRun(requests, config, BuiltinHost(), client=client, check_consistency=True)
    assert run.calm_leaps, "the configuration must take calm leaps"
    return run.run_to_end(), after, leapt[0]


def _check(
    requests: list[EngineRequest],
    config: EngineConfig,
    monkeypatch: pytest.MonkeyPatch,
    client=None,  # type: ignore[no-untyped-def]
) -> tuple[int, int]:
    """Leaps against steps: records, totals and the state after every leap.

    Returns the steps leapt and the steps run.
    """
    expected, snapshots = _reference(requests, config, client)
    got, after, leapt = _leapt(requests, config, monkeypatch, client)
    assert_same_results(got, expected)
    for step, state in after.items():
        assert state == snapshots[step], f"state after the leap to step {step}"
    return leapt, expected.num_steps


def _random_case(seed: int) -> tuple[list[EngineRequest], EngineConfig, ClientModel | None]:
    """A seeded workload and async configuration: pool, batch, budget, content, policies."""
    rng = random.Random(seed)
    block_size = rng.choice([4, 16])
    num_blocks = rng.randrange(24, 160)
    requests = [
        dataclasses.replace(
            r,
            arrival_s=round(r.arrival_s * rng.choice([0.3, 1.0, 5.0]), 3),
            max_tokens=rng.choice([r.max_tokens, r.output_tokens, r.output_tokens + 2]),
        )
        for r in random_content(seed, rng.randrange(10, 40))
    ]
    config = make_engine(
        num_blocks,
        block_size=block_size,
        max_num_seqs=rng.choice([2, 4, 16]),
        max_num_batched_tokens=rng.choice([8, 64, 512]),
        max_model_len=rng.choice([None, (num_blocks - 1) * block_size // 2]),
        async_scheduling=True,
        enable_prefix_caching=rng.random() < 0.7,
        scheduling_policy=rng.choice(["fcfs", "priority"]),
        long_prefill_token_threshold=rng.choice([0, 0, 48]),
        **rng.choice([{}, {"clock": "cost-model"}]),
    )
    client = rng.choice([None, None, ClientModel(ttft_timeout_s=rng.choice([2.0, 30.0]))])
    return requests, config, client


@pytest.mark.parametrize("seed", range(24))
def test_random_async_runs_leap_to_the_step_by_step_run(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, config, client = _random_case(seed)
    _check(requests, config, monkeypatch, client)


def test_random_runs_take_leaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded cases above leap in most runs (so their comparisons test something)."""
    leaping = 0
    for seed in range(24):
        requests, config, client = _random_case(seed)
        leaping += _leapt(requests, config, monkeypatch, client)[2] > 0
        monkeypatch.undo()
    assert leaping >= 18


@pytest.mark.parametrize(
    "changes",
    [{}, {"enable_prefix_caching": False}, {"clock": "steps", "step_s": 0.05}],
    ids=["vllm-defaults", "no-prefix-caching", "steps-clock"],
)
def test_azure_sample_at_vllms_defaults(changes: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped sample (120 requests at twice their rate) on vLLM's defaults, 300 blocks.

    A waiting request is refused for blocks at most steps (the pool is tight), so the leaps
    must carry that refusal, the block takes that evict cached blocks, and the keying of
    full blocks.
    """
    workload = load_workload(AZURE, limit=120, rate_scale=2.0)
    config = EngineConfig(num_blocks=300, max_model_len=4608, **changes)
    leapt, steps = _check(engine_requests(workload), config, monkeypatch)
    assert leapt > 0.5 * steps


def test_a_run_with_max_steps_stops_inside_a_leap() -> None:
    requests = random_content(3, 20)
    config = make_engine(200, async_scheduling=True, enable_prefix_caching=True)
    full = EngineRun(requests, config, BuiltinHost(), calm_leaps=False)
    leaping = EngineRun(requests, config, BuiltinHost())
    for chunk in (7, 13, 1, 40, 1000):
        a = full.run_to_end(max_steps=chunk)
        b = leaping.run_to_end(max_steps=chunk)
        assert_same_results(b, a)
        assert _snapshot(leaping) == _snapshot(full)


def test_sync_scheduling_and_subclasses_do_not_leap() -> None:
    """Leaps are for vLLM's own async schedulers; the synchronous loop steps one at a time."""
    requests = random_content(1, 5)
    assert not EngineRun(requests, make_engine(60), BuiltinHost()).calm_leaps
    assert EngineRun(requests, make_engine(60, async_scheduling=True), BuiltinHost()).calm_leaps
