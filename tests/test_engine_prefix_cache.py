"""Prefix caching in the embedded engine: the content model, the cached block pool, the scheduler.

Exactness against the real scheduler is checked by ``tests/test_vllm_prefix_live.py`` (live) and
the committed prefix-caching fixtures; these tests pin the rules without vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import StepWatcher, random_content

from tracekit.engine import BuiltinHost, EngineConfig, EngineResult, run_engine
from tracekit.engine.content import (
    block_segments,
    content_token,
    prompt_token_ids,
    unique_token,
)
from tracekit.engine.outputs import StepRecord
from tracekit.engine.prefix_cache import PrefixCachingBlockPool
from tracekit.engine.request import EngineRequest, SchedulerRequest
from tracekit.engine.scheduler import VllmPrefixCachingScheduler, make_vllm_scheduler
from tracekit.vllm.protocol import Scenario


def test_equal_content_gives_equal_tokens_and_nothing_else_does() -> None:
    a = prompt_token_ids(0, 40, (7, 8), 16)
    b = prompt_token_ids(1, 40, (7, 9), 16)
    assert a[:16] == b[:16]
    assert a[16:32] != b[16:32]
    # Past the content region the tokens are the request's own.
    assert a[32:] == [unique_token(0, p) for p in range(32, 40)]
    assert not set(a[32:]) & set(b)
    tokens = {content_token(c, o) for c in range(-3, 30) for o in range(40)}
    assert len(tokens) == 33 * 40
    assert not tokens & {unique_token(i, p) for i in range(30) for p in range(40)}
    assert min(tokens) >= 16


def test_block_segments_split_at_chunk_boundaries() -> None:
    assert block_segments((4, 5), 10, 6, 14) == ((4, 6, 4), (5, 0, 4))
    assert block_segments((4,), 10, 0, 8) == ((4, 0, 8),)


def state(rid: str, index: int, prompt: int, content: tuple[int, ...], output: int = 5):
    return SchedulerRequest(EngineRequest(rid, 0.0, prompt, output, output, 0, content, 32), index)


def test_pool_keys_hits_and_free_order() -> None:
    pool = PrefixCachingBlockPool(num_blocks=9, block_size=16)
    a = state("a", 0, 64, (1, 2))
    pool.get_new_blocks(4, a.kv_blocks)
    pool.cache_full_blocks(a, 64)
    assert pool.num_free_blocks == 4 and pool.num_cached_blocks == 4
    # b shares the first content block (32 tokens, two blocks), not the second.
    b = state("b", 1, 64, (1, 3))
    hit = pool.find_longest_cache_hit(b)
    assert hit == a.kv_blocks[:2]
    # a full match is capped at num_tokens - 1: the last block is recomputed.
    c = state("c", 2, 64, (1, 2))
    assert pool.find_longest_cache_hit(c) == a.kv_blocks[:3]
    pool.touch(hit)
    assert [blk.ref_cnt for blk in a.kv_blocks] == [2, 2, 1, 1]
    pool.free_blocks(a.kv_blocks)
    # Only a's two private blocks are free, last block first in the queue; still cached.
    assert pool.num_free_blocks == 6
    assert list(pool._free_hashed) == [a.kv_blocks[3], a.kv_blocks[2]]
    assert pool.find_longest_cache_hit(c) == a.kv_blocks[:3]
    # Unkeyed blocks go first; then the cached ones, evicted in free order.
    taken: list = []
    pool.get_new_blocks(5, taken)
    assert taken[-1] is a.kv_blocks[3] and a.kv_blocks[3].key is None
    assert pool.num_evicted == 1
    assert pool.find_longest_cache_hit(c) == a.kv_blocks[:3]


def run_watching_hits(
    requests: list[EngineRequest],
    config: EngineConfig,
    make: Callable[..., Any],
    on_hits: Callable[[dict[str, int]], None],
) -> EngineResult:
    """Run ``requests`` (consistency checked) on the scheduler ``make(config, host, on_decision)``
    builds; after every step, ``on_hits`` gets the step's prefix-cache hits per request."""
    made: list[Any] = []

    def factory(c, h, d):  # type: ignore[no-untyped-def]
        made.append(make(c, h or BuiltinHost(), d))
        return made[0]

    def on_step(record: StepRecord) -> None:
        on_hits(made[0].step_cache_hits)

    return run_engine(
        requests,
        config,
        None,
        StepWatcher(on_step),
        scheduler_factory=factory,
        check_consistency=True,
    )


def workload(seed: int, n: int = 80) -> list[EngineRequest]:
    return random_content(seed, n)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("version", ["0.32", "0.33"])
