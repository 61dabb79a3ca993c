"""A small but real qualification results folder for the report tests.

The runs are recorded with ``record_sim`` on three disjoint windows of the shipped Azure sample
(300 KV blocks, so the engine preempts). One request id and the workload name carry HTML/script
payloads, so that escaping is tested on real data flowing through every table and chart.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.analysis.cells import CellRun, cells_frame
from tracekit.analysis.serving import SloTargets
from tracekit.conformance import run_conformance
from tracekit.diff import diff_traces
from tracekit.engine.config import make_engine_config
from tracekit.recording.sim import SimRun, record_sim
from tracekit.replay import replay_open
from tracekit.strategies import resolve_strategy
from tracekit.workloads import load_workload


def qualify_exit(results: Path) -> int:
    """The status ``tracekit qualify`` exits with for ``results``: 1 for a NO-GO, else 0.

    Read from the headline of the folder's ``qualification.json`` (docs/index.md,
    "Conventions": 1 is a finding, such as diff's differences or qualify's NO-GO).
    """
    document = json.loads((results / "qualification.json").read_text("utf-8"))
    return 1 if document["headline"]["decision"] == "no-go" else 0


REPO = Path(__file__).resolve().parents[1]
AZURE = REPO / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"

# Planted payloads: if any of them runs in a browser, the page title changes / a flag is set.
EVIL_ID = "<img src=x onerror=\"document.title='XSS';window.__xss=1\">"
EVIL_WORKLOAD = "azure<svg onload=window.__xss=2>"
WINDOW_S = 60.0
ENGINE = {"num_blocks": 300, "max_model_len": 4608}
POLICY_CONFIG = {"utility_kv_gate": 0.9}
SLO = {"ttft_s": 2.0, "tpot_s": 0.1}
STRATEGIES = ("builtin", "bidkv", "largest-first")
CELL = f"{EVIL_WORKLOAD}|rate=1.0|bidkv:utility_kv_gate=0.9"

_CACHE: dict[tuple[Any, ...], Path] = {}


def workload_file(folder: Path) -> Path:
    """The first three windows of the Azure sample as a Parquet workload with one planted id.

    The planted id replaces a request that the runs preempt (it is a candidate of decisions).
    """
    frame = load_workload(AZURE, window=(0.0, 3 * WINDOW_S)).frame
    frame = frame.with_columns(
        pl.when(pl.col("request_id") == "azure-000030")
        .then(pl.lit(EVIL_ID))
        .otherwise(pl.col("request_id"))
        .alias("request_id")
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{EVIL_WORKLOAD}.parquet"
    frame.write_parquet(path)
    return path


def _record(workload_path: Path, window: int, strategy: str, host: str, out: Path) -> Path:
    workload = load_workload(workload_path, window=(window * WINDOW_S, (window + 1) * WINDOW_S))
    spec = resolve_strategy(strategy, POLICY_CONFIG, seed=0)
    run = SimRun(workload, make_engine_config(**ENGINE), spec, host, seed=0)  # type: ignore[arg-type]
    return record_sim(run, out)


def _replay(root: Path, strategies: tuple[str, ...]) -> None:
    """Open-mode replay of every strategy on the baseline's decisions of repeat 0."""
    specs = [resolve_strategy(s, POLICY_CONFIG) for s in strategies]
    replay_open(root / "runs" / "r0" / "builtin", specs, root / "replay")


def _diff(root: Path, workload_path: Path) -> None:
    folder = root / "diff"
    _record(workload_path, 0, "bidkv", "legacy", folder / "legacy")
    _record(workload_path, 0, "bidkv", "typed", folder / "typed")
    report = diff_traces(folder / "legacy", folder / "typed", allow_contract_differences=True)
    # Sorted keys, as tracekit qualify writes it (tracekit/qualify/job.py): the candidates'
    # fields come in alphabetical order, and the report must put them in the contract's order.
    (folder / "diff.json").write_text(
        json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str)
    )
    conformance = run_conformance(["bidkv"], POLICY_CONFIG)
    (root / "conformance.json").write_text(json.dumps(conformance.to_dict(), indent=2))


def build_results(
    root: Path, *, repeats: int = 3, strategies: tuple[str, ...] = STRATEGIES
) -> Path:
    """Record and assemble a full results folder at ``root`` (a few seconds)."""
    workload_path = workload_file(root.parent / f"{root.name}-inputs")
    root.mkdir(parents=True)
    runs = []
    for k in range(repeats):
        for strategy in strategies:
            bundle = root / "runs" / f"r{k}" / resolve_strategy(strategy).label
            _record(workload_path, k, strategy, "typed", bundle)
            runs.append(CellRun(k, 0, strategy, bundle))
    workload = load_workload(workload_path)
    qualify = {
        "workload": {
            "name": workload.name,
            "source": str(workload_path),
            "sha256": workload.sha256,
            "options": {"window_s": WINDOW_S},
        },
        "engine_config": {**ENGINE, "block_size": 16, "max_num_seqs": 32},
        "strategies": list(strategies),
        "candidate": "bidkv",
        "policy_config": resolve_strategy("bidkv", POLICY_CONFIG).settings,
        "repeats": repeats,
        "repeat_kind": "windows",
        "repeat_details": [
            {"repeat": k, "window": [k * WINDOW_S, (k + 1) * WINDOW_S], "seed": 0}
            for k in range(repeats)
        ],
        "slo": SLO,
        "cell": CELL,
        "tool_version": "test",
        "created_at": "2026-11-30T00:00:00+00:00",
    }
    (root / "qualify.json").write_text(json.dumps(qualify, indent=2))
    cells_frame(root, runs, CELL, SloTargets(**SLO)).write_parquet(root / "cells.parquet")
    _replay(root, strategies)
    _diff(root, workload_path)
    return root


def shared_results(tmp_path_factory: Any) -> Path:
    """One results folder per test session (built on first use), never modified by tests."""
    key = ("default",)
    if key not in _CACHE:
        _CACHE[key] = build_results(tmp_path_factory.mktemp("report") / "results")
    return _CACHE[key]


def copy_results(source: Path, dest: Path) -> Path:
    """A private copy of a results folder that a test may modify."""
    shutil.copytree(source, dest)
    return dest
