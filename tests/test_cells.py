"""``cells_frame``: serving metrics and policy counters per closed-loop run."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analysis.cells import CellRun, cells_frame
from tracekit.engine.config import EngineConfig, make_engine_config
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.workloads import Workload, load_workload

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def recorded_cells(
    tmp_path: Path, workload: Workload, config: EngineConfig, strategy: str
) -> pl.DataFrame:
    """The cells of the built-in run and ``strategy``'s (typed host), recorded under tmp_path."""
    runs = []
    for name in ("builtin", strategy):
        bundle = tmp_path / "runs" / name
        record_sim(SimRun(workload, config, resolve_strategy(name), "typed"), bundle)
        runs.append(CellRun(0, 0, name, bundle))
    return cells_frame(tmp_path, runs, f"azure|rate=1.0|{strategy}:defaults")


def test_one_row_per_run_with_counters_matching_the_decisions(tmp_path: Path) -> None:
    workload = load_workload(SAMPLE, limit=120)
    config = make_engine_config(num_blocks=300, max_model_len=4608, clock="cost-model")
    cells = recorded_cells(tmp_path, workload, config, "bidkv")
    assert cells["strategy"].to_list() == ["bidkv", "builtin"]
    assert cells["bundle"].to_list() == ["runs/bidkv", "runs/builtin"]
    assert cells["host_path"].to_list() == ["typed", "builtin"]
    bidkv = cells.row(0, named=True)
    decisions = pl.read_parquet(tmp_path / "runs" / "bidkv" / "decisions.parquet")
    outcomes = decisions["outcome"].value_counts().to_dict(as_series=False)
    counted = dict(zip(outcomes["outcome"], outcomes["count"], strict=True))
    # Every decision of a healthy typed run is a call that selected or abstained.
    assert bidkv["calls"] == decisions.height == bidkv["decisions"]
    assert bidkv["selections"] == counted.get("selected", 0)
    assert bidkv["abstentions"] == counted.get("abstained", 0)
    assert bidkv["abstentions"] == bidkv["liveness_abstentions"] + bidkv["cascade_abstentions"]
    assert (bidkv["failures"], bidkv["invalid_selections"]) == (0, 0)
    assert bidkv["policy_enabled"] is True
    builtin = cells.row(1, named=True)
    assert builtin["calls"] == 0
    assert builtin["preemptions"] == builtin["decisions"]
    assert builtin["requests"] == 120 and builtin["all_finished"]


def test_efficiency_outcomes_and_goodput_match_the_bundles(tmp_path: Path) -> None:
    # Prefix caching on (the default): part of what preemptions discard comes back on resume.
    workload = load_workload(SAMPLE, limit=200)
    config = make_engine_config(num_blocks=300, max_model_len=4608)
    cells = recorded_cells(tmp_path, workload, config, "lcf")
    for row in cells.iter_rows(named=True):
        folder = tmp_path / row["bundle"]
        requests = pl.read_parquet(folder / "requests.parquet").to_dicts()
        steps = pl.read_parquet(folder / "steps.parquet")
        decisions = pl.read_parquet(folder / "decisions.parquet").to_dicts()
        # By hand, row by row: what was discarded less what the cache served back on resume.
        truly = sum(
            r["recomputed_tokens"] - min(r["resume_cached_tokens"] or 0, r["recomputed_tokens"])
            for r in requests
        )
        computed = int(
            steps["scheduled_prefill_tokens"].sum() + steps["scheduled_decode_tokens"].sum()
        )
        assert row["truly_recomputed_tokens"] == truly
        assert row["computed_tokens"] == computed
        assert row["recompute_tax"] == pytest.approx(truly / computed)
        assert truly < row["recomputed_tokens"]  # the cache served some of it back
        assert row["aborted"] == sum(r["status"] == "aborted" for r in requests)
        assert row["rejected"] == sum(r["status"] == "rejected" for r in requests)
        assert row["differing_decisions"] == sum(
            d["applied_victim_id"] != d["builtin_victim_id"] for d in decisions
        )
        finished = [r for r in requests if r["status"] == "finished"]
        span = max(r["finish_s"] for r in finished) - min(r["arrival_s"] for r in finished)

        def meets(r: dict) -> bool:
            ttft = r["first_token_s"] - r["arrival_s"]
            if r["output_tokens"] <= 1:
                return ttft <= 2.0
            return (
                ttft <= 2.0
                and (r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1) <= 0.1
            )

        assert row["goodput_rps"] == pytest.approx(sum(map(meets, finished)) / span)
    assert cells.filter(pl.col("strategy") == "builtin")["differing_decisions"].item() == 0
    assert cells.filter(pl.col("strategy") == "lcf")["differing_decisions"].item() > 0
