"""``tracekit experiment traces|run``: the original BidKV experiments."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import (
    CONTEXT_SETTINGS,
    ignored_option,
    library_errors,
    out_option,
    overwrite_option,
)
from tracekit.cli.options import (
    Progress,
    paper_latency_option,
    slo_option,
    slo_target,
)
from tracekit.cli.params import (
    MAX_RATE,
    SEED,
    Choice,
    Number,
    count,
    deprecated_alias,
    jobs_option,
)
from tracekit.defaults import PAPER_MATRIX, PAPER_SLO_TTFT_MS

if TYPE_CHECKING:
    from tracekit.engine.config import EngineConfig

# The experiment's defaults are MatrixSpec's and SloSpec's (their copies in tracekit.defaults,
# which tests/test_cli_lazy.py keeps equal); the options show them, not restate them.
MATRIX = PAPER_MATRIX
RATES = ",".join(str(rate) for rate in MATRIX["rates"])


def _float_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[float, ...]:
    try:
        # An empty item ('2,,3', a trailing comma) is a slip, not a rate: refused.
        rates = tuple(float(v) for v in value.split(","))
    except ValueError:
        rates = ()
    if not rates or not all(0 < rate <= MAX_RATE for rate in rates):
        raise click.BadParameter(
            f"expected comma-separated request rates > 0 and <= {MAX_RATE:g}, got {value!r}"
        )
    return rates


def _ms_to_s(value: float) -> float:
    return value / 1000


def _s_to_ms(value: float | None) -> float | None:
    # The library's targets are in milliseconds (the paper's tables).
    return None if value is None else value * 1000


def _name_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@click.group(context_settings=CONTEXT_SETTINGS)
def experiment() -> None:
    """Re-run the original BidKV experiments on the embedded engine (docs/experiments.md)."""


@experiment.command("traces", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--mode",
    type=Choice(["formal", "verify"]),
    default="formal",
    show_default=True,
    help="formal: write traces and manifest; verify: regenerate and compare SHA-256 hashes.",
)
@out_option(
    required=True,
    help="Trace folder to write, or to verify.",
)
@click.option(
    "--pool",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Workload whose lengths are sampled [default: shipped ShareGPT lengths].",
)
@click.option(
    "--max-prompt-tokens",
    type=count(),
    default=None,
    help="Keep pool rows with at most this many prompt tokens [default pool: 1350].",
)
@click.option("--rates", default=RATES, show_default=True, callback=_float_list)
@click.option("--seed", type=SEED, default=MATRIX["seed"], show_default=True)
@click.option("--num-requests", type=count(), default=MATRIX["num_requests"], show_default=True)
@overwrite_option("a trace folder experiment traces wrote")
def experiment_traces(
    mode: str,
    out: Path,
    overwrite: bool,
    pool: Path | None,
    max_prompt_tokens: int | None,
    rates: tuple[float, ...],
    seed: int,
    num_requests: int,
) -> None:
    """Freeze seeded Poisson traces from a length pool (the original freeze_traces)."""
    from tracekit.experiment import (
        freeze_traces,
        load_default_pool,
        load_length_pool,
        verify_traces,
    )

    with library_errors():
        if mode == "verify":
            if overwrite:
                raise ignored_option("--overwrite", "--mode formal", "--mode verify")
            report = verify_traces(out)
            click.echo(report.render())
            raise SystemExit(0 if report.ok else 1)
        lengths = (
            load_default_pool(
                **({} if max_prompt_tokens is None else {"max_prompt_tokens": max_prompt_tokens})
            )
            if pool is None
            else load_length_pool(pool, max_prompt_tokens=max_prompt_tokens)
        )
        traces = freeze_traces(
            lengths, out, rates=rates, seed=seed, num_requests=num_requests, overwrite=overwrite
        )
        for name, digest in traces.manifest["hashes"].items():
            click.echo(f"{digest}  {out / name}")


def _with_latency(latency: str) -> EngineConfig:
    """The experiment's engine configuration with another step-time model (docs/latency.md)."""
    from tracekit.engine.config import make_engine_config
    from tracekit.experiment import MatrixSpec

    default = dataclasses.asdict(MatrixSpec().engine_config)
    return make_engine_config(**{**default, "latency": latency})


