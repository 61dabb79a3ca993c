"""Closed-mode replay: re-simulate each recorded run's workload once per strategy.

Open mode asks "what would each policy have chosen on the recorded contexts"; closed mode asks
"how would the run have gone": the recorded workload (every request's arrival, lengths, priority
and input order, from the ``requests`` table) runs again on the embedded engine with the
recorded engine configuration, once per strategy, and the counterfactual runs are compared with
the recorded one on serving metrics. The counterfactual runs are a plan for the sweep's executor
(:func:`tracekit.sweep.execute_runs`), so they run in parallel with ``jobs``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import safe_output
from tracekit.analysis.serving import SloTargets, serving_metrics
from tracekit.engine.config import PRE_FEATURE_SETTINGS, make_engine_config
from tracekit.errors import ConfigError, TraceSchemaError
from tracekit.recording.sim import SimRun, make_run_id
from tracekit.replay.marks import MARKER, REPLAY_MARK
from tracekit.strategies import HostPath, StrategySpec
from tracekit.sweep import PlannedRun, execute_runs, make_executor
from tracekit.sweep.progress import ProgressCallback, ProgressSnapshot
from tracekit.trace.bundle import Bundle, check_parquet, open_trace
from tracekit.workloads import Workload, with_shared_prefix

__all__ = ["CLOSED_SUMMARY", "ClosedReplay", "recorded_workload", "replay_closed"]

CLOSED_SUMMARY = "closed_summary"
# Metrics compared with the recorded run as relative changes (percent).
COMPARED = ("throughput_rps", "ttft_p95_s", "tpot_p95_s", "e2e_p95_s", "preemptions")
# The requests columns closed mode reads (it rebuilds the workload from them).
REQUEST_COLUMNS = (
    "input_index", "request_id", "arrival_s", "prompt_tokens", "target_output_tokens",
    "max_tokens", "priority",
)  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class ClosedReplay:
    """What a closed-mode replay produced."""

    out: Path
    summary: pl.DataFrame


def recorded_workload(bundle: Bundle) -> Workload:
    """The workload of a recorded run, rebuilt from its ``requests`` table (input order kept)."""
    spec = bundle.manifest.get("workload") or {}
    if not isinstance(spec, dict):
        spec = {}
    files = bundle.table_files("requests")
    for file in files:  # one line naming the file, not a polars traceback
        check_parquet(file, list(REQUEST_COLUMNS))
    try:
        frame = (
            pl.scan_parquet(files)
            .sort("input_index")
            .select(
                "request_id",
                "arrival_s",
                "prompt_tokens",
                pl.col("target_output_tokens").alias("output_tokens"),
                "max_tokens",
                "priority",
            )
            .collect()
        )
    except (pl.exceptions.PolarsError, OSError) as exc:
        message = " ".join(str(exc).split())[:200]
        raise TraceSchemaError(
            f"{bundle.path}: cannot read the requests table ({type(exc).__name__}: {message}); "
            "the file is truncated or corrupt: re-record the bundle"
        ) from None
    if frame.height == 0:
        raise TraceSchemaError(
            f"{bundle.path}: the run has no requests table rows; closed mode needs the recorded "
            "workload (live recordings and imports cannot be re-simulated)"
        )
    workload = Workload(
        name=str(spec.get("name") or bundle.run_id),
        source=Path(str(spec.get("source") or bundle.path)),
        sha256=str(spec.get("sha256") or ""),
        format=str(spec.get("format") or "trace"),
        options=dict(spec.get("options") or {}),
        frame=frame,
    )
    return _with_recorded_prefix(workload)


def _with_recorded_prefix(workload: Workload) -> Workload:
    """Re-derive a synthetic shared prefix (``--shared-prefix-tokens``) from its recorded options.

    The requests table does not hold token content; a shared prefix depends only on its options
    and the requests' order, so it comes back exactly. Other content (Mooncake ``hash_ids``,
    conversation logs) is not in the trace: those runs re-simulate without it.
    """
    options = workload.options
    tokens = options.get("shared_prefix_tokens")
    if tokens is None:
        return workload
    content = {"shared_prefix_tokens", "prefix_groups", "prefix_seed", "content_block_tokens"}
    bare = dataclasses.replace(
        workload, options={k: v for k, v in options.items() if k not in content}
    )
    shared = with_shared_prefix(
        bare, tokens, options.get("prefix_groups") or 1, options.get("prefix_seed") or 0
    )
    # The recorded options, in their recorded order (they enter the run id).
    return dataclasses.replace(shared, options=dict(options))


def _engine_config(bundle: Bundle) -> Any:
    config = bundle.manifest.get("engine_config")
    if not isinstance(config, dict):
        raise TraceSchemaError(
            f"{bundle.path / 'manifest.json'}: field 'engine_config' is missing; closed mode "
            "needs the recorded engine configuration"
        )
    try:
        # A manifest older than a vLLM feature keeps that feature's setting of the time.
        return make_engine_config(**{**PRE_FEATURE_SETTINGS, **config})
    except TypeError as exc:
        raise TraceSchemaError(
            f"{bundle.path / 'manifest.json'}: field 'engine_config' does not fit this engine "
            f"({exc}); re-record the bundle with this tracekit"
        ) from None


def _recorded_seed(bundle: Bundle) -> int:
    """The recorded run's seed (0 when absent); a NaN or a non-integer is refused in one line."""
    value = bundle.manifest.get("seed")
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceSchemaError(
            f"{bundle.path / 'manifest.json'}: field 'seed' is {value!r}, expected an integer; "
            "fix the manifest or pass --seed"
        )
    return value


