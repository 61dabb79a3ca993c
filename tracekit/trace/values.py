"""What a trace's values may be: the row rules that ``validate`` and every reader check.

One rule set, two passes (docs/trace-format.md, "Validation"):

- ``tracekit validate`` applies :func:`row_rules` to each batch of rows it streams, and reports
  every rule broken (exit 1).
- Readers (``inspect``, ``replay``, ``oracle``, ``diff``, ``fidelity``, ``calibrate``, the
  output gate) call :func:`check_values` on the tables and columns they read before they use
  them: one lazy polars query per table, every rule an aggregation of one scan, and the first
  rule broken is a one-line :class:`~tracekit.errors.TraceSchemaError` (exit 2).

A rule only looks at one row: nulls in columns that may not be null, NaN and infinite floats,
negative counts and times, and values no run can hold (:data:`MAX_COUNT`, :data:`MAX_TIME_S`,
:data:`MAX_PRIORITY`), plus the few relations between the columns of one row (the KV usage is
in [0, 1], a candidate's exclusive blocks are at most its held blocks, the applied victim
agrees with the outcome, ...). Rules between rows (order, counters, the candidates of a
decision) stay in :mod:`tracekit.trace.validate`.

The manifest's numbers have rules too (:func:`manifest_number_problems`): the engine
configuration's sizes are whole numbers >= 1 (a KV cache of -1 blocks, or blocks of 0 tokens,
describe no engine).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.defaults import MAX_COUNT, MAX_TIME_S
from tracekit.errors import TraceSchemaError
from tracekit.trace.bundle import MANIFEST, Bundle
from tracekit.trace.schema import TableSpec, trace_schema

__all__ = [
    "ALL_COLUMNS",
    "CALLED",
    "MAX_COUNT",
    "MAX_PRIORITY",
    "MAX_TIME_S",
    "OUTCOMES",
    "Reads",
    "Rule",
    "block_size",
    "check_values",
    "manifest_number_problems",
    "row_rules",
]

OUTCOMES = ("selected", "abstained", "invalid", "exception", "disabled", "builtin")
# Outcomes that mean the controller called the policy (disabled/builtin do not;
# docs/trace-format.md, "Outcomes and counters").
CALLED = ("selected", "abstained", "invalid", "exception")

#: Largest priority magnitude: 2**53, the integers a float64 holds exactly (policies compute
#: with priorities as floats). vLLM priorities are any integer, negative ones included.
MAX_PRIORITY = 2**53

# Integer columns that may be negative; every other integer column counts or indexes something.
SIGNED = frozenset({"priority"})
# Integer columns with a sentinel below 0: live recorders and imports cannot see the scheduler
# step, and store -1.
FLOORS = {("decisions", "step"): -1}
# Times measured from the start of the run, so never negative.
NON_NEGATIVE_TIMES = {
    "requests": ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s"),
    "decisions": ("time_s",),
    "steps": ("time_s", "duration_s"),
    "admissions": ("time_s",),
}
# The column that locates an offending row in a message.
KEYS = {
    "requests": "request_id",
    "decisions": "seq",
    "candidates": "seq",
    "steps": "step",
    "scheduled": "step",
    "admissions": "request_id",
}
RERECORD = "re-record the bundle"

#: What a reader reads: table name -> its columns, or :data:`ALL_COLUMNS` for all of them.
Reads = Mapping[str, Collection[str] | None]
#: A table read whole (every rule of the table applies).
ALL_COLUMNS = None


@dataclass(frozen=True, slots=True)
class Rule:
    """One row rule of a table: a row breaks it where ``bad`` is true.

    Attributes
    ----------
    table
        The table's name.
    columns
        The columns ``bad`` reads (a reader that reads none of them skips the rule).
    message
        What is wrong, naming the table and column (``"requests.arrival_s is negative"``).
    bad
        A boolean polars expression over one row; null counts as not broken.
    """

    table: str
    columns: tuple[str, ...]
    message: str
    bad: pl.Expr


def _column_rules(table: str, column: str, kind: str, nullable: bool) -> Iterator[Rule]:
    col = pl.col(column)
    name = f"{table}.{column}"
    if not nullable:
        yield Rule(table, (column,), f"{name} is null", col.is_null())
    if kind == "float64":
        yield Rule(table, (column,), f"{name} is NaN or infinite", ~col.is_finite())
        finite = col.is_finite()
        if column in NON_NEGATIVE_TIMES.get(table, ()):
            yield Rule(table, (column,), f"{name} is negative", finite & (col < 0))
        if column != "kv_usage":
            yield Rule(
                table,
                (column,),
                f"{name} is beyond {MAX_TIME_S:g} s in magnitude (317 years: no run's time)",
                finite & (col.abs() > MAX_TIME_S),
            )
    elif kind == "int64":
        if column in SIGNED:
            yield Rule(
                table,
                (column,),
                f"{name} is beyond 2**53 in magnitude (a float cannot hold it exactly)",
                col.abs() > MAX_PRIORITY,
            )
            return
        floor = FLOORS.get((table, column), 0)
        below = "is negative" if floor == 0 else f"is below {floor}"
        yield Rule(table, (column,), f"{name} {below}", col < floor)
        yield Rule(
            table,
            (column,),
            f"{name} is above 2**40 = {MAX_COUNT} (no run counts that high)",
            col > MAX_COUNT,
        )


def _relation_rules(spec: TableSpec, block_size: int | None) -> Iterator[Rule]:
    """Rules between the columns of one row of ``spec``'s table."""
    names = set(spec.column_names)
    table = spec.name
    if table == "requests":
        yield Rule(
            table,
            ("prompt_tokens",),
            "requests.prompt_tokens is not positive",
            pl.col("prompt_tokens") <= 0,
        )
        if "num_cached_tokens" in names:
            # vLLM caps a hit at num_tokens - 1: the first schedule computes the last prompt
            # token.
            yield Rule(
                table,
                ("num_cached_tokens", "prompt_tokens"),
                "requests.num_cached_tokens is not below prompt_tokens",
                pl.col("num_cached_tokens") >= pl.col("prompt_tokens"),
            )
    elif table == "decisions":
        yield Rule(
            table,
            ("outcome",),
            f"decisions.outcome is not one of {', '.join(OUTCOMES)}",
            ~pl.col("outcome").is_in(OUTCOMES),
        )
        kv = pl.col("kv_usage")
        yield Rule(
            table,
            ("kv_usage",),
            "decisions.kv_usage is outside [0, 1]",
            kv.is_finite() & ((kv < 0) | (kv > 1)),
        )
        yield Rule(
            table,
            ("outcome", "applied_victim_id", "raw_result", "builtin_victim_id"),
            "decisions.applied_victim_id disagrees with the outcome (selected: the policy's id; "
            "otherwise: the built-in victim)",
            (pl.col("outcome") == "selected")
            & (pl.col("applied_victim_id") != pl.col("raw_result"))
            | (pl.col("outcome") != "selected")
            & (pl.col("applied_victim_id") != pl.col("builtin_victim_id")),
        )
        if "freed_blocks" in names and block_size is not None:
            yield Rule(
                table,
                ("freed_tokens", "freed_blocks"),
                f"decisions.freed_tokens is not freed_blocks * engine_config.block_size "
                f"({block_size})",
                pl.col("freed_tokens") != pl.col("freed_blocks") * block_size,
            )
    elif table == "candidates" and "num_blocks_exclusive" in names:
        yield Rule(
            table,
            ("num_blocks_exclusive", "num_blocks_held"),
            "candidates.num_blocks_exclusive is above num_blocks_held",
            pl.col("num_blocks_exclusive") > pl.col("num_blocks_held"),
        )
    elif table == "steps":
        yield Rule(
            table,
            ("kv_blocks_used", "kv_blocks_total"),
            "steps.kv_blocks_used is outside [0, kv_blocks_total]",
            pl.col("kv_blocks_used") > pl.col("kv_blocks_total"),
        )


