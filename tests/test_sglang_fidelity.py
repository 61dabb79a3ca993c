"""``tracekit fidelity`` with SGLang recordings (the committed fixtures; no SGLang needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.real_engine.comparison import FidelityInputError
from tracekit.recording.sim import SimRun, record_sim
from tracekit.sglang.compare import engine_config
from tracekit.sglang.fidelity import compare_sglang_fidelity
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.strategies import resolve_strategy

ROOT = Path(__file__).resolve().parents[1]
NAME = "synthetic-radix-length"
FIXTURE = ROOT / FIXTURES_DIR / NAME


@pytest.fixture(scope="module")
def sim_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine's own recording of the fixture's run (record sim, scheduled table on)."""
    fixture = FIXTURES[NAME]
    run = SimRun(
        fixture.load_workload(ROOT),
        engine_config(fixture.config),
        resolve_strategy("builtin"),
        "typed",
    )
    return record_sim(run, tmp_path_factory.mktemp("sim") / "sim", record_scheduled=True)


def test_engine_recording_matches_the_sglang_recording(sim_bundle: Path) -> None:
    report = compare_sglang_fidelity(sim_bundle, FIXTURE)
    assert report.matched, report.render()
    assert report.exit_code == 0
    assert report.num_steps > 1000
    # Either order works.
    assert compare_sglang_fidelity(FIXTURE, sim_bundle).matched


def test_cli_fidelity_takes_the_sglang_path(sim_bundle: Path) -> None:
    result = CliRunner().invoke(cli, ["fidelity", str(sim_bundle), str(FIXTURE)])
    assert result.exit_code == 0, result.output
    assert "match:" in result.output
    result = CliRunner().invoke(cli, ["fidelity", "--json", str(sim_bundle), str(FIXTURE)])
    assert result.exit_code == 0 and '"matched": true' in result.output


def test_two_sglang_recordings_compare_their_step_streams() -> None:
    report = compare_sglang_fidelity(FIXTURE, FIXTURE)
    assert report.matched and report.num_steps > 1000


def test_a_changed_schedule_is_reported_at_its_step(sim_bundle: Path, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered"
    shutil.copytree(FIXTURE, tampered)
    scheduled = pl.read_parquet(tampered / "scheduled.parquet")
    # Swap the order of the first two requests of the first step that schedules several.
    step = (
        scheduled.group_by("step", maintain_order=True)
        .len()
        .filter(pl.col("len") > 1)["step"]
        .item(0)
    )
    rows = scheduled.with_row_index()
    first, second = rows.filter(pl.col("step") == step)["index"].to_list()[:2]
    order = list(range(len(scheduled)))
    order[first], order[second] = order[second], order[first]
    scheduled[order].write_parquet(tampered / "scheduled.parquet")
    report = compare_sglang_fidelity(sim_bundle, tampered)
    assert not report.matched and report.exit_code == 1
    assert report.mismatch is not None
    assert (report.mismatch.step, report.mismatch.field) == (step, "scheduled")
    result = CliRunner().invoke(cli, ["fidelity", str(sim_bundle), str(tampered)])
    assert result.exit_code == 1 and f"MISMATCH at step {step}, scheduled" in result.output


def test_runs_that_do_not_mirror_each_other_are_bad_input(sim_bundle: Path) -> None:
    other = ROOT / FIXTURES_DIR / "synthetic-noradix-length"
    with pytest.raises(FidelityInputError, match="radix_cache"):
        compare_sglang_fidelity(sim_bundle, other)
    with pytest.raises(FidelityInputError, match="different scenarios"):
        compare_sglang_fidelity(FIXTURE, other)
    result = CliRunner().invoke(cli, ["fidelity", str(sim_bundle), str(other)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "radix_cache" in result.output


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        # SGLang's defaults: the overlap loop, priority preemption at admission.
        ("priority-preempt-overlap", ["--enable-priority-scheduling"]),
        ("mooncake-radix-length", ["--disable-overlap-schedule"]),
    ],
)
def test_record_sim_cli_mirrors_an_sglang_recording(
    tmp_path: Path, name: str, flags: list[str]
) -> None:
    """The engine options for SGLang mode reach the engine: the CLI's run matches SGLang."""
    fixture = FIXTURES[name]
    config = fixture.config
    options = {
        key: value
        for key, value in fixture.workload_options.items()
        if key in ("rate_scale", "priority_seed")
    }
    workload = ["--workload", str(ROOT / fixture.workload)]
    if "window" in fixture.workload_options:
        start, end = fixture.workload_options["window"]
        workload += ["--window", f"{start}:{end}"]
    for key, value in options.items():
        workload += [f"--{key.replace('_', '-')}", str(value)]
    out = tmp_path / "sim"
    args = [
        "record", "sim", *workload,
        "--engine-mode", "sglang", "--num-blocks", str(config.kv_tokens + 1),
        "--max-num-seqs", str(config.max_running_requests),
        "--max-num-batched-tokens", str(config.max_prefill_tokens),
        "--max-model-len", str(config.max_context_len),
        "--chunked-prefill-size", str(config.chunked_prefill_size),
        "--retraction-policy", config.retraction_policy,
        "--clock", "steps", "--step-s", str(config.step_s), "--record-scheduled",
        *flags, "--out", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["fidelity", str(out), str(ROOT / FIXTURES_DIR / name)])
    assert result.exit_code == 0, result.output
