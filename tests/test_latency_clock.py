"""The engine clock takes its step times from ``EngineConfig.latency`` (``docs/latency.md``).

Independent facts: the step shapes of a one-request run worked out by hand from vLLM's chunked
prefill (64-token budget, a 100-token prompt); today's cost-model clock for ``roofline``; a
calibrated model's coefficients applied by hand.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from tracekit.engine import BuiltinHost, EngineConfig, make_engine_config, run_engine
from tracekit.engine.clock import CostModelClock, StepModelClock, make_clock
from tracekit.engine.request import EngineRequest
from tracekit.errors import ConfigError
from tracekit.latency.interface import StepShape


class RecordingModel:
    """A step-time model that records every shape it is asked about."""

    name = "recording"

    def __init__(self) -> None:
        self.shapes: list[StepShape] = []

    def step_time_s(self, shape: StepShape) -> float:
        self.shapes.append(shape)
        return 0.01 + 0.001 * shape.num_prefill_tokens + 0.0001 * shape.num_decode_context_tokens

    def describe(self) -> dict[str, Any]:
        return {"kind": "test", "name": self.name}


def _one_request(prompt: int = 100, output: int = 3) -> list[EngineRequest]:
    return [EngineRequest("r0", 0.0, prompt, output, output)]


def _config(**kw: Any) -> EngineConfig:
    # Hand-worked for synchronous scheduling unless a test says otherwise.
    kw.setdefault("async_scheduling", False)
    return EngineConfig(
        num_blocks=64, block_size=16, max_num_batched_tokens=64, max_model_len=1000, **kw
    )


def _run_with(model: Any, requests: list[EngineRequest], config: EngineConfig) -> Any:
    """``run_engine`` with ``model`` handed to the clock (what ``config.latency`` would build)."""
    import tracekit.engine.engine as engine_module

    original = engine_module.make_clock
    engine_module.make_clock = lambda cfg, states: make_clock(cfg, states, model=model)
    try:
        return run_engine(requests, config, BuiltinHost())
    finally:
        engine_module.make_clock = original


# The one request's four steps (both loops): chunks 64 and 36 of its 100-token prompt, then
# decodes with 100 and 101 tokens of context.
HAND_SHAPES = [
    StepShape.of(prefill=[(64, 0)]),
    StepShape.of(prefill=[(36, 64)]),
    StepShape.of(decode=[100]),
    StepShape.of(decode=[101]),
]


def test_async_steps_count_in_flight_output_as_decode() -> None:
    # Async: step 3 is scheduled while step 2 (which samples token 1) is in flight, so r0 has
    # no output yet but one placeholder: still a decode with 100 tokens of context, as vLLM's
    # is_prefill_chunk says. Step 5 is scheduled while token 3 (the last of max_tokens) is in
    # flight: r0 is skipped, an empty step (overhead); step 4's output then finishes r0, and
    # one more empty schedule() reports it (vLLM's finished_req_ids): overhead again.
    model = RecordingModel()
    result = _run_with(model, _one_request(), _config(async_scheduling=True))
    assert model.shapes == HAND_SHAPES
    durations = [s.duration_s for s in result.steps]
    overhead = result.steps[-1].duration_s
    assert durations == pytest.approx([0.074, 0.046, 0.02, 0.0201, overhead, overhead])
    assert overhead < 0.01


def test_step_shapes_are_the_hand_worked_chunks_and_decodes() -> None:
    # 100-token prompt, 64-token budget: chunk 64 after 0, chunk 36 after 64 (samples token 1),
    # then decodes with 100 and 101 tokens of context (tokens 2 and 3).
    model = RecordingModel()
    result = _run_with(model, _one_request(), _config())
    assert model.shapes == HAND_SHAPES
    durations = [s.duration_s for s in result.steps]
    assert durations == pytest.approx([0.074, 0.046, 0.02, 0.0201])
    # Step start times accumulate the model's durations; the request ends after the fourth.
    assert [s.time_s for s in result.steps] == pytest.approx([0.0, 0.074, 0.12, 0.14])
    assert result.requests[0].finish_s == pytest.approx(0.1601)


def test_a_mixed_step_splits_prefill_and_decode_like_the_engine() -> None:
    # r0 decodes while r1 (arriving later) is prefilled in the same step.
    requests = [EngineRequest("r0", 0.0, 10, 5, 5), EngineRequest("r1", 0.011, 20, 2, 2)]
    model = RecordingModel()
    _run_with(model, requests, _config())
    # Step 1 (0.0): r0's prompt (10). Step 2 (0.02 s): r0 decodes after 10, r1 prefills 20.
    assert model.shapes[0] == StepShape.of(prefill=[(10, 0)])
    assert model.shapes[1] == StepShape.of(prefill=[(20, 0)], decode=[10])


@pytest.mark.parametrize("spelling", [None, "roofline", "roofline:a6000-llama3-8b"])
def test_roofline_keeps_todays_cost_model_times(spelling: str | None) -> None:
    requests = [EngineRequest(f"r{i}", 0.01 * i, 30 + 7 * i, 4 + i, 8) for i in range(12)]
    base = run_engine(requests, _config(), BuiltinHost())
    run = run_engine(requests, _config(latency=spelling), BuiltinHost())
    assert isinstance(make_clock(_config(latency=spelling)), CostModelClock)
    assert [(s.time_s, s.duration_s) for s in run.steps] == [
        (s.time_s, s.duration_s) for s in base.steps
    ]


def test_roofline_with_a_preset_uses_that_preset() -> None:
    config = _config(latency="roofline:a100-llama2-7b")
    clock = make_clock(config)
    assert isinstance(clock, CostModelClock) and clock.model.name == "a100-llama2-7b"
    same = make_clock(_config(cost_model="a100-llama2-7b"))
    assert clock.duration(100, 2, 300) == same.duration(100, 2, 300)


def _calibrated_file(tmp_path: Path, coefficients: dict[str, float]) -> Path:
    path = tmp_path / "model.json"
    path.write_text(
        json.dumps(
            {
                "format": "tracekit-step-time-model",
                "version": 1,
                "coefficients": coefficients,
            }
        )
    )
    return path


def test_calibrated_model_times_every_step_by_its_coefficients(tmp_path: Path) -> None:
    coefficients = {
        "intercept": 0.005,
        "num_prefill_tokens": 0.0002,
        "num_decode_seqs": 0.001,
        "kv_tokens_read": 0.00001,
        "num_sequences": 0.0005,
    }
    path = _calibrated_file(tmp_path, coefficients)
    run = run_engine(_one_request(), _config(latency=f"calibrated:{path}"), BuiltinHost())
    # Hand-worked: (prefill, decode seqs, kv read, seqs) = (64,0,64,1), (36,0,100,1),
    # (0,1,101,1), (0,1,102,1).
    expected = [
        0.005 + 0.0002 * 64 + 0.00001 * 64 + 0.0005,
        0.005 + 0.0002 * 36 + 0.00001 * 100 + 0.0005,
        0.005 + 0.001 + 0.00001 * 101 + 0.0005,
        0.005 + 0.001 + 0.00001 * 102 + 0.0005,
    ]
    assert [s.duration_s for s in run.steps] == pytest.approx(expected, rel=1e-12)
    roofline = run_engine(_one_request(), _config(), BuiltinHost())
    assert [s.duration_s for s in run.steps] != [s.duration_s for s in roofline.steps]


def test_the_config_pickles_with_its_latency_and_the_model_is_built_once(tmp_path: Path) -> None:
    from tracekit.latency.spec import cached_step_time_model

    path = _calibrated_file(
        tmp_path,
        dict.fromkeys(
            (
                "intercept",
                "num_prefill_tokens",
                "num_decode_seqs",
                "kv_tokens_read",
                "num_sequences",
            ),
            0.001,
        ),
    )
    config = _config(latency=f"calibrated:{path}")
    again = pickle.loads(pickle.dumps(config))
    assert again == config and again.latency == f"calibrated:{path}"
    clock_a, clock_b = make_clock(config), make_clock(again)
    assert isinstance(clock_a, StepModelClock)
    assert clock_a.step_model is clock_b.step_model is cached_step_time_model(config.latency)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"latency": "rooflin"}, "unknown kind 'rooflin'; did you mean roofline"),
        ({"latency": "roofline:h100"}, "unknown roofline preset 'h100'"),
        ({"latency": "calibrated:/no/such/model.json"}, "not found"),
        ({"latency": "aiconfigurator:h100_sxm"}, "expected aiconfigurator:<system>/<model>"),
        ({"latency": "roofline", "clock": "steps"}, "needs clock cost-model"),
        ({"latency": ""}, "latency must be a --latency spelling"),
    ],
)
def test_bad_latency_values_are_one_line_config_errors(
    settings: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_engine_config(**settings)
    message = str(err.value)
    assert words in message and "\n" not in message
    assert message.startswith("engine configuration: latency")


def test_effective_latency_names_the_model_that_times_the_steps() -> None:
    assert EngineConfig().effective_latency == "roofline:a6000-llama3-8b"
    assert EngineConfig(cost_model="a100-llama2-7b").effective_latency == "roofline:a100-llama2-7b"
    assert EngineConfig(clock="steps", step_s=0.05).effective_latency == "steps:0.05"
    assert EngineConfig(latency=" roofline:a100-llama2-7b ").effective_latency == (
        "roofline:a100-llama2-7b"
    )


@pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is not None,
    reason="checks the error raised when aiconfigurator-core is absent",
)
def test_an_aiconfigurator_config_without_the_package_is_refused_where_it_is_made() -> None:
    with pytest.raises(ConfigError) as err:
        make_engine_config(latency="aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B")
    assert "aiconfigurator-core" in str(err.value) and "Python 3.11" in str(err.value)


def test_a_scheduler_that_does_not_advance_request_states_is_refused() -> None:
    # The real vLLM scheduler's adapter keeps its own requests: the engine's states stay at 0
    # computed tokens, so the make-up read from them disagrees with the scheduler's KV count.
    from tracekit.engine.base import ScheduledStep
    from tracekit.engine.request import SchedulerRequest

    state = SchedulerRequest(EngineRequest("r0", 0.0, 100, 3, 3), 0)
    clock = make_clock(_config(), [state], model=RecordingModel())
    out = ScheduledStep(0, 0.0)
    out.num_scheduled_tokens = {"r0": 64}
    out.num_prefill_tokens = 64
    out.kv_tokens_read = 64
    with pytest.raises(ConfigError, match="does not advance the engine's request states"):
        clock.step_duration(out)


def test_the_engine_does_not_import_optional_packages() -> None:
    engine_dir = Path(__file__).resolve().parents[1] / "tracekit" / "engine"
    for path in engine_dir.glob("*.py"):
        text = path.read_text()
        assert "aiconfigurator" not in text.replace("``aiconfigurator:", ""), path
        assert "import polars" not in text and "import duckdb" not in text, path


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            kind,
            marks=pytest.mark.skipif(
                importlib.util.find_spec(module) is None,
                reason=f"needs the {kind} extra (Python 3.11 to 3.13)",
            ),
        )
        for kind, module in (("aiconfigurator", "aiconfigurator_core"),
                             ("aisimulate", "aisimulate_core"))
    ],
)  # fmt: skip
def test_a_table_model_times_every_step_as_its_estimator_does(kind: str) -> None:
    from tracekit.latency.spec import TABLE_MODELS, cached_step_time_model

    spelling = f"{kind}:h100_sxm/meta-llama/Meta-Llama-3.1-8B"
    requests = [EngineRequest(f"r{i}", 0.05 * i, 200 + 37 * i, 5 + i % 7, 16) for i in range(30)]
    run = run_engine(requests, _config(latency=spelling), BuiltinHost())
    assert isinstance(make_clock(_config(latency=spelling)), StepModelClock)

    class Watching(RecordingModel):
        def step_time_s(self, shape: StepShape) -> float:
            self.shapes.append(shape)
            return cached_step_time_model(spelling).step_time_s(shape)

    watching = Watching()
    again = _run_with(watching, requests, _config())
    assert [s.duration_s for s in again.steps] == [s.duration_s for s in run.steps]
    # Each step lasts what the estimator, called directly (no grid), says of its shape.
    direct = TABLE_MODELS[kind]("h100_sxm", "meta-llama/Meta-Llama-3.1-8B", tabulate=False)
    expected = [direct.step_time_s(shape) for shape in watching.shapes]
    assert [s.duration_s for s in run.steps] == pytest.approx(expected, rel=1e-3)


def test_the_totals_fast_path_equals_step_time_of_the_shape(tmp_path: Path) -> None:
    from random import Random

    from tracekit.latency.aiconfigurator import AIConfiguratorModel
    from tracekit.latency.calibrated import load_calibrated_model
    from tracekit.latency.roofline import RooflineModel

    def fake_estimator(f: dict[str, int]) -> float:  # smooth, non-linear, like attention
        return (
            5.0
            + 0.01 * f["sum_prefill_tokens"] ** 1.1
            + 1e-4 * f["sum_prefill_kv_tokens"]
            + 0.3 * f["num_decode_requests"]
            + 2e-4 * f["sum_decode_kv_tokens"]
        )

    coefficients = dict(
        zip(
            ("intercept", "num_prefill_tokens", "num_decode_seqs", "kv_tokens_read",
             "num_sequences"),
            (0.004, 0.0001, 0.0003, 2e-7, 0.0001),
            strict=True,
        )
    )  # fmt: skip
    models = [
        RooflineModel.from_preset("a6000-llama3-8b"),
        load_calibrated_model(_calibrated_file(tmp_path, coefficients)),
        AIConfiguratorModel("sys", "model", estimator=fake_estimator, version="test"),
    ]
    rng = Random(5)
    for _ in range(300):
        shape = StepShape.of(
            prefill=[(rng.randint(1, 900), rng.randint(0, 5000)) for _ in range(rng.randint(0, 3))],
            decode=[
                rng.randint(0, 9000) for _ in range(rng.randint(0 if rng.random() < 0.5 else 1, 40))
            ],
        )
        if shape.is_empty:
            continue
        totals = (
            len(shape.prefill_chunks),
            shape.num_prefill_tokens,
            shape.num_prefill_computed_tokens,
            shape.num_decode_seqs,
            shape.num_decode_context_tokens,
        )
        for model in models:
            assert model.step_time_totals_s(*totals) == pytest.approx(
                model.step_time_s(shape), rel=1e-12
            ), model.name
