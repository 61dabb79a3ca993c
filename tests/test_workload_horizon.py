"""Arrivals beyond a sane horizon are refused: they would stall the engine clock for ever."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import WorkloadError
from tracekit.workloads import load_workload
from tracekit.workloads.model import MAX_ARRIVAL_S

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def _csv(tmp_path: Path, arrivals: list[float]) -> Path:
    path = tmp_path / "w.csv"
    n = len(arrivals)
    pl.DataFrame(
        {"arrival_s": arrivals, "prompt_tokens": [10] * n, "output_tokens": [4] * n}
    ).write_csv(path)
    return path


def test_an_arrival_of_1e300_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    path = _csv(tmp_path, [0.0, 1e300])
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    message = str(caught.value)
    assert str(path) in message and "arrival_s" in message and "--rate-scale" in message
    assert "\n" not in message


def test_a_rate_scale_near_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="arrival_s"):
        load_workload(_csv(tmp_path, [0.0, 1.0]), rate_scale=1e-300)


def test_the_horizon_itself_is_accepted_and_the_shipped_traces_load(tmp_path: Path) -> None:
    assert load_workload(_csv(tmp_path, [0.0, MAX_ARRIVAL_S])).duration_s == MAX_ARRIVAL_S
    assert load_workload(SAMPLE).frame.height == 1000
    assert load_workload(ROOT / "traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv").duration_s
    assert load_workload(ROOT / "traces/mooncake-synthetic/synthetic_trace.jsonl").duration_s


def test_record_sim_fails_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--rate-scale", "1e-300", "--out", str(out)],
    )
    assert result.exit_code != 0, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "arrival_s" in result.output and "Traceback" not in result.output
    assert not out.exists()
