"""Record the whole Azure conversation hour with each step-time model and compare wall times.

Loads ``traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv`` (19,366 requests, one hour),
then records it to a trace bundle (``tracekit record sim``, builtin policy, default engine
configuration) once per ``--latency`` value, in one process, and prints for each: the wall time
of building the model (AIConfigurator loads its tables), of the recording, the steps, the
simulated end time, and the recording's wall time as a ratio to the roofline's. The target: the
hour recorded with the AIConfigurator model in under 60 s (docs/latency.md, "Speed: the whole
Azure hour").

A calibrated model is fitted first to a roofline recording of the first 2,000 requests
(``tracekit calibrate`` on a modelled recording: it exercises the path; the times are the
roofline's).

Usage::

    python benchmarks/latency_hour.py [WORKLOAD] [--latency SPEC ...] [--limit N]

Default models: ``roofline``, ``calibrated:<fitted>``, and, when aiconfigurator-core imports,
``aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B`` (the A6000 stand-in) and
``aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B``.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

from tracekit.engine import EngineConfig
from tracekit.latency.measured import calibrate_trace
from tracekit.latency.spec import A6000_STAND_IN, cached_step_time_model
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.trace import open_trace
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def record(workload, latency: str, out: Path, *, scheduled: bool = False) -> dict:
    """Build the model, record the hour with it, and return the timings."""
    start = time.perf_counter()
    cached_step_time_model(latency)
    build_s = time.perf_counter() - start
    run = SimRun(workload, EngineConfig(latency=latency), resolve_strategy("builtin"), "typed")
    start = time.perf_counter()
    record_sim(run, out, record_scheduled=scheduled)
    wall_s = time.perf_counter() - start
    steps = open_trace(out).scan("steps").collect()
    end_s = float((steps["time_s"] + steps["duration_s"]).max())
    return {"build_s": build_s, "wall_s": wall_s, "steps": steps.height, "end_s": end_s}


def main() -> None:
    """Print one line per model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--latency", action="append", default=None)
    parser.add_argument("--limit", type=int, default=None, help="first N requests only")
    args = parser.parse_args()

    workload = load_workload(args.workload, limit=args.limit)
    print(f"workload {workload.name}: {workload.num_requests:,} requests")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # The calibration recording: the first 2,000 requests with their scheduled rows.
        head = load_workload(args.workload, limit=min(2000, args.limit or 2000))
        record(head, "roofline", folder / "head", scheduled=True)
        fitted = calibrate_trace(folder / "head", folder / "model.json").model
        print(
            f"calibrated on the roofline recording of {head.num_requests:,} requests: held-out "
            f"MAPE {fitted.errors['holdout']['mape_pct']:.2f} %"
        )
        base = record(workload, "roofline", folder / "roofline")
        models = args.latency or [f"calibrated:{folder / 'model.json'}"]
        if args.latency is None and importlib.util.find_spec("aiconfigurator_core"):
            models += [A6000_STAND_IN, "aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B"]
        rows = [("roofline", base)]
        for i, latency in enumerate(models):
            rows.append((latency, record(workload, latency, folder / f"m{i}")))
        print(
            f"{'latency':<55} {'build s':>8} {'record s':>9} {'ratio':>6} {'steps':>9} "
            f"{'sim end s':>10} {'+us/step':>9}"
        )
        for latency, r in rows:
            shown = latency if not latency.startswith("calibrated:") else "calibrated:<fitted>"
            print(
                f"{shown:<55} {r['build_s']:>8.2f} {r['wall_s']:>9.1f} "
                f"{r['wall_s'] / base['wall_s']:>6.2f} {r['steps']:>9,} {r['end_s']:>10.0f} "
                f"{(r['wall_s'] - base['wall_s']) / r['steps'] * 1e6:>9.1f}"
            )


if __name__ == "__main__":
    main()
