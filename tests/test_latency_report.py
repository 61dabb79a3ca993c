"""The report header says which step-time model produced its times (``docs/latency.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_helpers import copy_results, shared_results

from tracekit.qualify import write_report
from tracekit.report.html import latency_text, measured_error_text


@pytest.mark.parametrize(
    ("engine", "text"),
    [
        ({}, "roofline:? (roofline, modelled from datasheets, not measured)"),
        (
            {"clock": "cost-model", "cost_model": "a100-llama2-7b", "latency": None},
            "roofline:a100-llama2-7b (roofline, modelled from datasheets, not measured)",
        ),
        (
            {"clock": "cost-model", "cost_model": "a6000-llama3-8b", "latency": "roofline"},
            "roofline:a6000-llama3-8b (roofline, modelled from datasheets, not measured)",
        ),
        (
            {"latency": "aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B"},
            "aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B "
            "(AIConfigurator's measured per-operator tables)",
        ),
        (
            {"latency": "calibrated:/m.json"},
            "calibrated:/m.json (fitted to a live engine's measured steps)",
        ),
        ({"clock": "steps", "step_s": 0.02}, "steps:0.02 (every step lasts 0.02 s)"),
    ],
)
def test_latency_text(engine: dict, text: str) -> None:
    assert latency_text(engine) == text


def test_qualify_report_header_names_the_latency_model(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    results = copy_results(shared_results(tmp_path_factory), tmp_path / "results")
    inputs = json.loads((results / "qualify.json").read_text())
    inputs["engine_config"]["latency"] = "calibrated:/models/a6000.json"
    (results / "qualify.json").write_text(json.dumps(inputs))
    page = write_report(results, tmp_path / "r.html").read_text("utf-8")
    assert (
        "<dt>step times</dt><dd>calibrated:/models/a6000.json "
        "(fitted to a live engine&#x27;s measured steps)</dd>"
    ) in page


def test_qualify_report_names_the_measured_error_of_a_calibrated_model(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """A model fitted to measured runs carries its error into qualify.json and the header."""
    import dataclasses

    from tracekit.engine.config import make_engine_config
    from tracekit.latency.calibrated import CalibratedModel
    from tracekit.qualify.job import _latency_measured_error

    model = CalibratedModel(
        (0.003, 1e-6, 1e-4, 1e-7, 1e-5, 0.0),
        fit={"runs": [{"source": "a.json"}, {"source": "b.json"}]},
        request_overheads={"ttft_s": 0.01, "ttft_per_prompt_token_s": 0.0, "e2e_s": 0.0},
        measured_error={
            "fitted_runs": {"ttft_p50": -0.031, "e2e_p50": 0.012, "output_throughput": 0.004},
            "held_out": {"vllm-bench rate 16": {"errors": {"e2e_p50": 0.087, "tpot_p50": -0.02}}},
        },
    )
    path = model.save(tmp_path / "measured.json")
    config = dataclasses.replace(make_engine_config(), latency=f"calibrated:{path}")
    carried = _latency_measured_error(config)["latency_measured_error"]
    assert carried["fitted_on"] == ["a.json", "b.json"]
    assert carried["held_out"]["vllm-bench rate 16"]["errors"]["e2e_p50"] == 0.087
    # A model fitted to step times carries none, and neither does the roofline.
    plain = CalibratedModel((0.003, 1e-6, 1e-4, 1e-7, 1e-5, 0.0)).save(tmp_path / "plain.json")
    assert _latency_measured_error(dataclasses.replace(config, latency=f"calibrated:{plain}")) == {}
    assert _latency_measured_error(make_engine_config()) == {}

    results = copy_results(shared_results(tmp_path_factory), tmp_path / "results")
    inputs = json.loads((results / "qualify.json").read_text())
    inputs["engine_config"]["latency"] = f"calibrated:{path}"
    inputs["latency_measured_error"] = carried
    (results / "qualify.json").write_text(json.dumps(inputs))
    page = write_report(results, tmp_path / "r.html").read_text("utf-8")
    # A file from before the errors without the spread were kept: its errors are those of the
    # model with the spread, which qualify's runs do not add, and the row says so.
    assert (
        "<dt>measured error</dt><dd>simulated vs measured (the step model with its request "
        "overheads and TTFT spread; these runs leave the spread out): on the 2 runs it was "
        "fitted on: TTFT P50 -3.1%, E2E P50 +1.2%, throughput +0.4%; held out, vllm-bench "
        "rate 16: TPOT P50 -2.0%, E2E P50 +8.7%</dd>"
    ) in page
    # A current file: the errors of what qualify's runs apply, the overheads without the spread.
    current = {
        **carried,
        "fitted_runs_without_spread": {"ttft_p50": 0.052, "e2e_p50": 0.013},
        "held_out": {
            "vllm-bench rate 16": {
                "errors": {"e2e_p50": 0.087},
                "errors_without_spread": {"e2e_p50": 0.091},
            }
        },
    }
    assert measured_error_text(current) == (
        "simulated vs measured (the step model with its request overheads, as these runs): on "
        "the 2 runs it was fitted on: TTFT P50 +5.2%, E2E P50 +1.3%; held out, vllm-bench "
        "rate 16: E2E P50 +9.1%"
    )
