"""What every tracekit command shares: help options and library errors turned into exits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from tracekit.errors import TracekitError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

EXIT_FAILED = 1
"""A check ran and failed (validate invalid, diff different, fidelity mismatch, a run failed)."""
EXIT_BAD_INPUT = 2
"""Bad input: a missing or unreadable path, a bad option value, configuration or workload."""


class LibraryError(click.ClickException):
    """A library error shown as one line, with the command's chosen exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def library_errors(exit_code: int = EXIT_BAD_INPUT) -> Iterator[None]:
    """Turn a ``TracekitError`` into a one-line error and exit with ``exit_code``.

    Every command exits with 2 on bad input (a ``TracekitError``); 1 is kept for a check that
    ran and failed, which commands report through their result's ``exit_code``.
    """
    try:
        yield
    except TracekitError as error:
        raise LibraryError(str(error), exit_code) from error


trace_argument = click.argument(
    "trace", type=click.Path(exists=False, file_okay=False, path_type=Path)
)
