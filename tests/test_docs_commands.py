"""The docs and the click CLI agree: what the docs run exists, and every command is documented.

The documented invocations are parsed out of README.md and docs/*.md: every line of a fenced code
block that runs ``tracekit`` (after a ``$`` prompt, a ``&&`` or as ``.venv/bin/tracekit``), and
every inline code span that starts with ``tracekit ``. Each is resolved through the click command
tree by introspection, so a renamed command or a removed option makes this file fail.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(tracekit [^`\n]+)`")


@dataclass(frozen=True)
class Invocation:
    where: str  # file:line
    words: tuple[str, ...]  # the words after "tracekit"


def _words_after_tracekit(line: str) -> list[tuple[str, ...]]:
    """The argument lists of every ``tracekit`` run in one shell line (comments dropped)."""
    found = []
    for part in re.split(r"&&|\|\||;|\|(?![\w-])", line):
        part = part.strip().removeprefix("$").strip()
        try:
            words = shlex.split(part, comments=True)
        except ValueError:  # an unbalanced quote is prose, not a command
            continue
        if words and (words[0] == "tracekit" or words[0].endswith("/tracekit")):
            found.append(tuple(words[1:]))
    return found


def documented_invocations() -> list[Invocation]:
    found = []
    for path in DOC_FILES:
        text = path.read_text("utf-8")
        for block in FENCE.finditer(text):
            first_line = text.count("\n", 0, block.start(1)) + 1
            joined, start = "", first_line
            for offset, line in enumerate(block.group(1).split("\n")):
                if not joined:
                    start = first_line + offset
                if line.endswith("\\"):  # a trailing backslash continues the command
                    joined += line[:-1] + " "
                    continue
                for words in _words_after_tracekit(joined + line):
                    # "tracekit diff: different: ..." is the command's printed output.
                    if words and not words[0].endswith(":"):
                        found.append(Invocation(f"{path.name}:{start}", words))
                joined = ""
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for span in INLINE.finditer(prose):
            line = prose.count("\n", 0, span.start()) + 1
            found.append(Invocation(f"{path.name}:{line}", tuple(shlex.split(span.group(1))[1:])))
    return found


def resolve(words: tuple[str, ...]) -> tuple[tuple[str, ...], click.Command, list[str]]:
    """Walk ``words`` down the command tree: the command path, the command, and the options used.

    Raises
    ------
    LookupError
        When a word where a subcommand is expected names none.
    """
    command: click.Command = cli
    path: list[str] = []
    rest = list(words)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        if name not in command.commands:
            raise LookupError(f"no command {' '.join([*path, name])!r}")
        command = command.commands[name]
        path.append(name)
    options = []
    for word in rest:
        word = word.strip("[]")  # usage lines write optional flags as [--host typed|legacy]
        if word.startswith("--") or re.fullmatch(r"-[A-Za-z]", word):
            options.append(word.split("=", 1)[0])
    return tuple(path), command, options


def _option_names(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    return names


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        found.append(path)
        if isinstance(command, click.Group):
            found += _commands(command, path)
    return found


INVOCATIONS = documented_invocations()
COMMANDS = _commands(cli)


def test_the_docs_are_parsed() -> None:
    # A floor, so that a parser that silently finds nothing cannot pass the tests below:
    # the README's quick tour alone runs eleven commands.
    assert len(INVOCATIONS) > 40
    readme = {inv.words[:2] for inv in INVOCATIONS if inv.where.startswith("README.md")}
    assert {("record", "sim"), ("replay", "runs/typed"), ("manifest", "validate")} <= readme


@pytest.mark.parametrize("invocation", INVOCATIONS, ids=lambda i: i.where)
def test_every_documented_command_and_option_exists(invocation: Invocation) -> None:
    try:
        path, command, options = resolve(invocation.words)
    except LookupError as error:
        pytest.fail(f"{invocation.where}: tracekit {' '.join(invocation.words)}: {error}")
    assert path, f"{invocation.where}: names no command"
    unknown = sorted(set(options) - _option_names(command))
    assert unknown == [], f"{invocation.where}: tracekit {' '.join(path)} has no {unknown}"


def test_resolve_rejects_what_the_cli_does_not_have() -> None:
    # The checker itself can fail: a wrong subcommand raises, a wrong option is reported.
    with pytest.raises(LookupError, match="no command 'record nope'"):
        resolve(("record", "nope", "--out", "x"))
    path, command, options = resolve(("sweep", "m.toml", "[--jobs", "2]", "--dry-run", "--nope=1"))
    assert path == ("sweep",)
    assert set(options) - _option_names(command) == {"--nope"}


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_cli_command_has_help_and_is_documented(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    short = CliRunner().invoke(cli, [*path, "-h"], catch_exceptions=False)
    assert (short.exit_code, short.output) == (0, result.output)
    assert result.output.startswith(f"Usage: cli {' '.join(path)} ") or result.output.startswith(
        f"Usage: tracekit {' '.join(path)} "
    )
    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    assert command.help and len(command.help.strip()) > 20
    documented = set()
    for invocation in INVOCATIONS:
        try:
            found = resolve(invocation.words)[0]
            documented.update(found[:n] for n in range(1, len(found) + 1))
        except LookupError:
            continue
    assert path in documented, f"tracekit {' '.join(path)} is run or named in no doc"
