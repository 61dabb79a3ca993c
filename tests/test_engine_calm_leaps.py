"""SGLang mode's calm leaps: runs of calm decode steps taken in one go give the step-by-step run.

The step-by-step run is the reference (it matches SGLang 0.5.23's real objects step for step,
``tests/test_engine_sglang_fixtures.py``). A run with leaps must give the same step records,
request records, decisions and totals, and the scheduler must be, after each leap, in the state
the step-by-step run reaches at that step. Each test also checks that leaps were taken, so that
it cannot pass by never leaping.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import assert_same_results

from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest
from tracekit.engine.engine import EngineResult, EngineRun
from tracekit.engine.sglang import RadixTree, SglangScheduler
from tracekit.errors import ConfigError
from tracekit.sglang.compare import engine_requests
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.sglang.record import read_sglang_scenario
from tracekit.workloads.client import ClientModel

ROOT = Path(__file__).resolve().parents[1]


class _Leaps:
    """Counts the steps a run took by leaps, and snapshots the scheduler after each leap."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps = 0
        self.leaps = 0
        self.after: dict[int, tuple] = {}
        original = EngineRun._calm_leap

        def counted(run: EngineRun, limit: int | None) -> int:
            taken = original(run, limit)
            if taken:
                self.steps += taken
                self.leaps += 1
                self.after[run.clock.step] = _snapshot(run)
            return taken

        monkeypatch.setattr(EngineRun, "_calm_leap", counted)


def _snapshot(run: EngineRun) -> tuple:
    """What the next step depends on: the scheduler's counters and every request's."""
    s: Any = run.scheduler
    in_flight = s._in_flight
    return (
        run.clock.step,
        run.clock.now,
        s.new_token_ratio,
        s.block_pool.num_free_blocks,
        s.outputs_end_s,
        s.batch_is_full,
        None
        if in_flight is None
        else (
            in_flight.end_s,
            in_flight.out.step,
            in_flight.out.time_s,
            tuple(in_flight.out.num_scheduled_tokens.items()),
            in_flight.out.kv_tokens_read,
            tuple(r.request_id for r in in_flight.reqs),
        ),
        tuple(
            (r.request_id, r.num_computed_tokens, r.num_output_tokens, r.num_blocks, r.status)
            for r in s.running
        ),
        tuple(r.request_id for r in s.waiting),
        run.result.num_steps,
        run.result.end_s,
        s._refresh_calls,
        dict(s._prefix),
        None if s.radix is None else _tree(s.radix),
    )


def _tree(radix: RadixTree) -> tuple:
    """The radix tree as eviction reads it: every node's tokens, times and lock, and totals."""
    nodes = []
    stack = [radix.root]
    while stack:
        node = stack.pop()
        nodes.append((node.created, node.access, node.lock, tuple(node.key)))
        stack.extend(node.children.values())
    return radix.clock, radix.evictable, radix.protected, tuple(sorted(nodes))


def _run(
    requests: list[EngineRequest],
    config: EngineConfig,
    *,
    leaps: bool,
    client: ClientModel | None = None,
    check: bool = True,
) -> EngineResult:
    return EngineRun(
        requests, config, BuiltinHost(), client=client, calm_leaps=leaps, check_consistency=check
    ).run_to_end()


