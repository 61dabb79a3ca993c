"""A measured benchmark run: per-request latencies a benchmark client saved, as one table.

The field's clients (``vllm bench serve --save-result --save-detailed``, GuideLLM's JSON report,
AIPerf's ``profile_export.jsonl``) each save what every request sent and measured. One loader
per client (:mod:`~tracekit.workloads.vllm_bench`, :mod:`~tracekit.workloads.guidellm`,
:mod:`~tracekit.workloads.aiperf`) reads its file into a :class:`MeasuredRun`: the measured
table below, plus the run's settings (request rate, burstiness, concurrency). Its
:meth:`MeasuredRun.workload` is the canonical workload (``docs/workloads.md``, "Benchmark
results"): arrivals from the client's send times, relative to the first one; lengths from the
measured input and output token counts; a failed request kept, as failed.

=================  ==============  ===========================================================
column             polars type     meaning
=================  ==============  ===========================================================
request_id         String          the client's id, or ``<client>-<index>``
start_s            Float64         when the client sent it, seconds after the first send
prompt_tokens      Int64           input tokens (the client's count), > 0
output_tokens      Int64           output tokens received (0 for a failed request)
ok                 Boolean         the request succeeded
ttft_s             Float64         send to first token, seconds (null when failed)
e2e_s              Float64         send to last token, seconds (null when failed)
itl_s              List(Float64)   the gaps between consecutive output tokens, seconds
                                   (empty when the client did not record them)
error              String          the client's error text (null when ok)
=================  ==============  ===========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.workloads._errors import workload_error
from tracekit.workloads._readers import file_sha256
from tracekit.workloads.model import CANCEL_AFTER_S, Workload, assemble_workload

__all__ = ["FAILED_CANCEL_S", "MEASURED_SCHEMA", "MeasuredRun", "measured_run"]

#: The measured table's columns.
MEASURED_SCHEMA: pl.Schema = pl.Schema(
    [
        ("request_id", pl.String),
        ("start_s", pl.Float64),
        ("prompt_tokens", pl.Int64),
        ("output_tokens", pl.Int64),
        ("ok", pl.Boolean),
        ("ttft_s", pl.Float64),
        ("e2e_s", pl.Float64),
        ("itl_s", pl.List(pl.Float64)),
        ("error", pl.String),
    ]
)

#: A failed request whose client recorded no failure time is cancelled this soon after it was
#: sent (it still arrives, and is aborted at the engine's next step boundary).
FAILED_CANCEL_S = 1e-3


@dataclass(frozen=True)
class MeasuredRun:
    """One benchmark client's saved run.

    Attributes
    ----------
    source
        The result file.
    client
        ``vllm-bench``, ``guidellm`` or ``aiperf`` (also the workload format name).
    sha256
        Of the file's bytes.
    frame
        The measured table (:data:`MEASURED_SCHEMA`), sorted by ``start_s``.
    settings
        The run's settings as the client recorded them: ``request_rate`` (requests/s, None for
        as fast as possible or a concurrency run), ``burstiness``, ``max_concurrency``,
        ``duration_s`` (the client's benchmark duration), ``model`` and client-specific keys.
    name
        A label for the run (the file stem, with a benchmark index where one file holds many).
    """

    source: Path
    client: str
    sha256: str
    frame: pl.DataFrame
    settings: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def num_requests(self) -> int:
        """Requests sent (failed ones included)."""
        return self.frame.height

    @property
    def num_failed(self) -> int:
        """Requests that failed."""
        return int((~self.frame.get_column("ok")).sum())

    def workload(self) -> Workload:
        """The run as a canonical workload (``docs/workloads.md``, "Benchmark results").

        ``arrival_s`` = ``start_s``; ``prompt_tokens`` and ``output_tokens`` = the measured
        counts (``max_tokens`` = ``output_tokens``: the client asked for exactly what came back,
        as ``--ignore-eos`` runs do; a replay stops where the measured request stopped). A
        failed request is kept and fails again: it has one output token and ``cancel_after_s``
        = its measured latency when the client recorded one (else :data:`FAILED_CANCEL_S`), so
        the engine aborts it (status ``aborted``) instead of serving it.
        """
        frame = self.frame
        failed_after = (
            pl.when(pl.col("e2e_s") > 0).then(pl.col("e2e_s")).otherwise(pl.lit(FAILED_CANCEL_S))
        )
        table = frame.select(
            "request_id",
            pl.col("start_s").alias("arrival_s"),
            "prompt_tokens",
            pl.max_horizontal(pl.col("output_tokens"), pl.lit(1)).alias("output_tokens"),
            pl.max_horizontal(pl.col("output_tokens"), pl.lit(1)).alias("max_tokens"),
            pl.lit(0, pl.Int64).alias("priority"),
            *(
                [pl.when(pl.col("ok")).then(None).otherwise(failed_after).alias(CANCEL_AFTER_S)]
                if self.num_failed
                else []
            ),
        )
        options = {
            "client": self.client,
            "num_failed": self.num_failed,
            **{f"source_{k}": v for k, v in self.settings.items() if _plain(v)},
        }
        return assemble_workload(
            self.source, format=self.client, frame=table, options=options, name=self.name or None
        )


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def measured_run(
    path: Path,
    client: str,
    columns: Mapping[str, list[Any]],
    settings: Mapping[str, Any],
    *,
    name: str | None = None,
) -> MeasuredRun:
    """Build a checked :class:`MeasuredRun` from per-request column lists.

    ``columns`` holds :data:`MEASURED_SCHEMA`'s columns, with ``start_s`` still on the client's
    clock (seconds); it is re-based on the first send here. A request with a missing or
    non-positive prompt length, or an ok request with a missing or negative TTFT or latency, or
    a latency below its TTFT, is refused with a one-line error naming the request.
    """
    frame = pl.DataFrame(dict(columns), schema=MEASURED_SCHEMA, strict=False)
    if frame.height == 0:
        raise workload_error(
            path,
            expected="at least one request in the benchmark result",
            found="none",
            fix="point at a result of a run that sent requests",
        )
    first = frame.get_column("start_s").min()
    frame = frame.with_columns(pl.col("start_s") - first)
    rules = [
        ("start_s", pl.col("start_s").is_finite(), "a finite send time"),
        ("prompt_tokens", pl.col("prompt_tokens") > 0, "an input token count > 0"),
        ("output_tokens", pl.col("output_tokens") >= 0, "an output token count >= 0"),
        (
            "ttft_s",
            ~pl.col("ok") | (pl.col("ttft_s").is_finite() & (pl.col("ttft_s") >= 0)),
            "a time to first token >= 0 for a successful request",
        ),
        (
            "e2e_s",
            ~pl.col("ok") | (pl.col("e2e_s").is_finite() & (pl.col("e2e_s") >= pl.col("ttft_s"))),
            "a latency >= its time to first token for a successful request",
        ),
        (
            "output_tokens",
            ~pl.col("ok") | (pl.col("output_tokens") >= 1),
            "at least one output token for a successful request",
        ),
    ]
    for column, ok, wanted in rules:
        bad = frame.with_row_index("_i").filter(~ok.fill_null(False))
        if bad.height:
            row = bad.row(0, named=True)
            raise workload_error(
                path,
                where=f"request {row['_i']} ({row['request_id']!r})",
                field=column,
                expected=wanted,
                found=repr(row[column]),
                fix="check that the file is the client's own unedited output",
            )
    if frame.get_column("request_id").n_unique() != frame.height:
        raise workload_error(
            path,
            field="request_id",
            expected="unique request ids",
            found="a repeated id",
            fix="check that the file is one benchmark run",
        )
    frame = frame.sort("start_s", maintain_order=True)
    return MeasuredRun(
        source=path,
        client=client,
        sha256=file_sha256(path),
        frame=frame,
        settings=dict(settings),
        name=name or path.stem,
    )
