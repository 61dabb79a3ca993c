"""Every tracekit command has help and is documented (README or docs/)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = "\n".join(
    p.read_text("utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        found.append(path)
        if isinstance(command, click.Group):
            found += _commands(command, path)
    return found


COMMANDS = _commands(cli)


def test_the_command_tree_is_what_the_docs_describe() -> None:
    assert {c[0] for c in COMMANDS} == {
        "diff", "experiment", "fidelity", "inspect", "manifest", "qualify", "query", "record",
        "replay", "report", "sweep", "validate",
    }  # fmt: skip


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_help_and_is_documented(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0
    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    assert command.help and len(command.help.strip()) > 20
    assert f"tracekit {' '.join(path)}" in DOCS, f"tracekit {' '.join(path)} is not documented"
