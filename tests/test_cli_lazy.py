"""The command line imports a command's library only when that command runs.

``tracekit --help`` (and ``record --help``, ``--version``, a mistyped command) in a fresh
interpreter imports click and ``tracekit.cli`` only: no polars, pyarrow, DuckDB, altair, numpy or
engine (docs/index.md, "Conventions"). Every command's and subcommand's own ``--help``, and its
usage errors (an unknown option, a missing argument or required option), import none of them
either: a command module imports its library in the command's body, and its options read only
``tracekit.defaults`` and ``tracekit.engine_options``, whose plain copies of values the library
derives are checked here against the library's. The registry's summaries are the commands' own,
so the listing is what click prints with every command loaded, and every command and subcommand
is registered and prints its ``--help``. The time it saves is measured in
``benchmarks/cli_startup.py``, not here.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import textwrap
import typing

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
    listing_modules = sorted(sys.modules)

    # Then every command's and subcommand's --help and usage errors, in the same interpreter.
    import click
    from tracekit.cli import cli

    def paths(group, prefix):
        found = []
        for name in group.commands:
            command = group.commands[name]
            found.append(((*prefix, name), command))
            if isinstance(command, click.Group):
                found += paths(command, (*prefix, name))
        return found

    helps = {}
    for path, command in paths(cli, ()):
        calls = [["--help"], ["--no-such-option"]]
        if not isinstance(command, click.Group) and any(p.required for p in command.params):
            calls.append([])  # a missing argument or required option
        for extra in calls:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main([*path, *extra])
                except SystemExit as stop:
                    code = stop.code
            helps[" ".join([*path, *extra])] = {"code": code, "out": out.getvalue(),
                                                "err": err.getvalue()}
    print(json.dumps({"runs": runs, "listing_modules": listing_modules, "helps": helps,
                      "modules": sorted(sys.modules)}))
    """
)


@pytest.fixture(scope="module")
def fresh() -> dict:
    """What a fresh interpreter imported and printed for the listing commands."""
    result = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(result.stdout)


def _heavy(modules: list[str]) -> list[str]:
    return [name for name in modules if any(name == h or name.startswith(h + ".") for h in HEAVY)]


def test_help_imports_no_library(fresh: dict) -> None:
    assert _heavy(fresh["listing_modules"]) == []
    # Not one command module either: the listing comes from the registry.
    assert [name for name in fresh["listing_modules"] if name.endswith("_cmd")] == []


def test_every_command_help_and_usage_error_imports_no_library(fresh: dict) -> None:
    helps = fresh["helps"]
    assert "record sim --help" in helps and "experiment run --help" in helps
    assert "latency tables --help" in helps and "manifest render --help" in helps
    for args, run in helps.items():
        if args.endswith("--help"):
            assert run["code"] == 0, (args, run["err"])
            assert run["out"].startswith(f"Usage: tracekit {args.removesuffix(' --help')} ")
        else:
            assert run["code"] == 2, (args, run["out"], run["err"])
            assert "Error: " in run["err"], args
    assert "Missing option '--workload'" in helps["qualify"]["err"]
    assert "No such option '--no-such-option'" in helps["record sim --no-such-option"]["err"]
    # After all of them (every command module loaded), still none of the libraries.
    assert _heavy(fresh["modules"]) == []


def test_light_copies_are_the_librarys() -> None:
    # The option declarations read plain copies of values the library derives; equal here.
    import dataclasses

    from tracekit.cli.options import field_defaults
    from tracekit.defaults import PAPER_MATRIX, PAPER_SLO_TTFT_MS
    from tracekit.engine.clock import COST_MODEL_PRESETS
    from tracekit.engine.config import ENGINE_DEFAULTS, SGLANG_DEFAULTS
    from tracekit.engine_options import (
        COST_MODEL_NAMES,
        SCHEDULING_POLICIES,
        SGLANG_CONFIG_DEFAULTS,
        SGLANG_MODE_DEFAULTS,
        VLLM_MODE_DEFAULTS,
    )
    from tracekit.experiment import MatrixSpec, SloSpec
    from tracekit.hosts.preemption_policy import SchedulingPolicyName
    from tracekit.sglang.protocol import SglangConfig

    assert dict(VLLM_MODE_DEFAULTS) == dict(ENGINE_DEFAULTS)
    assert dict(SGLANG_MODE_DEFAULTS) == dict(SGLANG_DEFAULTS)
    assert tuple(sorted(COST_MODEL_PRESETS)) == COST_MODEL_NAMES
    assert typing.get_args(SchedulingPolicyName) == SCHEDULING_POLICIES
    sglang = SglangConfig()
    fields = {f.name: getattr(sglang, f.name) for f in dataclasses.fields(sglang)}
    assert dict(SGLANG_CONFIG_DEFAULTS) == fields
    matrix = field_defaults(MatrixSpec)
    assert {name: matrix[name] for name in PAPER_MATRIX} == PAPER_MATRIX
    assert SloSpec().ttft_ms == PAPER_SLO_TTFT_MS


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
