"""``tracekit qualify``: the end-to-end job on a small pressured workload."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from report_helpers import qualify_exit

from tracekit.cli import cli
from tracekit.engine.config import make_engine_config
from tracekit.errors import ConfigError
from tracekit.qualify import QualifyPlan, run_qualify
from tracekit.strategies import parse_strategy_list, resolve_strategy
from tracekit.sweep import RunFailedError
from tracekit.workloads import load_workload
from tracekit.workloads.repeats import plan_repeats

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
# 240 requests (about 52 s of arrivals) on 300 blocks: every window is under KV pressure.
ARGS = [
    "--workload", str(SAMPLE), "--limit", "240", "--num-blocks", "300", "--max-model-len", "4608",
    "--strategy", "builtin,bidkv,largest-first", "--load-plan", "single",
]  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qualify") / "results"
    result = CliRunner().invoke(cli, ["qualify", *ARGS, "--out", str(out)])
    assert result.exit_code == qualify_exit(out), result.output
    # stdout: the verdict line, then the report's path.
    verdict, path = result.stdout.strip().splitlines()
    document = json.loads((out / "qualification.json").read_text())
    assert verdict == document["headline"]["text"]
    assert path == str(out / "report.html")
    return out


def test_results_folder_layout(results: Path) -> None:
    names = sorted(p.name for p in results.iterdir())
    assert names == [
        ".tracekit-qualify", "cells.parquet", "conformance.json", "diff", "qualification.json",
        "qualify.json", "replay", "report.html", "runs",
    ]  # fmt: skip
    # Ten repeats by default (docs/qualify.md, "Repeats").
    assert sorted(p.name for p in (results / "runs").iterdir()) == sorted(
        f"r{k}" for k in range(10)
    )
    # The A/A control adds static-random and its second arm.
    assert sorted(p.name for p in (results / "runs" / "r0").iterdir()) == [
        "bidkv", "builtin", "largest-first", "static-random", "static-random-aa",
    ]  # fmt: skip
    assert (results / "diff" / "diff.json").is_file()
    assert (results / "replay" / "summary.parquet").is_file()


def test_cells_pair_every_strategy_with_the_baseline_of_its_repeat(results: Path) -> None:
    cells = pl.read_parquet(results / "cells.parquet")
    assert cells.height == 10 * 5
    assert sorted(cells["strategy"].unique().to_list()) == [
        "bidkv", "builtin", "largest-first", "static-random", "static-random-aa",
    ]  # fmt: skip
    assert cells.filter(pl.col("strategy") == "builtin")["calls"].to_list() == [0] * 10
    # The candidate was called in every repeat that preempted (the runs are under KV pressure).
    bidkv = cells.filter(pl.col("strategy") == "bidkv")
    assert (bidkv.filter(pl.col("decisions") > 0)["calls"] > 0).all()
    assert bidkv["calls"].sum() > 0
    # The A/A arms are one strategy with two seeds: the second arm's is the repeat's + 1000003.
    seeds = {
        json.loads((results / b / "manifest.json").read_text())["strategy_config"]["utility_seed"]
        for b in cells.filter(pl.col("strategy") == "static-random-aa")["bundle"]
    }
    assert seeds == {1_000_003}


def test_the_diff_and_replay_look_at_the_repeat_with_the_most_decisions(results: Path) -> None:
    # A light window may make no victim decision: a diff or replay of it would compare nothing.
    cells = pl.read_parquet(results / "cells.parquet")
    builtin = cells.filter(pl.col("strategy") == "builtin").sort("repeat")
    counts = builtin["decisions"].to_list()
    expected = counts.index(max(counts))  # the first of the most
    reference = json.loads((results / "qualify.json").read_text())["reference"]
    assert (reference["repeat"], reference["decisions"]) == (expected, max(counts))
    assert max(counts) > 0
    # The diff recorded the candidate on that repeat: the typed run is the cell's own run.
    typed = json.loads((results / "diff" / "typed" / "manifest.json").read_text())
    bidkv = cells.filter((pl.col("strategy") == "bidkv") & (pl.col("repeat") == expected))
    assert typed["run_id"] == bidkv["run_id"].item()
    (pair,) = json.loads((results / "diff" / "diff.json").read_text())["pairs"]
    # (Comparable until the two contracts first show the policy different contexts.)
    assert 0 < pair["comparable_decisions"] <= bidkv["decisions"].item()
    replay = json.loads((results / "replay" / "replay.json").read_text())
    assert replay["decisions"] == max(counts)


def test_windows_are_disjoint_and_cover_the_workload(results: Path) -> None:
    inputs = json.loads((results / "qualify.json").read_text())
    details = inputs["repeat_details"]
    assert [d["window"][0] for d in details[1:]] == [d["window"][1] for d in details[:-1]]
    assert sum(d["num_requests"] for d in details) == 240
    assert inputs["repeat_kind"] == "windows"
    assert inputs["independent_repeats"] is True
    # The rule was registered before the runs, with its defaults.
    assert [e["name"] for e in inputs["rule"]["endpoints"]][:2] == [
        "recomputed_tokens", "recompute_tax",
    ]  # fmt: skip


def test_qualification_verdicts(results: Path) -> None:
    verdicts = json.loads((results / "qualification.json").read_text())
    assert verdicts["candidate"] == "bidkv"
    assert verdicts["lifecycle"]["runtime_effective"]["reached"] is True
    assert verdicts["functional_compatibility"]["status"] == "passed"
    rows = {row["strategy"]: row for row in verdicts["effectiveness"]["cells"]}
    assert set(rows) == {"bidkv", "largest-first", "static-random"}
    # The paired changes come from cells.parquet: strategy vs the baseline of the same repeat,
    # relative to the baseline runs' mean.
    cells = pl.read_parquet(results / "cells.parquet").sort("repeat")
    base = cells.filter(pl.col("strategy") == "builtin")["output_tokens_per_s"].to_list()
    ours = cells.filter(pl.col("strategy") == "bidkv")["output_tokens_per_s"].to_list()
    mean_base = sum(base) / len(base)
    changes = [100 * (o - b) / mean_base for o, b in zip(ours, base, strict=True)]
    throughput = rows["bidkv"]["endpoints"]["output_throughput"]
    assert throughput["changes"] == pytest.approx(changes)
    # This pressured cell is far beyond saturation: under half of the built-in requests meet
    # the SLO, so it is labelled overloaded rather than judged; see
    # docs/qualify.md, "The default plan: one cell per load level".
    builtin_slo = cells.filter(pl.col("strategy") == "builtin")["slo_attainment"].mean()
    assert builtin_slo < 0.5
    assert {row["label"] for row in rows.values()} == {"overloaded"}
    assert verdicts["headline"]["text"].startswith("NO-GO (no evidence of benefit) for bidkv")
    # The A/A control is not judged in an overloaded cell either.
    assert verdicts["aa_control"]["judged"] == 0


def test_plan_repeats_by_seeds_keeps_the_whole_workload() -> None:
    workload = load_workload(SAMPLE, limit=50)
    repeats = plan_repeats(workload, 3, "seeds", 7)
    assert [r.seed for r in repeats] == [7, 8, 9]
    assert all(r.workload.num_requests == 50 for r in repeats)


def test_fewer_than_three_repeats_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 3 repeats"):
        QualifyPlan(
            load_workload(SAMPLE, limit=50), make_engine_config(), (),
            resolve_strategy("bidkv"), repeats=2,
        )  # fmt: skip


def test_a_failing_job_leaves_no_results(tmp_path: Path) -> None:
    plan = QualifyPlan(
        load_workload(SAMPLE, limit=60), make_engine_config(num_blocks=300, max_model_len=4608),
        tuple(parse_strategy_list("builtin")), resolve_strategy("bidkv"),
    )  # fmt: skip

    def explode(stage: str, done: int, total: int) -> None:
        if stage == "legacy vs typed":
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        run_qualify(plan, tmp_path / "out", stage=explode)
    assert list(tmp_path.iterdir()) == []


def test_existing_results_are_refused(results: Path) -> None:
    result = CliRunner().invoke(cli, ["qualify", *ARGS, "--out", str(results)])
    assert result.exit_code == 2
    assert "already exists" in result.output and "--overwrite" in result.output


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_two_jobs_write_the_same_results_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    plan = QualifyPlan(
        load_workload(SAMPLE, limit=90), make_engine_config(num_blocks=300, max_model_len=4608),
        tuple(parse_strategy_list("builtin,largest-first")), resolve_strategy("bidkv"),
    )  # fmt: skip
    # The same folder both times: diff.json and replay.json name their input bundles' paths.
    one = _files(run_qualify(plan, tmp_path / "results", jobs=1))
    two = _files(run_qualify(plan, tmp_path / "results", jobs=2, overwrite=True))
    assert sorted(one) == sorted(two) and "runs/r2/bidkv/decisions.parquet" in one
    assert [name for name in one if one[name] != two[name]] == []
    # Those paths name the results folder, not the staging one (its name holds the pid).
    for name in ("diff/diff.json", "diff/diff.txt", "replay/replay.json"):
        assert b".partial-" not in one[name] and str(tmp_path / "results").encode() in one[name]


@pytest.mark.e2e
def test_a_failing_run_fails_the_job_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    plan = QualifyPlan(
        load_workload(SAMPLE, limit=60), make_engine_config(num_blocks=300, max_model_len=4608),
        tuple(parse_strategy_list("builtin")),
        resolve_strategy("sweep_helpers:CrashingPolicy"),
    )  # fmt: skip
    with pytest.raises(RunFailedError, match="worker process died"):
        run_qualify(plan, tmp_path / "out", jobs=2)
    assert list(tmp_path.iterdir()) == []
