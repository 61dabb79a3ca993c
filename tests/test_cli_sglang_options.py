"""``record sglang`` takes SGLang's engine settings through the engine's own options."""

from __future__ import annotations

import dataclasses

from tracekit.cli.options import engine_options
from tracekit.cli.sglang_cmd import ENGINE_SETTINGS, record_sglang_command, sglang_config
from tracekit.engine.config import ENGINE_OPTIONS
from tracekit.sglang.protocol import SglangConfig

REQUIRED = ["--workload", "w.csv", "--out", "o"]


def _params(*args: str) -> dict:
    return record_sglang_command.make_context("sglang", [*REQUIRED, *args]).params


def test_every_setting_of_the_run_has_one_option() -> None:
    names = {p.name for p in record_sglang_command.params}
    fields = {f.name for f in dataclasses.fields(SglangConfig)} - {"max_steps"}
    assert fields - names == {"max_context_len"}  # --context-length, SGLang's name
    assert "context_length" in names
    # The shared ones are the engine's declarations (the same help as record sim's).
    assert {
        "chunked_prefill_size", "radix_cache", "retraction_policy", "overlap_schedule",
        "enable_priority_scheduling", "schedule_low_priority_values_first",
        "disable_priority_preemption", "priority_scheduling_preemption_threshold", "step_s",
    } == ENGINE_SETTINGS  # fmt: skip
    sim = {o.name: o.help for o in engine_options(lambda: None).__click_params__}
    for option in record_sglang_command.params:
        if option.name in ENGINE_SETTINGS:
            assert option.help == sim[option.name], option.name
    assert {o.field for o in ENGINE_OPTIONS} >= ENGINE_SETTINGS


def test_the_options_left_out_give_sglangs_defaults() -> None:
    assert sglang_config(_params()) == SglangConfig()


def test_each_option_sets_its_own_field() -> None:
    args = ["--context-length", "4000", "--no-radix-cache", "--disable-overlap-schedule",
            "--enable-priority-scheduling", "--kv-tokens", "5000",
            "--chunked-prefill-size", "0", "--step-s", "0.5"]  # fmt: skip
    config = sglang_config(_params(*args))
    assert (config.max_context_len, config.radix_cache, config.overlap_schedule) == (
        4000, False, False,
    )  # fmt: skip
    assert (config.enable_priority_scheduling, config.kv_tokens) == (True, 5000)
    assert (config.chunked_prefill_size, config.step_s) == (0, 0.5)
