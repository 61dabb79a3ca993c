"""Option defaults and choices come from the library's dataclasses, not from the commands."""

from __future__ import annotations

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
    assert run["slo_ttft_ms"].default == spec.slo.ttft_ms
    qualify = options("qualify")
    assert qualify["slo_ttft_s"].default == SloTargets().ttft_s
    assert qualify["slo_tpot_s"].default == SloTargets().tpot_s
