"""A click group whose commands are imported only when one runs (click's lazy-group pattern).

A command module imports its library (polars, DuckDB, altair, the engine) only in the command's
body, so that its own ``--help`` imports none of it; the group names each command by
``module:attribute`` and imports that module only when the command is looked up. Listing the
commands (``tracekit --help``) needs each one's one-line summary without the import, so the
registry carries it, in the manner of pip's ``commands_dict``; ``tests/test_cli_lazy.py``
checks that every summary is the loaded command's own help.

The group's ``commands`` is a :class:`LazyCommands` mapping, which click accepts in place of a
dict: names and membership come from the registry, and looking a command up imports it. Click's
own lookup, listing, "Did you mean" and every reader of ``group.commands`` work unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import click

__all__ = ["LazyCommand", "LazyCommands", "LazyGroup"]


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command lives and what ``--help`` of its group says about it.

    Parameters
    ----------
    target
        ``"package.module:attribute"``, the click command object.
    summary
        The first paragraph of the command's help (what the group's listing shortens).
    """

    target: str
    summary: str

    def load(self) -> click.Command:
        """Import the command's module and return the command."""
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is a {type(command).__name__}, not a click command")
        return command


class LazyCommands(MutableMapping[str, click.Command]):
    """Command name -> command, each imported from its :class:`LazyCommand` on first look-up.

    Membership, iteration and ``len`` never import; ``commands[name]`` (and ``get``,
    ``values``, ``items``) does, once per command. Commands added directly are kept as given.
    """

    def __init__(self, registry: Mapping[str, LazyCommand]) -> None:
        self._registry = dict(registry)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            self._loaded[name] = self._registry[name].load()  # KeyError: no such command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._registry.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._registry

    def __iter__(self) -> Iterator[str]:
        return iter({**self._registry, **self._loaded})

    def __len__(self) -> int:
        return len({**self._registry, **self._loaded})

    def listed(self, name: str) -> click.Command:
        """The command if it is loaded, else a stand-in carrying its summary (no import)."""
        if name in self._loaded:
            return self._loaded[name]
        return click.Command(name, help=self._registry[name].summary)


class LazyGroup(click.Group):
    """A group of ``lazy_commands``, each imported when it is looked up.

    Parameters
    ----------
    lazy_commands
        Command name -> :class:`LazyCommand`; commands added later (``add_command``) are
        eager, as in any click group.
    """

    commands: LazyCommands

    def __init__(self, *args: Any, lazy_commands: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, commands=LazyCommands(lazy_commands), **kwargs)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing of ``--help`` from the summaries, so that it imports no command module.

        The layout is click's own (``click.Group.format_commands``): the same column width and
        the same shortening of each summary.
        """
        listed = [(name, self.commands.listed(name)) for name in self.list_commands(ctx)]
        shown = [(name, command) for name, command in listed if not command.hidden]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows = [(name, command.get_short_help_str(limit)) for name, command in shown]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
