"""One entry point for every format: detect, read, then window, limit, rescale and prioritise.

:func:`load_workload` applies its options in a fixed order, each on the result of the one before:

1. read the whole file with the format's ``read_*`` loader (``**options`` go to it);
2. ``priority_seed``: give every request of the *whole* table a seeded priority in
   ``[0, priority_levels)`` (rule in :mod:`tracekit.workloads.seeded`, stream ``PRIORITY``,
   drawn by arrival position), so a request keeps its priority whatever window or limit follows;
3. ``window=(start_s, end_s)``: keep requests with ``start_s <= arrival_s < end_s`` on the
   source's time axis, then subtract ``start_s``: times stay relative to the window start, so the
   quiet stretch before the first kept request is kept too;
4. ``limit``: keep the first ``limit`` requests in arrival order;
5. ``rate_scale``: divide every ``arrival_s`` by it (2.0 replays twice as fast).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.workloads._errors import (
    check_int_option,
    check_positive_option,
    option_error,
)
from tracekit.workloads.aiperf import read_aiperf
from tracekit.workloads.azure import read_azure
from tracekit.workloads.bidkv_trace import read_bidkv_trace
from tracekit.workloads.detect import WorkloadFormat, detect_format, parse_format
from tracekit.workloads.guidellm import read_guidellm
from tracekit.workloads.model import Workload
from tracekit.workloads.mooncake import read_mooncake
from tracekit.workloads.seeded import Stream, uniform_integers
from tracekit.workloads.sessions import read_sessions
from tracekit.workloads.table import read_table
from tracekit.workloads.vidur import read_vidur
from tracekit.workloads.vllm_bench import read_vllm_bench
from tracekit.workloads.vllm_workload import read_vllm_workload

__all__ = ["READERS", "load_workload"]

#: The loader of each format.
READERS: Mapping[WorkloadFormat, Callable[..., Workload]] = {
    WorkloadFormat.AZURE: read_azure,
    WorkloadFormat.MOONCAKE: read_mooncake,
    WorkloadFormat.BIDKV_TRACE: read_bidkv_trace,
    WorkloadFormat.VLLM_WORKLOAD: read_vllm_workload,
    WorkloadFormat.VIDUR: read_vidur,
    WorkloadFormat.CSV: partial(read_table, format=WorkloadFormat.CSV),
    WorkloadFormat.PARQUET: partial(read_table, format=WorkloadFormat.PARQUET),
    WorkloadFormat.SESSIONS: read_sessions,
    WorkloadFormat.VLLM_BENCH: read_vllm_bench,
    WorkloadFormat.GUIDELLM: read_guidellm,
    WorkloadFormat.AIPERF: read_aiperf,
}


def _loader_options(reader: Callable[..., Workload]) -> list[str]:
    return [
        name
        for name, parameter in inspect.signature(reader).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "format"
    ]


def _check_window(path: Path, window: object) -> tuple[float, float] | None:
    if window is None:
        return None
    expected = "a (start_s, end_s) pair with 0 <= start_s < end_s (end_s may be None)"
    fix = "pass window=(start_s, end_s), e.g. window=(0, 600)"
    if not isinstance(window, tuple | list) or len(window) != 2:
        raise option_error(path, "window", window, expected=expected, fix=fix)
    start, end = window
    end = math.inf if end is None else end
    numbers = all(
        isinstance(value, int | float) and not isinstance(value, bool) for value in (start, end)
    )
    if not numbers or not (math.isfinite(start) and 0 <= start < end):
        raise option_error(path, "window", window, expected=expected, fix=fix)
    return float(start), float(end)


def load_workload(
    path: str | Path,
    *,
    format: str | WorkloadFormat | None = None,
    limit: int | None = None,
    window: tuple[float, float | None] | None = None,
    rate_scale: float = 1.0,
    priority_seed: int | None = None,
    priority_levels: int = 3,
    **options: Any,
) -> Workload:
    """Load a workload file of any supported format into the canonical table.

    Parameters
    ----------
    path
        The workload file.
    format
        A :class:`WorkloadFormat` or its name; detected from the extension and the first
        bytes when ``None``.
    limit
        Keep only the first ``limit`` requests (>= 1) after windowing.
    window
        ``(start_s, end_s)``: keep requests arriving in ``[start_s, end_s)`` of the source's
        time axis, re-based so that ``start_s`` becomes 0. ``end_s=None`` means no end.
    rate_scale
        Divide arrival times by this (> 0): 2.0 is twice the request rate.
    priority_seed
        Seed for assigning priorities ``0 .. priority_levels - 1`` uniformly; ``None`` keeps the
        source's priorities (0 unless the format has them).
    priority_levels
        Number of priority levels for ``priority_seed`` (>= 1).
    **options
        Options of the format's loader, e.g. ``bucket="spread"`` for Mooncake or ``rate=3.8``
        for a vidur lengths file.

    Returns
    -------
    Workload
        ``options`` holds the loader's options plus ``limit``, ``window`` (a list, ``None`` for
        an open end), ``rate_scale``, ``priority_seed``, ``priority_levels`` and
        ``num_source_requests`` (the count before windowing and limiting).

    Raises
    ------
    tracekit.errors.WorkloadError
        For an unknown format, a bad option value, an option the format's loader does not take,
        a window that holds no request, or any error of the loader itself.

    Examples
    --------
    >>> workload = load_workload(
    ...     "traces/azure-llm-2023/azure_conv_sample.csv", window=(60, 120), rate_scale=2.0
    ... )
    >>> workload.format, workload.num_requests
    ('azure', 265)
    >>> first = next(workload.iter_requests())
    >>> first.request_id, round(first.arrival_s, 4), first.prompt_tokens
    ('azure-000191', 0.0861, 1118)
    """
    path = Path(path)
    fmt = detect_format(path) if format is None else parse_format(format, path)
    if limit is not None:
        # 2**40: the largest count of a trace (docs/trace-format.md, "Validation").
        check_int_option(path, "limit", limit, minimum=1, maximum=2**40)
    bounds = _check_window(path, window)
    scale = check_positive_option(path, "rate_scale", rate_scale)
    if priority_seed is not None:
        check_int_option(path, "priority_seed", priority_seed)
    check_int_option(path, "priority_levels", priority_levels, minimum=1)
    reader = READERS[fmt]
    accepted = _loader_options(reader)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise option_error(
            path,
            unknown[0],
            options[unknown[0]],
            expected=f"an option of the {fmt.value!r} loader ({', '.join(accepted) or 'none'})",
            fix="drop the option or pass the right format",
        )

    workload = reader(path, **options)
    frame = workload.frame
    num_source = frame.height
    if priority_seed is not None:
        frame = frame.with_columns(
            priority=uniform_integers(priority_levels, priority_seed, Stream.PRIORITY)
        )
    if bounds is not None:
        start, end = bounds
        kept = frame.filter((pl.col("arrival_s") >= start) & (pl.col("arrival_s") < end))
        if kept.height == 0:
            span = frame.get_column("arrival_s")
            raise option_error(
                path,
                "window",
                window,
                expected="a window holding at least one request",
                fix=f"pick a window inside the trace's {span.min():g}..{span.max():g} s",
            )
        frame = kept.with_columns(pl.col("arrival_s") - start)
    if limit is not None:
        frame = frame.head(limit)
    if scale != 1.0:
        frame = frame.with_columns(pl.col("arrival_s") / scale)
    # JSON has no infinity: an open-ended window is recorded with end None.
    recorded_window = (
        None if bounds is None else [bounds[0], bounds[1] if bounds[1] < math.inf else None]
    )
    recorded = {
        **workload.options,
        "limit": limit,
        "window": recorded_window,
        "rate_scale": scale,
        "priority_seed": priority_seed,
        "priority_levels": priority_levels if priority_seed is not None else None,
        "num_source_requests": num_source,
    }
    return dataclasses.replace(workload, frame=frame, options=recorded)