def replay_closed(
    trace: str | Path,
    strategies: Sequence[StrategySpec],
    out: str | Path,
    *,
    host_path: HostPath = "typed",
    seed: int | None = None,
    slo: SloTargets | None = None,
    progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
    jobs: int | None = 1,
    overwrite: bool = False,
) -> ClosedReplay:
    """Re-simulate every run of ``trace`` once per strategy and compare with the recording.

    Parameters
    ----------
    trace
        A bundle or dataset recorded with the embedded engine (its manifests hold the engine
        configuration and its ``requests`` tables the workload).
    strategies
        Resolved strategies (see :func:`tracekit.strategies.parse_strategy_list`).
    out
        Output folder to create: ``bundles/<recorded run>/<strategy>/`` per counterfactual run,
        and ``closed_summary.parquet`` / ``.json``. It appears only when everything completed.
    host_path
        Contract the policies are called through.
    seed
        Seed of the counterfactual runs; defaults to each recorded run's seed.
    slo
        Latency targets of SLO attainment.
    progress
        Given a label, returns a ``(runs done, runs total)`` callback, or None.
    jobs
        Worker processes re-simulating the runs (1: in this process; ``None``: one per core).
        The counterfactual runs go through the sweep's executor
        (:func:`tracekit.sweep.execute_runs`); the output is the same for any number.
    overwrite
        Replace an existing output folder, once the new one is complete, and only one that
        ``tracekit replay`` wrote (:data:`tracekit.replay.marks.REPLAY_MARK`).

    Returns
    -------
    ClosedReplay
        The output folder and the summary (one row per recorded run and strategy, plus the
        recorded run itself with ``strategy`` = ``recorded``).
    """
    if not strategies:
        raise ConfigError("--strategy names no strategy to replay")
    final = Path(out)
    safe_output.check_folder_output(final, mark=REPLAY_MARK, overwrite=overwrite, inputs=[trace])
    dataset = open_trace(trace)
    executor = make_executor(jobs)
    # docs/guarantees.md, "Safe output": staged beside OUT, renamed into place when complete
    # (a killed replay's staging folder is removed by the next replay into OUT).
    with safe_output.staged_folder(
        final, mark=REPLAY_MARK, overwrite=overwrite, inputs=[trace], marker=MARKER
    ) as staging:
        planned: list[PlannedRun] = []
        recorded: list[tuple[Bundle, int]] = []
        for bundle in dataset:
            workload = recorded_workload(bundle)
            config = _engine_config(bundle)
            run_seed = _recorded_seed(bundle) if seed is None else seed
            recorded.append((bundle, len(strategies)))
            for strategy in strategies:
                run = SimRun(workload, config, strategy, host_path, run_seed)
                planned.append(
                    PlannedRun(
                        path=f"bundles/{bundle.run_id}/{strategy.label}",
                        run=run,
                        run_id=make_run_id(run),
                        workload=workload.name,
                        rate=float(workload.options.get("rate_scale", 1.0)),
                        strategy=strategy.name,
                        config=host_path,
                        repeat=0,
                        seed=run_seed,
                    )
                )
        callback = progress("closed-mode runs") if progress is not None else None
        execute_runs(
            planned, staging, executor, progress=_run_counts(callback) if callback else None
        ).check()
        runs: list[tuple[Path, Path, str, str, str]] = []
        todo = iter(planned)
        for bundle, count in recorded:
            runs.append((bundle.path, bundle.path, bundle.run_id, "recorded", bundle.run_id))
            for new in itertools.islice(todo, count):
                runs.append(
                    (staging / new.path, final / new.path, new.run_id, new.strategy, bundle.run_id)
                )
        summary = _summarise(runs, slo)
        summary.write_parquet(staging / f"{CLOSED_SUMMARY}.parquet", compression="zstd")
        (staging / f"{CLOSED_SUMMARY}.json").write_text(
            json.dumps(summary.to_dicts(), indent=2, sort_keys=True, default=str) + "\n", "utf-8"
        )
    return ClosedReplay(final, summary)


