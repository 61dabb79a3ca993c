"""``tracekit oracle``: a recorded trace's victim decisions against the hindsight best.

The recorded workload (the bundle's ``requests`` table) and engine configuration are run again
on the embedded engine under the built-in rule: the **reference run**. Its decisions are the
decisions evaluated: each strategy's choice on each of them (open mode: a fresh policy fed every
decision in order), and every candidate rolled out (:mod:`tracekit.oracle.rollout`). Then:

- **regret** of a strategy at a decision: its candidate's score minus the best candidate's;
- **closed loop**: every strategy, and the greedy oracle (the per-decision best, chosen by
  rollouts at every decision of its own run), run on the whole workload and scored exactly;
- **headroom**: the built-in rule's objective minus the greedy oracle's; a strategy's share is
  its own gain over the built-in rule divided by the headroom.

The work is a plan for the sweep executor (:func:`tracekit.sweep.execute_runs`): decision
chunks (a step's decisions stay in one chunk), one closed-loop run per strategy and the greedy
oracle, so ``jobs`` processes share it. Outputs appear in ``out`` atomically (a hidden staging
folder renamed into place): ``decisions.parquet``, ``candidates.parquet``, ``regret.parquet``,
``closed.parquet`` and ``oracle.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import safe_output
from tracekit.engine.config import EngineConfig, recorded_engine_config
from tracekit.engine.engine import EngineRun
from tracekit.engine.hosts import BuiltinHost
from tracekit.engine.outputs import DecisionRecord
from tracekit.engine.request import EngineRequest, engine_requests
from tracekit.errors import ConfigError, TraceSchemaError
from tracekit.hosts.preemption_policy import PreemptionContext
from tracekit.oracle.rollout import (
    OracleSettings,
    evaluate_at,
    run_greedy_oracle,
    run_objective,
)
from tracekit.replay.closed_mode import recorded_workload
from tracekit.strategies import StrategySpec
from tracekit.sweep import PlannedRun, execute_runs, make_executor
from tracekit.trace.validate import open_checked
from tracekit.trace.values import ALL_COLUMNS

__all__ = [
    "ORACLE_LABEL",
    "load_oracle",
    "OracleResult",
    "OracleTask",
    "oracle_frames",
    "run_oracle",
    "strategy_picks",
]

#: The greedy oracle's row in the closed-loop table.
ORACLE_LABEL = "oracle-greedy"
# Decision chunks per worker process: small enough to balance, large enough that the reference
# run each chunk replays to its first decision stays a small share.
_CHUNKS_PER_JOB = 4
# The marker file of an oracle folder, and what the folder holds (docs/guarantees.md).
MARKER = ".tracekit-oracle"
OUTPUT_FILES = (
    "candidates.parquet", "closed.parquet", "decisions.parquet", "oracle.json", "regret.parquet",
)  # fmt: skip
ORACLE_MARK = safe_output.marker_files("tracekit oracle", MARKER, OUTPUT_FILES)
# A task folder lives in the job's own staging folder, so any earlier one there is the job's.
_TASK_MARK = safe_output.Mark("tracekit oracle", lambda folder: None)


@dataclasses.dataclass(frozen=True, slots=True)
class DecisionSpec:
    """One reference decision, as a chunk needs it."""

    seq: int
    step: int
    candidates: tuple[str, ...]
    builtin_victim_id: str
    victim_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class OracleTask:
    """One unit of the plan: a decision chunk, a strategy's closed-loop run, or the oracle's."""

    kind: str  # "decisions", "closed" or "greedy"
    requests: tuple[EngineRequest, ...]
    config: EngineConfig
    settings: OracleSettings
    decisions: tuple[DecisionSpec, ...] = ()
    strategy: StrategySpec | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OracleResult:
    """What ``run_oracle`` wrote and computed."""

    out: Path
    summary: dict[str, Any]
    decisions: pl.DataFrame
    regret: pl.DataFrame
    closed: pl.DataFrame


# --------------------------------------------------------------------------------- workers
def record_oracle_task(
    task: OracleTask, out: Path, sidecar: Path | None, run_id: str, overwrite: bool
) -> None:
    """The sweep recorder of an oracle task: ``result.parquet`` and a complete manifest.

    Written in a hidden sibling folder and renamed into place, like a recorded bundle, so the
    executor sees the folder only once it is complete.
    """
    frame = _run_task(task)
    with safe_output.staging_copy(out) as staging:
        frame.write_parquet(staging / "result.parquet")
        manifest = {"complete": True, "run_id": run_id, "kind": task.kind}
        (staging / "manifest.json").write_text(json.dumps(manifest) + "\n", "utf-8")
    # Inside the job's own staging folder: an earlier (incomplete) task folder is replaced.
    safe_output.publish_folder(staging, out, mark=_TASK_MARK, overwrite=True)


def _run_task(task: OracleTask) -> pl.DataFrame:
    if task.kind == "decisions":
        return _evaluate_chunk(task)
    if task.kind == "greedy":
        run = run_greedy_oracle(task.requests, task.config, task.settings)
        return _closed_row(ORACLE_LABEL, run, task.settings)
    assert task.strategy is not None
    run = EngineRun(task.requests, task.config, task.strategy.make_host("typed"))
    run.run_to_end()
    return _closed_row(task.strategy.name, run, task.settings)


def _evaluate_chunk(task: OracleTask) -> pl.DataFrame:
    """Every candidate of the chunk's decisions, rolled out from the reference run."""
    run = EngineRun(task.requests, task.config, BuiltinHost(), collect=False)
    rows: dict[str, list[Any]] = {
        k: [] for k in ("seq", "candidate_index", "victim_id", "score", "window_steps")
    }
    prior: list[str] = []
    step = -1
    for decision in task.decisions:
        if decision.step != step:
            while run.prepare() and run.next_step < decision.step:
                run.step()
            if run.next_step != decision.step:
                raise RuntimeError(
                    f"the reference run did not reach step {decision.step} (at {run.next_step})"
                )
            step = decision.step
            # Decisions of this step made before the chunk's first one (a split step).
            prior = []
            before = decision.seq - run.num_decisions
            if before:
                raise RuntimeError("a step's decisions must stay in one chunk")
        scores = evaluate_at(
            run, prior, decision.candidates, decision.builtin_victim_id, task.settings
        )
        for index, score in enumerate(scores):
            rows["seq"].append(decision.seq)
            rows["candidate_index"].append(index)
            rows["victim_id"].append(score.victim_id)
            rows["score"].append(score.score)
            rows["window_steps"].append(score.window_steps)
        prior.append(decision.victim_id)
    return pl.DataFrame(
        rows,
        schema={
            "seq": pl.Int64,
            "candidate_index": pl.Int32,
            "victim_id": pl.String,
            "score": pl.Float64,
            "window_steps": pl.Int32,
        },
    )


