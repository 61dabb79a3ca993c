"""Time fidelity: the embedded engine with a calibrated step-time model against the live engine.

1. Records two slices of one workload on the live vLLM engine (``tracekit record vllm --live``:
   the tiny random-weight Llama on this machine's CPU, built-in victims, one driver process):
   the *calibration* slice and a different *test* slice.
2. Fits the linear step-time model of :mod:`tracekit.latency.calibrated` to the calibration
   slice's measured steps (its ``step_shapes.parquet``: each step's make-up and measured
   duration) and reports its held-out error, and its error on every step of the test slice.
3. Simulates the test slice on the embedded engine twice, with the same engine configuration:
   with the calibrated model as the clock, and with the default roofline cost model
   (``a6000-llama3-8b``: what a user gets without calibration).
4. Compares each simulation's serving metrics with the live test run's (``tracekit.analysis.
   serving``): TTFT, TPOT and end-to-end P50 and P95, output throughput, and preemptions; prints
   the relative error of each (simulated / live - 1) and whether it is within ``--target``.

The calibrated clock: when the engine has ``EngineConfig.latency`` (``--latency calibrated:FILE``)
it is used; otherwise this script times each embedded step with the model itself (the same
make-up: prefill tokens, decoding sequences, context tokens read, scheduled sequences, read
after ``schedule()`` exactly as the engine's ``kv_tokens_read``).

Wall-clock measurements on a shared machine are noisy: the live runs' step times move with the
load of other processes, which no model sees. The script prints the machine's load average
before and after so that a reader can judge.

Exit status: 0; 1 with ``--check E`` when a P50/P95 or throughput error of the calibrated model
exceeds ``E`` (CI uses a loose bound: the check is that the pipeline works end to end and the
calibrated model stays in the right range, not the 10 % target). Writes everything (bundles,
model, ``time_fidelity.json``) under ``--out``.

Usage: ``python benchmarks/time_fidelity.py [--workload PATH] [--calibrate-window 0:30]
[--test-window 30:60] [--num-blocks 256] [--max-model-len 6144] [--out DIR] [--vllm-venv DIR]
[--target 0.10] [--check E]``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

import tracekit.engine.engine as engine_module
from tracekit.analysis.serving import serving_metrics
from tracekit.engine.clock import COST_MODEL_PRESETS, CostModelClock
from tracekit.engine.config import EngineConfig, make_engine_config
from tracekit.engine.engine import run_engine
from tracekit.engine.hosts import BuiltinHost
from tracekit.engine.request import engine_requests
from tracekit.engine.scheduler import VllmScheduler
from tracekit.latency.calibrated import CalibratedModel, fit_step_time_model
from tracekit.latency.interface import StepShape
from tracekit.recording.rows import request_row
from tracekit.recording.sim import SimRun, load_run_workload
from tracekit.strategies import resolve_strategy
from tracekit.trace.bundle import open_trace
from tracekit.vllm.live_engine.record import STEP_SHAPES_FILE, record_vllm_live

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"

#: The compared metrics: (label, serving_metrics column).
METRICS = (
    ("TTFT P50 (s)", "ttft_p50_s"),
    ("TTFT P95 (s)", "ttft_p95_s"),
    ("TPOT P50 (s)", "tpot_p50_s"),
    ("TPOT P95 (s)", "tpot_p95_s"),
    ("E2E P50 (s)", "e2e_p50_s"),
    ("E2E P95 (s)", "e2e_p95_s"),
    ("output tokens/s", "output_tokens_per_s"),
    ("preemptions", "preemptions"),
)
#: The metrics ``--check`` bounds (preemption counts are reported, not checked: a handful of
#: preemptions moves by one or two with the live run's timing).
CHECKED = ("ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s", "e2e_p50_s", "e2e_p95_s")


def _window(text: str) -> tuple[float, float]:
    start, _, end = text.partition(":")
    return float(start), float(end)


class _ModelClock(CostModelClock):
    """A cost-model clock whose step times come from a calibrated model of the step's make-up.

    Used only when the engine has no ``EngineConfig.latency``; :class:`_ShapeProbe` hands it
    the make-up of the step being timed.
    """

    __slots__ = ("probe", "step_model")

    def __init__(self, step_model: CalibratedModel, probe: _ShapeProbe) -> None:
        super().__init__(COST_MODEL_PRESETS["a6000-llama3-8b"])
        self.step_model = step_model
        self.probe = probe

    def duration(self, num_scheduled_tokens: int, num_sequences: int, kv_tokens_read: int) -> float:
        """The model's time of the step the probe saw last."""
        if num_sequences == 0:
            return self.model.overhead_s
        return self.step_model.step_time_s(self.probe.shape)


