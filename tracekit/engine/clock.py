"""Engine time: a fixed-length step clock, or a modelled step time from a cost model.

Both clocks answer the same questions: the current step index and start time, whether a request
that arrived at ``arrival_s`` is visible to the next step, how long a scheduled step lasts, and
where to jump when the engine is idle.

The cost model is a roofline of one forward pass (all figures are modelled, not measured)::

    memory_s  = (weight_bytes + kv_bytes_per_token * kv_tokens_read) / (bandwidth * bw_eff)
    compute_s = flops_per_token * scheduled_tokens / (peak_flops * compute_eff)
    step_s    = overhead_s + max(memory_s, compute_s) + per_sequence_s * num_sequences

``docs/engine.md`` gives the sources of every preset figure.

A third clock, :class:`StepModelClock`, takes its step times from any
:class:`~tracekit.engine.step_time.StepTimeModel` (``EngineConfig.latency``: AIConfigurator's
measured tables, a model calibrated from a live engine); it builds each step's make-up from the
scheduled requests. ``roofline`` (and no ``latency``) keeps the :class:`CostModelClock`, with
identical times. :func:`make_clock` gets any other model from the process's installed
step-time model source (``tracekit.latency`` installs one), or takes one handed in; the engine
never imports ``tracekit.latency`` (docs/latency.md, "The step-time boundary").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.engine.config import EngineConfig
from tracekit.engine.step_time import (
    PrefillChunk,
    StepShape,
    StepTimeModel,
    resolve_step_time_model,
)
from tracekit.errors import ConfigError

if TYPE_CHECKING:
    from tracekit.engine.base import ScheduledStep
    from tracekit.engine.request import SchedulerRequest

__all__ = [
    "COST_MODEL_PRESETS",
    "CostModel",
    "CostModelClock",
    "EngineClock",
    "StepModelClock",
    "StepsClock",
    "make_clock",
]


@dataclass(frozen=True, slots=True)
class CostModel:
    """A roofline step-time model of one GPU serving one model.

    Parameters
    ----------
    name
        Preset name.
    weight_bytes
        Model weights read once per step.
    kv_bytes_per_token
        KV cache bytes of one token over all layers (2 x layers x kv_heads x head_dim x dtype).
    flops_per_token
        Dense FLOPs per processed token (2 x parameters; attention FLOPs are ignored).
    bandwidth
        Peak memory bandwidth, bytes per second.
    peak_flops
        Peak dense fp16/bf16 tensor throughput, FLOP per second.
    bandwidth_efficiency
        Achieved fraction of ``bandwidth``.
    compute_efficiency
        Achieved fraction of ``peak_flops`` (model FLOPs utilisation).
    overhead_s
        Fixed time per step (scheduling, kernel launches, sampling set-up).
    per_sequence_s
        Extra time per scheduled sequence (sampling, input preparation).
    """

    name: str
    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    bandwidth: float
    peak_flops: float
    bandwidth_efficiency: float
    compute_efficiency: float
    overhead_s: float
    per_sequence_s: float

    def step_time(
        self, num_scheduled_tokens: int, num_sequences: int, kv_tokens_read: int
    ) -> float:
        """Modelled length of a step, seconds.

        Parameters
        ----------
        num_scheduled_tokens
            Prefill plus decode tokens of the step.
        num_sequences
            Requests scheduled in the step.
        kv_tokens_read
            Context tokens whose KV the step's attention reads (summed over sequences).
        """
        memory_s = (self.weight_bytes + self.kv_bytes_per_token * kv_tokens_read) / (
            self.bandwidth * self.bandwidth_efficiency
        )
        compute_s = (self.flops_per_token * num_scheduled_tokens) / (
            self.peak_flops * self.compute_efficiency
        )
        return self.overhead_s + max(memory_s, compute_s) + self.per_sequence_s * num_sequences


def _llama3_8b_on(gpu: str, *, bandwidth: float, peak_flops: float) -> CostModel:
    """Llama-3.1-8B in bf16 (as ``a6000-llama3-8b``) on a datacenter GPU; the A100's overheads."""
    return CostModel(
        name=f"{gpu}-llama3-8b",
        weight_bytes=16.06e9,
        kv_bytes_per_token=2 * 32 * 8 * 128 * 2,
        flops_per_token=2 * 8.03e9,
        bandwidth=bandwidth,
        peak_flops=peak_flops,
        bandwidth_efficiency=0.85,
        compute_efficiency=0.6,
        overhead_s=0.002,
        per_sequence_s=0.00005,
    )


