"""``tracekit diff``: legacy versus typed host, and the conformance checks."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors
from tracekit.cli.output import emit, output_options
from tracekit.errors import ConfigError


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("legacy", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.argument("typed", required=False, type=click.Path(file_okay=False, path_type=Path))
@output_options("report")
@click.option(
    "--allow-contract-differences",
    is_flag=True,
    help="Exit 0 when every difference is explained by the two contracts.",
)
@click.option(
    "--conformance",
    is_flag=True,
    help="Run the failure and rollback checks through both hosts instead of diffing traces.",
)
@click.option(
    "--strategy", default="bidkv", show_default=True, help="For --conformance: a,b or all."
)
@click.option("--policy-config", default=None, metavar="JSON|@FILE", help="For --conformance.")
def diff(
    legacy: Path | None,
    typed: Path | None,
    as_json: bool,
    allow_contract_differences: bool,
    conformance: bool,
    strategy: str,
    policy_config: str | None,
) -> None:
    """Compare LEGACY and TYPED recordings of the same runs (legacy vs typed host).

    Exit status: 0 equivalent, 1 different (or differences explained only by the contracts,
    unless --allow-contract-differences), 2 invalid input. With --conformance: 0 when every
    check passes, 1 otherwise.
    """
    from tracekit.conformance import run_conformance
    from tracekit.diff import diff_traces
    from tracekit.strategies import parse_policy_config

    with library_errors():
        if conformance:
            names = tuple(name.strip() for name in strategy.split(",") if name.strip())
            report = run_conformance(names, parse_policy_config(policy_config))
        else:
            if legacy is None or typed is None:
                raise ConfigError("diff needs LEGACY and TYPED trace paths (or --conformance)")
            report = diff_traces(
                legacy, typed, allow_contract_differences=allow_contract_differences
            )
    emit(as_json, report.to_dict, report.render_text)
    raise SystemExit(report.exit_code)
