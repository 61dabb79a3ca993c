"""The ``--latency`` spelling."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tracekit.errors import ConfigError
from tracekit.latency import RooflineModel, StepShape
from tracekit.latency.aiconfigurator import MISSING_MESSAGE
from tracekit.latency.calibrated import fit_step_time_model
from tracekit.latency.spec import (
    A6000_STAND_IN,
    LatencySpec,
    make_step_time_model,
    parse_latency_spec,
)

HAVE_AIC = importlib.util.find_spec("aiconfigurator_core") is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("roofline", LatencySpec("roofline", "roofline", preset="a6000-llama3-8b")),
        (
            "roofline:a100-llama2-7b",
            LatencySpec("roofline", "roofline:a100-llama2-7b", preset="a100-llama2-7b"),
        ),
        (
            "aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B",
            LatencySpec(
                "aiconfigurator",
                "aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B",
                system="h100_sxm",
                model="meta-llama/Meta-Llama-3.1-8B",
                backend="vllm",
            ),
        ),
        (
            "aiconfigurator:l40s/Qwen/Qwen3-8B@SGLang:0.5.16",
            LatencySpec(
                "aiconfigurator",
                "aiconfigurator:l40s/Qwen/Qwen3-8B@SGLang:0.5.16",
                system="l40s",
                model="Qwen/Qwen3-8B",
                backend="sglang",
                version="0.5.16",
            ),
        ),
        (
            "aisimulate:h100_sxm/meta-llama/Meta-Llama-3.1-8B@vllm:next",
            LatencySpec(
                "aisimulate",
                "aisimulate:h100_sxm/meta-llama/Meta-Llama-3.1-8B@vllm:next",
                system="h100_sxm",
                model="meta-llama/Meta-Llama-3.1-8B",
                backend="vllm",
                version="next",
            ),
        ),
    ],
)
def test_parse(text, expected):
    assert parse_latency_spec(text) == expected


def test_a6000_stand_in_parses():
    s = parse_latency_spec(A6000_STAND_IN)
    assert (s.system, s.model, s.backend) == ("l40s", "meta-llama/Meta-Llama-3.1-8B", "vllm")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rooflin", "unknown kind 'rooflin'; did you mean roofline?"),
        ("aiconfig:h100_sxm/x", "unknown kind 'aiconfig'; did you mean aiconfigurator?"),
        ("measured", "unknown kind 'measured'; expected roofline"),
        ("roofline:a6000", "unknown roofline preset 'a6000'; did you mean a6000-llama3-8b?"),
        ("calibrated:", "calibrated needs an argument"),
        ("calibrated:/nonexistent/model.json", "'/nonexistent/model.json' not found"),
        ("aiconfigurator:h100_sxm", "expected aiconfigurator:<system>/<model>"),
        ("aiconfigurator:/Qwen3-8B", "expected aiconfigurator:<system>/<model>"),
        ("aiconfigurator:h100_sxm/Qwen/Qwen3-8B@vlm", "unknown backend 'vlm'; did you mean vllm?"),
        ("aiconfigurator:h100_sxm/Qwen/Qwen3-8B@vllm:", "empty table version"),
        ("aisimulat:h100_sxm/x", "unknown kind 'aisimulat'; did you mean aisimulate,"),
        ("aisimulate:h100_sxm", "expected aisimulate:<system>/<model>"),
        ("aisimulate:h100_sxm/Qwen/Qwen3-8B@trt", "unknown backend 'trt'; did you mean trtllm?"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        parse_latency_spec(text)
    assert "\n" not in str(info.value)


def test_build_roofline_and_calibrated(tmp_path: Path):
    assert isinstance(make_step_time_model("roofline:a100-llama2-7b"), RooflineModel)
    rows = [
        (StepShape.of([(1 + 17 * i % 900, 0)] * (i % 2), [10 + i] * (1 + i % 9)), 0.01 + 1e-5 * i)
        for i in range(80)
    ]
    path = fit_step_time_model(rows).save(tmp_path / "m.json")
    model = make_step_time_model(f"calibrated:{path}")
    assert model.describe()["kind"] == "calibrated"


@pytest.mark.skipif(HAVE_AIC, reason="checks the error raised when aiconfigurator-core is absent")
def test_build_aiconfigurator_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    with pytest.raises(ConfigError) as info:
        make_step_time_model("aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B")
    assert str(info.value) == MISSING_MESSAGE


@pytest.mark.skipif(not HAVE_AIC, reason="aiconfigurator-core is not installed")
def test_build_aiconfigurator_stand_in():
    model = make_step_time_model(A6000_STAND_IN)
    assert model.describe()["system"] == "l40s"
    assert 0.01 < model.step_time_s(StepShape.of(decode=[500] * 8)) < 0.05


@pytest.mark.parametrize(
    "module", ["tracekit.engine.step_time", "tracekit.latency.calibrated", "tracekit.latency.spec"]
)
def test_doctests_of_the_latency_modules(module):
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0
    assert failures == 0
