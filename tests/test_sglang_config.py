"""One SGLang configuration: ``SglangConfig`` is ``EngineConfig(mode="sglang")`` under SGLang's
names, with SGLang 0.5.23's own defaults (``srt/arg_groups/fields/schedule.py`` and the
resolutions cited in ``tracekit/engine/config.py``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.engine.config import (
    SGLANG_DEFAULTS,
    EngineConfig,
    recorded_engine_config,
    sglang_max_running_requests,
)
from tracekit.sglang.protocol import SglangConfig

ROOT = Path(__file__).resolve().parents[1]


def test_sglang_mode_defaults_are_sglangs() -> None:
    config = EngineConfig(mode="sglang")
    # On a GPU SGLang overlaps (event_loop_overlap) and keeps the radix cache; page size 1.
    assert (config.overlap_schedule, config.radix_cache, config.block_size) == (True, True, 1)
    # --max-prefill-tokens 16384; --chunked-prefill-size 4096 on a GPU of 48 GB (the A6000 of
    # the default cost model), 8192 on one of 80 GB.
    assert (config.max_num_batched_tokens, config.chunked_prefill_size) == (16384, 4096)
    assert EngineConfig(mode="sglang", cost_model="a100-llama2-7b").chunked_prefill_size == 8192
    # Priority scheduling off; when on, larger values first, preemption at admission above 10.
    assert config.enable_priority_scheduling is False
    assert config.schedule_low_priority_values_first is False
    assert config.disable_priority_preemption is False
    assert config.priority_scheduling_preemption_threshold == 10
    assert config.retraction_policy == "length"
    # The same pool in tokens as vllm mode's default (599 usable blocks of 16).
    assert config.num_usable_blocks * config.block_size == 599 * 16
    assert dict(SGLANG_DEFAULTS)["overlap_schedule"] is True


def test_max_running_requests_is_derived_as_sglang_does() -> None:
    # resolve_max_num_reqs: kv / context * 512, clamped to [2048, 4096], at most kv // 2.
    assert sglang_max_running_requests(9584, 8192) == 2048  # 599 -> 2048
    assert sglang_max_running_requests(1000, 1000) == 500  # 512 -> 2048 -> kv // 2
    assert sglang_max_running_requests(100_000, 8192) == 4096  # 6250 -> 4096
    assert EngineConfig(mode="sglang").max_num_seqs == 2048
    assert EngineConfig(mode="sglang", num_blocks=1001, max_model_len=1000).max_num_seqs == 500


def test_sglang_config_is_the_engine_config_under_sglangs_names() -> None:
    default = SglangConfig()
    engine = default.engine_config()
    assert engine == EngineConfig(mode="sglang", clock="steps", step_s=default.step_s)
    assert (default.kv_tokens, default.max_running_requests) == (9584, 2048)
    assert (default.max_prefill_tokens, default.max_context_len) == (16384, 8192)
    assert default.chunked_prefill_size == 4096 and default.overlap_schedule
    custom = SglangConfig(
        kv_tokens=3000,
        max_running_requests=4,
        chunked_prefill_size=0,
        radix_cache=False,
        overlap_schedule=False,
        enable_priority_scheduling=True,
        retraction_policy="priority",
        schedule_low_priority_values_first=True,
        priority_scheduling_preemption_threshold=3,
    )
    assert SglangConfig.from_engine_config(custom.engine_config()) == custom
    mirrored = custom.engine_config()
    assert (mirrored.num_blocks, mirrored.max_num_seqs, mirrored.scheduling_policy) == (
        3001,
        4,
        "priority",
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"retraction_policy": "priority"}, "requires enable_priority_scheduling"),
        ({"chunked_prefill_size": -1}, "chunked_prefill_size must be an integer from 0"),
        ({"priority_scheduling_preemption_threshold": 1.5}, "must be an integer"),
        ({"overlap_schedule": "yes"}, "overlap_schedule must be a bool"),
    ],
)
def test_both_types_refuse_the_same_values(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SglangConfig(**settings)
    with pytest.raises(ValueError, match=message):
        EngineConfig(mode="sglang", **settings)


def test_vllm_mode_refuses_sglangs_loop_and_tree() -> None:
    for name in ("overlap_schedule", "radix_cache"):
        with pytest.raises(ValueError, match="sglang mode only"):
            EngineConfig(**{name: True})
    assert EngineConfig().overlap_schedule is False and EngineConfig().radix_cache is False
    with pytest.raises(ValueError, match="page size 1"):
        EngineConfig(mode="sglang", block_size=16)
    assert EngineConfig(mode="sglang", block_size=16, radix_cache=False).block_size == 16


def test_an_old_manifest_keeps_the_settings_of_its_time() -> None:
    """Before the overlap and priority options: the normal loop, lower values first, no
    preemption, and an unset chunk meant the token budget."""
    old = {
        "mode": "sglang",
        "num_blocks": 4001,
        "block_size": 1,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 2048,
        "scheduling_policy": "priority",
        "max_model_len": 4000,
        "retraction_policy": "priority",
        "radix_cache": True,
        "chunked_prefill_size": None,
        "clock": "steps",
    }
    config = recorded_engine_config(old)
    assert config.overlap_schedule is False
    assert config.schedule_low_priority_values_first is True
    assert config.disable_priority_preemption is True
    assert config.chunked_prefill_size == 2048


def test_record_sim_in_sglang_mode_defaults_to_sglang(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["record", "sim", "--workload", str(ROOT / "tests/data/workloads/azure_small.csv")]
    result = CliRunner().invoke(cli, [*args, "--engine-mode", "sglang", "--out", str(out)])
    assert result.exit_code == 0, result.output
    recorded = json.loads((out / "manifest.json").read_text("utf-8"))["engine_config"]
    expected = dataclasses.asdict(EngineConfig(mode="sglang"))
    assert recorded == expected
    assert recorded["overlap_schedule"] and recorded["radix_cache"]
    assert (out / "admissions.parquet").is_file()  # the radix hits of each admission


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--retraction-policy", "priority"], "--enable-priority-scheduling"),
        (["--block-size", "16"], "radix_cache False"),
        (["--chunked-prefill-size", "-1"], "--chunked-prefill-size"),
    ],
)
def test_a_bad_sglang_configuration_is_one_line_and_exit_2(
    tmp_path: Path, flags: list[str], words: str
) -> None:
    out = tmp_path / "run"
    args = ["record", "sim", "--workload", str(ROOT / "tests/data/workloads/azure_small.csv")]
    result = CliRunner().invoke(cli, [*args, "--engine-mode", "sglang", *flags, "--out", str(out)])
    assert result.exit_code == 2
    # One error line (a value out of an option's range is refused by the option, below
    # click's usage lines; a setting the engine refuses is the only line).
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and words in errors[0], result.output
    assert result.output.count("\n") in (1, 4), result.output
    assert not out.exists()


def test_sglang_refuses_prompts_of_min_context_pool_less_six() -> None:
    """TpModelWorker.get_worker_info: max_req_input_len = min(context - 1, pool - 1) - 5; a
    prompt of that many tokens or more is refused (validate_input_length); vLLM: max_model_len."""
    from tracekit.capacity.rejections import find_rejections
    from tracekit.engine import BuiltinHost, EngineRequest, run_engine
    from tracekit.workloads import load_workload

    config = EngineConfig(mode="sglang", num_blocks=301, max_model_len=200, clock="steps")
    assert config.max_prompt_tokens == 193  # min(200, 300) - 7
    requests = [EngineRequest("ok", 0.0, 193, 2, 2), EngineRequest("no", 0.0, 194, 2, 2)]
    result = run_engine(requests, config, BuiltinHost())
    assert {r.request_id: r.status for r in result.requests} == {
        "ok": "finished_length_capped",
        "no": "rejected",
    }
    assert EngineConfig(max_model_len=200, num_blocks=14).max_prompt_tokens == 199
    warning = find_rejections(
        load_workload(ROOT / "tracekit/data/azure_conv_sample.csv", limit=50),
        EngineConfig(mode="sglang", max_model_len=1024),
    ).warning()
    assert warning is not None and "prompt >= 1018 tokens" in warning


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # SGLang's defaults: overlap, the radix cache, no priority scheduling; ignore_eos sent.
        (["--ignore-eos"], {"overlap_schedule": True, "radix_cache": True}),
        (
            [
                "--no-radix-cache",
                "--disable-overlap-schedule",
                "--enable-priority-scheduling",
                "--retraction-policy",
                "priority",
                "--schedule-low-priority-values-first",
                "--disable-priority-preemption",
                "--priority-scheduling-preemption-threshold",
                "3",
            ],
            {
                "overlap_schedule": False,
                "radix_cache": False,
                "enable_priority_scheduling": True,
                "retraction_policy": "priority",
                "schedule_low_priority_values_first": True,
                "disable_priority_preemption": True,
                "priority_scheduling_preemption_threshold": 3,
            },
        ),
        (["--no-enable-priority-scheduling"], {"enable_priority_scheduling": False}),
    ],
)
def test_record_sglang_options_make_the_sglang_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str], expected: dict
) -> None:
    """What record sglang hands the recorder for its options (the live test runs one such
    command on SGLang itself)."""
    import tracekit.sglang.record
    from tracekit.sglang.record import SglangUnavailableError

    seen: list[tuple] = []

    def fake_record(workloads: list, outs: list, *, config: SglangConfig, **_: object) -> list:
        seen.append((workloads[0], config))
        raise SglangUnavailableError("no SGLang here")

    # The command imports the recorder when it runs: patched where it lives.
    monkeypatch.setattr(tracekit.sglang.record, "record_sglang", fake_record)
    data = ROOT / "tests/data/workloads/azure_small.csv"
    args = ["record", "sglang", "--workload", str(data), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, [*args, "--kv-tokens", "1200", *flags])
    assert result.exit_code == 2 and "no SGLang here" in result.output, result.output
    ((workload, config),) = seen
    # Every other setting is SGLang's default for that pool.
    default = SglangConfig(kv_tokens=1200)
    for name in (f.name for f in dataclasses.fields(SglangConfig)):
        assert getattr(config, name) == expected.get(name, getattr(default, name)), name
    ignore = workload.frame["ignore_eos"].to_list() if "ignore_eos" in workload.frame else []
    assert all(ignore) and bool(ignore) == ("--ignore-eos" in flags)
