"""``tracekit validate``, ``inspect`` and ``query``: checking and reading traces."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, trace_argument
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import Choice


@click.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@output_options("report")
def validate(trace: Path, as_json: bool) -> None:
    """Check every bundle of TRACE against the schema and the trace invariants.

    Exit status: 0 valid, 1 an invariant fails, 2 malformed or unreadable input (a manifest
    field of the wrong type, a table that is gone, a missing, unknown or mistyped column), 3
    truncated (a recording that never finished: what was flushed is readable).
    """
    from tracekit.trace.text import text_table
    from tracekit.trace.validate import validate_trace

    with library_errors():
        report = validate_trace(trace)
    bundles = report.bundles

    def text() -> str:
        rows = [(b.status, f"{b.path} ({b.run_id})") for b in bundles]
        lines = []
        for line, bundle in zip(text_table(rows), bundles, strict=True):
            lines.append(line.rstrip())
            lines.extend(f"  - {problem}" for problem in bundle.problems)
        return "\n".join(lines)

    payload = [
        {"path": str(b.path), "run_id": b.run_id, "status": b.status, "rows": b.rows,
         "problems": b.problems}
        for b in bundles
    ]  # fmt: skip
    emit(as_json, lambda: payload, text)
    raise SystemExit(report.exit_code)


@click.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@output_options("summary")
def inspect(trace: Path, as_json: bool) -> None:
    """Summarise TRACE: runs, decisions by outcome, preemptions per request, KV pressure."""
    from tracekit.trace.inspect import inspect_trace, render_inspection

    with library_errors():
        summaries = inspect_trace(trace)
    emit(as_json, lambda: summaries, lambda: render_inspection(summaries))


@click.command(context_settings=CONTEXT_SETTINGS)
@trace_argument
@click.argument("sql")
@click.option(
    "--format",
    "fmt",
    type=Choice(["table", "csv", "json", "parquet"]),
    default="table",
    show_default=True,
)
@out_option(folder=False, default=None)
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
def query(trace: Path, sql: str, fmt: str, out: Path | None, overwrite: bool) -> None:
    """Run a read-only SQL SELECT over TRACE with DuckDB.

    Views: requests, decisions, candidates, steps, scheduled (each across every bundle of the
    dataset) and runs (one row per manifest). --out never writes inside TRACE.
    """
    from tracekit.trace.query import check_output, run_query, write_query_result

    with library_errors():
        if out is not None:
            check_output(out, trace, overwrite)
        frame = run_query(trace, sql)
        text = write_query_result(frame, fmt, out, overwrite)  # type: ignore[arg-type]
    if text is not None:
        click.echo(text, nl=not text.endswith("\n"))
