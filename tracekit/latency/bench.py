"""Measure the step-time models on the step shapes of a real engine run.

Runs the embedded engine over a workload (default: the whole Azure conversation hour, default
configuration, cost-model clock) and keeps every scheduled step's make-up, then:

1. times every model over all the steps (the tabulated AIConfigurator model from an empty cache,
   so its estimator calls are included);
2. compares the tabulated AIConfigurator model with direct estimator calls on every
   ``--every``-th step: the relative interpolation error (max, P50, P95, P99, mean);
3. times direct estimator calls on that sample and extrapolates to all the steps;
4. fits the calibrated model to the tabulated model's times on that sample (steps with at most
   one chunk) as if they were measurements, and reports its held-out error.

Usage::

    python -m tracekit.latency.bench [WORKLOAD] [--latency aiconfigurator:<system>/<model>]
        [--every N] [--limit N]

``--latency`` may name an ``aisimulate:`` model too (the same grid). Needs the ``tracekit``
extra (the workload loader) and the package of the table model named. The engine is not
modified: the run uses a scheduler subclass that reads each scheduled request's computed tokens
after ``schedule()``.
"""

from __future__ import annotations

import argparse
import time
from array import array
from pathlib import Path

from tracekit.latency.interface import StepShape

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
COLUMNS = ("chunks", "prefill", "prefix", "decode", "context")


