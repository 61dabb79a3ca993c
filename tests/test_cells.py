"""``cells_frame``: serving metrics and policy counters per closed-loop run."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.analysis.cells import CellRun, cells_frame
from tracekit.engine.config import make_engine_config
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.workloads import load_workload

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def test_one_row_per_run_with_counters_matching_the_decisions(tmp_path: Path) -> None:
    workload = load_workload(SAMPLE, limit=120)
    config = make_engine_config(num_blocks=300, max_model_len=4608, clock="cost-model")
    runs = []
    for name in ("builtin", "bidkv"):
        bundle = tmp_path / "runs" / name
        record_sim(SimRun(workload, config, resolve_strategy(name), "typed"), bundle)
        runs.append(CellRun(0, 0, name, bundle))
    cells = cells_frame(tmp_path, runs, "azure|rate=1.0|bidkv:defaults")
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
