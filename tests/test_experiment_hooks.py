"""The legacy adapter's scheduler hooks, hand-built states.

The rules: docs/experiments.md, "Experiment mode in the engine".

Scenarios are built directly in a :class:`HookedVllmScheduler`: ``num_blocks=101`` leaves 100
usable blocks (block 0 is vLLM's null block), so KV usage is ``blocks held / 100``. A decoding
request with ``output`` tokens has ``prompt + output - 1`` computed tokens at the start of a step
(its last sampled token is not computed yet).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from bidkv.legacy.baselines.base import BaselineCandidate as StrategyRequest
from bidkv.legacy.baselines.base import CompressionAction
from bidkv.legacy.baselines.registry import create_default_registry
from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
from tracekit.engine.block_pool import cdiv
from tracekit.engine.outputs import DecisionRecord
from tracekit.engine.request import RequestStatus, SchedulerRequest
from tracekit.experiment.hooks import (
    LEGACY_STRATEGIES,
    ExperimentHooks,
    HookedVllmScheduler,
    HookSettings,
    keep_score,
)


class Scenario:
    """A hooked scheduler whose running and waiting queues are set by hand."""

    def __init__(
        self, name: str, *, settings: HookSettings | None = None, seed: int = 0, **hooks: Any
    ) -> None:
        # The original runner's engine: prefix caching off, synchronous scheduling.
        self.config = EngineConfig(
            num_blocks=101, block_size=16, max_num_seqs=16, max_num_batched_tokens=4000,
            max_model_len=1600, enable_prefix_caching=False, async_scheduling=False,
        )  # fmt: skip
        self.decisions: list[DecisionRecord] = []
        self.hooks = ExperimentHooks(name, settings=settings, seed=seed, **hooks)
        self.scheduler: HookedVllmScheduler = self.hooks.make_scheduler(
            self.config, BuiltinHost(), self.decisions.append
        )
        self._index = 0

    def _state(
        self, request_id: str, prompt: int, max_tokens: int, arrival: float
    ) -> SchedulerRequest:
        state = SchedulerRequest(
            EngineRequest(request_id, arrival, prompt, 10_000, max_tokens), self._index
        )
        self._index += 1
        return state

    def run(
        self,
        request_id: str,
        prompt: int,
        *,
        output: int = 0,
        computed: int | None = None,
        blocks: int | None = None,
        preemptions: int = 0,
        max_tokens: int = 256,
    ) -> SchedulerRequest:
        """Add a RUNNING request holding ``blocks`` (default: what its computed tokens need)."""
        state = self._state(request_id, prompt, max_tokens, 0.0)
        state.num_output_tokens = output
        state.num_computed_tokens = (
            computed if computed is not None else prompt + output - 1 if output else prompt
        )
        state.num_preemptions = preemptions
        held = blocks if blocks is not None else cdiv(state.num_computed_tokens, 16)
        self.scheduler.block_pool.allocate(held)
        state.num_blocks = held
        state.status = RequestStatus.RUNNING
        self.scheduler.requests[request_id] = state
        self.scheduler.running.append(state)
        return state

    def wait(self, request_id: str, prompt: int, *, max_tokens: int = 256) -> SchedulerRequest:
        state = self._state(request_id, prompt, max_tokens, 0.0)
        self.scheduler.add_request(state)
        return state

    @property
    def running_ids(self) -> list[str]:
        return [r.request_id for r in self.scheduler.running]

    @property
    def waiting_ids(self) -> list[str]:
        return [r.request_id for r in self.scheduler.waiting]

    def usage(self) -> float:
        return self.scheduler.block_pool.get_usage()


# ---------------------------------------------------------------------------------- admission
def test_sjf_admission_sorts_waiting_by_prompt_stably() -> None:
    s = Scenario("static-random")
    for request_id, prompt in (("w1", 300), ("w2", 100), ("w3", 300), ("w4", 50)):
        s.wait(request_id, prompt)
    assert s.hooks.reorder_waiting(s.scheduler)
    # Shortest prompt first; w1 and w3 (both 300) keep their arrival order.
    assert s.waiting_ids == ["w4", "w2", "w1", "w3"]


@pytest.mark.parametrize(
    "strategy", ["preempt-evict-sjf", "static-random", "largest-first", "bidkv"]
)
def test_every_strategy_but_preempt_evict_uses_sjf(strategy: str) -> None:
    s = Scenario(strategy)
    s.wait("long", 500)
    s.wait("short", 10)
    s.hooks.reorder_waiting(s.scheduler)
    assert s.waiting_ids == ["short", "long"]


def test_preempt_evict_keeps_fcfs_admission() -> None:
    s = Scenario("preempt-evict")
    s.wait("long", 500)
    s.wait("short", 10)
    assert not s.hooks.reorder_waiting(s.scheduler)
    assert s.waiting_ids == ["long", "short"]


def test_a_preempted_request_at_the_front_is_sorted_too() -> None:
    s = Scenario("bidkv")
    s.wait("w", 50)
    victim = s.run("v", 400, output=20)
    s.scheduler.preempt_outside_step(victim, 0, 0.0, "test")
    assert s.waiting_ids == ["v", "w"]  # vLLM prepends a preempted request
    s.hooks.reorder_waiting(s.scheduler)
    assert s.waiting_ids == ["w", "v"]


# ---------------------------------------------------------------------------------- cache
class RecordingStrategy:
    """A select_victims strategy that records its inputs and returns a fixed order."""

    def __init__(self, order: Sequence[str]) -> None:
        self.order = list(order)
        self.calls: list[tuple[list[StrategyRequest], int, dict[str, Any]]] = []

    def select_victims(
        self, candidates: Sequence[StrategyRequest], needed_tokens: int, **kwargs: Any
    ) -> list[CompressionAction]:
        self.calls.append((list(candidates), needed_tokens, kwargs))
        return [CompressionAction(rid, "evict", 1) for rid in self.order]


def test_refresh_builds_request_states_as_the_adapter_did() -> None:
    strategy = RecordingStrategy(["b"])
    s = Scenario("largest-first", strategy=strategy)
    s.wait("a", 100)
    s.hooks.before_schedule(s.scheduler, 0, 0.5)  # stamps a's first sighting at 500 ms
    waiting_a = s.scheduler.waiting.pop_request()
    # a runs: 100-token prompt, 30 outputs; b was preempted once and is recomputing its prompt.
    waiting_a.status = RequestStatus.RUNNING
    waiting_a.num_output_tokens = 30
    waiting_a.num_computed_tokens = 129
    s.scheduler.running.append(waiting_a)
    s.run("b", 200, output=12, computed=64, preemptions=1, max_tokens=50)
    s.hooks.last_refresh_s = -math.inf
    assert s.hooks.refresh_priority_cache(s.scheduler, 4.0)
    (candidates, needed, kwargs) = strategy.calls[0]
    a, b = candidates
    assert kwargs == {}
    assert (a.request_id, a.current_tokens, a.num_computed_tokens) == ("a", 130, 129)
    assert (a.arrival_time_ms, a.priority, a.deadline_ms) == (500.0, -500.0, 120_500.0)
    assert (a.num_prompt_tokens, a.max_output_tokens, a.num_preemptions) == (100, 256, 0)
    assert len(a.token_ids) == 130
    # current_tokens is prompt + output so far, not the KV-resident (computed) tokens,
    # and a preemption does not reset it. b was first seen at the refresh (4 s).
    assert (b.current_tokens, b.num_computed_tokens, b.num_preemptions) == (212, 64, 1)
    assert (b.arrival_time_ms, b.max_output_tokens) == (4000.0, 50)
    assert needed == 130 + 212
    # The i-th action gets priority i; every other running request len(actions) + 100.
    assert s.hooks.priority_cache == {"b": 0.0, "a": 101.0}


def test_refresh_interval_runs_from_the_last_attempt() -> None:
    s = Scenario("bidkv")
    s.run("a", 100, output=5)
    # t=0: due (never refreshed), stamped, but one running request is too few.
    assert not s.hooks.refresh_priority_cache(s.scheduler, 0.0)
    assert s.hooks.last_refresh_s == 0.0 and s.hooks.priority_cache == {}
    s.run("b", 100, output=9)
    assert not s.hooks.refresh_priority_cache(s.scheduler, 2.999)  # < 3 s since the attempt
    assert s.hooks.refresh_priority_cache(s.scheduler, 3.0)
    assert set(s.hooks.priority_cache) == {"a", "b"}
    assert not s.hooks.refresh_priority_cache(s.scheduler, 5.9)
    assert s.hooks.stats.refresh_attempts == 2 and s.hooks.stats.cache_refreshes == 1


@pytest.mark.parametrize("strategy", ["preempt-evict", "preempt-evict-sjf"])
def test_fcfs_strategies_never_cache(strategy: str) -> None:
    s = Scenario(strategy)
    s.run("a", 100, output=5)
    s.run("b", 100, output=9)
    assert not s.hooks.refresh_priority_cache(s.scheduler, 10.0)
    assert s.hooks.priority_cache == {}


def test_bidkv_cache_follows_the_strategy_and_skips_one_token_requests() -> None:
    s = Scenario("bidkv")
    s.run("a", 100, output=50, max_tokens=256)
    s.run("tiny", 1, computed=1)  # current_tokens 1: never a bidkv victim
    s.run("c", 300, output=2)
    s.hooks.refresh_priority_cache(s.scheduler, 0.0)
    states = [s.hooks._strategy_request(r, 0.0) for r in s.scheduler.running]
    actions = create_default_registry().get("bidkv").select_victims(states, 150 + 1 + 302)
    expected = {a.request_id: float(i) for i, a in enumerate(actions)}
    assert set(expected) == {"a", "c"}
    assert s.hooks.priority_cache == {**expected, "tiny": 102.0}


def test_bidkv_ranks_at_most_the_original_solver_cap() -> None:
    s = Scenario("bidkv", settings=HookSettings(bidkv_ranked_cap=2))
    for i, output in enumerate((10, 40, 70, 100)):
        s.run(f"r{i}", 100, output=output)
    s.hooks.refresh_priority_cache(s.scheduler, 0.0)
    ranked = {k: v for k, v in s.hooks.priority_cache.items() if v < 100}
    assert sorted(ranked.values()) == [0.0, 1.0]
    assert sorted(v for v in s.hooks.priority_cache.values() if v >= 100) == [102.0, 102.0]
    uncapped = Scenario("bidkv", settings=HookSettings(bidkv_ranked_cap=None))
    for i, output in enumerate((10, 40, 70, 100)):
        uncapped.run(f"r{i}", 100, output=output)
    uncapped.hooks.refresh_priority_cache(uncapped.scheduler, 0.0)
    assert sorted(uncapped.hooks.priority_cache.values()) == [0.0, 1.0, 2.0, 3.0]


def test_static_random_draws_one_seeded_seed_per_refresh() -> None:
    def caches(seed: int) -> tuple[list[dict[str, float]], list[int]]:
        s = Scenario("static-random", seed=seed)
        for i in range(6):
            s.run(f"r{i}", 50, output=3)
        seen = []
        for now in (0.0, 3.0, 6.0):
            s.hooks.refresh_priority_cache(s.scheduler, now)
            seen.append(dict(s.hooks.priority_cache))
        return seen, s.hooks.stats.strategy_seeds

    first, seeds = caches(7)
    again, seeds_again = caches(7)
    assert first == again and seeds == seeds_again
    generator = random.Random(7)
    assert seeds == [generator.getrandbits(32) for _ in range(3)]
    assert len({tuple(sorted(c, key=c.__getitem__)) for c in first}) > 1  # orders differ
    assert caches(8)[1] != seeds


# ---------------------------------------------------------------------------------- proactive
def proactive_scenario(strategy: str = "static-random", **settings: Any) -> Scenario:
    """Three running requests at 90 % KV (30 blocks each), one waiting, a cache choosing b."""
    s = Scenario(strategy, settings=HookSettings(**settings))
    for request_id in ("a", "b", "c"):
        s.run(request_id, 400, output=5, blocks=30)
    s.wait("w", 50)
    s.hooks.priority_cache = {"a": 3.0, "b": 1.0, "c": 1.0}
    return s


def test_proactive_preempts_the_first_lowest_cached_priority() -> None:
    s = proactive_scenario()
    assert s.usage() == pytest.approx(0.90)
    victim = s.hooks.proactive_preempt(s.scheduler, 7, 10.0)
    assert victim is not None and victim.request_id == "b"  # b and c tie at 1.0: the first
    assert s.running_ids == ["a", "c"] and s.waiting_ids == ["b", "w"]
    assert victim.status == RequestStatus.PREEMPTED and victim.num_computed_tokens == 0
    assert victim.num_blocks == 0 and victim.num_preemptions == 1
    assert s.usage() == pytest.approx(0.60)
    (decision,) = s.decisions
    assert (decision.seq, decision.step, decision.time_s) == (0, 7, 10.0)
    assert decision.requesting_request_id == "" and decision.kv_cache_usage == pytest.approx(0.9)
    assert [c.request_id for c in decision.candidates] == ["a", "b", "c"]
    assert (decision.outcome, decision.victim_id, decision.raw_result) == ("selected", "b", "b")
    assert decision.builtin_victim_id == "c" and decision.decision_reason == "proactive"
    assert s.hooks.last_proactive_s == 10.0
    stats = s.hooks.stats
    assert (stats.proactive_preemptions, stats.total_evictions, stats.total_tokens_freed) == (
        1, 1, 404,
    )  # fmt: skip


def test_proactive_cooldown_is_five_engine_seconds() -> None:
    s = proactive_scenario()
    s.hooks.last_proactive_s = 10.0
    assert s.hooks.proactive_preempt(s.scheduler, 0, 14.999) is None
    assert s.hooks.proactive_preempt(s.scheduler, 0, 15.0) is not None


@pytest.mark.parametrize(
    "change",
    ["no waiting", "two running", "kv below 0.90", "empty cache", "all uncached"],
)
def test_each_proactive_gate_blocks(change: str) -> None:
    s = proactive_scenario()
    if change == "no waiting":
        s.scheduler.waiting.pop_request()
    elif change == "two running":
        dropped = s.scheduler.running.pop()
        s.scheduler.block_pool.free(dropped.num_blocks)
        s.scheduler.block_pool.allocate(30)  # keep KV at 0.90
    elif change == "kv below 0.90":
        s.scheduler.block_pool.free(1)
    elif change == "empty cache":
        s.hooks.priority_cache = {}
    else:
        s.hooks.priority_cache = {"someone-else": 0.0}
    assert s.hooks.proactive_preempt(s.scheduler, 0, 10.0) is None
    assert s.decisions == []


@pytest.mark.parametrize("strategy", ["preempt-evict", "preempt-evict-sjf", "bidkv"])
def test_proactive_is_off_for_pe_pe_sjf_and_bidkv(strategy: str) -> None:
    s = proactive_scenario(strategy)
    assert s.hooks.proactive_preempt(s.scheduler, 0, 10.0) is None


@pytest.mark.parametrize("strategy", ["static-random", "largest-first"])
def test_proactive_fires_at_the_gate_values(strategy: str) -> None:
    s = proactive_scenario(strategy)  # exactly 3 running, exactly 0.90, exactly 5 s
    s.hooks.last_proactive_s = 5.0
    assert s.hooks.proactive_preempt(s.scheduler, 0, 10.0) is not None


# ---------------------------------------------------------------------------------- SRPT
def srpt_scenario(strategy: str = "largest-first", *, a_max_tokens: int = 256) -> Scenario:
    """KV 0.80; a: 49 outputs so far (computed 100 + 49), b: preempted twice, c: 4 outputs."""
    s = Scenario(strategy)
    s.run("a", 100, output=50, blocks=30, max_tokens=a_max_tokens)
    s.run("b", 100, output=20, blocks=30, preemptions=2)
    s.run("c", 100, output=5, blocks=20)
    s.wait("w1", 50, max_tokens=100)  # cost 150: the cheapest waiting request
    s.wait("w2", 40, max_tokens=200)  # cost 240
    return s


def test_srpt_preempts_the_longest_remaining_eligible_request() -> None:
    s = srpt_scenario()
    assert s.usage() == pytest.approx(0.80)
    victim = s.hooks.srpt_preempt(s.scheduler, 3, 20.0)
    # a: remaining 256 - 49 = 207 >= 1.2 * 150; b has 2 preemptions, c fewer than 10 outputs.
    assert victim is not None and victim.request_id == "a"
    (decision,) = s.decisions
    assert decision.decision_reason == "srpt" and decision.outcome == "selected"
    assert decision.builtin_victim_id == "c" and decision.requesting_request_id == ""
    assert s.waiting_ids[0] == "a" and s.hooks.last_srpt_s == 20.0
    assert (s.hooks.stats.srpt_preemptions, s.hooks.stats.total_tokens_freed) == (1, 207)


def test_srpt_fires_only_when_remaining_reaches_1_2_times_the_cheapest_waiting() -> None:
    # remaining = max_tokens - 49: 229 - 49 = 180 = 1.2 * 150 fires; 179 does not.
    s = srpt_scenario(a_max_tokens=229)
    assert s.hooks.srpt_preempt(s.scheduler, 0, 20.0) is not None
    s = srpt_scenario(a_max_tokens=228)
    assert s.hooks.srpt_preempt(s.scheduler, 0, 20.0) is None


def test_srpt_cooldown_is_one_and_a_half_engine_seconds() -> None:
    s = srpt_scenario()
    s.hooks.last_srpt_s = 10.0
    assert s.hooks.srpt_preempt(s.scheduler, 0, 11.499) is None
    assert s.hooks.srpt_preempt(s.scheduler, 0, 11.5) is not None


@pytest.mark.parametrize("change", ["no waiting", "two running", "kv below 0.80", "no victim"])
def test_each_srpt_gate_blocks(change: str) -> None:
    s = srpt_scenario()
    if change == "no waiting":
        s.scheduler.waiting.pop_request()
        s.scheduler.waiting.pop_request()
    elif change == "two running":
        dropped = s.scheduler.running.pop()
        s.scheduler.block_pool.free(dropped.num_blocks)
        s.scheduler.block_pool.allocate(20)
    elif change == "kv below 0.80":
        s.scheduler.block_pool.free(1)
    else:
        s.scheduler.running[0].num_preemptions = 2
    assert s.hooks.srpt_preempt(s.scheduler, 0, 20.0) is None
    assert s.decisions == []


@pytest.mark.parametrize("strategy", ["preempt-evict", "preempt-evict-sjf", "bidkv"])
def test_srpt_is_off_for_pe_pe_sjf_and_bidkv(strategy: str) -> None:
    s = srpt_scenario(strategy)
    assert s.hooks.srpt_preempt(s.scheduler, 0, 20.0) is None


# ---------------------------------------------------------------------------------- reorder
def test_keep_score_by_hand() -> None:
    s = Scenario("static-random")
    # out = 150 - 100 = 50, c = 50/200, remaining 150, P = 1:
    # (0.1 + 0.0625) * 151 / 150 * 3 = 0.49075
    request = s.run("a", 100, computed=150, preemptions=1, max_tokens=200)
    assert keep_score(request) == pytest.approx(0.49075)


@pytest.mark.parametrize("strategy", ["static-random", "largest-first"])
def test_reorder_by_cache_puts_uncached_first_and_the_most_expendable_last(strategy: str) -> None:
    s = Scenario(strategy)
    for request_id in ("a", "b", "c", "d", "e"):
        s.run(request_id, 50, output=2)
    s.hooks.priority_cache = {"a": 0.0, "b": 102.0, "d": 1.0, "e": 1.0}
    assert s.hooks.reorder_running(s.scheduler) == "cache"
    # c is uncached (+inf); d and e tie and keep their order; a (0) ends at the tail.
    assert s.running_ids == ["c", "b", "d", "e", "a"]


def test_reorder_without_cache_sorts_by_keep_score() -> None:
    s = Scenario("static-random")
    s.run("low", 100, computed=110, max_tokens=256)  # c = 10/256: low keep score
    s.run("high", 100, computed=300, max_tokens=256)  # c = 200/256: high keep score
    s.run("mid", 100, computed=200, max_tokens=256)
    assert s.hooks.reorder_running(s.scheduler) == "keep-score"
    assert s.running_ids == ["high", "mid", "low"]


@pytest.mark.parametrize("strategy", ["preempt-evict", "preempt-evict-sjf"])
def test_fcfs_strategies_never_reorder(strategy: str) -> None:
    s = Scenario(strategy)
    s.run("a", 50, output=2)
    s.run("b", 50, output=2)
    s.hooks.priority_cache = {"a": 0.0, "b": 5.0}
    assert s.hooks.reorder_running(s.scheduler) is None
    assert s.running_ids == ["a", "b"]


def bidkv_reorder_scenario(prompt_b: int, blocks: int) -> Scenario:
    s = Scenario("bidkv")
    s.run("a", 500, output=2, blocks=blocks // 2)
    s.run("b", prompt_b, output=2, blocks=blocks - blocks // 2)
    s.hooks.priority_cache = {"a": 0.0, "b": 1.0}
    return s


def test_bidkv_reorders_only_past_both_gates() -> None:
    s = bidkv_reorder_scenario(500, 95)  # mean prompt 500 <= 500, KV 0.95 >= 0.95
    assert s.usage() == pytest.approx(0.95)
    assert s.hooks.reorder_running(s.scheduler) == "cache"
    assert s.running_ids == ["b", "a"]
    s = bidkv_reorder_scenario(502, 95)  # mean prompt 501 > 500
    assert s.hooks.reorder_running(s.scheduler) is None and s.running_ids == ["a", "b"]
    s = bidkv_reorder_scenario(500, 94)  # KV 0.94 < 0.95
    assert s.hooks.reorder_running(s.scheduler) is None and s.running_ids == ["a", "b"]


# ---------------------------------------------------------------------------------- in the step
def test_a_hook_preemption_does_not_stop_admission_in_its_step() -> None:
    s = proactive_scenario()
    s.hooks.last_refresh_s = 10.0  # keep the hand-made cache
    out = s.scheduler.schedule(3, 10.0)
    # b was preempted before the step, went back to the front of waiting, and the step (which
    # preempted nothing itself) admitted it again and then w: vLLM's preempted_reqs is local
    # to schedule(), and the hooks ran outside it.
    assert [d.decision_reason for d in s.decisions] == ["proactive"]
    assert list(out.num_scheduled_tokens) == ["a", "c", "b", "w"]
    assert out.num_scheduled_tokens["b"] == 405 and out.num_preemptions == 1
    s.scheduler.check_consistency()


def _workload(seed: int, n: int = 60) -> list[EngineRequest]:
    rng = random.Random(seed)
    requests, now = [], 0.0
    for i in range(n):
        now += rng.expovariate(4.0)
        output = rng.randint(5, 120)
        requests.append(EngineRequest(f"r{i:03d}", now, rng.randint(20, 600), output, output))
    return requests


def _small_config() -> EngineConfig:
    # The original runner's engine: prefix caching off, synchronous scheduling.
    return EngineConfig(
        num_blocks=120, block_size=16, max_num_seqs=16, max_num_batched_tokens=1024,
        max_model_len=1600, clock="cost-model", enable_prefix_caching=False,
        async_scheduling=False,
    )  # fmt: skip


def test_preempt_evict_hooks_change_nothing() -> None:
    requests = _workload(1)
    plain = run_engine(requests, _small_config(), BuiltinHost())
    hooks = ExperimentHooks("preempt-evict")
    hooked = run_engine(
        requests, _small_config(), BuiltinHost(), scheduler_factory=hooks.make_scheduler
    )
    assert plain.num_decisions > 0
    assert [s.num_scheduled_tokens for s in hooked.steps] == [
        s.num_scheduled_tokens for s in plain.steps
    ]
    assert [d.victim_id for d in hooked.decisions] == [d.victim_id for d in plain.decisions]
    assert hooked.requests == plain.requests


@pytest.mark.parametrize("strategy", LEGACY_STRATEGIES)
def test_every_strategy_runs_consistently_and_counts_hook_preemptions(strategy: str) -> None:
    hooks = ExperimentHooks(strategy, seed=3)
    result = run_engine(
        _workload(2, 120),
        _small_config(),
        BuiltinHost(),
        scheduler_factory=hooks.make_scheduler,
        check_consistency=True,
    )
    assert {r.status for r in result.requests} <= {
        RequestStatus.FINISHED_STOPPED,
        RequestStatus.FINISHED_LENGTH_CAPPED,
    }
    assert result.num_preemptions == result.num_decisions == len(result.decisions)
    per_step: dict[int, int] = {}
    for decision in result.decisions:
        per_step[decision.step] = per_step.get(decision.step, 0) + 1
    assert {s.step: s.num_preemptions for s in result.steps if s.num_preemptions} == per_step
    reasons = {d.decision_reason for d in result.decisions}
    outcomes = {d.outcome for d in result.decisions}
    if strategy in ("static-random", "largest-first"):
        assert reasons >= {"proactive", None}
        assert outcomes == {"selected", "builtin"}
    else:
        assert reasons == {None} and outcomes == {"builtin"}
    assert [d.seq for d in result.decisions] == list(range(len(result.decisions)))


def test_hooks_serve_one_run_and_need_fcfs() -> None:
    hooks = ExperimentHooks("bidkv")
    run_engine(_workload(3, 5), _small_config(), None, scheduler_factory=hooks.make_scheduler)
    with pytest.raises(ValueError, match="one run"):
        run_engine(_workload(3, 5), _small_config(), None, scheduler_factory=hooks.make_scheduler)
    config = EngineConfig(scheduling_policy="priority")
    factory = ExperimentHooks("bidkv").make_scheduler
    with pytest.raises(ValueError, match="fcfs"):
        run_engine(_workload(3, 5), config, BuiltinHost(), scheduler_factory=factory)
    with pytest.raises(ValueError, match="strategy must be one of"):
        ExperimentHooks("slack-aware")


def test_client_cap_holds_requests_until_one_finishes() -> None:
    # Three requests at t=0 with room for one in flight: each is sent when the previous one
    # finishes (the original runner's thread pool), and latencies still count from t=0.
    requests = [EngineRequest(f"r{i}", 0.0, 32, 3, 3) for i in range(3)]
    hooks = ExperimentHooks("bidkv", settings=HookSettings(client_max_in_flight=1))
    result = run_engine(
        requests,
        _small_config(),
        BuiltinHost(),
        scheduler_factory=hooks.make_scheduler,
        check_consistency=True,
    )
    records = {r.request_id: r for r in result.requests}
    assert hooks.sent_s["r0"] == 0.0
    assert hooks.sent_s["r1"] == records["r0"].finish_s == records["r1"].first_scheduled_s
    assert hooks.sent_s["r2"] == records["r1"].finish_s == records["r2"].first_scheduled_s
    assert max(s.num_running + s.num_waiting for s in result.steps) == 1
    assert records["r2"].arrival_s == 0.0
    uncapped = ExperimentHooks("bidkv")
    run_engine(requests, _small_config(), None, scheduler_factory=uncapped.make_scheduler)
    assert uncapped.sent_s == {"r0": 0.0, "r1": 0.0, "r2": 0.0}


@pytest.mark.parametrize("cap", [0, -1, 2.5, True])
def test_client_cap_must_be_a_positive_integer(cap: object) -> None:
    with pytest.raises(ValueError, match="client_max_in_flight"):
        HookSettings(client_max_in_flight=cap)  # type: ignore[arg-type]
