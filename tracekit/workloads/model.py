"""The canonical workload table, declared once, and the :class:`Workload` that carries it.

Every loader turns its format into this one table; nothing downstream looks at source formats.

=================  ==============  ===========================================================
column             polars type     meaning
=================  ==============  ===========================================================
request_id         String          unique within the workload
arrival_s          Float64         seconds from the workload start, finite, >= 0, at most
                                   ``MAX_ARRIVAL_S``, and non-decreasing down the table
prompt_tokens      Int64           prompt length in tokens, > 0
output_tokens      Int64           target output length in tokens (the engine generates
                                   exactly this many unless ``max_tokens`` stops it), >= 1
max_tokens         Int64           the request's output cap, >= ``output_tokens``
priority           Int64           scheduling priority (vLLM meaning: lower runs first), 0
                                   unless the source or a seeded assignment sets it
prefix_hash_ids    List(Int64)     optional: Mooncake prefix-block hashes (512 tokens a block);
                                   equal leading ids mark a shareable prompt prefix
cancel_after_s     Float64         optional: a recorded client cancel, in seconds after the
                                   request was sent (finite, > 0); null: never cancelled
ignore_eos         Boolean         optional: the client's ``ignore_eos`` sampling parameter
                                   (SGLang ``bench_serving``'s default, ``vllm bench serve
                                   --ignore-eos``): the request runs to ``max_tokens``, so
                                   ``output_tokens`` equals ``max_tokens`` where it is true
=================  ==============  ===========================================================
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from tracekit.workloads._errors import describe_value, workload_error
from tracekit.workloads._readers import file_sha256

__all__ = [
    "CANCEL_AFTER_S",
    "IGNORE_EOS",
    "MAX_ARRIVAL_S",
    "OPTIONAL_SCHEMA",
    "PREFIX_HASH_IDS",
    "REQUIRED_SCHEMA",
    "Workload",
    "WorkloadRequest",
    "assemble_workload",
    "canonical_columns",
    "check_workload_frame",
    "workload_schema",
]

#: The latest arrival a workload may have: 10 million seconds (about 116 days). Real traces span
#: hours; an arrival beyond this is a unit mistake (milliseconds read as seconds) or a rate scale
#: near zero, and would stall the engine clock for ever in a run that nobody can wait for.
MAX_ARRIVAL_S = 1e7

#: The columns every workload table has, in this order.
REQUIRED_SCHEMA: pl.Schema = pl.Schema(
    [
        ("request_id", pl.String),
        ("arrival_s", pl.Float64),
        ("prompt_tokens", pl.Int64),
        ("output_tokens", pl.Int64),
        ("max_tokens", pl.Int64),
        ("priority", pl.Int64),
    ]
)

#: Name of the optional prefix-hash column.
PREFIX_HASH_IDS = "prefix_hash_ids"

#: Name of the optional recorded-cancel column: seconds after sending at which the client
#: cancels the request if it has not finished (null: never). Relative to the sending time, so
#: it survives windowing, rate scaling, re-ordering and generated arrivals unchanged.
CANCEL_AFTER_S = "cancel_after_s"

#: Name of the optional ``ignore_eos`` column: the request ignores the end of sequence and
#: generates ``max_tokens`` tokens (SGLang also reserves its whole output on admission).
IGNORE_EOS = "ignore_eos"

#: Columns a workload table may add after the required ones, in this order.
OPTIONAL_SCHEMA: pl.Schema = pl.Schema(
    [(PREFIX_HASH_IDS, pl.List(pl.Int64)), (CANCEL_AFTER_S, pl.Float64), (IGNORE_EOS, pl.Boolean)]
)


def workload_schema(
    *, prefix_hash_ids: bool = False, cancel_after_s: bool = False, ignore_eos: bool = False
) -> pl.Schema:
    """Return the canonical schema, with or without the optional columns.

    Parameters
    ----------
    prefix_hash_ids
        Include ``prefix_hash_ids`` (Mooncake workloads, or tables that carry it).
    cancel_after_s
        Include ``cancel_after_s`` (workloads with recorded client cancels).
    ignore_eos
        Include ``ignore_eos`` (requests sent with that sampling parameter).

    Returns
    -------
    pl.Schema
        Column names and polars types, in table order.

    Examples
    --------
    >>> workload_schema().names()
    ['request_id', 'arrival_s', 'prompt_tokens', 'output_tokens', 'max_tokens', 'priority']
    """
    wanted = {
        PREFIX_HASH_IDS: prefix_hash_ids,
        CANCEL_AFTER_S: cancel_after_s,
        IGNORE_EOS: ignore_eos,
    }
    optional = [(name, dtype) for name, dtype in OPTIONAL_SCHEMA.items() if wanted[name]]
    return pl.Schema([*REQUIRED_SCHEMA.items(), *optional])


class WorkloadRequest(NamedTuple):
    """One request of a workload, as yielded by :meth:`Workload.iter_requests`."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    priority: int
    prefix_hash_ids: tuple[int, ...] | None
    cancel_after_s: float | None = None
    ignore_eos: bool = False


