"""The report header says which step-time model produced its times (``docs/latency.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_helpers import copy_results, shared_results

from tracekit.qualify import write_report
from tracekit.report.html import latency_text


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
