"""The benchmark's step capture: its shapes reproduce the engine's own step times exactly."""

from __future__ import annotations

from tracekit.engine import BuiltinHost, EngineConfig, run_engine
from tracekit.latency import RooflineModel, StepShape
from tracekit.latency.bench import COLUMNS, capture_steps
from tracekit.recording.sim import engine_requests
from tracekit.workloads import load_workload


def shape_from_totals(p: int, tokens: int, prefix: int, d: int, context: int) -> StepShape:
    """A shape with the given totals (how they split between requests does not matter here)."""
    chunks = [(tokens - (p - 1), prefix)] + [(1, 0)] * (p - 1) if p else []
    decode = [context] + [0] * (d - 1) if d else []
    return StepShape.of(chunks, decode)


def test_captured_shapes_give_the_engine_cost_model_durations(azure_sample):
    limit = 60
    cols = capture_steps(azure_sample, limit=limit)
    requests = engine_requests(load_workload(azure_sample))[:limit]
    result = run_engine(
        requests,
        EngineConfig(clock="cost-model", enable_prefix_caching=False, async_scheduling=False),
        BuiltinHost(),
    )
    steps = [s for s in result.steps if s.num_scheduled_tokens]
    assert len(steps) == len(cols["chunks"]) > 100
    roofline = RooflineModel.from_preset()
    rows = zip(*(cols[c] for c in COLUMNS), strict=True)
    for record, row in zip(steps, rows, strict=True):
        shape = shape_from_totals(*row)
        assert shape.num_prefill_tokens == record.num_prefill_tokens
        assert shape.num_decode_seqs == record.num_decode_tokens
        assert shape.num_sequences == len(record.num_scheduled_tokens)
        assert roofline.step_time_s(shape) == record.duration_s
