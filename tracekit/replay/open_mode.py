"""``tracekit replay`` open mode: every recorded context, passed to other strategies.

Open mode replays counterfactual choices on the recorded contexts: for every run of a trace or
dataset, in ``seq`` order, each decision's context is rebuilt exactly and given to each strategy
through the typed host controller, one fresh policy and controller per run. The recorded future
is not altered: the candidates' counters (``num_preemptions``, computed tokens, ...) stay as the
recorded engine saw them, whatever a strategy would have chosen before.

Production strategies take the fast path (:mod:`tracekit.replay.fast`) unless ``fast=False``;
user policies and configurations it does not cover take the reference path
(:mod:`tracekit.replay.plain`). Both give identical rows; the tests and
``benchmarks/replay.py`` hold them to it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from tracekit import __version__, safe_output
from tracekit.errors import ConfigError
from tracekit.replay.contexts import run_decision_count
from tracekit.replay.marks import MARKER, OPEN_FILES, REPLAY_MARK
from tracekit.replay.plain import Failure
from tracekit.replay.runs import Job, Progress, replay_all
from tracekit.replay.summary import dumps, render_summary, summary_records
from tracekit.replay.table import COMPRESSION
from tracekit.strategies import StrategySpec
from tracekit.trace.bundle import Bundle, TraceDataset, open_trace
from tracekit.trace.inspect import recompute_split

__all__ = ["DEFAULT_CHUNK_ROWS", "OUTPUT_FILES", "OpenReplayResult", "replay_open"]

#: Decisions per chunk: the trace writers' row group size.
DEFAULT_CHUNK_ROWS = 65_536
#: What ``replay_open`` writes into ``out_dir`` (its marker file included).
OUTPUT_FILES = OPEN_FILES


@dataclass(frozen=True, slots=True)
class OpenReplayResult:
    """What :func:`replay_open` wrote and its summary.

    Attributes
    ----------
    out_dir
        The output folder (see :data:`OUTPUT_FILES`).
    summary
        One row per strategy (``summary.parquet``).
    agreement
        ``strategy_a, strategy_b, agree_rate, decisions, agreements`` (``agreement.parquet``).
    decisions
        Recorded decisions replayed.
    evaluations
        Decision evaluations: decisions times strategies.
    fast_path, reference_path
        Labels of the strategies that took each path in at least one run.
    failures
        Every policy the controller disabled: run, strategy, seq and reason.
    text
        The rendered summary (``summary.txt``).
    elapsed_s
        Wall time of the replay.
    """

    out_dir: Path
    summary: pl.DataFrame
    agreement: pl.DataFrame
    decisions: int
    evaluations: int
    fast_path: tuple[str, ...]
    reference_path: tuple[str, ...]
    failures: tuple[Failure, ...]
    text: str
    elapsed_s: float


def replay_open(
    trace_path: str | os.PathLike[str],
    strategies: Sequence[StrategySpec],
    out_dir: str | os.PathLike[str],
    *,
    labels: Sequence[str] | None = None,
    fast: bool = True,
    workers: int = 1,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    limit: int | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> OpenReplayResult:
    """Replay every recorded decision of a trace through each strategy (open mode).

    Parameters
    ----------
    trace_path
        A trace bundle or a dataset folder of bundles; runs are replayed in dataset order,
        decisions in ``seq`` order.
    strategies
        Resolved strategies (``tracekit.strategies.parse_strategy_list``); each run gets a
        fresh policy and controller per strategy.
    out_dir
        Output folder, created atomically: it appears complete or not at all.
    labels
        Strategy names in the outputs; default ``spec.name``. Must be unique.
    fast
        Use the fast path for the production strategies it covers. ``False`` sends every
        decision through the controller (the reference path); results are identical.
    workers
        Processes replaying runs in parallel (a dataset of several runs); 1 replays in this
        process.
    chunk_rows
        Decisions read and evaluated at a time: bounds memory. Output row groups follow it.
    limit
        Replay only the first ``limit`` decisions of the dataset (in run order).
    overwrite
        Replace an existing ``out_dir`` once the new output is complete.
    progress
        Called with ``(decisions done, decisions total)``.

    Returns
    -------
    OpenReplayResult
        The summary and where everything was written.

    Raises
    ------
    ConfigError
        Bad arguments, duplicate labels, an existing ``out_dir``, or a user policy that cannot
        be built.
    TraceSchemaError
        ``trace_path`` holds no bundle, or a bundle's tables cannot be replayed.
    """
    started = time.perf_counter()
    specs = tuple(strategies)
    names = tuple(labels) if labels is not None else tuple(s.name for s in specs)
    _check_arguments(specs, names, workers, chunk_rows, limit)
    out = Path(out_dir)
    safe_output.check_folder_output(
        out, mark=REPLAY_MARK, overwrite=overwrite, inputs=[trace_path]
    )
    dataset = open_trace(trace_path)
    for table in ("decisions", "candidates"):
        dataset.scan(table)  # checks every file's Parquet footer and columns before any work
    jobs, total = _jobs(dataset.root, dataset.bundles, specs, names, fast, chunk_rows, limit)
    # docs/guarantees.md, "Safe output": staged beside OUT, renamed into place when complete.
    with safe_output.staged_folder(
        out, mark=REPLAY_MARK, overwrite=overwrite, inputs=[trace_path], marker=MARKER
    ) as partial:
        reports, accumulator, failures = replay_all(jobs, partial, workers, total, progress)
        summary, agreement = accumulator.finish()
        decisions = sum(r.decisions for r in reports)
        recompute = _recorded_recompute(dataset)
        text = render_summary(summary, agreement) + _recompute_text(recompute)
        _write_outputs(partial, summary, agreement, text)
        (partial / "replay.json").write_text(
            dumps(
                {
                    "mode": "open",
                    "tool_version": __version__,
                    "trace": str(trace_path),
                    "strategies": [
                        {"label": n, "name": s.name, "kind": s.kind, "settings": s.settings}
                        for s, n in zip(specs, names, strict=True)
                    ],
                    "fast": fast,
                    "chunk_rows": chunk_rows,
                    "limit": limit,
                    "decisions": decisions,
                    "evaluations": decisions * len(specs),
                    "runs": [r.record() for r in reports],
                    # The recorded runs' recomputed tokens, split by the prefix cache (trace v2).
                    "recorded_recompute": recompute,
                    "failures": [
                        {
                            "run_id": f.run_id,
                            "strategy": f.strategy,
                            "seq": f.seq,
                            "outcome": f.outcome,
                            "message": f.message,
                        }
                        for f in failures
                    ],
                }
            ),
            "utf-8",
        )
    return OpenReplayResult(
        out_dir=out,
        summary=summary,
        agreement=agreement,
        decisions=decisions,
        evaluations=decisions * len(specs),
        fast_path=tuple(n for n in names if any(n in r.fast_path for r in reports)),
        reference_path=tuple(n for n in names if any(n in r.reference_path for r in reports)),
        failures=tuple(failures),
        text=text,
        elapsed_s=time.perf_counter() - started,
    )


def _recorded_recompute(dataset: TraceDataset) -> list[dict[str, object]]:
    """Per recorded run: recomputed tokens, of which served by the prefix cache / truly redone."""
    if not any(b.has_table("requests") for b in dataset):
        return []
    return recompute_split(dataset.scan("requests")).collect().to_dicts()


def _recompute_text(runs: list[dict[str, object]]) -> str:
    """Lines for summary.txt: the recorded runs' recomputation, where the trace records hits."""
    known = [r for r in runs if r["truly_recomputed_tokens"] is not None]
    if not known:
        return ""
    lines = ["", "recorded runs: recomputed tokens = prefix-cache hits + truly recomputed"]
    lines += [
        f"  {r['run_id']}: {r['recomputed_tokens']} = {r['recomputed_from_cache_tokens']} + "
        f"{r['truly_recomputed_tokens']}"
        for r in known
    ]
    return "\n".join(lines) + "\n"


