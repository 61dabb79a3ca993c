"""``tracekit calibrate``: fit a step-time model to a recording's measured step durations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import SEED, Number

__all__ = ["calibrate"]


@click.command("calibrate", context_settings=CONTEXT_SETTINGS)
@click.argument(
    "traces",
    nargs=-1,
    required=True,
    type=click.Path(exists=False, file_okay=False, path_type=Path),
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
@output_options("model file, its coefficients, errors and fitted range")
def calibrate(
    traces: tuple[Path, ...], out: Path, holdout: float, seed: int, as_json: bool
) -> None:
    """Fit a step-time model to the measured step durations of TRACES (docs/latency.md).

    Each trace is a live bundle (record vllm --live), or a bundle whose steps table has measured
    duration_s and whose scheduled table was recorded. Several traces of one kind are pooled
    into one fit, which averages the run-to-run wander of a machine's speed. Prints the error on
    the held-out steps; use the model with --latency calibrated:OUT.
    """
    from tracekit.latency.measured import calibrate_trace

    with library_errors():
        result = calibrate_trace(traces, out, holdout_fraction=holdout, seed=seed)
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
