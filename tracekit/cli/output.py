"""What commands print: one ``--json`` option and one renderer for JSON, text tables and frames.

Every command that can print JSON takes :func:`output_options` (in the manner of sqlite-utils'
``output_options``) and prints through :func:`emit`; tables go through
:func:`tracekit.trace.text.text_table` (polars' table formatter), data frames through
:func:`echo_frame`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    import polars as pl

    from tracekit.trace.query import OutputFormat
    from tracekit.trace.text import Align

__all__ = ["echo_frame", "echo_json", "echo_table", "emit", "output_options"]

F = TypeVar("F", bound=Callable[..., Any])


def output_options(what: str) -> Callable[[F], F]:
    """Add ``--json`` (parameter ``as_json``): print ``what`` as JSON instead of text."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print the {what} as JSON.")


def echo_json(payload: Any) -> None:
    """Print ``payload`` as indented JSON (values JSON cannot hold are printed as strings)."""
    click.echo(json.dumps(payload, indent=2, default=str))


def emit(as_json: bool, payload: Callable[[], Any], text: Callable[[], str]) -> None:
    """Print ``payload()`` as JSON when ``as_json``, otherwise ``text()``."""
    if as_json:
        echo_json(payload())
    else:
        click.echo(text())


def echo_table(rows: Sequence[Sequence[str]], *, align: Align | Sequence[Align] = "left") -> None:
    """Print ``rows`` as a plain text table (see :func:`tracekit.trace.text.text_table`)."""
    from tracekit.trace.text import text_table

    for line in text_table(rows, align=align):
        click.echo(line.rstrip())


def echo_frame(frame: pl.DataFrame, fmt: OutputFormat = "table") -> None:
    """Print a data frame as a polars table, CSV or JSON (the formats of ``tracekit query``)."""
    from tracekit.trace.query import write_query_result

    text = write_query_result(frame, fmt, None) or ""
    click.echo(text, nl=not text.endswith("\n"))