class _ShapeProbe:
    """Wraps the embedded scheduler's ``schedule()`` to read each step's make-up."""

    def __init__(self) -> None:
        self.shape = StepShape()
        self.scheduler: Any = None

    def factory(self, config: EngineConfig, host: Any, on_decision: Any) -> Any:
        scheduler = VllmScheduler(config, host, on_decision)
        schedule = scheduler.schedule
        requests = scheduler.requests  # request_id -> the engine's state, while unfinished

        def probed(step: int, now: float) -> Any:
            out = schedule(step, now)
            self.shape = _shape_of(out, requests)
            return out

        scheduler.schedule = probed  # type: ignore[method-assign]
        return scheduler


def _shape_of(out: Any, states: dict[str, Any]) -> StepShape:
    """The make-up of a scheduled step, as the engine counts it (``fake_model.split_tokens``)."""
    prefill = []
    decode = []
    for request_id, n in out.num_scheduled_tokens.items():
        r = states[request_id]
        computed = r.num_computed_tokens
        output = r.num_output_tokens
        if n == 1 and output and computed == r.num_prompt_tokens + output:
            decode.append(computed - 1)
        else:
            prefill.append((n, computed - n))
    return StepShape.of(prefill, decode)


@contextlib.contextmanager
def _model_clock(step_model: CalibratedModel, probe: _ShapeProbe) -> Iterator[None]:
    saved = engine_module.make_clock
    engine_module.make_clock = lambda *args, **kwargs: _ModelClock(step_model, probe)  # type: ignore[assignment]
    try:
        yield
    finally:
        engine_module.make_clock = saved


def simulate(
    requests: list[Any], config: EngineConfig, step_model: CalibratedModel | None, model_path: Path
) -> pl.DataFrame:
    """The embedded engine's ``requests`` rows for the run (calibrated clock, or roofline)."""
    run_id = "calibrated" if step_model is not None else "roofline"
    if step_model is None:
        result = run_engine(requests, config, BuiltinHost())
    elif "latency" in {f.name for f in dataclasses.fields(EngineConfig)}:
        latency_config = dataclasses.replace(config, latency=f"calibrated:{model_path}")  # type: ignore[call-arg]
        result = run_engine(requests, latency_config, BuiltinHost())
    else:
        probe = _ShapeProbe()
        with _model_clock(step_model, probe):
            result = run_engine(requests, config, BuiltinHost(), scheduler_factory=probe.factory)
    rows = [request_row(run_id, r)._asdict() for r in result.requests]
    return pl.DataFrame(rows, infer_schema_length=None)


def _metrics(requests: pl.DataFrame | pl.LazyFrame) -> dict[str, float]:
    frame = serving_metrics(requests.lazy()).row(0, named=True)
    return {column: float(frame[column]) for _, column in METRICS}