def _closed_row(label: str, run: EngineRun, settings: OracleSettings) -> pl.DataFrame:
    requests = run.result.requests
    metrics = {
        name: run_objective(requests, dataclasses.replace(settings, objective=name))  # type: ignore[arg-type]
        for name in ("recomputed", "e2e", "slo")
    }
    return pl.DataFrame(
        {
            "strategy": [label],
            "objective": [metrics[settings.objective]],
            "recomputed_tokens": [int(metrics["recomputed"])],
            "e2e_sum_s": [metrics["e2e"]],
            "slo_misses": [int(metrics["slo"])],
            "num_decisions": [run.num_decisions],
            "num_preemptions": [run.result.num_preemptions],
        }
    )


# --------------------------------------------------------------------------------- driver
def _engine_config(manifest_path: Path, config: object) -> EngineConfig:
    if not isinstance(config, dict):
        raise TraceSchemaError(
            f"{manifest_path}: field 'engine_config' is missing; the oracle needs the recorded "
            "engine configuration (record the run with tracekit record sim or a live recorder)"
        )
    try:
        # Features a manifest predates keep their setting of the time, never today's default.
        return recorded_engine_config(config)
    except (TypeError, ValueError) as exc:
        raise TraceSchemaError(
            f"{manifest_path}: field 'engine_config' does not fit this engine ({exc}); "
            "re-record the bundle with this tracekit"
        ) from None


