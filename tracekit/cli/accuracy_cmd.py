"""``tracekit accuracy``: measured benchmark runs against their simulation; shared options."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import engine_range, latency_option
from tracekit.cli.output import echo_json, output_options
from tracekit.cli.params import Number

__all__ = ["accuracy", "measured_engine_options", "measured_options"]

F = TypeVar("F", bound=Callable[..., Any])


def measured_engine_options(function: F) -> F:
    """The server's engine options (unset: from ``--server-log``, then the engine's defaults)."""
    for decorator in reversed(
        [
            click.option(
                "--server-log",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                default=None,
                help="vllm serve's start-up log: block size, KV blocks, max_num_seqs, token "
                "budget, max_model_len, prefix caching (options given here win).",
            ),
            click.option("--block-size", type=engine_range("block_size"), default=None),
            click.option("--num-blocks", type=engine_range("num_blocks"), default=None),
            click.option("--max-model-len", type=engine_range("max_model_len"), default=None),
            click.option("--max-num-seqs", type=engine_range("max_num_seqs"), default=None),
            click.option(
                "--max-num-batched-tokens",
                type=engine_range("max_num_batched_tokens"),
                default=None,
            ),
            click.option(
                "--prefix-caching/--no-prefix-caching", "enable_prefix_caching", default=None
            ),
            click.option(
                "--async-scheduling/--no-async-scheduling", "async_scheduling", default=None
            ),
        ]
    ):
        function = decorator(function)
    return function


def measured_options(options: dict[str, Any]) -> dict[str, Any]:
    """The engine keywords of :func:`measured_engine_options` (``None``: unset)."""
    keys = ("block_size", "num_blocks", "max_model_len", "max_num_seqs",
            "max_num_batched_tokens", "enable_prefix_caching", "async_scheduling")  # fmt: skip
    return {k: options.get(k) for k in keys}


def _fmt(value: float | None, name: str) -> str:
    if value is None:
        return "-"
    if "throughput" in name:
        return f"{value:.4g}"
    return f"{value * 1000:.4g} ms"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


#: The ``format`` of the file ``accuracy --out`` writes: how ``--overwrite`` knows its own.
ACCURACY_FORMAT = "tracekit.accuracy"


def _accuracy_mark() -> Any:
    from tracekit import safe_output

    def check(path: Path) -> str | None:
        try:
            document = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            document = None
        if isinstance(document, dict) and document.get("format") == ACCURACY_FORMAT:
            return None
        return "not a comparison written by tracekit accuracy"

    return safe_output.Mark("tracekit accuracy", check)


def _write_json(path: Path, payload: Any, inputs: tuple[Path, ...], overwrite: bool) -> None:
    # docs/guarantees.md, "Safe output": never over a file accuracy did not write; staged.
    from tracekit import safe_output

    document = {"format": ACCURACY_FORMAT, "version": 1, **payload}
    with safe_output.staged_file(
        path, mark=_accuracy_mark(), overwrite=overwrite, inputs=list(inputs)
    ) as staging:
        Path(staging).write_text(json.dumps(document, indent=2, default=str) + "\n")


@click.command("accuracy", context_settings=CONTEXT_SETTINGS)
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=False, path_type=Path))
@latency_option
@measured_engine_options
@click.option(
    "--target",
    # Above 10 (a 1,000 % error) every comparison would pass: a slip, not a target.
    type=Number(0.0, 10.0, low_open=True),
    default=0.10,
    show_default=True,
    help="Relative error each metric is held to (or the repeats' noise floor, if larger).",
)
@out_option(folder=False, default=None, help="Also write the comparison as JSON to this file.")
@overwrite_option("a comparison accuracy wrote")
@click.option(
    "--record-error",
    "record_label",
    default=None,
    metavar="LABEL",
    help="Add the errors to the calibrated model file (--latency calibrated:FILE) as the "
    "held-out measurement LABEL; reports whose times come from the model print them.",
)
@output_options("comparison")
def accuracy(
    results: tuple[Path, ...],
    latency: str | None,
    server_log: Path | None,
    target: float,
    out: Path | None,
    overwrite: bool,
    record_label: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Compare measured RESULTS (repeats of one configuration) with their simulation.

    Each RESULT is a vllm bench serve --save-result --save-detailed JSON, a GuideLLM report or
    an AIPerf profile_export.jsonl (docs/workloads.md, "Benchmark results"). Each is simulated
    on the embedded engine with its own send times and lengths, and the means over the repeats
    of TTFT, TPOT, ITL and E2E (mean, P50, P90, P99) and the throughputs are compared
    (docs/latency.md, "Measured against simulated"). Exit status 1 when a metric is outside
    --target and outside the repeats' noise floor.
    """
    from tracekit.measured.runs import accuracy as run_accuracy
    from tracekit.measured.runs import (
        measured_engine_config,
        read_measured_run,
        record_measured_error,
    )

    if record_label is not None and not (latency or "").startswith("calibrated:"):
        raise click.UsageError("--record-error needs --latency calibrated:FILE")
    with library_errors():
        if out is not None:
            from tracekit import safe_output

            safe_output.check_new_file(
                out, mark=_accuracy_mark(), overwrite=overwrite, inputs=list(results)
            )
        runs = [read_measured_run(r) for r in results]
        config, provenance = measured_engine_config(
            {**measured_options(options), "latency": latency}, server_log
        )
        click.echo(f"accuracy: started ({len(results)} run(s))", err=True)
        comparison = run_accuracy(runs, config, target=target, provenance=provenance)
    payload = comparison.as_dict()
    if record_label is not None:
        with library_errors():
            record_measured_error(str(latency).partition(":")[2], comparison, record_label)
    if out is not None:
        with library_errors():
            _write_json(out, payload, results, overwrite)
    click.echo(f"accuracy: done {len(results)}/{len(results)}", err=True)
    if as_json:
        echo_json(payload)
    else:
        if provenance["defaulted"]:
            click.echo(
                "engine options from the engine's defaults (neither given nor in a server log): "
                + ", ".join(provenance["defaulted"])
            )
        click.echo(f"latency model  {comparison.latency}; overheads {payload['overheads']}")
        rows = [("metric", "measured", "range", "simulated", "error", "noise", "within")]
        for m in comparison.metrics:
            span = (
                "-"
                if m.measured_min is None
                else f"{_fmt(m.measured_min, m.name)}..{_fmt(m.measured_max, m.name)}"
            )
            rows.append(
                (
                    m.name,
                    _fmt(m.measured, m.name),
                    span,
                    _fmt(m.simulated, m.name),
                    _pct(m.error),
                    _pct(m.noise),
                    "-" if m.within is None else ("yes" if m.within else "NO"),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)))
    if not comparison.all_within:
        sys.exit(1)
