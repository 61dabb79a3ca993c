"""``tracekit calibrate``: fit a step-time model to a recording's measured step durations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.accuracy_cmd import measured_engine_options, measured_options
from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import SEED, Number, count

__all__ = ["calibrate"]


@click.command("calibrate", context_settings=CONTEXT_SETTINGS)
@click.argument(
    "traces",
    nargs=-1,
    required=True,
    type=click.Path(exists=False, path_type=Path),
)
@out_option(folder=False, required=True, help="Model file to write (JSON).")
@click.option(
    "--holdout",
    type=Number(0.0, 1.0, low_open=True, high_open=True),
    default=0.2,
    show_default=True,
    help="Fraction of the steps held out to measure the error.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the hold-out split.")
@measured_engine_options
@click.option(
    "--max-iterations",
    type=count(1, 1000),
    default=20,
    show_default=True,
    help="Benchmark results: simulate-and-fit rounds at most.",
)
@click.option(
    "--spread/--no-spread",
    default=True,
    show_default=True,
    help="Benchmark results: keep the fitted requests' TTFT residuals in the model, so that "
    'tracekit accuracy\'s percentiles include their scatter (docs/latency.md, "The spread").',
)
@overwrite_option("a model file calibrate wrote")
@output_options("model file, its coefficients and errors")
def calibrate(
    traces: tuple[Path, ...],
    out: Path,
    holdout: float,
    seed: int,
    server_log: Path | None,
    max_iterations: int,
    spread: bool,
    overwrite: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Fit a step-time model to the measured step durations of TRACES (docs/latency.md).

    Each trace is a live bundle (record vllm --live), or a bundle whose steps table has measured
    duration_s and whose scheduled table was recorded. Several traces of one kind are pooled
    into one fit, which averages the run-to-run wander of a machine's speed. Prints the error on
    the held-out steps; use the model with --latency calibrated:OUT.

    Or each is a benchmark result (vllm bench serve --save-detailed JSON, GuideLLM report,
    AIPerf profile_export.jsonl): the model and the per-request overheads are then fitted to the
    measured per-request latencies (simulate, fit, repeat until stable), with the server's engine
    options given here or read from --server-log (docs/latency.md, "Calibration from measured
    runs").
    """
    from tracekit.latency.measured import calibrate_trace
    from tracekit.measured.runs import is_measured_result

    if any(is_measured_result(t) for t in traces):
        _calibrate_results(
            traces, out, server_log, max_iterations, spread, overwrite, as_json, options
        )
        return

    with library_errors():
        result = calibrate_trace(
            traces, out, holdout_fraction=holdout, seed=seed, overwrite=overwrite
        )
    model = result.model
    held = model.errors["holdout"]
    coefficients = model.describe()["coefficients"]
    inputs = model.fit["inputs"]
    covered = {
        term: {"min": inputs[term]["min"], "max": inputs[term]["max"]}
        for term in ("num_prefill_tokens", "num_decode_seqs", "kv_tokens_read")
    }
    emit(
        as_json,
        lambda: {
            "out": str(result.out),
            "latency": f"calibrated:{result.out}",
            "num_steps": result.num_steps,
            "seed": seed,
            "holdout": held,
            "coefficients": coefficients,
            "fitted_range": covered,
        },
        lambda: _text(result, seed, coefficients, covered),
    )


def _text(result: Any, seed: int, coefficients: dict[str, float], covered: dict[str, Any]) -> str:
    held = result.model.errors["holdout"]
    terms = ", ".join(f"{term} {value:.4g}" for term, value in coefficients.items())
    fitted = ", ".join(f"{t} {r['min']:,.0f}-{r['max']:,.0f}" for t, r in covered.items())
    return "\n".join(
        [
            f"steps          {result.num_steps} ({held['num_steps']} held out, seed {seed})",
            f"coefficients   {terms} (seconds per unit)",
            f"held-out error MAPE {held['mape_pct']:.2f} %, P50 {100 * held['p50_rel']:.2f} %, "
            f"P95 {100 * held['p95_rel']:.2f} %",
            # A linear model extrapolates past what it saw; the user should know where.
            f"fitted range   {fitted} per step (beyond it the model extrapolates linearly)",
            f"wrote {result.out}; use --latency calibrated:{result.out}",
        ]
    )


