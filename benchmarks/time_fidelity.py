"""Time fidelity: the embedded engine with a calibrated step-time model against the live engine.

1. Records two slices of one workload on the live vLLM engine (``tracekit record vllm --live``:
   the tiny random-weight Llama on this machine's CPU, built-in victims, one driver process):
   the *calibration* slice and a different *test* slice.
2. Fits the step-time model of :mod:`tracekit.latency.calibrated` to the calibration slice's
   measured steps (its ``step_shapes.parquet``: each step's make-up, wall-clock duration and
   CPU time) on their **CPU time** with **absolute** weighting (the model's total equals the
   measured total) and reports its held-out error, and its error on every step of the test
   slice. The CPU time is the step's length without the time other processes held the two
   cores; a bundle recorded before it existed is fitted on the wall clock.
3. Simulates the test slice on the embedded engine (``--latency calibrated:FILE``), with the
   same engine configuration: with the calibrated model ("calibrated": the engine on an idle
   machine); with the model times the live test run's **load factor**, the wall-clock over CPU
   time of its steps ("calibrated x load": a diagnostic that separates the model's error from
   the machine's load, using that one figure of the test run); with the model fitted as before
   this script fitted on CPU time ("previous": relative error, wall clock, no attention pairs);
   and with the default roofline cost model (``a6000-llama3-8b``: what a user gets without
   calibration). ``--repeat-live`` also runs the test slice live a second time: how far two
   live runs of the same slice are apart is the floor no model can beat on this machine.
4. Compares each simulation's serving metrics with the live test run's (``tracekit.analysis.
   serving``): TTFT, TPOT and end-to-end P50 and P95, output throughput, and preemptions; prints
   the relative error of each (simulated / live - 1) and whether it is within ``--target``.

Wall-clock measurements on a shared machine are noisy: the live runs' step times move with the
load of other processes. The script prints the machine's load average before and after and
each live run's load factor so that a reader can judge.

Exit status: 0; 1 with ``--check R`` when the calibrated model's TPOT P50, end-to-end P50 or
output throughput is not within a factor ``R`` of the live run's; the model at the test run's
load factor is checked when it was fitted on CPU time (CI uses 3: the check is that the
pipeline works end to end and the model stays in range, not the 10 % target, which the load
of a shared machine makes unmeasurable; see docs/engine.md). Writes everything (bundles,
models, ``time_fidelity.json``) under ``--out``.

Usage: ``python benchmarks/time_fidelity.py [--workload PATH] [--calibrate-window 0:30]
[--test-window 30:60] [--num-blocks 256] [--max-model-len 6144] [--out DIR] [--vllm-venv DIR]
[--target 0.10] [--check R] [--repeat-live] [--reuse-live]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.analysis.serving import serving_metrics
from tracekit.engine.config import EngineConfig, make_engine_config
from tracekit.engine.engine import run_engine
from tracekit.engine.hosts import BuiltinHost
from tracekit.engine.request import engine_requests
from tracekit.latency.calibrated import PAIRS, CalibratedModel, fit_step_time_model
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
#: The metrics ``--check`` bounds: medians and throughput. The P95s and TTFT of a short, lightly
#: loaded slice hang on a few steps, and a handful of preemptions moves by one or two with the
#: live run's timing; they are reported, not checked.
CHECKED = ("tpot_p50_s", "e2e_p50_s", "output_tokens_per_s")


def _window(text: str) -> tuple[float, float]:
    start, _, end = text.partition(":")
    return float(start), float(end)


def simulate(requests: list[Any], config: EngineConfig, model_path: Path | None) -> pl.DataFrame:
    """The embedded engine's ``requests`` rows for the run (a calibrated model, or roofline)."""
    run_id = "roofline" if model_path is None else "calibrated"
    if model_path is not None:
        config = dataclasses.replace(config, latency=f"calibrated:{model_path}")
    result = run_engine(requests, config, BuiltinHost())
    rows = [request_row(run_id, r)._asdict() for r in result.requests]
    return pl.DataFrame(rows, infer_schema_length=None)


def _metrics(requests: pl.DataFrame | pl.LazyFrame) -> dict[str, float]:
    frame = serving_metrics(requests.lazy()).row(0, named=True)
    return {column: float(frame[column]) for _, column in METRICS}


def _step_error(
    step_model: CalibratedModel, shapes: pl.DataFrame, target: str = "duration_s"
) -> dict[str, float]:
    """MAPE and P50/P95 of the model's relative step-time error on measured steps."""
    predicted = _prediction(step_model, shapes.columns)
    rel = ((predicted - pl.col(target)).abs() / pl.col(target)).alias("rel")
    row = shapes.select(
        (rel.mean() * 100).alias("mape"),
        rel.quantile(0.5, "linear").alias("p50"),
        rel.quantile(0.95, "linear").alias("p95"),
    ).row(0)
    return {"steps": shapes.height, "mape_pct": row[0], "p50": row[1], "p95": row[2]}