def _fixture(name: str) -> tuple[list[EngineRequest], EngineConfig]:
    config, rows = read_sglang_scenario(ROOT / FIXTURES_DIR / name)
    return engine_requests(rows), config.engine_config()


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_leaps_give_the_step_by_step_run_on_every_fixture(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, config = _fixture(name)
    # (The consistency checks after every step run in the tests below, on fewer runs.)
    reference = _run(requests, config, leaps=False, check=False)
    leaps = _Leaps(monkeypatch)
    assert_same_results(_run(requests, config, leaps=True, check=False), reference)
    assert leaps.leaps > 0


@pytest.mark.parametrize(
    "name",
    [
        "azure-radix-length-overlap",
        "azure-noradix-length",
        "priority-high-overlap",
        "priority-high-retract-noradix-overlap",
        "priority-high-retract",
        "azure-late-radix-priority-high-overlap",
    ],
)
def test_after_each_leap_the_scheduler_is_where_the_step_by_step_run_is(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, config = _fixture(name)
    reference = EngineRun(requests, config, BuiltinHost(), calm_leaps=False)
    at_step = {}
    while reference.step():
        # (The first state at each step: a call that forms no batch takes no step.)
        at_step.setdefault(reference.clock.step, _snapshot(reference))
    leaps = _Leaps(monkeypatch)
    EngineRun(requests, config, BuiltinHost()).run_to_end()
    assert len(leaps.after) >= 5  # (the test has teeth)
    for step, state in leaps.after.items():
        assert state == at_step[step], f"after the leap ending before step {step}"


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("clock", ["steps", "cost-model"])
def test_leaps_under_client_cancels_on_both_clocks(
    clock: str, overlap: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TTFT timeouts that cancel mid-run, on the steps clock and the cost model's sums."""
    requests, config = _fixture("azure-late-radix-length")
    config = dataclasses.replace(
        config, clock=clock, cost_model="a6000-llama3-8b", overlap_schedule=overlap
    )
    client = ClientModel(ttft_timeout_s=2.0 if clock == "cost-model" else 1.0)
    reference = _run(requests, config, leaps=False, client=client)
    assert reference.num_aborted > 0  # (the timeout cancels some: the bound is exercised)
    leaps = _Leaps(monkeypatch)
    assert_same_results(_run(requests, config, leaps=True, client=client), reference)
    assert leaps.leaps > 0


def test_max_steps_stops_inside_a_leap_where_the_steps_would() -> None:
    requests, config = _fixture("azure-radix-length-overlap")
    stepped = EngineRun(requests, config, BuiltinHost(), calm_leaps=False)
    leaping = EngineRun(requests, config, BuiltinHost())
    for chunk in (7, 150, 1, 333, 40):
        for _ in range(chunk):
            stepped.step()
        leaping.run_to_end(max_steps=chunk)
        assert _snapshot(leaping) == _snapshot(stepped)
    assert leaping.run_to_end().steps == stepped.run_to_end().steps


def test_a_hand_worked_calm_run() -> None:
    """Two requests alone on a steps clock (normal loop), worked out by hand.

    Both arrive at 0 with 10-token prompts and ask for 40 and 25 outputs. Step 0 prefills both
    (20 tokens) and its result gives each its first token; every later step decodes both until
    the second finishes at its 25th output (end of step 24), then the first alone until its
    40th (end of step 39). With ``step_s`` 0.02, step k ends at ``k * 0.02 + 0.02``.
    """
    config = EngineConfig(
        mode="sglang", clock="steps", step_s=0.02, block_size=1, num_blocks=1000,
        radix_cache=False, overlap_schedule=False,
    )  # fmt: skip
    requests = [
        EngineRequest("a", 0.0, 10, 40, max_tokens=40),
        EngineRequest("b", 0.0, 10, 25, max_tokens=25),
    ]
    result = EngineRun(requests, config, BuiltinHost()).run_to_end()
    assert result.num_steps == 40
    assert [s.num_prefill_tokens for s in result.steps[:1]] == [20]
    assert [s.num_decode_tokens for s in result.steps[1:25]] == [2] * 24
    assert [s.num_decode_tokens for s in result.steps[25:]] == [1] * 15
    finish = {r.request_id: r.finish_s for r in result.requests}
    assert finish["b"] == pytest.approx(24 * 0.02 + 0.02)
    assert finish["a"] == pytest.approx(39 * 0.02 + 0.02)
    # The KV in use at step k: prompts plus the tokens decoded so far.
    assert result.steps[10].kv_blocks_used == 20 + 2 * 10


@pytest.mark.parametrize(
    "name",
    [
        "azure-late-noradix-priority-high",
        "azure-late-noradix-priority-high-overlap",
        "priority-high-retract-noradix",
        "priority-high-retract-noradix-overlap",
        "azure-late-radix-priority-high",
        "azure-late-radix-priority-high-overlap",
        "priority-high-retract",
        "priority-high-retract-overlap",
    ],
)
def test_leaps_over_refused_admissions_under_priority_preemption(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With priority preemption every step tries the waiting head; leaps cover the refusals.

    These fixtures (SGLang's priority scheduling with preemption, the radix cache on and off)
    spend most steps refusing the head for memory; most of their steps must be taken by leaps with
    requests waiting, and the run must still be the step-by-step one.
    """
    requests, config = _fixture(name)
    assert config.enable_priority_scheduling and not config.disable_priority_preemption
    reference = _run(requests, config, leaps=False)
    refused = 0
    original = EngineRun._calm_leap

    def counted(run: EngineRun, limit: int | None) -> int:
        nonlocal refused
        waiting = bool(run.scheduler.waiting)
        taken = original(run, limit)
        refused += taken if waiting else 0
        return taken

    monkeypatch.setattr(EngineRun, "_calm_leap", counted)
    assert_same_results(_run(requests, config, leaps=True), reference)
    assert refused > 0.5 * reference.num_steps


@pytest.mark.parametrize("radix", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_a_refused_head_admitted_part_way_through_a_run_of_calm_steps(
    overlap: bool, radix: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal check must flip at the very step the step-by-step run admits.

    Two requests of 1,500 outputs run on a 3,000-token pool; a third with an 800-token prompt
    arrives at step 5 and is refused: the two reserve ``1,500 * new_token_ratio`` each. The
    reservation shrinks faster (the ratio decays, outputs grow) than the pool fills (two
    tokens a step), so the head is admitted about 90 steps later, with no other event near:
    inside what would otherwise be one leap. A short fourth request leaves its 310 tokens in
    the radix tree (evictable, so counted as available) when the cache is on.
    """
    config = EngineConfig(
        mode="sglang", clock="steps", step_s=0.02, block_size=1, num_blocks=3000,
        max_num_seqs=8, radix_cache=radix, overlap_schedule=overlap,
        enable_priority_scheduling=True,
    )  # fmt: skip
    requests = [
        EngineRequest("a", 0.0, 100, 1500, max_tokens=1500),
        EngineRequest("b", 0.0, 100, 1500, max_tokens=1500),
        EngineRequest("d", 0.0, 300, 10, max_tokens=10),
        EngineRequest("c", 0.3, 900 if radix else 800, 100, max_tokens=100),
    ]
    reference = _run(requests, config, leaps=False)
    admitted = round(
        next(r for r in reference.requests if r.request_id == "c").first_scheduled_s / 0.02
    )
    assert 50 < admitted < 150
    verdicts: list[tuple[int, int, int]] = []  # (step, bound, steps refused)
    at_step = [0]
    original_leap = EngineRun._calm_leap
    original = SglangScheduler._refused_admissions

    def leap(run: EngineRun, limit: int | None) -> int:
        at_step[0] = run.clock.step
        return original_leap(run, limit)

    def recorded(scheduler: SglangScheduler, bound: int) -> int:
        verdicts.append((at_step[0], bound, original(scheduler, bound)))
        return verdicts[-1][2]

    monkeypatch.setattr(EngineRun, "_calm_leap", leap)
    monkeypatch.setattr(SglangScheduler, "_refused_admissions", recorded)
    assert_same_results(_run(requests, config, leaps=True), reference)
    # The leap before the admission stops exactly at it (neither later, nor earlier).
    stops = [step + refused for step, bound, refused in verdicts if 0 < refused < bound]
    assert stops == [admitted], verdicts


def test_leaps_that_evict_the_radix_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool full of cached tokens: calm steps evict the tree, step by step, as decodes do."""
    requests, config = _fixture("retract-many-radix-overlap")
    reference = _run(requests, config, leaps=False)
    evicting = 0
    original = SglangScheduler.apply_calm_decodes

    def counted(scheduler: SglangScheduler, *args: Any) -> list[int] | None:
        nonlocal evicting
        evicted = original(scheduler, *args)
        evicting += bool(evicted and sum(evicted))
        return evicted

    monkeypatch.setattr(SglangScheduler, "apply_calm_decodes", counted)
    assert_same_results(_run(requests, config, leaps=True), reference)
    assert evicting >= 10
    assert sum(s.num_evicted_blocks for s in reference.steps) > 0


def _random_case(seed: int) -> tuple[list[EngineRequest], EngineConfig, ClientModel]:
    """A seeded random SGLang-mode run: pool, batch, chunking, priorities, radix, loops, clocks.

    Requests arrive in bursts and lulls, share content blocks with the radix cache on, some
    with ``ignore_eos``, some ``max_tokens`` above their outputs, some under a TTFT timeout.
    """
    rng = random.Random(seed)
    radix = rng.random() < 0.6
    priority = rng.random() < 0.5
    config = EngineConfig(
        mode="sglang", clock=rng.choice(["steps", "cost-model"]),
        step_s=rng.choice([0.01, 0.02, 0.05]), block_size=1, num_blocks=rng.randint(600, 6000),
        max_num_seqs=rng.randint(2, 48), radix_cache=radix,
        overlap_schedule=rng.random() < 0.6,
        chunked_prefill_size=rng.choice([None, 256, 512, 2048]),
        enable_priority_scheduling=priority,
        schedule_low_priority_values_first=rng.random() < 0.5,
        disable_priority_preemption=rng.random() < 0.3,
        retraction_policy=rng.choice(["length", "priority"]) if priority else "length",
        max_model_len=8192,
    )  # fmt: skip
    requests = []
    arrival = 0.0
    for i in range(rng.randint(5, 120)):
        arrival += rng.expovariate(rng.choice([2.0, 10.0, 40.0]))
        output = rng.randint(1, 400)
        shared = radix and rng.random() < 0.5
        content = tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 3))) if shared else ()
        requests.append(
            EngineRequest(
                f"r{i}", round(arrival, 3), rng.randint(10, 500), output,
                max_tokens=output + rng.choice([0, 0, 50]), priority=rng.randint(0, 20),
                content_ids=content, content_block_tokens=64, ignore_eos=rng.random() < 0.2,
            )
        )  # fmt: skip
    return requests, config, ClientModel(ttft_timeout_s=rng.choice([None, None, 1.0, 3.0]))


@pytest.mark.parametrize("seed", range(30))
def test_leaps_give_the_step_by_step_run_on_random_runs(seed: int) -> None:
    """A differential check over seeded random configurations (both outcomes: a run or an error)."""
    requests, config, client = _random_case(seed)
    outcomes = []
    for leaps in (False, True):
        try:
            outcomes.append(_run(requests, config, leaps=leaps, client=client))
        except ConfigError as error:  # (a run stuck for good: the same error both ways)
            outcomes.append(str(error))  # type: ignore[arg-type]
    reference, leaping = outcomes
    if isinstance(reference, str):
        assert leaping == reference
    else:
        assert isinstance(leaping, EngineResult)
        assert_same_results(leaping, reference)
