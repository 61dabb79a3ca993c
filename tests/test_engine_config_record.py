"""What a manifest records of an engine configuration (``recorded_form``), and reading it back.

vLLM-mode records leave out the SGLang-only settings that are newer than the first vLLM-mode
records while they hold vLLM mode's value, so that those records, and the run ids digested from
them, stay what they were; every configuration reads back to itself.
"""

from __future__ import annotations

import json

import pytest

from tracekit.engine.config import EngineConfig, recorded_engine_config, recorded_form

#: The keys of a vLLM-mode record before SGLang's overlap and priority settings existed (a
#: manifest of the README's job recorded then, written out by hand).
VLLM_RECORD_KEYS = {
    "mode", "num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "watermark",
    "scheduling_policy", "max_model_len", "long_prefill_token_threshold",
    "full_sequence_must_fit", "vllm_version", "clock", "step_s", "cost_model",
    "enable_prefix_caching", "async_scheduling", "retraction_policy", "radix_cache",
    "chunked_prefill_size", "latency",
}  # fmt: skip


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_a_vllm_record_has_the_keys_it_always_had(policy: str) -> None:
    record = recorded_form(EngineConfig(scheduling_policy=policy))
    assert set(record) == VLLM_RECORD_KEYS
    assert record["scheduling_policy"] == policy


CONFIGS = [
    {},
    {"scheduling_policy": "priority", "num_blocks": 64, "max_model_len": 1000},
    {"enable_prefix_caching": False, "async_scheduling": False, "clock": "steps"},
    {"enable_priority_scheduling": True},
    {"mode": "sglang"},
    {"mode": "sglang", "scheduling_policy": "priority", "retraction_policy": "priority"},
    {"mode": "sglang", "overlap_schedule": False, "disable_priority_preemption": True},
    {"mode": "sglang", "priority_scheduling_preemption_threshold": 3, "radix_cache": False},
]


@pytest.mark.parametrize("settings", CONFIGS)
def test_every_configuration_reads_back_to_itself(settings: dict) -> None:
    config = EngineConfig(**settings)
    record = json.loads(json.dumps(recorded_form(config)))  # as a manifest holds it
    assert recorded_engine_config(record) == config


def test_a_vllm_record_never_needs_to_keep_a_setting_vllm_mode_ignores() -> None:
    # vLLM mode refuses an SGLang-only setting that differs from its own value (it would be
    # ignored), so what a vLLM record leaves out is always that value.
    with pytest.raises(ValueError, match="disable_priority_preemption True is read in SGLang"):
        EngineConfig(disable_priority_preemption=True)


def test_sglang_records_keep_every_setting() -> None:
    config = EngineConfig(mode="sglang")
    record = recorded_form(config)
    assert set(record) > VLLM_RECORD_KEYS
    assert (record["overlap_schedule"], record["priority_scheduling_preemption_threshold"]) == (
        True,
        10,
    )