def _scaled(step_model: CalibratedModel, scale: float, why: str) -> CalibratedModel:
    """``step_model`` with every coefficient times ``scale`` (``why`` goes into its record)."""
    return dataclasses.replace(
        step_model,
        coefficients=tuple(c * scale for c in step_model.coefficients),
        fit={**step_model.fit, "scale": scale, "scale_reason": why},
        source=f"{step_model.source} (x{scale:.3f}, {why})",
    )


def _load_factor(shapes: pl.DataFrame) -> float | None:
    """Wall-clock over CPU time of a live run's steps: how much other processes slowed it.

    With one compute thread a step's CPU time is its length on an idle machine, so the ratio is
    1 on a quiet machine (measured: the median step's ratio is 1.000) and grows with the time
    the run waited for a core. None for a bundle recorded before ``cpu_s`` existed.
    """
    if "cpu_s" not in shapes.columns or not shapes["cpu_s"].sum() > 0:
        return None
    return float(shapes["duration_s"].sum() / shapes["cpu_s"].sum())


def _prediction(step_model: CalibratedModel, columns: Any = (PAIRS,)) -> pl.Expr:
    c = step_model.coefficients
    return (
        c[0]
        + c[1] * pl.col("num_prefill_tokens")
        + c[2] * pl.col("num_decode_seqs")
        + c[3] * pl.col("kv_tokens_read")
        + c[4] * pl.col("num_sequences")
        + c[5] * (pl.col(PAIRS) if PAIRS in columns else pl.lit(0))
    )


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
    parser.add_argument(
        "--check",
        type=float,
        default=None,
        metavar="R",
        help="exit 1 unless the calibrated model's TPOT P50, E2E P50 and output throughput (at "
        "the live test run's load factor when fitted on CPU time) are within a factor R of the "
        "live run's (a smoke check, e.g. 3)",
    )
    parser.add_argument(
        "--repeat-live",
        action="store_true",
        help="run the test slice live a second time: the live run's own spread (noise floor)",
    )
    parser.add_argument(
        "--reuse-live",
        action="store_true",
        help="analyse the live bundles already under --out instead of recording them again",
    )
    args = parser.parse_args(argv)

    config = make_engine_config(
        block_size=32,
        num_blocks=args.num_blocks,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        # The live engine steps synchronously (one schedule and one forward per timed step), so
        # the simulation does too; prefix caching stays at vLLM's default (on) on both sides.
        async_scheduling=False,
    )
    builtin = resolve_strategy("builtin", None, seed=args.seed)
    runs = [
        SimRun(load_run_workload(args.workload, window=window), config, builtin, "typed", args.seed)
        for window in (args.calibrate_window, args.test_window)
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    bundles = [args.out / "live-calibrate", args.out / "live-test"]
    if args.repeat_live:
        runs.append(runs[1])
        bundles.append(args.out / "live-test-again")
    load_before = os.getloadavg()
    started = time.perf_counter()
    if not args.reuse_live:
        record_vllm_live(runs, bundles, venv=args.vllm_venv, overwrite=True)
    live_s = time.perf_counter() - started
    load_after = os.getloadavg()

    calibration = pl.read_parquet(bundles[0] / STEP_SHAPES_FILE)
    test_shapes = pl.read_parquet(bundles[1] / STEP_SHAPES_FILE)
    # The step time to fit: CPU time when the bundle has it (the step's length without the
    # time other processes held the cores; on a quiet machine it equals the wall clock), else
    # the wall clock. Absolute weighting: latencies and throughput add up step totals.
    target = "cpu_s" if _load_factor(calibration) is not None else "duration_s"
    fitted = fit_step_time_model(
        calibration, seed=args.seed, source=str(bundles[0]), weighting="absolute", target=target
    )
    # The model before this fit's changes: relative error, wall clock, no attention pairs.
    previous = fit_step_time_model(
        calibration.drop(PAIRS, strict=False), seed=args.seed, source=str(bundles[0])
    )
    fitted_path = fitted.save(args.out / "model.json")
    previous_path = previous.save(args.out / "model-previous.json")
    load = {
        "calibrate": _load_factor(calibration),
        "test": _load_factor(test_shapes),
        "test again": (
            _load_factor(pl.read_parquet(bundles[2] / STEP_SHAPES_FILE))
            if args.repeat_live
            else None
        ),
    }

    requests = list(engine_requests(runs[1].workload))
    live = _metrics(open_trace(bundles[1]).scan("requests"))
    columns: dict[str, dict[str, float]] = {}
    if args.repeat_live:
        columns["live again"] = _metrics(open_trace(bundles[2]).scan("requests"))
    columns["calibrated"] = _metrics(simulate(requests, config, fitted_path))
    if target == "cpu_s" and load["test"] is not None:
        # Diagnostic, not a prediction: the model slowed by the load the live test run itself
        # measured (its wall over CPU time), which separates the model's error from the load's.
        loaded = _scaled(fitted, load["test"], "the live test run's wall / CPU time")
        columns["calibrated x load"] = _metrics(
            simulate(requests, config, loaded.save(args.out / "model-test-load.json"))
        )
    columns["previous"] = _metrics(simulate(requests, config, previous_path))
    columns["roofline"] = _metrics(simulate(requests, config, None))

    def error(sim: dict[str, float], column: str) -> float | None:
        base = live[column]
        return None if base == 0 else sim[column] / base - 1

    rows = []
    for label, column in METRICS:
        row: dict[str, Any] = {"metric": label, "column": column, "live": live[column]}
        for name, values in columns.items():
            row[name] = values[column]
            row[f"{name} error"] = error(values, column)
        rows.append(row)
    report = {
        "workload": str(args.workload),
        "calibrate_window": args.calibrate_window,
        "test_window": args.test_window,
        "engine_config": dataclasses.asdict(config),
        "live_wall_s": live_s,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "model": fitted.to_json(),
        "previous_model": previous.to_json(),
        "fit_target": target,
        "load_factor": load,
        "step_error_holdout": fitted.errors.get("holdout"),
        "step_error_test_slice": _step_error(fitted, test_shapes, target),
        "step_error_test_slice_previous": _step_error(previous, test_shapes),
        "step_time_totals_test_slice": {
            "measured_wall_s": float(test_shapes["duration_s"].sum()),
            "measured_cpu_s": (
                float(test_shapes["cpu_s"].sum()) if "cpu_s" in test_shapes.columns else None
            ),
            "calibrated_s": test_shapes.select(
                _prediction(fitted, test_shapes.columns).sum()
            ).item(),
            "previous_s": test_shapes.select(
                _prediction(previous, test_shapes.columns).sum()
            ).item(),
        },
        "requests": {"calibrate": runs[0].workload.num_requests, "test": len(requests)},
        "metrics": rows,
    }
    (args.out / "time_fidelity.json").write_text(json.dumps(report, indent=1, default=str))

    print(
        f"live engine: {len(requests)} test requests, {test_shapes.height} test steps, "
        f"{calibration.height} calibration steps; the live runs took {live_s:.0f} s "
        f"(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)"
    )
    print(
        "load factor (wall / CPU time of the steps): "
        + ", ".join(f"{k} {'-' if v is None else f'{v:.2f}'}" for k, v in load.items())
    )
    for name, key, measured in (
        ("calibrated", "step_error_test_slice", target),
        ("previous", "step_error_test_slice_previous", "duration_s"),
    ):
        e = report[key]
        print(
            f"{name} step time on every test-slice step ({measured}): MAPE {e['mape_pct']:.1f} %, "
            f"P50 {e['p50']:.3f}, P95 {e['p95']:.3f}"
        )
    held = fitted.errors.get("holdout") or {}
    totals = report["step_time_totals_test_slice"]
    cpu_total = totals["measured_cpu_s"]
    print(
        f"fit ({target}, absolute) held-out: MAPE {held.get('mape_pct', math.nan):.1f} %, "
        f"P50 {held.get('p50_rel', math.nan):.3f}, P95 {held.get('p95_rel', math.nan):.3f}; "
        f"test-slice step totals: measured {totals['measured_wall_s']:.1f} s wall"
        + ("" if cpu_total is None else f", {cpu_total:.1f} s CPU")
        + f"; calibrated {totals['calibrated_s']:.1f} s, previous {totals['previous_s']:.1f} s"
    )
    header = f"{'metric':16} {'live':>9}" + "".join(f" {n:>17} {'error':>7}" for n in columns)
    print(header)
    # The check compares the model at the live test run's measured load when the model was
    # fitted on CPU time (a loaded CI machine slows the live run by a factor of 1.2 to 2 that
    # no model of the engine sees), else the model itself.
    checked = "calibrated x load" if "calibrated x load" in columns else "calibrated"
    failed = []
    for row in rows:
        line = f"{row['metric']:16} {row['live']:9.4g}"
        for name in columns:
            e = row[f"{name} error"]
            line += f" {row[name]:17.4g} {'-' if e is None else f'{e:+.0%}':>7}"
        print(line)
        ratio = None if row["live"] == 0 else row[checked] / row["live"]
        if (
            args.check is not None
            and row["column"] in CHECKED
            and (ratio is None or not 1 / args.check <= ratio <= args.check)
        ):
            failed.append(row["metric"])
    for name in [n for n in ("calibrated", "calibrated x load") if n in columns]:
        within = [
            r["metric"]
            for r in rows
            if r[f"{name} error"] is not None and abs(r[f"{name} error"]) <= args.target
        ]
        print(f"within {args.target:.0%} ({name}): {', '.join(within) or 'none'}")
    if failed:
        print(
            f"check failed ({checked}): {', '.join(failed)} not within a factor {args.check:g} "
            "of the live run",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
