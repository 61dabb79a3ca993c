"""replay, sweep, report, experiment, fidelity and record vllm run end to end through the CLI.

Every command runs through click's ``CliRunner`` (``catch_exceptions=False``) on a small input, and
its files are checked against facts that do not come from the code under test:

- the committed recording of the real vLLM 0.32 scheduler (``traces/vllm-fixtures/``): its
  manifest's configuration and row counts, its victims and its candidates;
- the rules written in the docs (docs/replay.md, docs/report.md, docs/experiments.md,
  docs/sweep.md) and the reference (``largest-first`` = first candidate with the most computed
  tokens), recomputed here from the raw tables with polars;
- for ``record vllm``, the installed real vLLM scheduler itself.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner, Result
from polars.testing import assert_frame_equal
from vllm_helpers import vllm_version

from tracekit.cli import cli
from tracekit.engine.config import PRE_FEATURE_SETTINGS
from tracekit.vllm.record import DEFAULT_VLLM_VENV

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "traces" / "vllm-fixtures" / "vllm-0.32.0" / "synthetic-fcfs"
OTHER_FIXTURE = REPO / "traces" / "vllm-fixtures" / "vllm-0.32.0" / "synthetic-priority"
AZURE = REPO / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def run(args: list[str | Path], exit_code: int = 0) -> Result:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == exit_code, result.output
    return result


def manifest(bundle: Path) -> dict[str, Any]:
    return json.loads((bundle / "manifest.json").read_text("utf-8"))


def engine_flags(bundle: Path) -> list[str]:
    """The record options that reproduce a bundle's engine, read from its manifest."""
    # A manifest older than the vLLM features was recorded with both off.
    config = {**PRE_FEATURE_SETTINGS, **manifest(bundle)["engine_config"]}
    # The CLI has no flag for it: vLLM's rule, which the vllm engine mode always applies.
    assert config.pop("full_sequence_must_fit") is True
    switches = {"enable_prefix_caching": "prefix-caching", "async_scheduling": "async-scheduling"}
    flags = []
    for key, value in sorted(config.items()):
        if key in switches:
            flags.append(f"--{switches[key]}" if value else f"--no-{switches[key]}")
            continue
        flags += ["--engine-mode" if key == "mode" else "--" + key.replace("_", "-"), str(value)]
    return flags


def record_sim_like_fixture(fixture: Path, out: Path) -> Path:
    """``record sim`` of the fixture's workload and engine, as its manifest states them."""
    workload = REPO / manifest(fixture)["workload"]["source"]
    run(["record", "sim", "--workload", workload, *engine_flags(fixture), "--strategy",
         "builtin", "--record-scheduled", "--out", out])  # fmt: skip
    return out


# -- fidelity ------------------------------------------------------------------------------


def test_fidelity_of_a_sim_recording_against_the_committed_vllm_fixture(tmp_path: Path) -> None:
    sim = record_sim_like_fixture(FIXTURE, tmp_path / "sim")
    tables = {name: t["rows"] for name, t in manifest(FIXTURE)["tables"].items()}
    result = run(["fidelity", sim, FIXTURE])
    assert result.output.splitlines()[0] == (
        f"fidelity: MATCH (embedded-vllm vs vllm-0.32.0): identical {tables['steps']} steps, "
        f"{tables['decisions']} decisions, {tables['scheduled']} scheduled_rows, "
        f"{tables['requests']} requests"
    )
    report = json.loads(run(["fidelity", sim, FIXTURE, "--json"]).output)
    assert report["compared"]["steps"] == tables["steps"]
    # One step of the real recording altered by hand: a mismatch (exit 1) at exactly that step.
    tampered = tmp_path / "tampered"
    shutil.copytree(FIXTURE, tampered)
    steps = pl.read_parquet(FIXTURE / "steps.parquet")
    running = steps.filter(pl.col("step") == 100)["num_running"].item()
    steps.with_columns(
        pl.when(pl.col("step") == 100)
        .then(pl.col("num_running") + 1)
        .otherwise(pl.col("num_running"))
        .alias("num_running")
    ).write_parquet(tampered / "steps.parquet")
    mismatch = run(["fidelity", sim, tampered], exit_code=1)
    assert mismatch.output.splitlines()[0] == (
        f"fidelity: MISMATCH at step 100 (step): steps.num_running {running} vs {running + 1}"
    )
    # The same workload under the priority policy is another run: bad input, exit 2.
    other = run(["fidelity", sim, OTHER_FIXTURE], exit_code=2)
    assert "scheduling_policy 'fcfs' vs 'priority'" in other.output