def _calibrate_results(
    results: tuple[Path, ...],
    out: Path,
    server_log: Path | None,
    max_iterations: int,
    spread: bool,
    overwrite: bool,
    as_json: bool,
    options: dict[str, Any],
) -> None:
    from tracekit.measured.runs import calibrate_results, is_measured_result, measured_engine_config

    others = [str(r) for r in results if not is_measured_result(r)]
    if others:
        raise click.UsageError(
            f"{others[0]} is not a benchmark result; calibrate benchmark results and trace "
            "bundles separately"
        )
    click.echo(f"calibrate: started ({len(results)} measured run(s))", err=True)
    with library_errors():
        config, provenance = measured_engine_config(measured_options(options), server_log)
        fit = calibrate_results(
            results,
            out,
            config,
            provenance=provenance,
            max_iterations=max_iterations,
            spread=spread,
            overwrite=overwrite,
        )
    click.echo(f"calibrate: done {fit.iterations} round(s)", err=True)
    model = fit.model
    errors = model.measured_error["fitted_runs"]
    emit(
        as_json,
        lambda: {
            "out": str(out),
            "latency": f"calibrated:{out}",
            "runs": len(results),
            "num_latencies": model.fit["num_latencies"],
            "rounds": fit.iterations,
            "converged": fit.converged,
            "stop_reason": fit.stop_reason,
            "coefficients": model.describe()["coefficients"],
            "request_overheads": dict(model.request_overheads),
            "request_overheads_by_client": dict(model.request_overheads_by_client),
            "spread_residuals": len(model.request_spread.get("ttft_s", ())),
            "error_on_fitted_runs": errors,
            "defaulted": list(provenance["defaulted"]),
        },
        lambda: _results_text(fit, len(results), out, provenance),
    )


def _results_text(fit: Any, runs: int, out: Path, provenance: dict[str, Any]) -> str:
    model = fit.model
    coefficients = ", ".join(
        f"{term} {value:.4g}" for term, value in model.describe()["coefficients"].items()
    )
    state = fit.stop_reason or ("converged" if fit.converged else "not converged")
    overheads = ", ".join(f"{k} {v:.4g}" for k, v in model.request_overheads.items() if v)
    clients = model.request_overheads_by_client
    if clients:
        default = model.fit.get("default_client")
        overheads = "; ".join(
            f"{client}{' (the default)' if client == default else ''}: "
            + (", ".join(f"{k} {v:.4g}" for k, v in values.items() if v) or "none")
            for client, values in clients.items()
        )
    errors = model.measured_error["fitted_runs"]
    shown = ", ".join(
        f"{name} {errors[name]:+.1%}"
        for name in ("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p99", "output_throughput")
        if name in errors
    )
    lines = [
        f"runs           {runs}, {model.fit['num_latencies']} latencies",
        f"rounds         {fit.iterations}, {state}",
        f"coefficients   {coefficients} (seconds per unit)",
        f"overheads      {overheads or 'none'} (seconds)",
        f"spread         {len(model.request_spread.get('ttft_s', ()))} TTFT residuals of the "
        "fitted requests, in the percentiles of tracekit accuracy",
        f"error on them  {shown} (simulated / measured - 1)",
    ]
    if provenance["defaulted"]:
        defaulted = ", ".join(provenance["defaulted"])
        lines.append(f"defaulted      {defaulted} (not given, not in a log)")
    lines.append(f"wrote {out}; use --latency calibrated:{out}")
    return "\n".join(lines)
