"""What every tracekit command shares: help options and library errors turned into exits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from tracekit.errors import TracekitError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class LibraryError(click.ClickException):
    """A library error shown as one line, with the command's chosen exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def library_errors(exit_code: int = 1) -> Iterator[None]:
    """Turn a ``TracekitError`` into a one-line error and exit with ``exit_code``."""
    try:
        yield
    except TracekitError as error:
        raise LibraryError(str(error), exit_code) from error


trace_argument = click.argument(
    "trace", type=click.Path(exists=False, file_okay=False, path_type=Path)
)
