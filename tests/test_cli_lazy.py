"""The command line imports a command's library only when that command runs.

``tracekit --help`` (and ``record --help``, ``--version``, a mistyped command) in a fresh
interpreter imports click and ``tracekit.cli`` only: no polars, pyarrow, DuckDB, altair, numpy or
engine (docs/index.md, "Conventions"). The registry's summaries are the commands' own, so the
listing is what click prints with every command loaded, and every command and subcommand is
registered and prints its ``--help``. The time it saves is measured in
``benchmarks/cli_startup.py``, not here.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import textwrap

import click
import pytest
from click.testing import CliRunner

import tracekit.cli
from tracekit.cli import COMMANDS, RECORD_COMMANDS, cli
from tracekit.cli.lazy import LazyCommand, LazyGroup

HEAVY = ("polars", "pyarrow", "duckdb", "altair", "numpy", "pandas", "tracekit.engine")

FRESH = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from tracekit.__main__ import main

    runs = {}
    for args in (["--help"], ["record", "--help"], ["--version"], ["qualfy"], ["record", "simm"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as stop:
                code = stop.code
        runs[" ".join(args)] = {"code": code, "out": out.getvalue(), "err": err.getvalue()}
    print(json.dumps({"runs": runs, "modules": sorted(sys.modules)}))
    """
)


@pytest.fixture(scope="module")
def fresh() -> dict:
    """What a fresh interpreter imported and printed for the listing commands."""
    result = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(result.stdout)


def test_help_imports_no_library(fresh: dict) -> None:
    heavy = [
        name
        for name in fresh["modules"]
        if any(name == h or name.startswith(h + ".") for h in HEAVY)
    ]
    assert heavy == []
    # Not one command module either: the listing comes from the registry.
    assert [name for name in fresh["modules"] if name.endswith("_cmd")] == []


def test_listing_commands_work_without_their_modules(fresh: dict) -> None:
    runs = fresh["runs"]
    assert runs["--help"]["code"] == 0
    for name in COMMANDS:
        assert f"\n  {name} " in runs["--help"]["out"]
    assert runs["record --help"]["code"] == 0
    for name in RECORD_COMMANDS:
        assert f"\n  {name} " in runs["record --help"]["out"]
    assert runs["--version"]["code"] == 0
    assert runs["--version"]["out"].startswith("tracekit, version ")
    # A mistyped command is a usage error (2) suggesting the command it resembles, loaded or not.
    assert runs["qualfy"]["code"] == 2
    assert "No such command 'qualfy'. Did you mean 'qualify'?" in runs["qualfy"]["err"]
    assert runs["record simm"]["code"] == 2
    assert "Did you mean 'sim'?" in runs["record simm"]["err"]


def _eager_listing(group: click.Group, width: int) -> str:
    """The commands section click itself prints for ``group`` with every command loaded."""
    ctx = click.Context(group, info_name=group.name, terminal_width=width)
    commands = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}
    eager = click.Group(group.name, commands=commands)
    formatter = ctx.make_formatter()
    eager.format_commands(ctx, formatter)
    return formatter.getvalue()


@pytest.mark.parametrize("width", [50, 80, 120, 250])
@pytest.mark.parametrize("group_name", ["tracekit", "record"])
def test_listing_is_clicks_own(
    width: int, group_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = cli.get_command(click.Context(cli), "record")
    assert isinstance(record, click.Group)
    # A fresh group built as ``cli`` is, whose commands cannot be imported...
    if group_name == "record":
        real, lazy = record, LazyGroup("record", lazy_commands=RECORD_COMMANDS)
    else:
        real, lazy = cli, LazyGroup("tracekit", lazy_commands=COMMANDS)
        lazy.add_command(LazyGroup("record", help=record.help, lazy_commands=RECORD_COMMANDS))
    expected = _eager_listing(real, width)

    def refuse(self: LazyCommand) -> click.Command:
        raise AssertionError(f"the listing imported {self.target}")

    monkeypatch.setattr(LazyCommand, "load", refuse)
    ctx = click.Context(lazy, info_name=group_name, terminal_width=width)
    formatter = ctx.make_formatter()
    lazy.format_commands(ctx, formatter)
    # ...lists exactly what click itself prints with every command loaded.
    assert formatter.getvalue() == expected


def test_summaries_are_the_commands_first_paragraph() -> None:
    ctx = click.Context(cli)
    for registry, group in ((COMMANDS, cli), (RECORD_COMMANDS, cli.get_command(ctx, "record"))):
        assert isinstance(group, click.Group)
        for name, entry in registry.items():
            command = group.get_command(ctx, name)
            assert command is not None and command.name == name
            first = (command.help or "").split("\n\n")[0]
            assert " ".join(first.split()) == entry.summary, name


def _every_path(group: click.Group, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    ctx = click.Context(group)
    paths = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, (*prefix, name)
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths += _every_path(command, (*prefix, name))
    return paths


def test_every_command_module_command_is_registered() -> None:
    # A command defined in a cli module but missing from the registry would silently vanish.
    reachable = set()

    def walk(group: click.Group) -> None:
        for command in group.commands.values():
            reachable.add(id(command))
            if isinstance(command, click.Group):
                walk(command)

    _every_path(cli, ())  # loads every command
    walk(cli)
    for info in pkgutil.iter_modules(tracekit.cli.__path__):
        module = importlib.import_module(f"tracekit.cli.{info.name}")
        for attribute, value in vars(module).items():
            callback = getattr(value, "callback", None)
            if isinstance(value, click.Command) and callback.__module__ == module.__name__:
                assert id(value) in reachable or value is cli, f"{info.name}.{attribute}"


def test_every_command_prints_its_help() -> None:
    runner = CliRunner()
    paths = _every_path(cli, ())
    assert ("record", "vllm") in paths and ("experiment", "run") in paths and len(paths) >= 27
    for path in paths:
        result = runner.invoke(cli, [*path, "--help"], prog_name="tracekit")
        assert result.exit_code == 0, (path, result.output)
        assert result.output.startswith(f"Usage: tracekit {' '.join(path)} "), path