def _context(decision: DecisionRecord, config: EngineConfig) -> PreemptionContext:
    return PreemptionContext(
        decision.candidates,
        config.scheduling_policy,
        decision.requesting_request_id,
        decision.kv_cache_usage,
        decision.time_s,
        decision.builtin_victim_id,
    )


def strategy_picks(
    decisions: Sequence[DecisionRecord], config: EngineConfig, strategies: Sequence[StrategySpec]
) -> dict[str, list[str]]:
    """Each strategy's victim on each reference decision (a fresh policy, fed in order)."""
    picks: dict[str, list[str]] = {}
    for spec in strategies:
        host = spec.make_host("typed")
        picks[spec.name] = [host.choose_victim(_context(d, config)).victim_id for d in decisions]
    return picks


def _chunks(decisions: Sequence[DecisionSpec], count: int) -> list[tuple[DecisionSpec, ...]]:
    """About ``count`` runs of decisions, never splitting a step."""
    if not decisions:
        return []
    size = max(1, math.ceil(len(decisions) / count))
    chunks: list[tuple[DecisionSpec, ...]] = []
    current: list[DecisionSpec] = []
    for decision in decisions:
        if len(current) >= size and current[-1].step != decision.step:
            chunks.append(tuple(current))
            current = []
        current.append(decision)
    chunks.append(tuple(current))
    return chunks


