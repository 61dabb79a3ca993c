"""Option defaults and choices come from the library's dataclasses, not from the commands."""

from __future__ import annotations

import dataclasses

import click

from tracekit.analysis.serving import SloTargets
from tracekit.cli import cli
from tracekit.engine.config import (
    CLOCKS,
    ENGINE_MODES,
    SCHEDULING_POLICIES,
    VLLM_VERSIONS,
    EngineConfig,
)
from tracekit.experiment import MatrixSpec


def options(*path: str) -> dict[str, click.Parameter]:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return {p.name: p for p in command.params if p.name}


def test_engine_options_state_engine_config_defaults_and_choices() -> None:
    engine = EngineConfig()
    for path in (("record", "sim"), ("record", "vllm"), ("qualify",)):
        params = options(*path)
        assert list(params["engine_mode"].type.choices) == list(ENGINE_MODES)  # type: ignore[attr-defined]
        assert list(params["scheduling_policy"].type.choices) == list(SCHEDULING_POLICIES)  # type: ignore[attr-defined]
        assert list(params["clock"].type.choices) == list(CLOCKS)  # type: ignore[attr-defined]
        assert list(params["vllm_version"].type.choices) == list(VLLM_VERSIONS)  # type: ignore[attr-defined]
        assert params["engine_mode"].default == engine.mode
        assert params["clock"].default == engine.clock == "cost-model"
        assert params["scheduling_policy"].default == engine.scheduling_policy
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_model_len", "step_s"):
            assert params[name].default is None  # unset: EngineConfig keeps its default
            assert f"default {getattr(engine, name)}" in params[name].help  # type: ignore[attr-defined]


def test_experiment_and_qualify_defaults_are_the_library_defaults() -> None:
    spec, run = MatrixSpec(), options("experiment", "run")
    assert run["runs"].default == spec.runs and run["seed"].default == spec.seed
    assert run["rates"].default == ",".join(map(str, spec.rates))
    assert run["strategies"].default == ",".join(spec.strategies)
    assert run["slo_ttft_s"].default * 1000 == spec.slo.ttft_ms  # seconds, as everywhere
    qualify = options("qualify")
    assert qualify["slo_ttft_s"].default == SloTargets().ttft_s
    assert qualify["slo_tpot_s"].default == SloTargets().tpot_s


def test_each_engine_setting_is_declared_once_and_every_command_offers_it() -> None:
    # ENGINE_OPTIONS is the one declaration: every EngineConfig field but vLLM's always-on
    # full_sequence_must_fit has exactly one entry, every ranged setting is in it, and each
    # command's option of a setting is named by its field (engine_settings reads it back).
    from tracekit.cli.options import engine_settings
    from tracekit.engine.config import ENGINE_OPTIONS, ENGINE_RANGES

    declared = [o.field for o in ENGINE_OPTIONS]
    fields = [f.name for f in dataclasses.fields(EngineConfig)]
    assert len(declared) == len(set(declared))
    assert sorted(declared) == sorted(set(fields) - {"full_sequence_must_fit"})
    assert set(ENGINE_RANGES) <= set(declared)
    for option in ENGINE_OPTIONS:
        assert option.help_text is None or "{" not in option.help_text, option.field
    for path in (("record", "sim"), ("record", "vllm"), ("qualify",), ("capacity",)):
        params = options(*path)
        names = ["engine_mode" if f == "mode" else f for f in declared]
        assert all(name in params for name in names), path
        flags = {o.field: o.flag.split("/")[0] for o in ENGINE_OPTIONS}
        assert all(flags[f] in params[n].opts for f, n in zip(declared, names, strict=True))
    given = {name: None for name in options("record", "sim")} | {"engine_mode": "sglang"}
    given |= {"num_blocks": 65, "radix_cache": False, "priority_scheduling_preemption_threshold": 3}
    settings = engine_settings(given)
    assert sorted(settings) == sorted(declared)
    config = EngineConfig(**{k: v for k, v in settings.items() if v is not None})
    assert (config.mode, config.num_blocks, config.radix_cache) == ("sglang", 65, False)
    assert config.priority_scheduling_preemption_threshold == 3


def test_a_ranged_engine_option_refuses_what_its_range_refuses() -> None:
    from click.testing import CliRunner

    from tracekit.engine.config import ENGINE_RANGES

    def run(*args: str) -> str:
        # The option is parsed before the missing --workload is reported.
        result = CliRunner().invoke(cli, ["record", "sim", *args])
        assert result.exit_code == 2
        return result.output

    low, high = ENGINE_RANGES["num_blocks"]
    for value in (low - 1, high + 1):
        assert "Invalid value for '--num-blocks'" in run("--num-blocks", str(value))
    for value in (low, high):
        assert "Missing option '--workload'" in run("--num-blocks", str(value))
    assert "0.0<=x<1.0" in run("--watermark", "1.0")
    assert "Missing option '--workload'" in run("--watermark", "0.99")
