"""``tracekit capacity``: the knee on a case whose answer is worked by hand.

The rule is docs/qualify.md, "Capacity".
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.analysis.serving import SloTargets
from tracekit.capacity import find_capacity, mean_rate, workload_at_rate
from tracekit.cli import cli
from tracekit.engine import EngineConfig
from tracekit.errors import ConfigError
from tracekit.workloads import load_workload
from tracekit.workloads.client import ClientModel
from tracekit.workloads.load_spec import LoadSpec

# The known case. Ten requests, each a 10-token prompt and one output token, on an engine
# with one running slot and 1-second steps: a request is prefilled, samples its token and
# finishes in the step that first sees it, so the engine serves exactly one request a second.
# Under constant arrivals at R req/s request i arrives at a_i = (i+1)/R.
#  * R <= 1: every request finds the engine idle and is served at step ceil(a_i), so its TTFT
#    is ceil(a_i) + 1 - a_i <= 2 s: all meet a 2 s TTFT.
#  * R > 1: the engine is always busy; request i is served at step i+1, TTFT
#    1 + (i+1)(1 - 1/R). It meets 2 s iff (i+1)(1 - 1/R) <= 1. Nine of ten (90%) meet while
#    request 8 does, 9(1 - 1/R) <= 1, i.e. R <= 9/8.
# So at a 90% target the knee is exactly 9/8 = 1.125 req/s.
KNEE = 9 / 8


@pytest.fixture
def unit_workload(tmp_path: Path) -> Path:
    path = tmp_path / "unit.csv"
    pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(10)],
            "arrival_s": [float(i) for i in range(10)],
            "prompt_tokens": [10] * 10,
            "output_tokens": [1] * 10,
            "max_tokens": [1] * 10,
            "priority": [0] * 10,
        }
    ).write_csv(path)
    return path


def _engine() -> EngineConfig:
    return EngineConfig(
        num_blocks=11,
        block_size=16,
        max_num_seqs=1,
        max_model_len=160,
        clock="steps",
        step_s=1.0,
        # Worked by hand for synchronous scheduling (async reports a finish one step later).
        async_scheduling=False,
    )


def test_the_knee_is_nine_eighths_by_construction(unit_workload: Path) -> None:
    result = find_capacity(
        load_workload(unit_workload), _engine(),
        spec=LoadSpec(arrivals="constant", rate=1.0), slo=SloTargets(2.0, None),
        target=0.9, tolerance=0.01,
    )  # fmt: skip
    assert result.knee is not None and result.above is not None
    assert result.knee.rate <= KNEE < result.above.rate
    assert result.above.rate / result.knee.rate <= 1.01
    assert result.knee.slo_attainment == pytest.approx(0.9)
    assert result.above.slo_attainment == pytest.approx(0.8)
    # Every probe at or below 1 req/s met the SLO for every request.
    assert all(p.slo_attainment == 1.0 for p in result.probes if p.rate <= 1.0)


def test_recorded_arrivals_are_rescaled_to_the_rate(unit_workload: Path) -> None:
    workload = load_workload(unit_workload)
    # Arrivals 0..9 s: ten requests over a 9 s span.
    assert mean_rate(workload) == pytest.approx(10 / 9)
    doubled = workload_at_rate(workload, LoadSpec(), 20 / 9)
    assert doubled.frame["arrival_s"].to_list() == pytest.approx([i / 2 for i in range(10)])
    assert doubled.options["rate_rps"] == pytest.approx(20 / 9)


def test_a_slo_no_load_meets_has_no_knee(unit_workload: Path) -> None:
    # TTFT is at least one step (1 s), so a 0.5 s target is never met.
    result = find_capacity(
        load_workload(unit_workload), _engine(), slo=SloTargets(0.5, None), max_runs=4
    )
    assert result.knee is None and len(result.probes) == 4
    assert "knee: none" in result.render()


def test_closed_loops_and_bad_targets_are_refused(unit_workload: Path) -> None:
    workload = load_workload(unit_workload)
    with pytest.raises(ConfigError, match="--concurrency"):
        find_capacity(workload, _engine(), spec=LoadSpec(client=ClientModel(concurrency=2)))
    with pytest.raises(ConfigError, match=r"--target 1\.5"):
        find_capacity(workload, _engine(), target=1.5)


def test_cli_prints_the_knee_and_json(unit_workload: Path) -> None:
    args = [
        "capacity", "--workload", str(unit_workload), "--arrivals", "constant", "--rate", "1",
        "--num-blocks", "11", "--max-num-seqs", "1", "--max-model-len", "160",
        "--clock", "steps", "--step-s", "1", "--no-async-scheduling", "--slo-tpot-s", "1",
         "--tolerance", "0.01",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = CliRunner().invoke(cli, [*args, "--json"])
    payload = json.loads(text.stdout)
    assert payload["knee_rps"] <= KNEE < payload["above"]["rate"]
    assert "knee: 1.1" in result.stdout and "achieved throughput" in result.stdout
    bad = CliRunner().invoke(cli, [*args, "--concurrency", "2", "--arrivals", "recorded"])
    assert bad.exit_code == 2
