"""The AIConfigurator adapter: its grid with a stand-in estimator, the missing-package error, and
(only where aiconfigurator-core is installed) the real estimator."""

from __future__ import annotations

import importlib.util
import random
import sys

import pytest

from tracekit.errors import ConfigError
from tracekit.latency.aiconfigurator import (
    LIMITS,
    MISSING_MESSAGE,
    AIConfiguratorModel,
    load_estimator,
)
from tracekit.latency.interface import StepShape, StepTimeModel

HAVE_AIC = importlib.util.find_spec("aiconfigurator_core") is not None
needs_aic = pytest.mark.skipif(
    not HAVE_AIC,
    reason='aiconfigurator-core is not installed (pip install ".[aiconfigurator]", Python 3.11+)',
)


def linear_ms(f: dict[str, int]) -> float:
    """A stand-in estimator, linear in every field: the grid must reproduce it exactly."""
    return (
        5.0
        + 0.02 * f["sum_prefill_tokens"]
        + 0.001 * f["sum_prefill_kv_tokens"]
        + 0.3 * f["num_prefill_requests"]
        + 0.05 * f["num_decode_requests"]
        + 0.0002 * f["sum_decode_kv_tokens"]
    )


def fake(**kw) -> AIConfiguratorModel:
    return AIConfiguratorModel("fake_gpu", "org/model", version="0", estimator=linear_ms, **kw)


def shape_ms(s: StepShape) -> float:
    return linear_ms(
        {
            "num_prefill_requests": len(s.prefill_chunks),
            "sum_prefill_tokens": s.num_prefill_tokens,
            "sum_prefill_kv_tokens": s.num_prefill_computed_tokens,
            "num_decode_requests": s.num_decode_seqs,
            "sum_decode_kv_tokens": s.num_decode_context_tokens,
        }
    )


def test_grid_reproduces_a_linear_estimator_inside_and_outside_the_limits():
    model = fake()
    rng = random.Random(5)
    shapes = [
        StepShape.of([(rng.randint(1, 30000), rng.randint(0, 40000))], [rng.randint(1, 200000)])
        for _ in range(300)
    ]
    shapes.append(StepShape.of(decode=[10] * 3000))  # beyond 2,048 decode sequences
    shapes.append(StepShape.of([(1, 0)] * 300))  # beyond 256 prefill chunks
    for s in shapes:
        assert model.step_time_s(s) == pytest.approx(shape_ms(s) / 1000, rel=1e-9)
    assert isinstance(model, StepTimeModel)


def test_grid_caches_calls_and_stays_inside_the_limits():
    calls = []

    def record(f: dict[str, int]) -> float:
        calls.append(f)
        return linear_ms(f)

    model = AIConfiguratorModel("g", "m", version="0", estimator=record)
    s = StepShape.of([(5000, 20000)], [150000] * 3)
    first = model.step_time_s(s)
    n = len(calls)
    assert 1 < n <= 8
    assert model.step_time_s(s) == first
    assert len(calls) == n  # second time from the cache
    model.step_time_s(StepShape.of([(40000, 0)], [200000] * 4000))
    for f in calls:
        p, d = f["num_prefill_requests"], f["num_decode_requests"]
        assert f["sum_prefill_tokens"] <= LIMITS["num_prefill_tokens"]
        assert p <= LIMITS["num_prefill_chunks"]
        assert d <= LIMITS["num_decode_seqs"]
        if d:
            assert f["sum_decode_kv_tokens"] / d <= LIMITS["mean_decode_context"]


def test_exact_points_cost_one_call():
    calls = []
    model = AIConfiguratorModel("g", "m", version="0", estimator=lambda f: calls.append(f) or 1.0)
    model.step_time_s(StepShape.of([(1000, 0)], [30] * 8))  # prefill exact, mean context 30
    assert calls == [
        {
            "num_prefill_requests": 1,
            "sum_prefill_tokens": 1000,
            "sum_prefill_kv_tokens": 0,
            "num_decode_requests": 8,
            "sum_decode_kv_tokens": 240,
        }
    ]


def test_untabulated_calls_the_estimator_directly():
    model = fake(tabulate=False)
    s = StepShape.of([(777, 12345)], [99999, 3])
    assert model.step_time_s(s) == shape_ms(s) / 1000
    assert model.num_estimator_calls == 1
    d = model.describe()
    assert d["kind"] == "aiconfigurator"
    assert d["name"] == "aiconfigurator:fake_gpu/org/model@vllm"
    assert d["tabulated"] is False
    assert "extrapolation" in d["out_of_range"]


def test_missing_package_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    with pytest.raises(ConfigError) as info:
        load_estimator("h100_sxm", "meta-llama/Meta-Llama-3.1-8B")
    message = str(info.value)
    assert message == MISSING_MESSAGE
    assert "\n" not in message
    assert 'pip install ".[aiconfigurator]"' in message
    assert "Python 3.11 to 3.13" in message


@needs_aic
def test_real_estimator_h100_llama_and_the_grid_error():
    model = AIConfiguratorModel("h100_sxm", "meta-llama/Meta-Llama-3.1-8B")
    direct = AIConfiguratorModel("h100_sxm", "meta-llama/Meta-Llama-3.1-8B", tabulate=False)
    # A 2,048-token prefill of an 8B model on an H100 takes tens of milliseconds; one decode
    # token a few (the weights' read).
    prefill = direct.step_time_s(StepShape.of([(2048, 0)]))
    decode = direct.step_time_s(StepShape.of(decode=[100]))
    assert 0.02 < prefill < 0.1
    assert 0.002 < decode < 0.02
    rng = random.Random(0)
    worst = 0.0
    for _ in range(200):
        chunks = [(rng.randint(1, 2048), rng.choice([0, rng.randint(0, 6000)]))]
        s = StepShape.of(chunks, [rng.randint(1, 8000) for _ in range(rng.randint(0, 32))])
        worst = max(worst, abs(model.step_time_s(s) / direct.step_time_s(s) - 1))
    assert worst < 0.005


@needs_aic
def test_real_estimator_unknown_names_suggest_close_ones():
    with pytest.raises(ConfigError, match=r"unknown system 'h100'.*did you mean.*h100_sxm"):
        load_estimator("h100", "meta-llama/Meta-Llama-3.1-8B")
    with pytest.raises(ConfigError, match=r"RTX A6000 is not in the tables.*l40s"):
        load_estimator("rtx_a6000", "meta-llama/Meta-Llama-3.1-8B")
    with pytest.raises(ConfigError, match=r"unknown model.*did you mean.*Meta-Llama-3.1-8B"):
        load_estimator("h100_sxm", "meta-llama/Llama-3.1-8B")
    with pytest.raises(ConfigError, match=r"no vllm 9\.9 tables"):
        load_estimator("h100_sxm", "meta-llama/Meta-Llama-3.1-8B", version="9.9")
