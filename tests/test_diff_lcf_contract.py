"""``lcf``/``mcf`` on the legacy and typed hosts: the requester rule is a contract difference.

The legacy contract passes no requesting request, so ``lcf`` cannot skip it there: where the
legacy path took the requester (the least computed), the typed path took the next one. The
diff must explain that as a contract difference, not leave it unexplained.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.diff import diff_traces
from tracekit.engine.config import make_engine_config
from tracekit.recording.sim import SimRun, load_run_workload, record_sim
from tracekit.strategies import resolve_strategy

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def record(out: Path, host: str, strategy: str) -> Path:
    run = SimRun(
        load_run_workload(WORKLOAD, limit=300),
        make_engine_config(clock="cost-model"),
        resolve_strategy(strategy),
        host,  # type: ignore[arg-type]
    )
    return record_sim(run, out)


@pytest.mark.parametrize("strategy", ["lcf", "mcf"])
def test_the_skipped_requester_is_a_contract_difference(tmp_path: Path, strategy: str) -> None:
    legacy = record(tmp_path / "legacy", "legacy", strategy)
    typed = record(tmp_path / "typed", "typed", strategy)
    report = diff_traces(legacy, typed)
    (pair,) = report.pairs
    kinds = set(pair.decisions["kind"].to_list())
    assert "unexplained" not in kinds
    assert report.verdict in ("equivalent", "equivalent-modulo-contract")
    if strategy == "lcf":
        # On this workload the least computed is sometimes the requester itself.
        assert "requester-skip-contract" in kinds
        assert report.verdict == "equivalent-modulo-contract"