#: Named presets; the figures and their sources are listed in ``docs/engine.md``.
COST_MODEL_PRESETS: dict[str, CostModel] = {
    # RTX A6000 (48 GB GDDR6, 768 GB/s, 154.8 TFLOPS dense fp16 tensor) serving
    # Llama-3.1-8B-Instruct in bf16 (8.03 B parameters; 32 layers, 8 KV heads, head_dim 128):
    # the hardware and model of the original BidKV experiment.
    "a6000-llama3-8b": CostModel(
        name="a6000-llama3-8b",
        weight_bytes=16.06e9,
        kv_bytes_per_token=2 * 32 * 8 * 128 * 2,
        flops_per_token=2 * 8.03e9,
        bandwidth=768e9,
        peak_flops=154.8e12,
        bandwidth_efficiency=0.85,
        compute_efficiency=0.6,
        overhead_s=0.004,
        per_sequence_s=0.0001,
    ),
    # A100-SXM4-80GB (2,039 GB/s, 312 TFLOPS dense fp16 tensor) serving Llama-2-7B in fp16
    # (6.74 B parameters; 32 layers, 32 KV heads, head_dim 128): the reference pairing of the
    # vidur simulator's profiles and of Sarathi-Serve's 7B experiments.
    "a100-llama2-7b": CostModel(
        name="a100-llama2-7b",
        weight_bytes=13.48e9,
        kv_bytes_per_token=2 * 32 * 32 * 128 * 2,
        flops_per_token=2 * 6.74e9,
        bandwidth=2039e9,
        peak_flops=312e12,
        bandwidth_efficiency=0.85,
        compute_efficiency=0.6,
        overhead_s=0.002,
        per_sequence_s=0.00005,
    ),
    # Llama-3.1-8B in bf16 (as a6000-llama3-8b) on the datacenter GPUs of NVIDIA's tables
    # (AIConfigurator, AISimulate), so that the end-to-end check on a GPU
    # (scripts/e2e-check.sh) sets the roofline of the GPU it found beside theirs. NVIDIA
    # datasheets, dense bf16 tensor throughput (half the sparse figure); overheads as the A100's.
    # A100-SXM4-80GB: 2,039 GB/s HBM2e, 312 TFLOPS.
    "a100-llama3-8b": _llama3_8b_on("a100", bandwidth=2039e9, peak_flops=312e12),
    # H100-SXM5-80GB: 3,350 GB/s HBM3, 989.4 TFLOPS.
    "h100-llama3-8b": _llama3_8b_on("h100", bandwidth=3350e9, peak_flops=989.4e12),
    # H200-SXM-141GB: 4,800 GB/s HBM3e, 989.4 TFLOPS.
    "h200-llama3-8b": _llama3_8b_on("h200", bandwidth=4800e9, peak_flops=989.4e12),
    # L40S 48 GB: 864 GB/s GDDR6, 362.05 TFLOPS.
    "l40s-llama3-8b": _llama3_8b_on("l40s", bandwidth=864e9, peak_flops=362.05e12),
    # B200 (HGX, per GPU): 8,000 GB/s HBM3e, 2,250 TFLOPS.
    "b200-llama3-8b": _llama3_8b_on("b200", bandwidth=8000e9, peak_flops=2250e12),
}


class StepsClock:
    """Every step lasts ``step_s``; step ``k`` starts at ``k * step_s``.

    A request is visible to the first step whose index is at least ``arrival_s / step_s``.
    """

    __slots__ = ("step", "step_s")

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.step = 0

    @property
    def now(self) -> float:
        """Start time of the current step (a product, so it never accumulates rounding)."""
        return self.step * self.step_s

    def visible_step(self, arrival_s: float) -> int:
        """Index of the first step that sees a request arriving at ``arrival_s``."""
        return math.ceil(arrival_s / self.step_s)

    def is_visible(self, arrival_s: float) -> bool:
        """Whether the current step sees a request arriving at ``arrival_s``."""
        # (visible_step inlined: asked every step)
        return self.step >= math.ceil(arrival_s / self.step_s)

    def duration(self, num_scheduled_tokens: int, num_sequences: int, kv_tokens_read: int) -> float:
        """Length of a step: always ``step_s``."""
        return self.step_s

    def step_duration(self, out: ScheduledStep) -> float:
        """Length of the scheduled step ``out``: always ``step_s``."""
        return self.step_s

    def advance(self, duration_s: float) -> None:
        """Move to the next step."""
        self.step += 1

    def jump_to(self, arrival_s: float) -> None:
        """Idle until the step that sees ``arrival_s`` (never backwards)."""
        self.step = max(self.step, self.visible_step(arrival_s))


class CostModelClock:
    """Steps last what the cost model says; step indices are consecutive.

    A request is visible to the first step whose start time is at least ``arrival_s``.
    """

    __slots__ = ("model", "now", "step")

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.now = 0.0
        self.step = 0

    def is_visible(self, arrival_s: float) -> bool:
        """Whether a request arriving at ``arrival_s`` has arrived by the current step's start."""
        return arrival_s <= self.now

    def duration(self, num_scheduled_tokens: int, num_sequences: int, kv_tokens_read: int) -> float:
        """The cost model's step time; a step with nothing scheduled takes only the overhead."""
        if num_sequences == 0:
            return self.model.overhead_s
        return self.model.step_time(num_scheduled_tokens, num_sequences, kv_tokens_read)

    def step_duration(self, out: ScheduledStep) -> float:
        """:meth:`duration` of the scheduled step ``out``'s totals."""
        return self.duration(
            out.num_prefill_tokens + out.num_decode_tokens,
            len(out.num_scheduled_tokens),
            out.kv_tokens_read,
        )

    def advance(self, duration_s: float) -> None:
        """Move to the next step, ``duration_s`` later."""
        self.now += duration_s
        self.step += 1

    def jump_to(self, arrival_s: float) -> None:
        """Idle until ``arrival_s`` (never backwards); the step index does not move."""
        if arrival_s > self.now:
            self.now = arrival_s


