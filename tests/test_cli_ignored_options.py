"""An option the chosen mode, clock, objective or plan would ignore is refused, not recorded.

An audit found that ``--schedule-low-priority-values-first``, ``--disable-priority-preemption``,
``--priority-scheduling-preemption-threshold`` and ``--disable-overlap-schedule`` in vLLM mode,
``--watermark``, ``--long-prefill-token-threshold`` and ``--vllm-version`` in SGLang mode, and
``--step-s`` under the default cost-model clock gave tables identical to a run without them
(apart from the run id) while the manifest recorded them; so did oracle's ``--slo-*`` without
``--objective slo``, ``qualify --load-fractions`` with ``--load-plan single``, and
``capacity --rate inf`` (which printed "sends every request at time 0" while the search set the
rate itself). Each is now one line naming the option and what it needs, exit 2, nothing written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.engine import BuiltinHost, EngineConfig, run_engine
from tracekit.engine.config import make_engine_config, recorded_engine_config
from tracekit.engine.request import engine_requests
from tracekit.errors import ConfigError
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv")
SGLANG = ["--engine-mode", "sglang"]

# (extra arguments of record sim, the option the error must name, what it must say it needs)
RECORD_SIM = [
    (["--schedule-low-priority-values-first"], "--schedule-low-priority-values-first",
     "--engine-mode sglang"),
    (["--disable-priority-preemption"], "--disable-priority-preemption", "--engine-mode sglang"),
    (["--priority-scheduling-preemption-threshold", "3"],
     "--priority-scheduling-preemption-threshold", "--engine-mode sglang"),
    (["--disable-overlap-schedule"], "--disable-overlap-schedule", "--engine-mode sglang"),
    (["--no-radix-cache"], "--no-radix-cache", "--engine-mode sglang"),
    (["--retraction-policy", "length"], "--retraction-policy", "--engine-mode sglang"),
    ([*SGLANG, "--watermark", "0.01"], "--watermark", "--engine-mode vllm"),
    # The default value too: given, it says the user expects it to act.
    ([*SGLANG, "--watermark", "0"], "--watermark", "--engine-mode vllm"),
    ([*SGLANG, "--long-prefill-token-threshold", "64"], "--long-prefill-token-threshold",
     "--engine-mode vllm"),
    ([*SGLANG, "--vllm-version", "0.33"], "--vllm-version", "--engine-mode vllm"),
    ([*SGLANG, "--no-prefix-caching"], "--no-prefix-caching", "--engine-mode vllm"),
    ([*SGLANG, "--no-async-scheduling"], "--no-async-scheduling", "--engine-mode vllm"),
    (["--step-s", "0.05"], "--step-s", "--clock steps"),
]  # fmt: skip


def _invoke(*args: object) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _refused(result: object, option: str, needed: str) -> None:
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    lines = result.output.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith(f"Error: {option} "), lines
    assert needed in lines[0] and "ignore" in lines[0], lines


@pytest.mark.parametrize(("args", "option", "needed"), RECORD_SIM, ids=lambda v: str(v))
def test_record_sim_refuses_an_option_its_mode_or_clock_ignores(
    tmp_path: Path, args: list[str], option: str, needed: str
) -> None:
    out = tmp_path / "out"
    _refused(_invoke("record", "sim", "--workload", SAMPLE, "--limit", "5", *args, "--out", out),
             option, needed)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_the_same_options_in_their_own_mode_are_taken(tmp_path: Path) -> None:
    cases = [
        [*SGLANG, "--disable-priority-preemption", "--disable-overlap-schedule"],
        ["--watermark", "0.01", "--vllm-version", "0.33", "--clock", "steps", "--step-s", "0.05"],
    ]
    for i, args in enumerate(cases):
        result = _invoke("record", "sim", "--workload", SAMPLE, "--limit", "5", *args, "--out",
                         tmp_path / f"run{i}")  # fmt: skip
        assert result.exit_code == 0, result.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "option", "needed"),
    [
        (["--load-plan", "single", "--load-fractions", "0.5"], "--load-fractions",
         "--load-plan capacity"),
        (["--load-plan", "single", "--load-concurrency", "4"], "--load-concurrency",
         "--load-plan capacity"),
        (["--load-plan", "single", "--capacity-target", "0.5"], "--capacity-target",
         "--load-plan capacity"),
        (["--engine-mode", "sglang", "--watermark", "0.1"], "--watermark", "--engine-mode vllm"),
    ],
)  # fmt: skip
def test_qualify_refuses_what_its_plan_ignores_before_any_work(
    tmp_path: Path, args: list[str], option: str, needed: str
) -> None:
    out = tmp_path / "out"
    _refused(_invoke("qualify", "--workload", SAMPLE, "--limit", "20", *args, "--out", out),
             option, needed)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--slo-ttft-s", "--slo-tpot-s", "--ttft-s"])
def test_oracle_refuses_slo_targets_without_the_slo_objective(
    tmp_path: Path, write_bundle, option: str
) -> None:  # type: ignore[no-untyped-def]
    bundle = write_bundle(tmp_path / "b")
    out = tmp_path / "out"
    result = _invoke("oracle", bundle, "--objective", "recomputed", option, "3", "--out", out)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    last = result.output.strip().splitlines()[-1]  # type: ignore[attr-defined]
    # The old spelling warns first, then is refused under its new name.
    assert last.startswith("Error: --slo-") and "--objective slo" in last, last
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "option", "needed"),
    [
        (["--limit", "2"], "--limit", "--mode open"),
        (["--reference"], "--reference", "--mode open"),
    ],
)
def test_closed_replay_refuses_open_mode_options(
    tmp_path: Path, write_bundle, args: list[str], option: str, needed: str
) -> None:  # type: ignore[no-untyped-def]
    bundle = write_bundle(tmp_path / "b")
    out = tmp_path / "out"
    _refused(_invoke("replay", bundle, "--strategy", "lcf", "--mode", "closed", *args, "--out",
                     out), option, needed)  # fmt: skip
    result = _invoke("replay", bundle, "--strategy", "lcf", "--host", "legacy", "--out", out)
    _refused(result, "--host", "--mode closed")
    assert not out.exists()


@pytest.mark.parametrize("command", ["capacity", "qualify"])
def test_a_capacity_search_refuses_rate_inf(tmp_path: Path, command: str) -> None:
    args = [command, "--workload", SAMPLE, "--arrivals", "poisson", "--rate", "inf"]
    if command == "qualify":
        args += ["--out", tmp_path / "out"]
    result = _invoke(*args)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "sends every request at time 0" not in result.output  # type: ignore[attr-defined]
    assert result.output.strip().splitlines()[-1].startswith("Error: --rate inf: the capacity")  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"watermark": 0.01, "mode": "sglang"}, "watermark"),
        ({"long_prefill_token_threshold": 64, "mode": "sglang"}, "long_prefill_token_threshold"),
        ({"vllm_version": "0.33", "mode": "sglang"}, "vllm_version"),
        ({"schedule_low_priority_values_first": True}, "schedule_low_priority_values_first"),
        ({"disable_priority_preemption": True}, "disable_priority_preemption"),
        ({"priority_scheduling_preemption_threshold": 3},
         "priority_scheduling_preemption_threshold"),
        ({"chunked_prefill_size": 0}, "chunked_prefill_size"),
    ],
)  # fmt: skip
def test_the_library_refuses_a_setting_its_mode_or_clock_ignores(
    settings: dict[str, object], field: str
) -> None:
    # The sweep matrix and Python callers build configurations here, without the CLI.
    with pytest.raises(ConfigError, match=rf"^engine configuration: {field} .* only; "):
        make_engine_config(**settings)


def test_a_recorded_configuration_keeps_loading() -> None:
    # A manifest records every field resolved: the other mode's fields at their neutral value.
    for mode in ("vllm", "sglang"):
        recorded = dataclasses.asdict(EngineConfig(mode=mode))  # type: ignore[arg-type]
        assert EngineConfig(**recorded) == EngineConfig(mode=mode)  # type: ignore[arg-type]
    # One that an earlier version took and recorded, ignored, is read as what ran.
    recorded = dataclasses.asdict(EngineConfig())
    recorded.update(disable_priority_preemption=True, priority_scheduling_preemption_threshold=3)
    assert recorded_engine_config(recorded) == EngineConfig()


def test_a_clock_setting_is_refused_on_the_command_line_only() -> None:
    # Configurations are switched between clocks, and every manifest records step_s.
    config = dataclasses.replace(EngineConfig(clock="steps", step_s=0.5), clock="cost-model")
    assert config.step_s == 0.5


# Each refused setting, forced past the check: the engine's results do not change, which is
# why refusing it loses nothing (vllm mode at 300 blocks preempts; sglang mode retracts at 3000).
IGNORED = [
    ("vllm", "schedule_low_priority_values_first", True),
    ("vllm", "disable_priority_preemption", True),
    ("vllm", "priority_scheduling_preemption_threshold", 0),
    ("vllm", "retraction_policy", "priority"),
    ("vllm", "step_s", 0.5),
    ("sglang", "watermark", 0.2),
    ("sglang", "long_prefill_token_threshold", 16),
    ("sglang", "vllm_version", "0.33"),
    ("sglang", "step_s", 0.5),
]


@pytest.fixture(scope="module")
def requests() -> list:  # type: ignore[type-arg]
    return engine_requests(load_workload(Path(SAMPLE), limit=40))


def _run(config: EngineConfig, requests: list) -> tuple:  # type: ignore[type-arg]
    result = run_engine(requests, config, BuiltinHost())
    return result.steps, result.decisions, result.requests


@pytest.mark.parametrize(("mode", "field", "value"), IGNORED)
def test_a_refused_setting_is_one_the_engine_really_ignores(
    requests: list,  # type: ignore[type-arg]
    mode: str,
    field: str,
    value: object,
) -> None:
    sizes = {"num_blocks": 300, "max_model_len": 4608} if mode == "vllm" else {"num_blocks": 3000}
    config = EngineConfig(mode=mode, scheduling_policy="priority", **sizes)  # type: ignore[arg-type]
    forced = EngineConfig(mode=mode, scheduling_policy="priority", **sizes)  # type: ignore[arg-type]
    object.__setattr__(forced, field, value)
    baseline = _run(config, requests)
    assert baseline[1], "the run must make victim decisions for the comparison to mean much"
    assert _run(forced, requests) == baseline