def _run_id(kind: str, index: int, key: str) -> str:
    return f"oracle-{kind}-{index}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def run_oracle(
    trace: str | Path,
    out: str | Path,
    strategies: Sequence[StrategySpec],
    settings: OracleSettings | None = None,
    *,
    jobs: int | None = 1,
    limit: int | None = None,
    greedy: bool = True,
    progress: Callable[[Any], None] | None = None,
    overwrite: bool = False,
) -> OracleResult:
    """Evaluate the victim decisions of ``trace`` against the hindsight oracle.

    Parameters
    ----------
    trace
        One run's bundle (its ``requests`` table and manifest ``engine_config``).
    out
        Output folder to create; it appears only when everything completed.
    strategies
        Strategies to score (regret, closed loop, share of headroom); ``builtin`` is added.
    settings
        Objective, horizon and SLO targets (None: the defaults).
    jobs
        Worker processes (1: this process; None: one per core).
    limit
        Evaluate only the first N decisions of the reference run (closed loops are whole runs).
    greedy
        Run the greedy oracle in closed loop (the headroom needs it).
    progress
        A sweep progress callback.
    overwrite
        Replace an existing ``out``, once the new one is complete, and only one that
        ``tracekit oracle`` wrote (its marker file :data:`MARKER`, and only its files).

    Returns
    -------
    OracleResult
    """
    settings = settings if settings is not None else OracleSettings()
    final = Path(out)
    safe_output.check_folder_output(final, mark=ORACLE_MARK, overwrite=overwrite, inputs=[trace])
    if settings.horizon < 1:
        raise ConfigError(f"--horizon {settings.horizon}: expected a number of steps >= 1")
    bundles = list(open_checked(trace, {"requests": ALL_COLUMNS}))
    if len(bundles) != 1:
        raise ConfigError(
            f"{trace}: holds {len(bundles)} runs; pass one run's bundle folder to the oracle"
        )
    bundle = bundles[0]
    workload = recorded_workload(bundle)
    config = _engine_config(bundle.path / "manifest.json", bundle.manifest.get("engine_config"))
    requests = tuple(engine_requests(workload))
    if all(s.name != "builtin" for s in strategies):
        strategies = [StrategySpec("builtin", "builtin"), *strategies]

    try:
        reference = EngineRun(requests, config, BuiltinHost()).run_to_end()
    except ValueError as exc:  # what the forkable engine does not model yet: one line
        raise ConfigError(f"{trace}: the oracle cannot fork this run: {exc}") from None
    records = reference.decisions[:limit] if limit is not None else reference.decisions
    # A step's decisions are evaluated together: cut the limit at a step boundary.
    if limit is not None and len(records) < len(reference.decisions):
        cut = reference.decisions[len(records)].step
        records = [d for d in records if d.step != cut] or records
    specs = [
        DecisionSpec(
            d.seq,
            d.step,
            tuple(c.request_id for c in d.candidates),
            d.builtin_victim_id,
            d.victim_id,
        )
        for d in records
    ]
    picks = strategy_picks(records, config, strategies)

    executor = make_executor(jobs)
    chunk_count = max(1, (executor.workers or 1) * _CHUNKS_PER_JOB)
    tasks: list[tuple[str, OracleTask]] = []
    if greedy:
        tasks.append(("greedy", OracleTask("greedy", requests, config, settings)))
    for i, chunk in enumerate(_chunks(specs, chunk_count)):
        tasks.append((f"chunk-{i:04d}", OracleTask("decisions", requests, config, settings, chunk)))
    for spec in strategies:
        tasks.append(
            (f"closed-{spec.label}", OracleTask("closed", requests, config, settings, (), spec))
        )
    key = json.dumps([bundle.run_id, dataclasses.asdict(settings), limit], default=str)
    planned = [
        PlannedRun(
            path=f"tasks/{name}",
            run=task,
            run_id=_run_id(task.kind, i, f"{key}/{name}"),
            workload=workload.name,
            rate=1.0,
            strategy=task.strategy.name if task.strategy else task.kind,
            config="oracle",
            repeat=0,
            seed=0,
            recorder=record_oracle_task,
        )
        for i, (name, task) in enumerate(tasks)
    ]
    # docs/guarantees.md, "Safe output": staged beside OUT, renamed into place when complete.
    with safe_output.staged_folder(
        final, mark=ORACLE_MARK, overwrite=overwrite, inputs=[trace], marker=MARKER
    ) as staging:
        execute_runs(planned, staging, executor, progress=progress).check()
        parts = {
            name: pl.read_parquet(staging / f"tasks/{name}/result.parquet") for name, _ in tasks
        }
        candidates = pl.concat(
            [parts[n] for n, t in tasks if t.kind == "decisions"]
            or [_evaluate_chunk(OracleTask("decisions", (), config, settings))]
        ).sort("seq", "candidate_index")
        closed = pl.concat([parts[n] for n, t in tasks if t.kind != "decisions"])
        frames = oracle_frames(candidates, records, picks, closed)
        summary = _summary(bundle.path, settings, frames, len(records), limit)
        candidates.write_parquet(staging / "candidates.parquet", compression="zstd")
        for name in ("decisions", "regret", "closed"):
            frames[name].write_parquet(staging / f"{name}.parquet", compression="zstd")
        (staging / "oracle.json").write_text(
            json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n", "utf-8"
        )
        shutil.rmtree(staging / "tasks")
        for stray in staging.glob(".sweep*"):
            if stray.is_file():
                stray.unlink()
    return OracleResult(final, summary, frames["decisions"], frames["regret"], frames["closed"])