# -- replay --------------------------------------------------------------------------------


def test_open_replay_of_the_real_vllm_decisions(tmp_path: Path) -> None:
    out = tmp_path / "open"
    result = run(["replay", FIXTURE, "--strategy", "builtin,largest-first", "--out", out])
    decisions = pl.read_parquet(FIXTURE / "decisions.parquet")
    replayed = pl.read_parquet(out / "replay_decisions.parquet")
    # builtin is vLLM's own rule: it names the victim vLLM preempted, every time.
    builtin = replayed.filter(pl.col("strategy") == "builtin").sort("seq")
    assert builtin.height == decisions.height == manifest(FIXTURE)["tables"]["decisions"]["rows"]
    assert (
        builtin["applied_victim_id"].to_list()
        == decisions.sort("seq")["applied_victim_id"].to_list()
    )
    assert builtin["agrees_with_recorded"].all()
    line = next(x for x in result.output.splitlines() if x.startswith("builtin "))
    assert line.split()[1:3] == [str(decisions.height), "100.0%"]
    # largest-first (reference): the first candidate with the most computed tokens.
    expected = (
        pl.read_parquet(FIXTURE / "candidates.parquet")
        .sort("seq", "position")
        .group_by("seq", maintain_order=True)
        .agg(pl.col("request_id").get(pl.col("num_computed_tokens").arg_max()).alias("expected"))
    )
    largest = replayed.filter(pl.col("strategy") == "largest-first").join(expected, on="seq")
    assert largest.height == decisions.height
    assert (largest["applied_victim_id"] == largest["expected"]).all()
    agreement = pl.read_parquet(out / "agreement.parquet").filter(
        pl.col("strategy_a") == "largest-first", pl.col("strategy_b") == "builtin"
    )
    same = largest.join(decisions.select("seq", "applied_victim_id"), on="seq", suffix="_vllm")
    assert (
        agreement["agreements"].item()
        == (same["applied_victim_id"] == same["applied_victim_id_vllm"]).sum()
    )


def test_a_policy_replayed_on_its_own_recording_agrees_everywhere(tmp_path: Path) -> None:
    recorded = tmp_path / "bidkv-run"
    run(["record", "sim", "--workload", AZURE, "--limit", "80", "--num-blocks", "300",
         "--max-model-len", "4608", "--strategy", "bidkv", "--out", recorded])  # fmt: skip
    decisions = pl.read_parquet(recorded / "decisions.parquet")
    assert (decisions["outcome"] == "selected").sum() > 0  # the policy really chose victims
    run(["replay", recorded, "--strategy", "bidkv", "--out", tmp_path / "open"])
    replayed = pl.read_parquet(tmp_path / "open" / "replay_decisions.parquet").sort("seq")
    assert (
        replayed["applied_victim_id"].to_list()
        == decisions.sort("seq")["applied_victim_id"].to_list()
    )
    assert replayed["outcome"].to_list() == decisions.sort("seq")["outcome"].to_list()


