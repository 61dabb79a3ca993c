"""``tracekit manifest validate|render``: extension manifests."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit import manifests
from tracekit.cli.common import (
    CONTEXT_SETTINGS,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    LibraryError,
    library_errors,
)
from tracekit.cli.output import echo_json, emit, output_options
from tracekit.errors import ManifestReadError


@click.group(context_settings=CONTEXT_SETTINGS)
def manifest() -> None:
    """Validate and render extension manifests (Extension Manifest 0.2/0.3, Bundle v1)."""


@manifest.command("validate", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@output_options("result: valid, the rules passed, the problem")
def manifest_validate(path: Path, as_json: bool) -> None:
    """Check PATH against its JSON Schema and the scheduler-policy rules.

    Imports the policy's implementation_ref. Prints one line per passed rule; on the first
    problem prints it (file, JSON pointer, fix) and exits with status 1. A PATH that is missing,
    not a file, or not readable as UTF-8 JSON exits with status 2 (bad input). With --json a
    broken rule is printed as {"valid": false, "problem": ...} (exit 1); bad input stays a
    one-line error.
    """
    try:
        with library_errors(EXIT_FAILED if path.is_file() else EXIT_BAD_INPUT):
            checks = manifests.validate_manifest(path)
    except LibraryError as error:
        if isinstance(error.__cause__, ManifestReadError):
            error.exit_code = EXIT_BAD_INPUT
        if not as_json or error.exit_code != EXIT_FAILED:
            raise
        echo_json({"path": str(path), "valid": False, "checks": [], "problem": error.message})
        raise SystemExit(EXIT_FAILED) from None
    emit(
        as_json,
        lambda: {"path": str(path), "valid": True, "checks": list(checks), "problem": None},
        lambda: "\n".join([*(f"ok {check}" for check in checks), f"{path}: valid"]),
    )


def _key_values(
    ctx: click.Context, param: click.Parameter, items: tuple[str, ...]
) -> dict[str, str]:
    """Parse repeated ``KEY=VALUE`` options into a dictionary."""
    values = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", ctx, param)
        values[key] = value
    return values


@manifest.command("render", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--env",
    "overrides",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_key_values,
    help="Override a variable the manifest declares (repeatable).",
)
@output_options("rendered settings")
def manifest_render(path: Path, overrides: dict[str, str], as_json: bool) -> None:
    """Print the engine arguments, environment and additional_config enabling PATH sets.

    The manifest is validated without importing the policy.
    """
    with library_errors():
        rendered = manifests.render_manifest(path, overrides)
    emit(as_json, rendered.to_dict, rendered.format_text)
