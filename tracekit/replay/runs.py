"""Running an open-mode replay: one run at a time, or runs in parallel worker processes.

A run is replayed chunk by chunk (:class:`RunReplayer`), each strategy on the fast path when it
has one and the run's values allow it, else on the reference path. Finished chunks go to a
background thread that writes and summarises them (:class:`Sink`) while the next chunk is
evaluated. With several workers, each process replays whole runs into its own Parquet file, and
the parent appends them in run order, so the output is the same as with one process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import polars as pl
import pyarrow.parquet as pq

from tracekit.replay.contexts import iter_run_chunks
from tracekit.replay.fast import FastStrategy, fast_rule
from tracekit.replay.plain import Failure, PlainStrategy, policy_logs, replay_plain
from tracekit.replay.rules import ChunkRules
from tracekit.replay.summary import SummaryAccumulator
from tracekit.replay.table import DICTIONARY_COLUMNS, ReplayTableWriter, assemble
from tracekit.strategies import StrategySpec
from tracekit.trace.bundle import Bundle

__all__ = ["Job", "Progress", "RunReport", "replay_all"]

Progress = Callable[[int, int], None]
T = TypeVar("T")

# The fast path compares floats and divides integers as the policy does only for finite floats
# and integers below 2**53 (see tracekit.replay.rules); other runs take the reference path.
_EXACT_INT = 2**53


@dataclass(frozen=True, slots=True)
class Job:
    """One run to replay (picklable, for worker processes)."""

    bundle: Bundle
    path: str
    specs: tuple[StrategySpec, ...]
    labels: tuple[str, ...]
    fast: bool
    chunk_rows: int
    limit: int | None


@dataclass(slots=True)
class RunReport:
    """What happened in one run: decisions replayed, the path of each strategy, caveats."""

    run_id: str
    path: str
    decisions: int = 0
    fast_path: list[str] = field(default_factory=list)
    reference_path: list[str] = field(default_factory=list)
    note: str | None = None
    caveats: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The report as a JSON-ready record (``replay.json``)."""
        return {
            "run_id": self.run_id,
            "path": self.path,
            "decisions": self.decisions,
            "fast_path": self.fast_path,
            "reference_path": self.reference_path,
            "note": self.note,
            "caveats": self.caveats,
        }


class RunReplayer:
    """Replays one run chunk by chunk, each strategy on its path with fresh state."""

    def __init__(self, job: Job) -> None:
        self.job = job
        manifest = job.bundle.manifest
        self.report = RunReport(
            job.bundle.run_id,
            job.path,
            caveats={
                k: manifest[k] for k in ("missing_fields", "partial_candidates") if manifest.get(k)
            },
        )
        self.failures: list[Failure] = []

    def frames(self) -> Iterator[pl.DataFrame]:
        """The assembled rows of each chunk of the run, in order."""
        job = self.job
        if job.limit == 0:
            return  # beyond the requested prefix: no policy is built, nothing is read
        unsafe = _fast_path_blocker(job.bundle) if job.fast else None
        if unsafe is not None:
            self.report.note = f"every strategy on the reference path: {unsafe}"
        fast: list[tuple[int, FastStrategy]] = []
        plain: list[tuple[int, PlainStrategy]] = []
        for i, (spec, label) in enumerate(zip(job.specs, job.labels, strict=True)):
            if job.fast and unsafe is None and fast_rule(spec) is not None:
                fast.append((i, FastStrategy(spec)))
                self.report.fast_path.append(label)
            else:
                strategy = PlainStrategy(spec, label)
                strategy.start_run(job.bundle.run_id)
                plain.append((i, strategy))
                self.report.reference_path.append(label)
        plain_only = [s for _, s in plain]
        for chunk in read_ahead(iter_run_chunks(job.bundle, job.chunk_rows, job.limit)):
            results: list[Any] = [None] * len(job.specs)
            if plain:
                for (i, _), result in zip(plain, replay_plain(chunk, plain_only), strict=True):
                    results[i] = result
            if fast:
                rules = ChunkRules(chunk)
                for i, strategy in fast:
                    results[i] = strategy.evaluate(rules)
            self.report.decisions += chunk.size
            yield assemble(chunk, job.labels, results)
        for strategy in plain_only:
            self.failures.extend(strategy.failures)


def _fast_path_blocker(bundle: Bundle) -> str | None:
    """Why the fast path cannot reproduce ``bundle`` exactly, or ``None`` when it can."""
    decisions = bundle.table_files("decisions")
    candidates = bundle.table_files("candidates")
    if not decisions or not candidates:
        return None
    (times,) = (
        pl.scan_parquet(decisions)
        .select(pl.col("time_s").is_finite().all())
        .collect(engine="streaming")
        .row(0)
    )
    arrivals, outputs = (
        pl.scan_parquet(candidates)
        .select(
            pl.col("arrival_time").is_finite().all(),
            (pl.col("num_output_tokens").abs() < _EXACT_INT).all(),
        )
        .collect(engine="streaming")
        .row(0)
    )
    if times is False:
        return "a decision time is not finite"
    if arrivals is False:
        return "a candidate arrival time is not finite"
    if outputs is False:
        return "a candidate's num_output_tokens is beyond 2**53"
    return None