def test_runs_stay_consistent_and_hit(policy: str, version: str, is_async: bool) -> None:
    config = EngineConfig(
        num_blocks=120,
        max_num_seqs=16,
        max_model_len=1400,
        max_num_batched_tokens=512,
        scheduling_policy=policy,  # type: ignore[arg-type]
        vllm_version=version,  # type: ignore[arg-type]
        clock="steps",
        enable_prefix_caching=True,
        async_scheduling=is_async,
    )
    hits: list[int] = []
    requests = workload(1)
    result = run_watching_hits(
        requests, config, make_vllm_scheduler, lambda step_hits: hits.extend(step_hits.values())
    )
    assert result.num_preemptions > 0
    assert sum(hits) > 0 and all(h % 16 == 0 for h in hits)
    assert len(result.requests) == len(requests)
    # Caching saves recomputation: the same run without it takes more steps.
    off = run_engine(requests, dataclasses.replace(config, enable_prefix_caching=False), None)
    assert off.num_steps > result.num_steps


def test_content_is_ignored_with_prefix_caching_off() -> None:
    config = EngineConfig(
        num_blocks=120, max_model_len=1400, clock="steps", enable_prefix_caching=False
    )
    with_content = workload(2)
    without = [
        EngineRequest(
            r.request_id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.max_tokens, r.priority
        )
        for r in with_content
    ]
    a = run_engine(with_content, config, None)
    b = run_engine(without, config, None)
    assert a.steps == b.steps and a.requests == b.requests and a.decisions == b.decisions


def test_preempted_request_rehits_its_own_blocks() -> None:
    # Two requests that cannot both grow: the victim's blocks stay cached until reused.
    # Worked by hand for the synchronous scheduler.
    config = EngineConfig(
        num_blocks=12,
        max_model_len=160,
        clock="steps",
        enable_prefix_caching=True,
        async_scheduling=False,
    )
    requests = [
        EngineRequest("a", 0.0, 64, 60, 60),
        EngineRequest("b", 0.0, 64, 60, 60),
    ]
    hits: dict[str, int] = {}

    def keep_largest(step_hits: dict[str, int]) -> None:
        for rid, n in step_hits.items():
            hits[rid] = max(hits.get(rid, 0), n)

    result = run_watching_hits(requests, config, VllmPrefixCachingScheduler, keep_largest)
    assert result.num_preemptions > 0
    # b was preempted holding four full (keyed) blocks; a's growth reused its unkeyed partial
    # block first, then its keyed blocks from the last one: three are left to hit on resume.
    assert hits == {"a": 0, "b": 48}


def test_scenario_wire_keeps_content() -> None:
    requests = (
        EngineRequest("a", 0.0, 64, 5, 5, 1, (3, 4), 16),
        EngineRequest("b", 0.5, 10, 2, 2),
    )
    config = EngineConfig(clock="steps", enable_prefix_caching=True)
    scenario = Scenario(0, config, requests)
    assert Scenario.from_wire(scenario.to_wire()) == scenario


def test_prefix_caching_is_vllm_mode_only() -> None:
    with pytest.raises(ValueError, match="vllm mode only"):
        EngineConfig(mode="sglang", enable_prefix_caching=True)


def fresh_hit(pool: PrefixCachingBlockPool, request: SchedulerRequest) -> list:
    """The longest hit walked from scratch, with no remembered lookup."""
    max_blocks = (request.num_tokens - 1) // pool.block_size
    if max_blocks <= 0:
        return []
    keys = pool.block_keys(request, max_blocks)
    hit = []
    for key in keys[:max_blocks]:
        block = pool.cached_block(key)
        if block is None:
            break
        hit.append(block)
    return hit


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_remembered_lookups_equal_fresh_walks(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = [0]
    original = PrefixCachingBlockPool.find_longest_cache_hit

    def checking(self, request):  # type: ignore[no-untyped-def]
        hit = original(self, request)
        assert hit == fresh_hit(self, request)
        checked[0] += 1
        return hit

    monkeypatch.setattr(PrefixCachingBlockPool, "find_longest_cache_hit", checking)
    config = EngineConfig(
        num_blocks=90,
        max_num_seqs=16,
        max_model_len=1400,
        max_num_batched_tokens=512,
        scheduling_policy="priority" if seed % 2 else "fcfs",
        clock="steps",
        enable_prefix_caching=True,
    )
    result = run_engine(workload(seed), config, None, check_consistency=True)
    assert result.num_preemptions > 0 and checked[0] > 100