def oracle_frames(
    candidates: pl.DataFrame,
    records: Sequence[DecisionRecord],
    picks: dict[str, list[str]],
    closed: pl.DataFrame,
) -> dict[str, pl.DataFrame]:
    """Decisions, long regret and closed-loop tables from the candidate scores.

    ``candidates`` has one row per ``(seq, victim_id)`` with its ``score``; ``picks`` each
    strategy's victim per decision (in ``records`` order); ``closed`` one row per closed-loop
    run with its ``objective`` (the built-in rule's row is ``builtin``).
    """
    best = (
        candidates.sort("score", "candidate_index")
        .group_by("seq", maintain_order=True)
        .agg(
            pl.col("victim_id").first().alias("best_victim_id"),
            pl.col("score").first().alias("best_score"),
            pl.col("window_steps").max().alias("window_steps"),
            pl.len().alias("num_candidates"),
        )
    )
    meta = pl.DataFrame(
        {
            "seq": [d.seq for d in records],
            "step": [d.step for d in records],
            "time_s": [d.time_s for d in records],
            "kv_cache_usage": [d.kv_cache_usage for d in records],
            "builtin_victim_id": [d.builtin_victim_id for d in records],
        },
        schema={
            "seq": pl.Int64,
            "step": pl.Int64,
            "time_s": pl.Float64,
            "kv_cache_usage": pl.Float64,
            "builtin_victim_id": pl.String,
        },
    )
    regret = (
        pl.DataFrame(
            {
                "seq": [d.seq for d in records] * len(picks),
                "strategy": [name for name in picks for _ in records],
                "victim_id": [v for name in picks for v in picks[name]],
            },
            schema={"seq": pl.Int64, "strategy": pl.String, "victim_id": pl.String},
        )
        .join(candidates.select("seq", "victim_id", "score"), on=["seq", "victim_id"], how="left")
        .join(best.select("seq", "best_score"), on="seq", how="left")
        .with_columns((pl.col("score") - pl.col("best_score")).alias("regret"))
        .drop("best_score")
    )
    builtin_scores = regret.filter(pl.col("strategy") == "builtin").select(
        "seq", pl.col("score").alias("builtin_score"), pl.col("regret").alias("builtin_regret")
    )
    decisions = (
        meta.join(best, on="seq", how="left").join(builtin_scores, on="seq", how="left").sort("seq")
    )
    base = closed.filter(pl.col("strategy") == "builtin")["objective"]
    oracle = closed.filter(pl.col("strategy") == ORACLE_LABEL)["objective"]
    headroom = (base[0] - oracle[0]) if len(base) and len(oracle) else None
    gain = pl.lit(base[0] if len(base) else None, pl.Float64) - pl.col("objective")
    # The built-in rule first, the strategies in the order given, the oracle last.
    closed = closed.sort(
        pl.when(pl.col("strategy") == "builtin")
        .then(0)
        .when(pl.col("strategy") == ORACLE_LABEL)
        .then(2)
        .otherwise(1),
        maintain_order=True,
    )
    closed = closed.with_columns(
        gain.alias("gain_over_builtin"),
        (gain / headroom if headroom else pl.lit(None, pl.Float64)).alias("share_of_headroom"),
    )
    return {"decisions": decisions, "regret": regret, "closed": closed}


def _summary(
    trace: Path,
    settings: OracleSettings,
    frames: dict[str, pl.DataFrame],
    num_decisions: int,
    limit: int | None,
) -> dict[str, Any]:
    regret = frames["regret"]
    per_strategy = (
        regret.group_by("strategy", maintain_order=True)
        .agg(
            pl.col("regret").sum().alias("total_regret"),
            pl.col("regret").mean().alias("mean_regret"),
            (pl.col("regret") == 0).mean().alias("best_choice_rate"),
        )
        .to_dicts()
    )
    closed = frames["closed"]
    base = closed.filter(pl.col("strategy") == "builtin")["objective"]
    oracle = closed.filter(pl.col("strategy") == ORACLE_LABEL)["objective"]
    worst = (
        frames["decisions"]
        .sort("builtin_regret", "seq", descending=[True, False])
        .head(10)
        .select("seq", "step", "time_s", "builtin_victim_id", "best_victim_id", "builtin_regret")
        .to_dicts()
    )
    return {
        # The folder's name only: a results folder must not depend on where it was written.
        "trace": trace.name,
        "settings": dataclasses.asdict(settings),
        "num_decisions": num_decisions,
        "limit": limit,
        "num_candidates": int(frames["decisions"]["num_candidates"].sum() or 0),
        "builtin_objective": base[0] if len(base) else None,
        "oracle_objective": oracle[0] if len(oracle) else None,
        "headroom": (base[0] - oracle[0]) if len(base) and len(oracle) else None,
        "strategies": per_strategy,
        "closed": closed.to_dicts(),
        "most_lost": worst,
    }


def load_oracle(folder: str | Path) -> tuple[dict[str, Any], pl.DataFrame] | None:
    """``oracle.json`` and ``closed.parquet`` of an oracle output folder; None when absent."""
    folder = Path(folder)
    if not (folder / "oracle.json").is_file():
        return None
    summary = json.loads((folder / "oracle.json").read_text("utf-8"))
    return summary, pl.read_parquet(folder / "closed.parquet")