def _check_arguments(
    specs: tuple[StrategySpec, ...],
    names: tuple[str, ...],
    workers: int,
    chunk_rows: int,
    limit: int | None,
) -> None:
    if not specs:
        raise ConfigError("--strategy: no strategy given; name at least one, or 'all'")
    if len(names) != len(specs):
        raise ConfigError(f"labels: {len(names)} label(s) for {len(specs)} strategies")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(
            f"--strategy: {', '.join(repeated)} given more than once; give each strategy once "
            "(or distinct labels)"
        )
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be at least 1, got {chunk_rows}")
    if limit is not None and limit < 0:
        raise ConfigError(f"--limit must not be negative, got {limit}")


def _jobs(
    root: Path,
    bundles: Sequence[Bundle],
    specs: tuple[StrategySpec, ...],
    names: tuple[str, ...],
    fast: bool,
    chunk_rows: int,
    limit: int | None,
) -> tuple[list[Job], int]:
    jobs = []
    total = 0
    for bundle in bundles:
        count = run_decision_count(bundle)
        run_limit = None if limit is None else max(0, min(count, limit - total))
        total += count if run_limit is None else run_limit
        path = bundle.path.relative_to(root).as_posix() if bundle.path != root else "."
        jobs.append(Job(bundle, path, specs, names, fast, chunk_rows, run_limit))
    return jobs, total


def _write_outputs(folder: Path, summary: pl.DataFrame, agreement: pl.DataFrame, text: str) -> None:
    pq.write_table(summary.to_arrow(), folder / "summary.parquet", compression=COMPRESSION)
    pq.write_table(agreement.to_arrow(), folder / "agreement.parquet", compression=COMPRESSION)
    (folder / "summary.json").write_text(dumps(summary_records(summary, agreement)), "utf-8")
    (folder / "summary.txt").write_text(text, "utf-8")
