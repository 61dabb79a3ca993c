"""Loader for the request CSVs of the vidur simulator (0.0.26), in all four of its shapes.

The shape is chosen by the header (first match wins) and recorded as ``options["shape"]``:

``replay``  ``Date, Time, PromptTokenCount, CompletionTokenCount`` (vidur's trace replay).
    Only one ``Date`` is replayed, as in vidur: pass ``date=`` when the file has several.
    ``Time`` is seconds (a number) or a time of day (``HH:MM:SS[.f]``); ``arrival_s`` is
    ``Time`` minus the earliest kept ``Time``.
``intervals``  ``arrival_time`` (vidur's trace interval generator): wall-clock timestamps (or
    numbers of seconds); ``arrival_s`` is the time since the earliest one. vidur floors these to
    whole seconds; pass ``whole_seconds=True`` to do the same. Lengths come from length columns
    in the same file (either naming below) or from the lengths CSV given as ``lengths=``, paired
    row by row; the longer of the two is cut to the shorter, as vidur stops when either runs out.
``arrived``  ``arrived_at, num_prefill_tokens, num_decode_tokens`` (vidur's processed traces):
    ``arrived_at`` is already seconds from the start and is kept as is.
``lengths``  ``num_prefill_tokens, num_decode_tokens`` only (vidur's length generator, e.g. the
    ShareGPT length statistics): arrivals come from a seeded Poisson process at ``rate`` requests
    per second, ``arrival_s`` being the cumulative sum of the gaps (the first request arrives
    after one gap, like vidur's synthetic generator and BidKV's ``freeze_traces``). The gap rule
    is in :mod:`tracekit.workloads.seeded` (stream ``POISSON``).

Common rules: ``prompt_tokens`` = ``PromptTokenCount``/``num_prefill_tokens`` (> 0);
``output_tokens`` = ``max_tokens`` = ``CompletionTokenCount``/``num_decode_tokens`` (>= 1);
``priority`` = 0; ``request_id`` = ``vidur-<data row index, 6 digits>`` of the row the lengths
came from. Lengths are used as written: vidur's ``prefill_scale_factor``/``decode_scale_factor``,
its clipping to at least one token and its ``max_tokens`` cap are not applied (tracekit refuses a
zero instead of clipping it). ``shuffle=True`` permutes the lengths by a seeded key (stream
``SHUFFLE``) before pairing them with arrivals, as vidur's length generator does; by default the
file order is kept so that ``limit`` takes the first rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit.workloads._columns import (
    integer_column,
    number_column,
    row_ids,
    timestamp_column,
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
    check_not_empty,
    csv_locator,
    read_csv_strings,
)
from tracekit.workloads.detect import WorkloadFormat
from tracekit.workloads.model import Workload, assemble_workload
from tracekit.workloads.seeded import Stream, exponential_gaps, uniform

__all__ = ["VIDUR_SHAPES", "read_vidur"]

#: The CSV shapes, in detection order.
VIDUR_SHAPES = ("replay", "intervals", "arrived", "lengths")

_WHAT = "a vidur trace CSV"
_REPLAY = ("Date", "Time", "PromptTokenCount", "CompletionTokenCount")
_LENGTHS = ("num_prefill_tokens", "num_decode_tokens")
_REPLAY_LENGTHS = ("PromptTokenCount", "CompletionTokenCount")


def _shape(columns: list[str]) -> str | None:
    if set(_REPLAY) <= set(columns):
        return "replay"
    if "arrival_time" in columns:
        return "intervals"
    if "arrived_at" in columns and set(_LENGTHS) <= set(columns):
        return "arrived"
    if set(_LENGTHS) <= set(columns):
        return "lengths"
    return None


def _length_columns(raw: pl.DataFrame) -> tuple[str, str] | None:
    if set(_LENGTHS) <= set(raw.columns):
        return _LENGTHS
    if set(_REPLAY_LENGTHS) <= set(raw.columns):
        return _REPLAY_LENGTHS
    return None


def _lengths(raw: pl.DataFrame, path: Path, names: tuple[str, str]) -> pl.DataFrame:
    # ROW, prompt, output: checked token counts under canonical names.
    return pl.DataFrame(
        [
            raw.get_column(ROW),
            integer_column(raw, names[0], path, csv_locator, minimum=1).rename("prompt"),
            integer_column(raw, names[1], path, csv_locator, minimum=1).rename("output"),
        ]
    )


def _seconds_or_time_of_day(raw: pl.DataFrame, column: str, path: Path) -> pl.Series:
    text = pl.col(column).str.strip_chars()
    parsed = raw.select(
        pl.coalesce(
            text.cast(pl.Float64, strict=False),
            text.str.to_time("%H:%M:%S%.f", strict=False).cast(pl.Int64).cast(pl.Float64) / 1e9,
        )
    ).to_series()
    bad = (parsed.is_null() | parsed.is_nan() | parsed.is_infinite() | (parsed < 0)).fill_null(True)
    if bad.any():
        position = bad.arg_true()[0]
        raise workload_error(
            path,
            where=csv_locator(int(raw.get_column(ROW)[position])),
            field=column,
            expected="seconds >= 0 or a time of day HH:MM:SS",
            found=describe_value(raw.get_column(column)[position]),
            fix="correct or remove that line",
        )
    return parsed - parsed.min()


def _replay(raw: pl.DataFrame, path: Path, date: str | None) -> pl.DataFrame:
    dates = raw.get_column("Date").str.strip_chars()
    if date is None:
        distinct = dates.drop_nulls().unique(maintain_order=True)
        if distinct.len() > 1:
            shown = ", ".join(distinct.head(5).to_list()) + (", ..." if distinct.len() > 5 else "")
            raise option_error(
                path,
                "date",
                None,
                expected=f"one of the file's dates ({shown}), since the file spans several",
                fix="pass date=<one Date value>, as vidur replays one date",
            )
    else:
        raw = raw.filter(dates == date.strip())
        if raw.height == 0:
            shown = ", ".join(dates.unique(maintain_order=True).head(5).to_list())
            raise option_error(
                path,
                "date",
                date,
                expected=f"a Date value present in the file ({shown})",
                fix="pass one of the file's Date values",
            )
    times = _seconds_or_time_of_day(raw, "Time", path)
    return _lengths(raw, path, _REPLAY_LENGTHS).with_columns(arrival_s=times)


def _arrival_times(raw: pl.DataFrame, path: Path, whole_seconds: bool) -> pl.Series:
    numbers = raw.get_column("arrival_time").str.strip_chars().cast(pl.Float64, strict=False)
    if numbers.is_not_null().all():
        seconds = number_column(raw, "arrival_time", path, csv_locator, minimum=0)
    else:
        stamps = timestamp_column(raw, "arrival_time", path, csv_locator)
        seconds = (stamps - stamps.min()).dt.total_nanoseconds().cast(pl.Float64) / 1e9
    seconds = seconds - seconds.min()
    # vidur: (arrival_time - min) // 1 s
    return (seconds.floor() if whole_seconds else seconds).rename("arrival_s")


def _lengths_for_intervals(
    raw: pl.DataFrame, path: Path, lengths_path: Path | None
) -> tuple[pl.DataFrame, dict[str, Any]]:
    own = _length_columns(raw)
    if lengths_path is None:
        if own is None:
            raise option_error(
                path,
                "lengths",
                None,
                expected="token-length columns (num_prefill_tokens, num_decode_tokens) "
                "or a lengths CSV",
                fix="pass lengths=<vidur lengths CSV> to pair with these arrival times",
            )
        return _lengths(raw, path, own), {}
    other = read_csv_strings(lengths_path, what=f"{_WHAT} of lengths")
    names = _length_columns(other)
    if names is None:
        check_columns(other, lengths_path, _LENGTHS, what=f"{_WHAT} of lengths")
    check_not_empty(other, lengths_path, what=f"{_WHAT} of lengths")
    return _lengths(other, lengths_path, names or _LENGTHS), {"lengths": str(lengths_path)}


def _check_applicable(path: Path, shape: str, given: dict[str, object]) -> None:
    applies = {
        "replay": {"date"},
        "intervals": {"lengths", "whole_seconds", "shuffle"},
        "arrived": set(),
        "lengths": {"rate", "shuffle"},
    }
    for name, value in given.items():
        # ``is`` tests: ``rate=0`` must still count as given (0 == False).
        if value is not None and value is not False and name not in applies[shape]:
            raise option_error(
                path,
                name,
                value,
                expected=f"no {name} option for a vidur {shape!r} file",
                fix=f"drop {name}=, which applies only to other vidur shapes",
            )


def read_vidur(
    path: str | Path,
    *,
    rate: float | None = None,
    seed: int = 0,
    shuffle: bool = False,
    date: str | None = None,
    lengths: str | Path | None = None,
    whole_seconds: bool = False,
) -> Workload:
    """Read a vidur request CSV (replay, intervals, arrived or lengths shape) into a workload.

    Parameters
    ----------
    path
        The CSV file.
    rate
        Poisson arrival rate in requests per second; required for (and only for) the
        ``lengths`` shape.
    seed
        Seed of the Poisson gaps and of ``shuffle``.
    shuffle
        Permute the lengths by a seeded key before pairing them with arrivals
        (``lengths`` and ``intervals`` shapes).
    date
        The ``Date`` to replay (``replay`` shape; needed when the file has several).
    lengths
        A lengths CSV to pair with the arrival times of an ``intervals`` file.
    whole_seconds
        Floor ``intervals`` arrival times to whole seconds, as vidur does.

    Returns
    -------
    Workload
        Format ``"vidur"``; ``options`` records ``shape``, ``seed``, ``shuffle`` and every
        option that applied (``rate``, ``date``, ``lengths``, ``whole_seconds``,
        ``num_paired``).

    Raises
    ------
    tracekit.errors.WorkloadError
        For an empty file, an unknown header, a bad token count or time on some line, or an
        option that is missing, invalid, or does not apply to the file's shape.
    """
    path = Path(path)
    check_int_option(path, "seed", seed)
    raw = read_csv_strings(path, what=_WHAT)
    shape = _shape(raw.columns)
    if shape is None:
        present = ", ".join(name for name in raw.columns if name != ROW)
        raise workload_error(
            path,
            where="line 1",
            expected=(
                "a vidur header: Date,Time,PromptTokenCount,CompletionTokenCount | "
                "arrival_time | arrived_at,num_prefill_tokens,num_decode_tokens | "
                "num_prefill_tokens,num_decode_tokens"
            ),
            found=f"columns {present}",
            fix="rename the columns or pass the right format",
        )
    check_not_empty(raw, path, what=_WHAT)
    _check_applicable(
        path,
        shape,
        {
            "rate": rate,
            "date": date,
            "lengths": lengths,
            "whole_seconds": whole_seconds,
            "shuffle": shuffle,
        },
    )
    options: dict[str, Any] = {"shape": shape, "seed": seed, "shuffle": bool(shuffle)}
    arrivals: pl.Series | None = None
    if shape == "replay":
        frame = _replay(raw, path, date)
        options["date"] = date
    elif shape == "arrived":
        times = number_column(raw, "arrived_at", path, csv_locator, minimum=0)
        frame = _lengths(raw, path, _LENGTHS).with_columns(arrival_s=times)
    elif shape == "intervals":
        arrivals = _arrival_times(raw, path, whole_seconds)
        frame, extra = _lengths_for_intervals(raw, path, Path(lengths) if lengths else None)
        options.update(extra, whole_seconds=bool(whole_seconds))
    else:
        if rate is None:
            raise option_error(
                path,
                "rate",
                None,
                expected="an arrival rate in requests per second for a lengths-only file",
                fix="pass rate=<requests per second>, e.g. rate=3.8",
            )
        options["rate"] = check_positive_option(path, "rate", rate)
        frame = _lengths(raw, path, _LENGTHS)
    if shuffle:
        frame = frame.with_columns(key=uniform(seed, Stream.SHUFFLE)).sort("key").drop("key")
    if shape == "lengths":
        frame = frame.with_columns(arrival_s=exponential_gaps(options["rate"], seed).cum_sum())
    elif arrivals is not None:
        # Pair the i-th arrival time with the i-th length row; the longer side is cut.
        paired = min(arrivals.len(), frame.height)
        frame = frame.head(paired).with_columns(arrival_s=arrivals.head(paired))
        options["num_paired"] = paired
    canonical = frame.select(
        row_ids("vidur").alias("request_id"),
        "arrival_s",
        pl.col("prompt").alias("prompt_tokens"),
        pl.col("output").alias("output_tokens"),
        pl.col("output").alias("max_tokens"),
        pl.lit(0, dtype=pl.Int64).alias("priority"),
    )
    return assemble_workload(
        path, format=WorkloadFormat.VIDUR.value, frame=canonical, options=options
    )