def _step_error(step_model: CalibratedModel, shapes: pl.DataFrame) -> dict[str, float]:
    """MAPE and P50/P95 of the model's relative step-time error on measured steps."""
    c = step_model.coefficients
    predicted = (
        c[0]
        + c[1] * pl.col("num_prefill_tokens")
        + c[2] * pl.col("num_decode_seqs")
        + c[3] * pl.col("kv_tokens_read")
        + c[4] * pl.col("num_sequences")
    )
    rel = ((predicted - pl.col("duration_s")).abs() / pl.col("duration_s")).alias("rel")
    row = shapes.select(
        (rel.mean() * 100).alias("mape"),
        rel.quantile(0.5, "linear").alias("p50"),
        rel.quantile(0.95, "linear").alias("p95"),
    ).row(0)
    return {"steps": shapes.height, "mape_pct": row[0], "p50": row[1], "p95": row[2]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--calibrate-window", type=_window, default=(0.0, 30.0))
    parser.add_argument("--test-window", type=_window, default=(30.0, 60.0))
    parser.add_argument("--num-blocks", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=6144)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("time-fidelity"))
    parser.add_argument("--vllm-venv", type=Path, default=None)
    parser.add_argument("--target", type=float, default=0.10)
    parser.add_argument("--check", type=float, default=None)
    args = parser.parse_args(argv)

    config = make_engine_config(
        block_size=32,
        num_blocks=args.num_blocks,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
    )
    builtin = resolve_strategy("builtin", None, seed=args.seed)
    runs = [
        SimRun(load_run_workload(args.workload, window=window), config, builtin, "typed", args.seed)
        for window in (args.calibrate_window, args.test_window)
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    bundles = [args.out / "live-calibrate", args.out / "live-test"]
    load_before = os.getloadavg()
    started = time.perf_counter()
    record_vllm_live(runs, bundles, venv=args.vllm_venv, overwrite=True)
    live_s = time.perf_counter() - started
    load_after = os.getloadavg()

    calibration = pl.read_parquet(bundles[0] / STEP_SHAPES_FILE)
    step_model = fit_step_time_model(calibration, seed=args.seed, source=str(bundles[0]))
    model_path = step_model.save(args.out / "model.json")
    test_shapes = pl.read_parquet(bundles[1] / STEP_SHAPES_FILE)

    requests = list(engine_requests(runs[1].workload))
    live = _metrics(open_trace(bundles[1]).scan("requests"))
    calibrated = _metrics(simulate(requests, config, step_model, model_path))
    roofline = _metrics(simulate(requests, config, None, model_path))

    def error(sim: dict[str, float], column: str) -> float | None:
        base = live[column]
        return None if base == 0 else sim[column] / base - 1

    rows = []
    for label, column in METRICS:
        rows.append(
            {
                "metric": label,
                "column": column,
                "live": live[column],
                "calibrated": calibrated[column],
                "calibrated_error": error(calibrated, column),
                "roofline": roofline[column],
                "roofline_error": error(roofline, column),
            }
        )
    held = step_model.errors.get("holdout")
    report = {
        "workload": str(args.workload),
        "calibrate_window": args.calibrate_window,
        "test_window": args.test_window,
        "engine_config": dataclasses.asdict(config),
        "live_wall_s": live_s,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "model": step_model.to_json(),
        "step_error_holdout": held,
        "step_error_test_slice": _step_error(step_model, test_shapes),
        "requests": {"calibrate": runs[0].workload.num_requests, "test": len(requests)},
        "metrics": rows,
    }
    (args.out / "time_fidelity.json").write_text(json.dumps(report, indent=1, default=str))

    print(
        f"live engine: {len(requests)} test requests, {test_shapes.height} test steps, "
        f"{calibration.height} calibration steps; both live runs took {live_s:.0f} s "
        f"(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)"
    )
    test_error = report["step_error_test_slice"]
    print(
        f"calibrated step time: held-out {held}; on every test-slice step MAPE "
        f"{test_error['mape_pct']:.1f} %, P50 {test_error['p50']:.3f}, P95 {test_error['p95']:.3f}"
    )
    print(
        f"{'metric':18} {'live':>10} {'calibrated':>11} {'error':>8} {'roofline':>10} {'error':>8}"
    )
    failed = []
    for row in rows:
        ce, re_ = row["calibrated_error"], row["roofline_error"]
        flag = "" if ce is None or abs(ce) <= args.target else "  (outside target)"
        print(
            f"{row['metric']:18} {row['live']:10.4g} {row['calibrated']:11.4g} "
            f"{'-' if ce is None else f'{ce:+.1%}':>8} {row['roofline']:10.4g} "
            f"{'-' if re_ is None else f'{re_:+.1%}':>8}{flag}"
        )
        if (
            args.check is not None
            and row["column"] in CHECKED
            and (ce is None or abs(ce) > args.check)
        ):
            failed.append(row["metric"])
    if failed:
        print(f"check failed: {', '.join(failed)} beyond {args.check:.0%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
