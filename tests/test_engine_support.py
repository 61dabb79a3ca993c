"""Tests of the engine's small parts (the shared builders are in ``engine_helpers.py``).

``make_engine`` and ``make_requests`` follow vLLM's own test helpers (``v1/core/utils.py`` in
vLLM's test folder: ``create_scheduler(num_blocks=...)``, ``create_requests(...)``): tiny block
counts force preemption, and each scenario states its arithmetic in comments. With
``num_blocks=11`` block 0 is the null block, so 10 blocks of 16 tokens (160 tokens) are usable.
"""

from __future__ import annotations

import doctest
import math

import pytest

from tracekit.engine import EngineConfig, EngineRequest
from tracekit.engine import engine as engine_module
from tracekit.engine.block_pool import BlockPool, cdiv
from tracekit.engine.clock import COST_MODEL_PRESETS, CostModelClock, StepsClock, make_clock
from tracekit.engine.queues import (
    FCFSRequestQueue,
    PriorityRequestQueue,
    create_request_queue,
)
from tracekit.engine.request import SchedulerRequest

# --------------------------------------------------------------------------- block pool


def test_block_pool_reserves_the_null_block() -> None:
    pool = BlockPool(11)
    assert pool.num_usable_blocks == 10
    assert pool.num_free_blocks == 10
    pool.allocate(4)
    # vLLM BlockPool.get_usage: 1 - free / (num_gpu_blocks - 1).
    assert pool.get_usage() == 1.0 - 6 / 10
    pool.free(4)
    assert pool.get_usage() == 0.0
    with pytest.raises(RuntimeError):
        pool.allocate(11)
    with pytest.raises(RuntimeError):
        pool.free(1)


def test_cdiv() -> None:
    assert [cdiv(n, 16) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


# --------------------------------------------------------------------------- queues


def _state(request_id: str, arrival: float, priority: int = 0) -> SchedulerRequest:
    return SchedulerRequest(EngineRequest(request_id, arrival, 10, 1, 1, priority), 0)


def test_fcfs_queue_prepends_preempted_requests() -> None:
    queue = create_request_queue("fcfs")
    assert isinstance(queue, FCFSRequestQueue)
    a, b, c = _state("a", 0), _state("b", 1), _state("c", 2)
    queue.add_request(a)
    queue.add_request(b)
    queue.prepend_request(c)
    assert [r.request_id for r in queue] == ["c", "a", "b"]
    assert queue.pop_request() is c and queue.peek_request() is a and len(queue) == 2


def test_priority_queue_orders_by_priority_arrival_id() -> None:
    queue = create_request_queue("priority")
    assert isinstance(queue, PriorityRequestQueue)
    states = [_state("z", 0.0, 1), _state("b", 2.0, 0), _state("a", 2.0, 0), _state("y", 1.0, 0)]
    for state in states:
        queue.add_request(state)
    # Prepending is adding: a preempted request does not jump a more important one.
    queue.prepend_request(_state("late", 5.0, 0))
    assert [r.request_id for r in queue] == ["y", "a", "b", "late", "z"]
    assert queue.pop_request().request_id == "y"


def test_unknown_queue_policy() -> None:
    with pytest.raises(ValueError, match="scheduling_policy"):
        create_request_queue("lifo")


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mode", "trt"),
        ("num_blocks", 1),
        ("block_size", 0),
        ("max_num_seqs", 0),
        ("max_num_batched_tokens", -1),
        ("watermark", 1.0),
        ("scheduling_policy", "lifo"),
        ("max_model_len", 10_000),
        ("long_prefill_token_threshold", -1),
        ("vllm_version", "0.31"),
        ("clock", "wall"),
        ("step_s", 0.0),
        ("full_sequence_must_fit", 1),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})  # type: ignore[arg-type]


def test_config_rejects_unknown_cost_model_only_on_that_clock() -> None:
    EngineConfig(clock="steps", cost_model="nope")  # not used by the steps clock
    with pytest.raises(ValueError, match="cost_model"):
        EngineConfig(clock="cost-model", cost_model="nope")


def test_config_defaults_and_watermark_blocks() -> None:
    config = EngineConfig()
    assert (config.num_blocks, config.block_size, config.max_num_seqs) == (600, 16, 32)
    assert config.max_num_batched_tokens == 2048
    assert config.watermark == 0.0 and config.full_sequence_must_fit
    # One default clock for the engine, the CLI and the sweep: the cost model.
    assert config.clock == "cost-model" and config.cost_model == "a6000-llama3-8b"
    # int(watermark * num_blocks), the null block included, as vLLM's KVCacheManager.
    assert EngineConfig(num_blocks=11, max_model_len=160, watermark=0.1).watermark_blocks == 1


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="prompt_tokens"):
        EngineRequest("a", 0.0, 0, 1, 1)
    with pytest.raises(ValueError, match="arrival_s"):
        EngineRequest("a", math.nan, 1, 1, 1)
    with pytest.raises(ValueError, match="request_id"):
        EngineRequest("", 0.0, 1, 1, 1)


# --------------------------------------------------------------------------- clocks


def test_steps_clock_visibility_and_jump() -> None:
    clock = StepsClock(0.02)
    assert clock.is_visible(0.0) and not clock.is_visible(0.01)
    clock.jump_to(0.05)  # first step index >= 0.05 / 0.02 = 2.5 is 3
    assert clock.step == 3 and clock.is_visible(0.05) and clock.now == 3 * 0.02
    clock.advance(99.0)  # a steps clock ignores the duration
    assert clock.step == 4


def test_cost_model_clock() -> None:
    clock = make_clock(EngineConfig(clock="cost-model"))
    assert isinstance(clock, CostModelClock)
    model = COST_MODEL_PRESETS["a6000-llama3-8b"]
    # One decode token with no context: weights / (768 GB/s * 0.85) = 24.6 ms, plus the 4 ms
    # overhead and 0.1 ms for the sequence.
    one = clock.duration(1, 1, 0)
    assert one == pytest.approx(16.06e9 / (768e9 * 0.85) + 0.004 + 0.0001)
    # A full 2048-token prefill is compute-bound: 2 * 8.03e9 * 2048 / (154.8e12 * 0.6).
    assert clock.duration(2048, 1, 2048) == pytest.approx(
        0.004 + 2 * 8.03e9 * 2048 / (154.8e12 * 0.6) + 0.0001
    )
    assert clock.duration(0, 0, 0) == model.overhead_s
    clock.advance(one)
    clock.jump_to(0.001)  # never backwards
    assert clock.now == one and clock.step == 1


def test_doctests_of_the_facade() -> None:
    failures, _ = doctest.testmod(engine_module)
    assert failures == 0