_END = object()


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, each produced in a background thread while the previous one is used.

    Reading and decoding the next chunk (pyarrow and polars, which release the GIL) then
    overlaps the evaluation of the current one. At most one item is in flight.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-read") as pool:
        upcoming = pool.submit(next, items, _END)
        while True:
            item = upcoming.result()
            if item is _END:
                return
            upcoming = pool.submit(next, items, _END)
            yield item


class Sink:
    """Writes and summarises chunks in a background thread while the next one is computed.

    pyarrow's Parquet writer and polars release the GIL, so on two cores the writing overlaps
    the next chunk's evaluation (whose Python passes hold the GIL). One chunk is in flight at a
    time: with the chunk being evaluated and the one being read ahead, at most three chunks are
    alive.
    """

    def __init__(self, writer: ReplayTableWriter, accumulator: SummaryAccumulator) -> None:
        self._writer = writer
        self._accumulator = accumulator
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-sink")
        self._pending: Future[None] | None = None

    def _consume(self, frame: pl.DataFrame) -> None:
        self._writer.write(frame)
        self._accumulator.add(frame)

    def put(self, frame: pl.DataFrame) -> None:
        self.wait()
        self._pending = self._pool.submit(self._consume, frame)

    def wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def end_run(self) -> None:
        self.wait()
        self._accumulator.end_run()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown()


def _replay_jobs(
    jobs: Sequence[Job],
    writer: ReplayTableWriter,
    accumulator: SummaryAccumulator,
    on_chunk: Callable[[int], None] | None = None,
) -> tuple[list[RunReport], list[Failure]]:
    """Replay ``jobs`` in order into ``writer`` and ``accumulator``."""
    reports: list[RunReport] = []
    failures: list[Failure] = []
    sink = Sink(writer, accumulator)
    try:
        with policy_logs():
            for job in jobs:
                runner = RunReplayer(job)
                before = 0
                for frame in runner.frames():
                    sink.put(frame)
                    if on_chunk is not None:
                        on_chunk(runner.report.decisions - before)
                    before = runner.report.decisions
                sink.end_run()
                reports.append(runner.report)
                failures.extend(runner.failures)
    finally:
        sink.close()
    return reports, failures


def _worker(args: tuple[Job, Path]) -> tuple[RunReport, SummaryAccumulator, list[Failure]]:
    """Worker process: replay one run into its own Parquet file."""
    job, part = args
    accumulator = SummaryAccumulator(job.labels)
    with ReplayTableWriter(part) as writer:
        (report,), failures = _replay_jobs([job], writer, accumulator)
    return report, accumulator, failures


def replay_all(
    jobs: list[Job], partial: Path, workers: int, total: int, progress: Progress | None
) -> tuple[list[RunReport], SummaryAccumulator, list[Failure]]:
    """Replay every job into ``partial/replay_decisions.parquet``.

    Parameters
    ----------
    jobs
        The runs, in output order.
    partial
        The output folder being written.
    workers
        Processes; with 1 (or a single run) everything runs in this process.
    total
        Decisions to replay, for ``progress``.
    progress
        Called with ``(decisions done, total)``.

    Returns
    -------
    tuple
        The runs' reports, the summary accumulator and the disabled policies.
    """
    labels = jobs[0].labels if jobs else ()
    accumulator = SummaryAccumulator(labels)
    done = 0

    def on_chunk(decisions: int) -> None:
        nonlocal done
        done += decisions
        if progress is not None:
            progress(done, total)

    with ReplayTableWriter(partial / "replay_decisions.parquet") as writer:
        if workers == 1 or len(jobs) < 2:
            reports, failures = _replay_jobs(jobs, writer, accumulator, on_chunk)
            return reports, accumulator, failures
        reports, failures = [], []
        parts = partial / ".parts"
        parts.mkdir()
        tasks = [(job, parts / f"run-{i:05d}.parquet") for i, job in enumerate(jobs)]
        # spawn, not fork: forking a process that runs polars' thread pool can deadlock.
        context = multiprocessing.get_context("spawn")
        with context.Pool(min(workers, len(jobs))) as pool:
            for (_, part), (report, part_summary, part_failures) in zip(
                tasks, pool.imap(_worker, tasks), strict=True
            ):
                # Runs arrive in order; copying row groups keeps the single-process layout.
                source = pq.ParquetFile(part, read_dictionary=DICTIONARY_COLUMNS)
                for group in range(source.num_row_groups):
                    writer.write_arrow(source.read_row_group(group))
                source.close()
                part.unlink()
                accumulator.merge(part_summary)
                reports.append(report)
                failures.extend(part_failures)
                on_chunk(report.decisions)
        parts.rmdir()
    return reports, accumulator, failures