def capture_steps(workload: Path, limit: int | None = None) -> dict[str, array]:
    """Run the engine (FCFS, prefix caching off, synchronous) and keep each step's five totals."""
    import tracekit.engine.engine as engine_module
    from tracekit.engine import BuiltinHost, EngineConfig, run_engine
    from tracekit.engine.scheduler import VllmScheduler
    from tracekit.recording.sim import engine_requests
    from tracekit.workloads import load_workload

    cols = {c: array("q") for c in COLUMNS}
    chunks_a, prefill_a, prefix_a = (cols[c].append for c in ("chunks", "prefill", "prefix"))
    decode_a, context_a = cols["decode"].append, cols["context"].append

    class CapturingScheduler(VllmScheduler):
        def schedule(self, step, now):  # type: ignore[no-untyped-def]
            out = super().schedule(step, now)
            p = tokens = prefix = d = context = 0
            requests = self.requests
            for request_id, n in out.num_scheduled_tokens.items():
                r = requests[request_id]
                after = r.num_computed_tokens
                total = r.num_prompt_tokens + r.num_output_tokens
                if n == 1 and r.num_output_tokens and after == total:
                    d += 1
                    context += after - 1
                else:
                    p += 1
                    tokens += n
                    prefix += after - n
            if p or d:
                chunks_a(p)
                prefill_a(tokens)
                prefix_a(prefix)
                decode_a(d)
                context_a(context)
            return out

    requests = engine_requests(load_workload(workload))
    if limit:
        requests = requests[:limit]
    original = engine_module.VllmScheduler
    engine_module.VllmScheduler = CapturingScheduler  # type: ignore[misc]
    try:
        # The plain scheduler (the one substituted above): prefix caching off, synchronous.
        config = EngineConfig(
            clock="cost-model", enable_prefix_caching=False, async_scheduling=False
        )
        run_engine(requests, config, BuiltinHost(), collect=False)
    finally:
        engine_module.VllmScheduler = original  # type: ignore[misc]
    return cols


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    """Print the figures ``docs/latency.md`` reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--latency", default="aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B")
    parser.add_argument("--every", type=int, default=20, help="compare every N-th step directly")
    parser.add_argument("--limit", type=int, default=None, help="first N requests only")
    args = parser.parse_args()

    from tracekit.latency.roofline import RooflineModel
    from tracekit.latency.spec import TABLE_MODELS, parse_latency_spec

    start = time.perf_counter()
    cols = capture_steps(args.workload, args.limit)
    n = len(cols["chunks"])
    print(f"engine run + capture  {n:,} scheduled steps in {time.perf_counter() - start:.1f} s")
    rows = list(zip(*(cols[c] for c in COLUMNS), strict=True))

    spec = parse_latency_spec(args.latency)
    if spec.kind not in TABLE_MODELS:
        parser.error(f"--latency must name a table model ({', '.join(TABLE_MODELS)})")
    table_model = TABLE_MODELS[spec.kind]
    start = time.perf_counter()
    model = table_model(
        spec.system,  # type: ignore[arg-type]
        spec.model,  # type: ignore[arg-type]
        spec.backend,  # type: ignore[arg-type]
        spec.version,
    )
    direct = table_model(
        spec.system,  # type: ignore[arg-type]
        spec.model,  # type: ignore[arg-type]
        spec.backend,  # type: ignore[arg-type]
        spec.version,
        tabulate=False,
        estimator=model._estimator,
    )
    load = time.perf_counter() - start
    print(f"estimator load        {load:.1f} s ({model.name} {model.version})")

    forward = model.forward_ms
    start = time.perf_counter()
    total_ms = 0.0
    for p, t, k, d, c in rows:
        total_ms += forward(p, t, k, d, c)
    tab_wall = time.perf_counter() - start
    print(
        f"tabulated, all steps  {tab_wall:.2f} s ({tab_wall / n * 1e6:.2f} us/step), "
        f"{model.num_estimator_calls:,} estimator calls, {len(model._cache):,} cached points, "
        f"modelled busy time {total_ms / 1000:.0f} s"
    )
    start = time.perf_counter()
    for p, t, k, d, c in rows:
        forward(p, t, k, d, c)
    warm = time.perf_counter() - start
    print(f"tabulated, warm cache {warm:.2f} s ({warm / n * 1e6:.2f} us/step)")

    sample = rows[:: args.every]
    start = time.perf_counter()
    exact = [direct.forward_ms(*r) for r in sample]
    direct_wall = time.perf_counter() - start
    print(
        f"direct, sample        {len(sample):,} steps in {direct_wall:.2f} s "
        f"({direct_wall / len(sample) * 1e6:.1f} us/step; all steps would take "
        f"{direct_wall / len(sample) * n:.0f} s)"
    )
    errors = sorted(abs(forward(*r) / e - 1) for r, e in zip(sample, exact, strict=True))
    print(
        "interpolation error   "
        f"max {errors[-1]:.2e}, mean {sum(errors) / len(errors):.2e}, "
        f"P50 {_quantile(errors, 0.5):.2e}, P95 {_quantile(errors, 0.95):.2e}, "
        f"P99 {_quantile(errors, 0.99):.2e} (relative, {len(errors):,} steps)"
    )

    roofline = RooflineModel.from_preset()
    shapes = [
        StepShape.of([(t, k)] if p == 1 else [], [c // d] * d if d else [])
        for p, t, k, d, c in sample
        if p <= 1
    ]
    start = time.perf_counter()
    for s in shapes:
        roofline.step_time_s(s)
    roof = time.perf_counter() - start
    start = time.perf_counter()
    for s in shapes:
        model.step_time_s(s)
    via_shape = time.perf_counter() - start
    start = time.perf_counter()
    for p, t, k, d, c in sample:
        StepShape.of([(t, k)] if p == 1 else [], [c // d] * d if d else [])
    build = time.perf_counter() - start
    m = len(shapes)
    print(
        f"per step (sample)     StepShape build {build / len(sample) * 1e6:.2f} us, roofline "
        f"{roof / m * 1e6:.2f} us, tabulated via step_time_s {via_shape / m * 1e6:.2f} us"
    )
    from tracekit.latency.calibrated import fit_step_time_model

    start = time.perf_counter()
    fitted = fit_step_time_model(
        [(s, model.step_time_s(s)) for s in shapes], seed=0, source=model.name
    )
    held = fitted.errors["holdout"]
    fit_wall = time.perf_counter() - start
    print(
        f"calibrated on it      {len(shapes):,} steps fitted in {fit_wall:.1f} s;"
        f" held-out ({held['num_steps']:,}) MAPE {held['mape_pct']:.2f} %, "
        f"P50 {held['p50_rel']:.4f}, P95 {held['p95_rel']:.4f}; coefficients "
        + ", ".join(f"{c:.3g}" for c in fitted.coefficients)
    )
    longest = max(rows, key=lambda r: r[1])
    print(
        f"largest step          {longest[1]} prefill tokens in {longest[0]} chunks, "
        f"{longest[3]} decode sequences; max mean decode context "
        f"{max((c / d for _, _, _, d, c in rows if d), default=0):.0f}"
    )


if __name__ == "__main__":
    main()