def test_closed_replay_of_builtin_reproduces_the_real_vllm_run(tmp_path: Path) -> None:
    sim = record_sim_like_fixture(FIXTURE, tmp_path / "sim")
    out = tmp_path / "closed"
    result = run(["replay", sim, "--mode", "closed", "--strategy", "builtin", "--out", out])
    assert result.output.rstrip().endswith(f"wrote {out}")
    summary = pl.read_parquet(out / "closed_summary.parquet")
    again = summary.filter(pl.col("strategy") == "builtin")
    # The counterfactual with vLLM's own rule is the run vLLM made.
    requests = pl.read_parquet(FIXTURE / "requests.parquet")
    finished = requests.filter(pl.col("status") == "finished")
    makespan = requests["finish_s"].max() - requests["arrival_s"].min()
    assert again["preemptions"].item() == manifest(FIXTURE)["tables"]["decisions"]["rows"]
    assert again["throughput_rps"].item() == pytest.approx(finished.height / makespan, rel=1e-9)
    assert again["throughput_rps_change_pct"].item() == pytest.approx(0.0, abs=1e-9)
    # Request by request, the re-simulated run is the one vLLM recorded.
    (bundle,) = (out / "bundles").glob("*/builtin")
    columns = ["request_id", "arrival_s", "first_token_s", "finish_s", "status",
               "output_tokens", "num_preemptions", "recomputed_tokens"]  # fmt: skip
    assert_frame_equal(
        pl.read_parquet(bundle / "requests.parquet").select(columns).sort("request_id"),
        requests.select(columns).sort("request_id"),
    )
    run(["validate", out])


# -- sweep, validate and report --------------------------------------------------------------


