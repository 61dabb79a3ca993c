"""Loader for Mooncake trace JSON lines (FAST'25 release: conversation, tool-agent, synthetic).

One JSON object a line::

    {"timestamp": 0, "input_length": 40160, "output_length": 6, "hash_ids": [0, 1, ...]}

Rules:

* ``timestamp`` is milliseconds since the trace start and is kept as the origin:
  ``arrival_s = timestamp / 1000`` (no re-basing; the traces start at 0).
* ``prompt_tokens`` = ``input_length`` (> 0); ``output_tokens`` = ``max_tokens`` =
  ``output_length`` (>= 1); ``priority`` = 0.
* ``prefix_hash_ids`` = ``hash_ids`` (prefix-block hashes, 512 tokens a block). When
  ``hash_block_tokens`` is set (default 512), each line must have
  ``len(hash_ids) == ceil(input_length / hash_block_tokens)``. A file without ``hash_ids`` at all
  gives a workload without the column.
* ``request_id`` = ``mooncake-<record index, 0-based, 6 digits>``.

Timestamp buckets. The real conversation trace quantises timestamps to buckets of about 3 s (about
ten requests share each value); the semi-synthetic trace has Poisson arrivals with distinct
timestamps. ``bucket`` chooses how shared timestamps are replayed:

* ``"burst"``: verbatim; every request of a bucket arrives at the bucket's timestamp.
* ``"spread"``: each request arrives at ``t + u * w``, where ``t`` is its timestamp (taken as the
  start of its bucket), ``u`` is the seeded uniform draw for its record index (rule in
  :mod:`tracekit.workloads.seeded`, stream ``BUCKET_SPREAD``), and ``w`` is the bucket width,
  capped by the gap to the next distinct timestamp so that buckets never overlap.
  The width is ``bucket_ms`` if given, otherwise the median gap between consecutive distinct
  timestamps.
* ``"auto"`` (default): ``"spread"`` when the timestamps look bucketed, else ``"burst"``. They
  look bucketed when there are at most half as many distinct timestamps as requests (about 0.1 on
  the conversation trace, 0.997 on the semi-synthetic one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import polars as pl

from tracekit.workloads._columns import (
    integer_column,
    number_column,
    row_ids,
)
from tracekit.workloads._errors import (
    check_int_option,
    check_positive_option,
    describe_value,
    option_error,
    workload_error,
)
from tracekit.workloads._readers import (
    ROW,
    check_columns,
    jsonl_locator,
    read_ndjson_records,
)
from tracekit.workloads.detect import WorkloadFormat
from tracekit.workloads.model import PREFIX_HASH_IDS, Workload, assemble_workload
from tracekit.workloads.seeded import Stream, uniform

__all__ = ["BUCKET_MODES", "MOONCAKE_COLUMNS", "read_mooncake"]

#: Required source keys (``hash_ids`` is optional).
MOONCAKE_COLUMNS = ("timestamp", "input_length", "output_length")

#: Accepted values of the ``bucket`` option.
BUCKET_MODES = ("auto", "burst", "spread")

BucketMode = Literal["auto", "burst", "spread"]

_WHAT = "a Mooncake trace (JSON lines)"

# At most this many distinct timestamps per request means "bucketed".
_BUCKETED_DISTINCT_RATIO = 0.5


def _check_hash_ids(
    frame: pl.DataFrame, path: Path, hash_block_tokens: int | None, input_tokens: pl.Series
) -> pl.Series:
    hash_ids = frame.get_column("hash_ids")
    locate = jsonl_locator(path)
    dtype = hash_ids.dtype
    if not (isinstance(dtype, pl.List) and (dtype.inner.is_integer() or dtype.inner == pl.Null)):
        raise workload_error(
            path,
            field="hash_ids",
            expected="a list of integers on every line",
            found=f"values of type {dtype}",
            fix="write hash_ids as a JSON array of integers",
        )
    hash_ids = hash_ids.cast(pl.List(pl.Int64))
    bad = hash_ids.is_null() | (hash_ids.list.len() == 0)
    if hash_block_tokens is not None:
        blocks = (input_tokens + hash_block_tokens - 1) // hash_block_tokens
        bad = bad | (hash_ids.list.len() != blocks)
    if bad.fill_null(True).any():
        position = bad.fill_null(True).arg_true()[0]
        value = hash_ids[position]
        if value is None:
            found = describe_value(None)
        else:
            found = f"{len(value)} ids for {input_tokens[position]} input tokens"
        expected = "a non-empty list of integers"
        if hash_block_tokens is not None:
            expected = f"ceil(input_length / {hash_block_tokens}) prefix-block ids"
        raise workload_error(
            path,
            where=locate(int(frame.get_column(ROW)[position])),
            field="hash_ids",
            expected=expected,
            found=found,
            fix="correct the line, or pass hash_block_tokens=None to skip the length check",
        )
    return hash_ids.rename(PREFIX_HASH_IDS)


def _spread(timestamps_ms: pl.Series, width_ms: float, seed: int) -> pl.Series:
    # Each distinct timestamp opens a bucket that ends at the next distinct timestamp or after
    # width_ms, whichever comes first; requests are placed uniformly inside it.
    frame = pl.DataFrame({"t": timestamps_ms}).with_columns(u=uniform(seed, Stream.BUCKET_SPREAD))
    starts = frame.select(pl.col("t").unique().sort()).with_columns(next_t=pl.col("t").shift(-1))
    placed = frame.join(starts, on="t", how="left", maintain_order="left").select(
        pl.col("t")
        + pl.col("u") * pl.min_horizontal(pl.lit(width_ms), pl.col("next_t") - pl.col("t"))
    )
    return placed.to_series().rename("t")


def _median_gap_ms(timestamps_ms: pl.Series) -> float | None:
    gaps = timestamps_ms.unique().sort().diff().drop_nulls()
    gaps = gaps.filter(gaps > 0)
    return None if gaps.len() == 0 else float(gaps.median())  # type: ignore[arg-type]


def read_mooncake(
    path: str | Path,
    *,
    bucket: BucketMode = "auto",
    bucket_ms: float | None = None,
    seed: int = 0,
    hash_block_tokens: int | None = 512,
) -> Workload:
    """Read a Mooncake trace (JSON lines) into a checked workload.

    Parameters
    ----------
    path
        The trace file.
    bucket
        How requests sharing a timestamp arrive: ``"burst"``, ``"spread"`` or ``"auto"``
        (see the module docstring).
    bucket_ms
        Bucket width in milliseconds for ``"spread"`` (> 0); by default the median gap between
        distinct timestamps.
    seed
        Seed of the ``"spread"`` offsets.
    hash_block_tokens
        Tokens per prefix block, for the ``hash_ids`` length check, or ``None`` to skip it.

    Returns
    -------
    Workload
        Format ``"mooncake"``, with ``prefix_hash_ids`` when the file has ``hash_ids``.
        ``options`` records ``bucket`` (the mode used), ``bucket_requested``, ``bucketed``
        (the detection result), ``bucket_ms`` (the width used, or ``None`` for bursts),
        ``seed`` and ``hash_block_tokens``.

    Raises
    ------
    tracekit.errors.WorkloadError
        For an empty file, a line that is not a JSON object, a missing key, a negative or
        non-numeric timestamp, a token count < 1, malformed ``hash_ids``, or a bad option.
    """
    path = Path(path)
    if bucket not in BUCKET_MODES:
        raise option_error(
            path,
            "bucket",
            bucket,
            expected=f"one of {', '.join(BUCKET_MODES)}",
            fix="pass bucket='burst', 'spread' or 'auto'",
        )
    if bucket_ms is not None:
        bucket_ms = check_positive_option(path, "bucket_ms", bucket_ms)
    if hash_block_tokens is not None:
        check_int_option(path, "hash_block_tokens", hash_block_tokens, minimum=1)
    check_int_option(path, "seed", seed)
    raw = read_ndjson_records(path, what=_WHAT)
    check_columns(raw, path, MOONCAKE_COLUMNS, what=_WHAT)
    locate = jsonl_locator(path)
    timestamps = number_column(raw, "timestamp", path, locate, minimum=0)
    input_tokens = integer_column(raw, "input_length", path, locate, minimum=1)
    output_tokens = integer_column(raw, "output_length", path, locate, minimum=1)
    columns = [raw.get_column(ROW), input_tokens, output_tokens]
    if "hash_ids" in raw.columns:
        columns.append(_check_hash_ids(raw, path, hash_block_tokens, input_tokens))

    bucketed = timestamps.n_unique() <= _BUCKETED_DISTINCT_RATIO * timestamps.len()
    mode = ("spread" if bucketed else "burst") if bucket == "auto" else bucket
    width: float | None = None
    if mode == "spread":
        width = bucket_ms if bucket_ms is not None else _median_gap_ms(timestamps)
        if width is None:
            raise workload_error(
                path,
                field="timestamp",
                expected="at least two distinct timestamps to infer the bucket width",
                found="a single timestamp",
                fix="pass bucket_ms=<bucket width> or bucket='burst'",
            )
        timestamps = _spread(timestamps, width, seed)

    frame = pl.DataFrame(columns).with_columns(arrival_ms=timestamps)
    frame = frame.select(
        row_ids("mooncake").alias("request_id"),
        (pl.col("arrival_ms") / 1000.0).alias("arrival_s"),
        pl.col("input_length").alias("prompt_tokens"),
        pl.col("output_length").alias("output_tokens"),
        pl.col("output_length").alias("max_tokens"),
        pl.lit(0, dtype=pl.Int64).alias("priority"),
        *([pl.col(PREFIX_HASH_IDS)] if PREFIX_HASH_IDS in frame.columns else []),
    )
    options = {
        "bucket": mode,
        "bucket_requested": bucket,
        "bucketed": bucketed,
        "bucket_ms": width,
        "seed": seed,
        "hash_block_tokens": hash_block_tokens,
    }
    return assemble_workload(
        path, format=WorkloadFormat.MOONCAKE.value, frame=frame, options=options
    )