class StepModelClock(CostModelClock):
    """Steps last what a step-time model says of their make-up; otherwise a cost-model clock.

    Parameters
    ----------
    model
        A step-time model: ``step_time_s(shape)`` in seconds.
    requests
        Every request of the run (looked up by id to read what each scheduled one has computed).
    idle
        The cost model whose overhead a step with nothing scheduled lasts (the engine's own idle
        rule; such a step is never passed to the model).

    Notes
    -----
    A step's make-up is read after ``schedule()`` advanced ``num_computed_tokens``, with the
    engine's split (``fake_model.split_tokens``; under async scheduling the output tokens still
    in flight, ``ScheduledStep.in_flight_outputs``, count as output): a request scheduling
    exactly its one missing token after having produced output is decoding, with
    ``computed - 1`` tokens of context;
    every other one is a prefill chunk of ``n`` tokens after ``computed - n`` cached tokens.
    """

    __slots__ = ("_states", "_totals", "step_model")

    def __init__(
        self, model: StepTimeModel, requests: Iterable[SchedulerRequest], idle: CostModel
    ) -> None:
        super().__init__(idle)
        self.step_model = model
        self._states = {r.request_id: r for r in requests}
        # A model of the step's totals alone is called without building a shape (hot loop).
        self._totals = getattr(model, "step_time_totals_s", None)

    def register(self, state: SchedulerRequest) -> None:
        """Add a request that reached the engine (the run makes its state on arrival)."""
        self._states[state.request_id] = state

    def step_duration(self, out: ScheduledStep) -> float:
        """The model's time of the step ``out``; the overhead when nothing is scheduled."""
        scheduled = out.num_scheduled_tokens
        if not scheduled:
            return self.model.overhead_s
        states = self._states
        totals = self._totals
        chunks: list[tuple[int, int]] = []
        contexts: list[int] = []
        p = tokens = prefix = d = context = kv_read = 0
        in_flight = out.in_flight_outputs or {}
        for request_id, n in scheduled.items():
            r = states[request_id]
            computed = r.num_computed_tokens
            # Under async scheduling, output still in flight counts (the scheduler's own split).
            output = r.num_output_tokens + in_flight.get(request_id, 0)
            kv_read += computed
            if n == 1 and output and computed == r.num_prompt_tokens + output:
                d += 1
                context += computed - 1
                if totals is None:
                    contexts.append(computed - 1)
            else:
                p += 1
                tokens += n
                prefix += computed - n
                if totals is None:
                    chunks.append((n, computed - n))
        if kv_read != out.kv_tokens_read:
            # The scheduler counts the KV it reads from its own request table; a scheduler that
            # does not advance the engine's request states (the real vLLM scheduler's adapter)
            # would give every step a wrong make-up, so stop rather than time it wrongly.
            raise ConfigError(
                f"--latency {self.step_model.name}: the scheduler does not advance the engine's "
                "request states, so a step's make-up is unknown; use --latency roofline with it"
            )
        if totals is not None:
            return totals(p, tokens, prefix, d, context)
        shape = StepShape(tuple(PrefillChunk(n, c) for n, c in chunks), tuple(contexts))
        return self.step_model.step_time_s(shape)


EngineClock = StepsClock | CostModelClock | StepModelClock


def make_clock(
    config: EngineConfig,
    requests: Iterable[SchedulerRequest] = (),
    *,
    model: StepTimeModel | None = None,
) -> StepsClock | CostModelClock | StepModelClock:
    """The clock ``config`` names.

    Parameters
    ----------
    config
        Its ``clock``, ``step_s``, ``cost_model`` and ``latency``.
    requests
        The run's requests (a :class:`StepModelClock` reads the scheduled ones).
    model
        A step-time model to use instead of the one ``config.latency`` names (already built).

    Raises
    ------
    ConfigError
        ``config.latency`` names a model other than the roofline, none is handed in, and the
        installed step-time model source cannot build it (or none is installed).
    """
    if config.clock == "steps":
        return StepsClock(config.step_s)
    preset = COST_MODEL_PRESETS[config.cost_model]
    if model is None:
        spelling = config.effective_latency
        kind, _, arg = spelling.partition(":")
        if kind.strip().lower() == "roofline":
            # The engine's own cost model: identical numbers, and no per-step shape to build.
            return CostModelClock(COST_MODEL_PRESETS[arg.strip()])
        # The installed source (tracekit.latency's) builds each model once per process.
        model = resolve_step_time_model(spelling)
    return StepModelClock(model, requests, preset)