def row_rules(
    spec: TableSpec,
    run_id: str,
    *,
    block_size: int | None = None,
    columns: Collection[str] | None = ALL_COLUMNS,
) -> list[Rule]:
    """The row rules of ``spec``'s table in a bundle of run ``run_id``.

    Parameters
    ----------
    spec
        The table, in the bundle's schema version (a version-1 table has no v2 columns).
    run_id
        The manifest's run id, which every row's ``run_id`` must equal.
    block_size
        ``engine_config.block_size`` when the manifest gives a usable one (``freed_tokens``
        is checked against it), else None.
    columns
        Only the rules that read nothing but these columns (None: every rule).
    """
    rules = [
        rule
        for column in spec.columns
        for rule in _column_rules(spec.name, column.name, column.type, column.nullable)
    ]
    rules += _relation_rules(spec, block_size)
    rules.append(
        Rule(
            spec.name,
            ("run_id",),
            f"{spec.name}.run_id differs from the manifest's run_id {run_id!r}",
            pl.col("run_id") != run_id,
        )
    )
    if columns is None:
        return rules
    wanted = set(columns)
    return [rule for rule in rules if wanted.issuperset(rule.columns)]


def block_size(bundle: Bundle) -> int | None:
    """``engine_config.block_size`` if it is a usable size, else None."""
    config = bundle.manifest.get("engine_config")
    size = config.get("block_size") if isinstance(config, dict) else None
    ok = isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_COUNT
    return size if ok else None