def canonical_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s workload columns in the table's order (optional ones where they belong).

    For a rule that adds or replaces an optional column: ``with_columns`` and joins append it.
    """
    schema = workload_schema(
        prefix_hash_ids=PREFIX_HASH_IDS in frame.columns,
        cancel_after_s=CANCEL_AFTER_S in frame.columns,
        ignore_eos=IGNORE_EOS in frame.columns,
    )
    return frame.select(schema.names())


def _first_bad(frame: pl.DataFrame, predicate: pl.Expr) -> Mapping[str, Any] | None:
    bad = frame.filter(predicate.fill_null(True))
    return bad.row(0, named=True) if bad.height else None


def _check_rules(
    frame: pl.DataFrame, source: str | Path, rules: list[tuple[str, pl.Expr, str]]
) -> None:
    """Raise for the first request that breaks a rule ``(column, ok, expected)``, in rule order."""
    for column, ok, wanted in rules:
        row = _first_bad(frame, ~ok)
        if row is not None:
            raise workload_error(
                source,
                where=f"request {row['request_id']!r}",
                field=column,
                expected=wanted,
                found=describe_value(row[column]),
                fix="correct that request in the source file",
            )


def check_workload_frame(frame: pl.DataFrame, source: str | Path) -> None:
    """Raise a :class:`~tracekit.errors.WorkloadError` unless ``frame`` is a valid workload table.

    Checks the column names and types against :func:`workload_schema`, then the value rules of
    the module docstring (no nulls, positive lengths, ``max_tokens >= output_tokens``, finite
    non-negative sorted arrivals, unique request ids, at least one request).

    Parameters
    ----------
    frame
        The candidate table.
    source
        The workload file, named in error messages.
    """
    with_prefix = PREFIX_HASH_IDS in frame.columns
    with_cancel = CANCEL_AFTER_S in frame.columns
    with_ignore_eos = IGNORE_EOS in frame.columns
    expected = workload_schema(
        prefix_hash_ids=with_prefix, cancel_after_s=with_cancel, ignore_eos=with_ignore_eos
    )
    if frame.schema != expected:
        found = ", ".join(f"{name}: {dtype}" for name, dtype in frame.schema.items())
        want = ", ".join(f"{name}: {dtype}" for name, dtype in expected.items())
        raise workload_error(
            source,
            expected=f"workload columns ({want})",
            found=f"({found})",
            fix="build the table with tracekit.workloads.workload_schema()",
        )
    if frame.height == 0:
        raise workload_error(
            source,
            expected="at least one request",
            found="an empty workload",
            fix="load a file that contains requests, or widen the window",
        )
    rules: list[tuple[str, pl.Expr, str]] = [
        ("request_id", pl.col("request_id").is_not_null(), "a request id"),
        (
            "arrival_s",
            pl.col("arrival_s").is_finite() & (pl.col("arrival_s") >= 0),
            "a finite number of seconds >= 0",
        ),
        ("prompt_tokens", pl.col("prompt_tokens") > 0, "an integer > 0"),
        ("output_tokens", pl.col("output_tokens") >= 1, "an integer >= 1"),
        (
            "max_tokens",
            pl.col("max_tokens") >= pl.col("output_tokens"),
            "an integer >= output_tokens",
        ),
        ("priority", pl.col("priority").is_not_null(), "an integer"),
    ]
    _check_rules(frame, source, rules)
    late = _first_bad(frame, pl.col("arrival_s") > MAX_ARRIVAL_S)
    if late is not None:
        raise workload_error(
            source,
            where=f"request {late['request_id']!r}",
            field="arrival_s",
            expected=f"an arrival within {MAX_ARRIVAL_S:g} s of the workload start",
            found=describe_value(late["arrival_s"]),
            fix="check the arrival column's time unit, or use a larger --rate-scale",
        )
    optional: list[tuple[str, pl.Expr, str]] = []
    if with_prefix:
        nonempty = pl.col(PREFIX_HASH_IDS).list.len() != 0
        optional.append((PREFIX_HASH_IDS, nonempty, "a non-empty list of integers"))
    if with_cancel:
        cancel = pl.col(CANCEL_AFTER_S)
        optional.append(
            (
                CANCEL_AFTER_S,
                cancel.is_null() | (cancel.is_finite() & (cancel > 0)),
                "a finite number of seconds > 0, or empty for no cancel",
            )
        )
    if with_ignore_eos:
        optional.append((IGNORE_EOS, pl.col(IGNORE_EOS).is_not_null(), "true or false"))
    _check_rules(frame, source, optional)
    if with_ignore_eos:
        flag = pl.col(IGNORE_EOS)
        row = _first_bad(frame, flag & (pl.col("output_tokens") != pl.col("max_tokens")))
        if row is not None:
            raise workload_error(
                source,
                where=f"request {row['request_id']!r}",
                field="output_tokens",
                expected=f"max_tokens ({row['max_tokens']}): a request that ignores the end of "
                "sequence generates max_tokens tokens",
                found=describe_value(row["output_tokens"]),
                fix="set output_tokens to max_tokens on ignore_eos rows "
                "(tracekit.workloads.apply_ignore_eos does)",
            )
    if not frame.get_column("arrival_s").is_sorted():
        raise workload_error(
            source,
            field="arrival_s",
            expected="rows sorted by arrival time",
            found="an unsorted table",
            fix="sort the table by arrival_s (the loaders do this)",
        )
    duplicated = frame.filter(pl.col("request_id").is_duplicated())
    if duplicated.height:
        raise workload_error(
            source,
            field="request_id",
            expected="unique request ids",
            found=f"{duplicated.get_column('request_id')[0]!r} more than once",
            fix="give every request its own id",
        )


# eq=False: identity equality and hashing. Value equality would have to compare frames, which
# polars does element-wise; compare ``workload.frame`` with ``DataFrame.equals`` instead.
@dataclass(frozen=True, eq=False)
class Workload:
    """A loaded workload: the canonical request table plus where it came from.

    Construction checks ``frame`` with :func:`check_workload_frame`, so every instance holds a
    valid table. Instances are immutable; derive new ones with :func:`dataclasses.replace`.

    Parameters
    ----------
    name
        Short name (the file stem, or the name the file declares).
    source
        The file the requests were read from.
    sha256
        SHA-256 of the source file's bytes, so results can be tied to the exact input.
    format
        The detected or requested format name (a :class:`~tracekit.workloads.WorkloadFormat`
        value).
    options
        Every option that shaped the table (loader options, seeds, window, limit, ...), with
        JSON-compatible values, so a run can be reproduced from its record.
    frame
        The canonical table (see the module docstring), sorted by ``arrival_s``.
    """

    name: str
    source: Path
    sha256: str
    format: str
    options: dict[str, Any]
    frame: pl.DataFrame = field(repr=False)

    def __post_init__(self) -> None:
        check_workload_frame(self.frame, self.source)

    @property
    def num_requests(self) -> int:
        """Number of requests in the workload."""
        return self.frame.height

    @property
    def duration_s(self) -> float:
        """Arrival time of the last request, in seconds from the workload start."""
        return float(self.frame.get_column("arrival_s").max())  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        """Where the requests came from, as recorded in manifests (JSON-compatible)."""
        return {
            "name": self.name,
            "source": str(self.source),
            "sha256": self.sha256,
            "format": self.format,
            "options": self.options,
            "num_requests": self.num_requests,
        }

    def iter_requests(self) -> Iterator[WorkloadRequest]:
        """Yield the requests one by one, in arrival order.

        Yields
        ------
        WorkloadRequest
            One per table row; ``prefix_hash_ids`` is a tuple, or ``None`` when the workload
            has no such column; ``cancel_after_s`` is ``None`` without a column or a value;
            ``ignore_eos`` is False without a column.
        """
        columns = self.frame.columns
        prefix_at = columns.index(PREFIX_HASH_IDS) if PREFIX_HASH_IDS in columns else None
        cancel_at = columns.index(CANCEL_AFTER_S) if CANCEL_AFTER_S in columns else None
        eos_at = columns.index(IGNORE_EOS) if IGNORE_EOS in columns else None
        # The engine consumes requests one at a time, so this is the one place rows are iterated.
        for row in self.frame.iter_rows():
            prefix = tuple(row[prefix_at]) if prefix_at is not None else None
            cancel = row[cancel_at] if cancel_at is not None else None
            ignore_eos = bool(row[eos_at]) if eos_at is not None else False
            yield WorkloadRequest(
                row[0], row[1], row[2], row[3], row[4], row[5], prefix, cancel, ignore_eos
            )


def assemble_workload(
    path: Path,
    *,
    format: str,
    frame: pl.DataFrame,
    options: Mapping[str, Any],
    name: str | None = None,
) -> Workload:
    """Sort a loader's canonical columns by arrival, cast them and wrap them in a Workload.

    Parameters
    ----------
    path
        The source file (hashed here).
    format
        The format name to record.
    frame
        A frame holding at least the required canonical columns (extra columns are dropped;
        ``prefix_hash_ids``, ``cancel_after_s`` and ``ignore_eos`` are kept when present).
    options
        The options to record.
    name
        The workload name; defaults to the file stem.

    Returns
    -------
    Workload
        The checked workload.
    """
    schema = workload_schema(
        prefix_hash_ids=PREFIX_HASH_IDS in frame.columns,
        cancel_after_s=CANCEL_AFTER_S in frame.columns,
        ignore_eos=IGNORE_EOS in frame.columns,
    )
    canonical = frame.select(
        pl.col(column).cast(dtype, strict=True) for column, dtype in schema.items()
    ).sort("arrival_s", maintain_order=True)
    return Workload(
        name=name or path.stem,
        source=path,
        sha256=file_sha256(path),
        format=format,
        options=dict(options),
        frame=canonical,
    )
