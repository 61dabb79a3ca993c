"""``tracekit record sim``: the embedded engine recorded into bundles that validate."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest
from cli_helpers import SMALL
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from tracekit.cli import cli
from tracekit.engine.config import make_engine_config
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.trace import open_trace
from tracekit.trace.validate import validate_trace
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def run_cli(*args: str):
    return CliRunner().invoke(cli, ["record", "sim", *SMALL, *args])


def test_recorded_bundle_validates_and_reads_everywhere(tmp_path: Path) -> None:
    result = run_cli("--strategy", "bidkv", "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    assert "num_decisions" in result.output
    assert validate_trace(tmp_path / "b").status == "ok"
    dataset = open_trace(tmp_path / "b")
    requests = dataset.scan("requests").collect()
    assert requests.height == 120
    assert requests["status"].unique().to_list() == ["finished"]
    decisions = dataset.scan("decisions").collect()
    assert decisions.height > 0
    ((count,),) = duckdb.sql(f"select count(*) from '{tmp_path}/b/candidates.parquet'").fetchall()
    assert count == decisions["num_candidates"].sum()
    manifest = dataset.bundles[0].manifest
    assert manifest["engine"] == "embedded-vllm"
    assert manifest["strategy_config"]["utility_strategy"] == "bidkv"
    assert manifest["workload"]["sha256"] == load_workload(SAMPLE).sha256
    log = (tmp_path / "b" / "policy.log").read_text()
    assert "[BidKV] INIT" in log
    # Every utility pick logs one UTILITY_ACTIVE line (docs/policy.md, "The bidkv decision").
    utility_picks = (decisions["decision_reason"] == "strategy").sum()
    assert utility_picks > 0
    assert log.count("[BidKV] UTILITY_ACTIVE") == utility_picks


def test_builtin_run_makes_no_policy_calls(tmp_path: Path) -> None:
    assert run_cli("--out", str(tmp_path / "b")).exit_code == 0
    decisions = pl.read_parquet(tmp_path / "b" / "decisions.parquet")
    assert decisions["outcome"].unique().to_list() == ["builtin"]
    assert decisions["calls"].max() == 0
    # The built-in FCFS victim is the tail of the running queue (the last candidate).
    last = (
        pl.read_parquet(tmp_path / "b" / "candidates.parquet")
        .group_by("seq")
        .agg(pl.col("request_id").sort_by("position").last())
        .sort("seq")
    )
    assert last["request_id"].to_list() == decisions["applied_victim_id"].to_list()


def test_same_inputs_give_byte_identical_bundles(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    for name in ("one", "two"):
        assert run_cli("--strategy", "static-random", "--out", str(tmp_path / name)).exit_code == 0
    for file in sorted(p.name for p in (tmp_path / "one").iterdir()):
        assert (tmp_path / "one" / file).read_bytes() == (tmp_path / "two" / file).read_bytes()


def test_seed_changes_static_random_and_is_recorded(tmp_path: Path) -> None:
    for seed in ("1", "2"):
        out = tmp_path / seed
        assert (
            run_cli("--strategy", "static-random", "--seed", seed, "--out", str(out)).exit_code == 0
        )
        assert json.loads((out / "manifest.json").read_text())["seed"] == int(seed)
    a = pl.read_parquet(tmp_path / "1" / "decisions.parquet")["applied_victim_id"].to_list()
    b = pl.read_parquet(tmp_path / "2" / "decisions.parquet")["applied_victim_id"].to_list()
    assert a != b


def test_legacy_host_passes_no_requester(tmp_path: Path) -> None:
    assert (
        run_cli("--strategy", "bidkv", "--host", "legacy", "--out", str(tmp_path / "b")).exit_code
        == 0
    )
    decisions = pl.read_parquet(tmp_path / "b" / "decisions.parquet")
    # Recorded from the engine's side: the requester is known, but no cascade abstention can
    # happen through the legacy contract, which does not pass it to the policy.
    assert (decisions["decision_reason"] == "cascade_abstain").sum() == 0
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["host_path"] == "legacy"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "nope"], "--strategy 'nope' is unknown"),
        (["--strategy", "bidkv", "--policy-config", "{bad"], "not valid JSON"),
        (["--strategy", "bidkv", "--policy-config", '{"utility_kv_gate": 2}'], "utility_kv_gate"),
        (["--strategy", "bidkv", "--policy-config", '{"colour": 1}'], "unknown setting(s) colour"),
        (["--strategy", "nosuchmodule:Thing"], "cannot load it"),
    ],
)
def test_bad_options_fail_in_one_line_without_output(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = run_cli(*args, "--out", str(tmp_path / "b"))
    assert result.exit_code != 0
    assert message in result.output
    assert result.output.strip().count("\n") == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "ending"),
    [
        (["--num-blocks", "1"], "1 is not in the range 2<=x<=4194304"),
        (["--rate-scale", "0"], "0.0 is not in the range 0.0<x<=1000000.0"),
    ],
)
def test_option_ranges_are_usage_errors_without_output(
    tmp_path: Path, args: list[str], ending: str
) -> None:
    result = run_cli(*args, "--out", str(tmp_path / "b"))
    assert result.exit_code == 2
    last = result.output.splitlines()[-1]
    assert last.startswith(f"Error: Invalid value for '{args[0]}': {ending}; pass {args[0]}")
    assert list(tmp_path.iterdir()) == []


def test_bad_workload_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens\n0.0,10\n")
    result = CliRunner().invoke(
        cli, ["record", "sim", "--workload", str(bad), "--out", str(tmp_path / "b")]
    )
    assert result.exit_code != 0
    assert "bad.csv" in result.output
    assert not (tmp_path / "b").exists()


def test_library_call_matches_cli(tmp_path: Path) -> None:
    workload = load_workload(SAMPLE, limit=120)
    run = SimRun(
        workload,
        make_engine_config(num_blocks=300, max_model_len=4608, clock="cost-model"),
        resolve_strategy("largest-first"),
        "typed",
    )
    record_sim(run, tmp_path / "lib")
    assert run_cli("--strategy", "largest-first", "--out", str(tmp_path / "cli")).exit_code == 0
    lib = pl.read_parquet(tmp_path / "lib" / "decisions.parquet")
    cli_frame = pl.read_parquet(tmp_path / "cli" / "decisions.parquet")
    assert_frame_equal(lib, cli_frame, check_exact=True)