_FILE = "__tracekit_file"


def check_values(bundle: Bundle, reads: Reads) -> None:
    """Refuse a bundle whose tables break a row rule in the columns a reader reads.

    One lazy scan per table (only the columns the rules read), every rule a sum of that scan;
    only when a rule is broken does a second scan find its first row and file. Tables the
    bundle does not hold are skipped (the structure check,
    :func:`tracekit.trace.validate.check_readable`, says which must be there).

    Parameters
    ----------
    bundle
        A bundle whose structure has been checked.
    reads
        Table -> the columns the reader reads (None: all of them).

    Raises
    ------
    TraceSchemaError
        For the first rule broken: the file, what is wrong, how many rows, the first row's key,
        and the fix.
    """
    schema = trace_schema(bundle.schema_version)
    size = block_size(bundle)
    for table, columns in reads.items():
        files = bundle.table_files(table)
        if table not in schema.tables or not files:
            continue
        spec = schema.table(table)
        rules = row_rules(spec, bundle.run_id, block_size=size, columns=columns)
        if not rules:
            continue
        counts = _scan(files, spec, table, [r.bad.fill_null(False).sum() for r in rules])
        broken = next((i for i, n in enumerate(counts) if n), None)
        if broken is None:
            continue
        # Only now, for the first rule broken: which file and row (a second, rare scan).
        rule, key = rules[broken], KEYS[table]
        bad = rule.bad.fill_null(False)
        file, first = _scan(
            files,
            spec,
            table,
            [pl.col(_FILE).filter(bad).first(), pl.col(key).filter(bad).first()],
            with_file=True,
        )
        raise TraceSchemaError(
            f"{file}: {rule.message}: {counts[broken]} row(s), the first at {key} {first!r}; "
            f"{RERECORD}"
        )


def _scan(
    files: list[Path],
    spec: TableSpec,
    table: str,
    aggregations: list[pl.Expr],
    *,
    with_file: bool = False,
) -> list[Any]:
    """The values of ``aggregations`` over one lazy scan of ``files`` (read in the schema)."""
    try:
        frame = pl.scan_parquet(
            files, schema=spec.polars_schema, include_file_paths=_FILE if with_file else None
        )
        row = frame.select(e.alias(f"a{i}") for i, e in enumerate(aggregations)).collect().row(0)
    except (pl.exceptions.PolarsError, OSError) as exc:
        message = " ".join(str(exc).split())[:200]
        raise TraceSchemaError(
            f"{files[0]}: cannot read table {table!r} ({type(exc).__name__}: {message}); "
            f"the file is truncated or corrupt: {RERECORD}"
        ) from None
    return list(row)


# --- the manifest's numbers -----------------------------------------------------------------

#: ``engine_config`` sizes (any recorder's: the embedded engine, vLLM, SGLang) that are whole
#: numbers >= 1 where present.
_POSITIVE_SIZES = (
    "num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "kv_tokens", "max_running_requests", "max_context_len", "max_prefill_tokens", "max_steps",
)  # fmt: skip
#: ``engine_config`` sizes where 0 means "off" (or null: the default).
_SIZES_OR_OFF = ("long_prefill_token_threshold", "chunked_prefill_size")


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_COUNT


def manifest_number_problems(bundle: Bundle) -> list[str]:
    """The manifest's engine-configuration numbers that describe no engine, one line each."""
    config = bundle.manifest.get("engine_config")
    if not isinstance(config, dict):
        return []
    file: Path = bundle.path / MANIFEST
    problems = []

    def refuse(name: str, expected: str) -> None:
        problems.append(
            f"{file}: field 'engine_config.{name}' is {config[name]!r}, expected {expected}; "
            f"correct the manifest or {RERECORD}"
        )

    for name in _POSITIVE_SIZES:
        if name in config and not _whole(config[name], 1):
            refuse(name, "a whole number from 1 to 2**40")
    for name in _SIZES_OR_OFF:
        if config.get(name) is not None and not _whole(config[name], 0):
            refuse(name, "a whole number from 0 to 2**40, or null")
    watermark = config.get("watermark")
    if "watermark" in config and not (_number(watermark) and 0.0 <= watermark < 1.0):
        refuse("watermark", "a number in [0, 1)")
    step = config.get("step_s")
    if step is not None and not (_number(step) and 0 < step <= MAX_TIME_S):
        refuse("step_s", "a number of seconds > 0")
    return problems


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