@experiment.command("run", context_settings=CONTEXT_SETTINGS)
@out_option(
    required=True,
    help="Matrix folder (traces, bundles, summary, comparison).",
)
@click.option(
    "--strategies",
    default=",".join(MATRIX["strategies"]),
    show_default=True,
    callback=_name_list,
    help="The original experiments' select_victims strategies (bidkv.legacy), not the production "
    "policy's of the same names (docs/bidkv-core.md).",
)
@click.option("--rates", default=RATES, show_default=True, callback=_float_list)
@click.option("--runs", type=count(1, 1000), default=MATRIX["runs"], show_default=True)
@click.option("--num-requests", type=count(), default=MATRIX["num_requests"], show_default=True)
@click.option(
    "--seed", type=SEED, default=MATRIX["seed"], show_default=True, help="Run i uses seed + i."
)
@slo_option("ttft", PAPER_SLO_TTFT_MS / 1000, "A request meets the SLO with TTFT <= this")
@slo_option("tpot", None, "Also require TPOT <= this")
# The experiment's spelling before the one dialect: milliseconds.
@deprecated_alias("--slo-ttft-ms", "--slo-ttft-s", "slo_ttft_s", convert=_ms_to_s,
                  unit="seconds", type=float, callback=slo_target)  # fmt: skip
@deprecated_alias("--slo-tpot-ms", "--slo-tpot-s", "slo_tpot_s", convert=_ms_to_s,
                  unit="seconds", type=float, callback=slo_target)  # fmt: skip
@click.option(
    "--load-scale",
    type=Number(0.0, MAX_RATE, low_open=True),
    default=MATRIX["load_scale"],
    show_default=True,
    help="Arrival rate = rate x this (cells keep the nominal rate).",
)
@click.option(
    "--client-max-in-flight",
    type=count(),
    default=None,
    help="Emulate the original client's cap on requests in flight.",
)
@click.option(
    "--latency-from",
    type=Choice(["arrival", "sent"]),
    default=MATRIX["latency_from"],
    show_default=True,
    help="sent: the original runner's (defective) measurement.",
)
@click.option(
    "--pool",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Workload whose lengths are sampled [default: shipped ShareGPT lengths].",
)
@paper_latency_option
@jobs_option("running the matrix's runs")
@click.option("--resume", is_flag=True, help="Keep complete bundles already in --out.")
@overwrite_option("a matrix folder experiment run wrote; every run is recorded again")
def experiment_run(**options: Any) -> None:
    """Run the paper's matrix (5 strategies x 3 rates x 3 runs) and compare with the paper."""
    from tracekit.experiment import HookSettings, MatrixSpec, SloSpec, run_matrix
    from tracekit.sweep.executors import default_jobs

    with library_errors():
        spec = MatrixSpec(
            strategies=options["strategies"],
            rates=options["rates"],
            runs=options["runs"],
            num_requests=options["num_requests"],
            seed=options["seed"],
            slo=SloSpec(_s_to_ms(options["slo_ttft_s"]), _s_to_ms(options["slo_tpot_s"])),
            settings=HookSettings(client_max_in_flight=options["client_max_in_flight"]),
            load_scale=options["load_scale"],
            latency_from=options["latency_from"],
            # The step-time model (docs/latency.md); the A6000 roofline by default.
            **(
                {}
                if options["latency"] is None
                else {"engine_config": _with_latency(options["latency"])}
            ),
            # A given pool is read as it is (as `experiment traces --pool` does).
            **(
                {}
                if options["pool"] is None
                else {"pool_path": options["pool"], "pool_options": {}, "max_prompt_tokens": None}
            ),
        )
        result = run_matrix(
            spec,
            options["out"],
            jobs=options["jobs"] or default_jobs(),
            resume=options["resume"],
            overwrite=options["overwrite"],
            progress=Progress("experiment"),
        )
        click.echo((result.folder / "comparison.md").read_text("utf-8"), nl=False)
        click.echo(f"{len(result.runs)} runs in {result.wall_s:.1f} s -> {result.folder}")