MATRIX = """
name = "e2e"
seed = 0
strategies = ["builtin", "bidkv"]
rate_scale = [1.0, 2.0]

[repeats]
count = 3
kind = "windows"

[[workloads]]
path = "{azure}"
limit = 90

[[engines]]
label = "small"
num_blocks = 300
max_model_len = 4608
"""


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 strategies x 2 rates x 3 windows of 30 requests: 12 runs, about 2 s."""
    folder = tmp_path_factory.mktemp("sweep")
    matrix = folder / "matrix.toml"
    matrix.write_text(MATRIX.format(azure=AZURE.as_posix()), "utf-8")
    result = run(["sweep", matrix, "--out", folder / "out", "--jobs", "1"])
    assert f"{folder / 'out'}: 12 runs: 12 done, 0 skipped, 0 failed" in result.output
    return folder


def test_sweep_writes_one_cells_row_per_run(sweep_folder: Path) -> None:
    out = sweep_folder / "out"
    cells = pl.read_parquet(out / "cells.parquet")
    assert cells.height == 12
    assert cells.select("rate", "strategy", "repeat").n_unique() == 12
    # The three windows split the 90 requests: every request runs once per (rate, strategy).
    per_point = cells.group_by("rate", "strategy").agg(pl.col("requests").sum(), pl.len())
    assert per_point["requests"].to_list() == [90] * 4
    assert per_point["len"].to_list() == [3] * 4
    # The metrics are those of the bundle each row names.
    for row in cells.iter_rows(named=True):
        requests = pl.read_parquet(out / row["bundle"] / "requests.parquet")
        makespan = requests["finish_s"].max() - requests["arrival_s"].min()
        assert row["requests"] == requests.height
        assert row["makespan_s"] == pytest.approx(makespan, rel=1e-12)
        assert row["output_tokens_per_s"] == pytest.approx(
            requests["output_tokens"].sum() / makespan, rel=1e-12
        )
        assert manifest(out / row["bundle"])["strategy"] == row["strategy"]
    builtin = cells.filter(pl.col("strategy") == "builtin")
    assert (builtin["calls"] == 0).all() and (builtin["decisions"] == builtin["preemptions"]).all()
    bidkv = cells.filter(pl.col("strategy") == "bidkv")
    assert (bidkv["calls"] == bidkv["decisions"]).all() and bidkv["selections"].sum() > 0
    run(["validate", out])


def test_sweep_resumes_without_rerunning(sweep_folder: Path) -> None:
    out = sweep_folder / "out"
    before = pl.read_parquet(out / "cells.parquet")
    result = run(["sweep", sweep_folder / "matrix.toml", "--out", out, "--jobs", "1"])
    assert "12 runs: 0 done, 12 skipped, 0 failed" in result.output
    assert_frame_equal(pl.read_parquet(out / "cells.parquet"), before)


class _Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _interval(changes: list[float], comparisons: int) -> tuple[float, float, float]:
    """Mean and Bonferroni-corrected Student-t interval, t from SciPy (independent code)."""
    import scipy.stats as stats

    n = len(changes)
    mean = sum(changes) / n
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / (n - 1))
    half = float(stats.t.ppf(1 - 0.05 / (2 * comparisons), n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_report_of_the_sweep_has_the_verdict_tables(sweep_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run(["report", sweep_folder / "out", "--out", out])
    assert result.output.strip() == str(out)
    verdicts = json.loads((tmp_path / "qualification.json").read_text("utf-8"))
    cells = pl.read_parquet(sweep_folder / "out" / "cells.parquet")

    # Gate (docs/report.md): a sweep runs no diff and no conformance checks, so those two do not
    # pass, and the gate was not run (not failed): the sweep draws no GO/NO-GO.
    gate = verdicts["functional_compatibility"]
    assert gate["status"] == "not-run"
    assert verdicts["headline"]["decision"] == "none"
    assert [c["name"] for c in gate["checks"]] == [
        "all_requests_completed", "no_policy_failure", "no_invalid_selection",
        "policy_stayed_enabled", "invoked_at_every_preemption", "legacy_typed_equivalent",
        "conformance_passed",
    ]  # fmt: skip
    assert [c["name"] for c in gate["checks"] if not c["passed"]] == [
        "legacy_typed_equivalent",
        "conformance_passed",
    ]

    # Effectiveness: per repeat 100 * (bidkv - builtin) / mean(builtin), a corrected t interval
    # over m = 1 strategy x the judged cells x 11 endpoints (a cell whose built-in runs meet the
    # SLO for under half their requests is overloaded, not judged, and not in the family; with
    # no judged cell the intervals are plain 95% ones), and a label from the endpoints' verdicts.
    judged = [
        cell
        for cell in cells["cell"].unique().to_list()
        if cells.filter((pl.col("cell") == cell) & (pl.col("strategy") == "builtin"))[
            "slo_attainment"
        ].mean()
        >= 0.5
        and (
            cells.filter((pl.col("cell") == cell) & (pl.col("strategy") == "bidkv"))[
                "differing_decisions"
            ]
            > 0
        ).any()
    ]
    comparisons = len(judged) * 11
    assert verdicts["effectiveness"]["rule"]["comparisons"] == comparisons
    comparisons = max(1, comparisons)
    effectiveness = verdicts["effectiveness"]["cells"]
    assert len(effectiveness) == 2
    expected_rows = []
    for entry in effectiveness:
        assert entry["strategy"] == "bidkv"
        cell = cells.filter(pl.col("cell") == entry["cell"])
        pairs = cell.pivot("strategy", index="repeat", values=["output_tokens_per_s", "e2e_p95_s"])
        pairs = pairs.sort("repeat")
        measured = {}
        for metric, key in (("output_tokens_per_s", "output_throughput"), ("e2e_p95_s", "e2e_p95")):
            base = pairs[f"{metric}_builtin"]
            changes = (100 * (pairs[f"{metric}_bidkv"] - base) / base.mean()).to_list()
            stats = entry["endpoints"][key]
            assert stats["changes"] == pytest.approx(changes, rel=1e-9)
            mean, low, high = _interval(changes, comparisons)
            assert stats["mean"] == pytest.approx(mean, rel=1e-9)
            assert stats["low"] == pytest.approx(low, rel=1e-9)
            assert stats["high"] == pytest.approx(high, rel=1e-9)
            measured[key] = (mean, low, high)
        # A cell where the built-in runs meet the SLO for under half their requests is
        # overloaded and not judged; elsewhere the label follows the endpoints' verdicts.
        builtin_slo = cell.filter(pl.col("strategy") == "builtin")["slo_attainment"].mean()
        found = {s["verdict"] for s in entry["endpoints"].values()}
        better = {s["verdict"] for s in entry["endpoints"].values() if s["primary"]}
        if builtin_slo < 0.5:
            label = "overloaded"
        elif "worse" in found:
            label = "harmful"
        elif "better" in better and found <= {"better", "equivalent", "not worse"}:
            label = "beneficial"
        elif found == {"equivalent"}:
            label = "equivalent"
        else:
            label = "inconclusive"
        assert entry["label"] == label
        expected_rows.append([entry["load"], "bidkv", label, *measured["output_throughput"]])

    page = out.read_text("utf-8")
    assert "<h2>Verdicts</h2>" in page
    parser = _Tables()
    parser.feed(page)
    gate_table = next(t for t in parser.tables if t[0] == ["check", "passed", "detail"])
    assert [(r[0], r[1]) for r in gate_table[1:]] == [
        (c["name"], "yes" if c["passed"] else "no") for c in gate["checks"]
    ]
    header = ["load", "strategy", "label"]
    effect_table = next(t for t in parser.tables if t[0][:3] == header)
    column = effect_table[0].index("output throughput change [interval]")
    shown = []
    for row in effect_table[1:]:
        # "-6.4% [-31.2, +18.4]": the throughput change and its interval.
        mean, low, high = (float(x) for x in re.findall(r"[-+]\d+\.\d+", row[column]))
        shown.append([row[0], row[1], row[2], mean, low, high])
    assert len(shown) == len(expected_rows)
    for got, want in zip(shown, expected_rows, strict=True):
        assert got[:3] == want[:3]
        assert got[3:] == pytest.approx(want[3:], abs=0.06)


# -- experiment ----------------------------------------------------------------------------


def _original_percentile(values: list[float], p: float) -> float:
    """docs/experiments.md: ``sorted(v)[max(0, int(n * p) - 1)]`` over positive values."""
    positive = sorted(v for v in values if v > 0)
    return positive[max(0, int(len(positive) * p) - 1)]


def test_experiment_run_on_a_tiny_matrix(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    result = run([
        "experiment", "run", "--out", out, "--strategies", "preempt-evict,bidkv", "--rates", "3.8",
        "--runs", "1", "--num-requests", "40", "--jobs", "1",
    ])  # fmt: skip
    assert result.output.rstrip().endswith(f"-> {out}")
    assert "| bidkv | 3.8 | throughput_rps |" in result.output
    # The frozen trace (docs/experiments.md, Traces): 40 requests mixed-0000..., capped outputs.
    trace = json.loads((out / "traces" / "run0" / "mixed_rate3.8.json").read_text("utf-8"))
    frozen = trace["requests"] if isinstance(trace, dict) else trace
    assert [r["request_id"] for r in frozen] == [f"mixed-{i:04d}" for i in range(40)]
    assert all(1 <= r["max_tokens"] <= 256 for r in frozen)

    runs = pl.read_parquet(out / "runs.parquet").sort("strategy")
    assert runs["strategy"].to_list() == ["bidkv", "preempt-evict"]
    for row in runs.iter_rows(named=True):
        requests = pl.read_parquet(out / row["bundle"] / "requests.parquet")
        assert requests.height == row["requests"] == 40
        finished = requests.filter(pl.col("status") == "finished")
        # Summary figures: throughput = finished / last finish (the run starts at 0).
        assert row["throughput_rps"] == pytest.approx(
            finished.height / requests["finish_s"].max(), rel=1e-9
        )
        ttft_ms = ((finished["first_token_s"] - finished["arrival_s"]) * 1000).to_list()
        assert row["ttft_p95_ms"] == pytest.approx(_original_percentile(ttft_ms, 0.95), rel=1e-9)
        within = sum(t <= 300.0 for t in ttft_ms)
        assert row["slo_attainment_pct"] == pytest.approx(100 * within / 40, rel=1e-9)
        assert row["preemptions"] == (
            row["native_preemptions"] + row["proactive_preemptions"] + row["srpt_preemptions"]
        )
    # preempt-evict has no proactive and no SRPT preemption (docs/experiments.md's table).
    pe = runs.filter(pl.col("strategy") == "preempt-evict")
    assert (pe["proactive_preemptions"].item(), pe["srpt_preemptions"].item()) == (0, 0)
    run(["validate", out / "bundles"])


# -- record vllm ---------------------------------------------------------------------------


def _vllm_venv() -> str:
    venv = os.environ.get("BIDKV_VLLM_VENV") or str(DEFAULT_VLLM_VENV)
    version = vllm_version(venv)
    if not version.startswith("0.32."):
        pytest.skip(f"this test pins vLLM 0.32 settings; {venv} has vLLM {version}")
    return venv


# 12 requests of the synthetic chunked-prefill workload on 40 blocks: 39 * 16 = 624 usable
# tokens, so max_model_len 624, and the long prompts force preemptions.
TINY_VLLM_RUN = [
    "--workload", REPO / "traces" / "vllm-fixtures" / "workloads" / "synthetic-chunked.csv",
    "--limit", "12", "--engine-mode", "vllm", "--num-blocks", "40", "--max-num-seqs", "8",
    "--max-num-batched-tokens", "256", "--max-model-len", "624",
    "--long-prefill-token-threshold", "128", "--watermark", "0", "--vllm-version", "0.32",
    "--scheduling-policy", "fcfs", "--clock", "steps", "--step-s", "0.05",
]  # fmt: skip


@pytest.mark.vllm
def test_record_vllm_on_a_tiny_workload_validates_and_matches_the_engine(tmp_path: Path) -> None:
    venv = _vllm_venv()
    options = [*TINY_VLLM_RUN, "--strategy", "builtin"]
    live = tmp_path / "vllm"
    result = run(["record", "vllm", *options, "--vllm-venv", venv, "--out", live])
    assert "engine                          vllm-0.32.0" in result.output
    data = manifest(live)
    assert data["engine"] == "vllm-0.32.0" and data["vllm"]["version"].startswith("0.32.")
    assert data["tables"]["requests"]["rows"] == 12
    decisions = pl.read_parquet(live / "decisions.parquet")
    assert decisions.height > 0  # the workload preempts
    assert (decisions["applied_victim_id"] == decisions["builtin_victim_id"]).all()
    validated = run(["validate", live])
    assert validated.output.startswith("ok ")
    sim = tmp_path / "sim"
    run(["record", "sim", *options, "--record-scheduled", "--out", sim])
    assert run(["fidelity", sim, live]).output.startswith("fidelity: MATCH")


@pytest.mark.vllm
def test_record_vllm_with_a_policy_through_the_shim(tmp_path: Path) -> None:
    venv = _vllm_venv()
    options = [*TINY_VLLM_RUN, "--strategy", "largest-first", "--host", "typed"]
    live = tmp_path / "vllm"
    run(["record", "vllm", *options, "--vllm-venv", venv, "--out", live])
    run(["validate", live])
    # In the real scheduler the policy chose every victim: largest-first's rule (reference),
    # recomputed from the candidates vLLM offered.
    decisions = pl.read_parquet(live / "decisions.parquet")
    expected = (
        pl.read_parquet(live / "candidates.parquet")
        .sort("seq", "position")
        .group_by("seq", maintain_order=True)
        .agg(pl.col("request_id").get(pl.col("num_computed_tokens").arg_max()).alias("expected"))
    )
    joined = decisions.join(expected, on="seq")
    assert joined.height == decisions.height > 0
    assert (joined["outcome"] == "selected").all()
    assert (joined["applied_victim_id"] == joined["expected"]).all()
    sim = tmp_path / "sim"
    run(["record", "sim", *options, "--record-scheduled", "--out", sim])
    assert run(["fidelity", sim, live]).output.startswith("fidelity: MATCH")
