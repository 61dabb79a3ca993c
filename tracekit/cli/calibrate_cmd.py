"""``tracekit calibrate``: fit a step-time model to a recording's measured step durations."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option

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
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=0.2,
    show_default=True,
    help="Fraction of the steps held out to measure the error.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the hold-out split.")
@overwrite_option("a model file calibrate wrote")
def calibrate(
    traces: tuple[Path, ...], out: Path, holdout: float, seed: int, overwrite: bool
) -> None:
    """Fit a step-time model to the measured step durations of TRACES (docs/latency.md).

    Each trace is a live bundle (record vllm --live), or a bundle whose steps table has measured
    duration_s and whose scheduled table was recorded. Several traces of one kind are pooled
    into one fit, which averages the run-to-run wander of a machine's speed. Prints the error on
    the held-out steps; use the model with --latency calibrated:OUT.
    """
    from tracekit.latency.measured import calibrate_trace

    with library_errors():
        result = calibrate_trace(
            traces, out, holdout_fraction=holdout, seed=seed, overwrite=overwrite
        )
    model = result.model
    held = model.errors["holdout"]
    coefficients = ", ".join(
        f"{term} {value:.4g}" for term, value in model.describe()["coefficients"].items()
    )
    click.echo(f"steps          {result.num_steps} ({held['num_steps']} held out, seed {seed})")
    click.echo(f"coefficients   {coefficients} (seconds per unit)")
    click.echo(
        f"held-out error MAPE {held['mape_pct']:.2f} %, P50 {100 * held['p50_rel']:.2f} %, "
        f"P95 {100 * held['p95_rel']:.2f} %"
    )
    inputs = model.fit["inputs"]
    covered = ", ".join(
        f"{term} {inputs[term]['min']:,.0f}-{inputs[term]['max']:,.0f}"
        for term in ("num_prefill_tokens", "num_decode_seqs", "kv_tokens_read")
    )
    # A linear model extrapolates past what it saw; the user should know where that starts.
    click.echo(f"fitted range   {covered} per step (beyond it the model extrapolates linearly)")
    click.echo(f"wrote {result.out}; use --latency calibrated:{result.out}")
