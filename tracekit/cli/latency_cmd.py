"""``tracekit latency tables``: what the installed AIConfigurator or AISimulate tables cover."""

from __future__ import annotations

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors
from tracekit.cli.output import emit, output_options

__all__ = ["latency"]


@click.group("latency", context_settings=CONTEXT_SETTINGS)
def latency() -> None:
    """Step-time models (docs/latency.md); --latency SPEC on the commands that run the engine."""


@latency.command("tables", context_settings=CONTEXT_SETTINGS)
@click.argument("kind", type=click.Choice(["aiconfigurator", "aisimulate"]))
@output_options("listing")
def latency_tables(kind: str, as_json: bool) -> None:
    """List the systems, backends, table versions and models that KIND's installed tables cover.

    KIND is the --latency kind: aiconfigurator (aiconfigurator-core) or aisimulate (AISimulate).
    Each system shows its GPU's memory, bandwidth and dense bf16 throughput and, per backend, its
    table versions; the one marked (current) is used when a spelling names none. A missing
    package exits with status 2 and the command that installs it.
    """
    from tracekit.latency.spec import TABLE_MODELS

    with library_errors():
        coverage = TABLE_MODELS[kind].package.coverage()
    emit(as_json, coverage.to_dict, coverage.render)