def _run_counts(callback: Callable[[int, int], None]) -> ProgressCallback:
    """A sweep progress callback that reports ``(runs ended, runs total)`` to ``callback``."""

    def report(snapshot: ProgressSnapshot) -> None:
        if snapshot.event in ("start", "finished", "end"):
            callback(snapshot.skipped + snapshot.done + snapshot.failed, snapshot.total)

    return report


# Changes are rounded to this many decimals of a percent: a metric computed in another order
# (another row-group split, say) may differ from the recorded one in its last bit, and
# ``-1.1102e-14`` is meant as 0.
CHANGE_DECIMALS = 6


def _relative_change(metric: str) -> pl.Expr:
    """``100 * (value - recorded) / recorded`` per row, rounded; null where recorded is 0."""
    recorded = pl.col(f"_recorded_{metric}")
    change = (100.0 * (pl.col(metric) - recorded) / recorded).round(CHANGE_DECIMALS)
    return (
        pl.when(recorded != 0)
        .then(change + 0.0)  # + 0.0 turns a rounded -0.0 into 0.0
        .alias(f"{metric}_change_pct")
    )


def _summarise(
    runs: list[tuple[Path, Path, str, str, str]], slo: SloTargets | None
) -> pl.DataFrame:
    """Serving metrics per run, with relative changes against the recorded run.

    ``runs`` holds ``(read_from, final_path, run_id, strategy, recorded_run_id)``.
    """
    # Labelled per bundle, not joined on run_id: re-simulating the recorded strategy gives the
    # recorded run's own (deterministic) id.
    joined = pl.concat(
        [
            serving_metrics(
                pl.scan_parquet(Bundle(read, {}).table_files("requests")), slo
            ).with_columns(
                pl.lit(str(final)).alias("bundle"),
                pl.lit(strategy).alias("strategy"),
                pl.lit(recorded).alias("recorded_run_id"),
            )
            for read, final, _, strategy, recorded in runs
        ],
        how="vertical_relaxed",
    ).select(
        "bundle",
        "run_id",
        "strategy",
        "recorded_run_id",
        pl.exclude("bundle", "run_id", "strategy", "recorded_run_id"),
    )
    recorded = joined.filter(pl.col("strategy") == "recorded").select(
        "recorded_run_id", *[pl.col(m).alias(f"_recorded_{m}") for m in COMPARED]
    )
    return (
        joined.join(recorded, on="recorded_run_id", how="left")
        .with_columns(_relative_change(m) for m in COMPARED)
        .drop([f"_recorded_{m}" for m in COMPARED])
    )
