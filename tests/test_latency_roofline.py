"""The step shape's totals and the roofline model behind the step-time interface."""

from __future__ import annotations

import pytest

from tracekit.engine.clock import COST_MODEL_PRESETS, CostModelClock
from tracekit.errors import ConfigError
from tracekit.latency import PrefillChunk, RooflineModel, StepShape, StepTimeModel

SHAPES = [
    StepShape.of(prefill=[(2048, 0)]),
    StepShape.of(decode=[1]),
    StepShape.of(decode=[100 * i for i in range(1, 33)]),
    StepShape.of(prefill=[(512, 0), (100, 1000)], decode=[40, 60]),
    StepShape.of(prefill=[(1, 7999)], decode=[8000] * 31),
]


def test_shape_totals_by_hand():
    # 512 + 100 prefill tokens; prefixes 0 + 1000; decode contexts 40 + 60.
    # KV read after the step: (0 + 512) + (1000 + 100) + (40 + 1) + (60 + 1) = 1714.
    s = StepShape.of(prefill=[(512, 0), (100, 1000)], decode=[40, 60])
    assert s.prefill_chunks == (PrefillChunk(512, 0), PrefillChunk(100, 1000))
    assert s.num_prefill_tokens == 612
    assert s.num_prefill_computed_tokens == 1000
    assert s.num_decode_seqs == 2
    assert s.num_decode_context_tokens == 100
    assert s.num_scheduled_tokens == 614
    assert s.num_sequences == 4
    assert s.kv_tokens_read == 1714
    assert not s.is_empty
    assert StepShape().is_empty


def test_shape_is_frozen_and_validated():
    s = StepShape.of(decode=[3])
    with pytest.raises(AttributeError):
        s.num_decode_seqs = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="num_tokens >= 1"):
        PrefillChunk(0, 0)
    with pytest.raises(ValueError, match="decode contexts"):
        StepShape.of(decode=[-1])


@pytest.mark.parametrize("preset", sorted(COST_MODEL_PRESETS))
@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
def test_roofline_equals_the_engine_cost_model_clock(preset, shape):
    clock = CostModelClock(COST_MODEL_PRESETS[preset])
    expected = clock.duration(shape.num_scheduled_tokens, shape.num_sequences, shape.kv_tokens_read)
    model = RooflineModel.from_preset(preset)
    assert model.step_time_s(shape) == expected
    assert isinstance(model, StepTimeModel)


def test_roofline_empty_step_lasts_the_overhead():
    model = RooflineModel.from_preset("a6000-llama3-8b")
    assert model.step_time_s(StepShape()) == COST_MODEL_PRESETS["a6000-llama3-8b"].overhead_s


def test_roofline_decode_floor_matches_the_documented_figure():
    # docs/engine.md: 16.06 GB / (768 GB/s x 0.85) = 24.6 ms, + 4 ms overhead = 28.6 ms.
    t = RooflineModel.from_preset().step_time_s(StepShape.of(decode=[0]))
    assert t == pytest.approx(0.0286, abs=0.0002)


def test_roofline_describe_and_unknown_preset():
    d = RooflineModel.from_preset("a100-llama2-7b").describe()
    assert d["kind"] == "roofline"
    assert d["name"] == "roofline:a100-llama2-7b"
    assert d["measured"] is False
    with pytest.raises(ConfigError, match=r"unknown preset 'a6000'.*a100-llama2-7b"):
        RooflineModel.from_preset("a6000")
