"""The original experiment matrix, re-run on the embedded engine: strategies x rates x runs.

The published matrix (docs/experiments.md, "The matrix") is 5 strategies x rates 2.0, 3.8
and 5.7 req/s x 3 runs of 1,000 "mixed" requests, vLLM with 600 KV blocks of 16 tokens and 32
sequences. Here every run is one recorded bundle of the embedded engine in experiment mode
(:mod:`tracekit.experiment.record`) on the cost-model clock (preset ``a6000-llama3-8b``).

Runs differ by seed: run ``i`` replays the traces frozen with seed ``seed + i`` (one set of
traces per run index, shared by every strategy and rate, so strategies are compared on identical
requests), and ``static-random`` draws its per-refresh seeds from the same seed. The original's
three runs replayed one frozen trace and varied only through the real system's timing; a
deterministic engine would repeat itself exactly.

Layout of the output folder::

    matrix.json                 the specification, timings and library version
    traces/run<i>/              frozen traces of run i (manifest.json + <prefix>_rate<r>.json)
    bundles/<strategy>/rate<r>/run<i>/   one trace bundle per run
    sent/<strategy>__rate<r>__run<i>.parquet   when the emulated client sent each request

The runs are recorded by the sweep's executor (:func:`tracekit.sweep.execute_runs`), which also
resumes a matrix: a run whose bundle is complete (:attr:`tracekit.trace.bundle.Bundle.complete`)
is skipped.
    runs.parquet                one row per run: summary figures (tracekit.experiment.summary)
    summary.parquet, summary.json        mean and 95% CI per (strategy, rate)
    comparison.parquet, claims.parquet   the paper beside ours (tracekit.experiment.paper)
    comparison.md, comparison.html       the same as fragments for a report
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import polars as pl

from tracekit import __version__, safe_output
from tracekit.defaults import PAPER_RATES
from tracekit.engine import EngineConfig
from tracekit.engine.config import recorded_form
from tracekit.errors import ConfigError
from tracekit.experiment.hooks import LEGACY_STRATEGIES, STRATEGY_PLANS, HookSettings
from tracekit.experiment.paper import claims_frame, comparison_frame, render_html, render_markdown
from tracekit.experiment.record import (
    HOST_PATH,
    ExperimentRun,
    make_experiment_run_id,
    record_experiment_run,
)
from tracekit.experiment.summary import METRICS, SloSpec, aggregate_runs, run_metrics
from tracekit.experiment.traces import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_POOL_MAX_PROMPT_TOKENS,
    DEFAULT_POOL_OPTIONS,
    DEFAULT_POOL_PATH,
    freeze_traces,
    load_length_pool,
    trace_filename,
)
from tracekit.sweep import PlannedRun, execute_runs, make_executor
from tracekit.sweep.executors import refuse_in_bootstrap
from tracekit.sweep.progress import ProgressCallback, ProgressSnapshot
from tracekit.trace.bundle import open_trace
from tracekit.trace.timestamps import utc_now_iso
from tracekit.workloads import Workload, load_workload

__all__ = [
    "PAPER_RATES",
    "MatrixCell",
    "MatrixResult",
    "MatrixSpec",
    "matrix_cells",
    "matrix_plan",
    "run_matrix",
    "summarize_matrix",
]


Progress = Callable[[int, int], None]

# The marker file of an experiment folder, written when a run creates (or adopts) it.
MARKER = ".tracekit-experiment"


def _experiment_folder(folder: Path) -> str | None:
    """None if an experiment run wrote ``folder`` (its marker, or an older run's matrix.json)."""
    if (folder / MARKER).is_file() or (folder / "matrix.json").is_file():
        return None
    return f"not an experiment folder (no {MARKER} file) and not empty"


EXPERIMENT_MARK = safe_output.Mark("tracekit experiment run", _experiment_folder)


@dataclasses.dataclass(frozen=True, slots=True)
class MatrixSpec:
    """What to run; the defaults are the published matrix.

    Parameters
    ----------
    strategies
        Legacy strategy names.
    rates
        Arrival rates, requests per second.
    runs
        Runs per (strategy, rate).
    num_requests
        Requests per run.
    seed
        Run ``i`` uses seed ``seed + i`` (traces and static-random).
    engine_config
        Engine configuration (600 x 16-token blocks, 32 sequences, cost-model clock).
    settings
        The hooks' constants.
    slo
        SLO targets of the summary (TTFT <= 300 ms, as the paper's tables).
    pool_path, pool_options, max_prompt_tokens
        Where request lengths are sampled from (see :mod:`tracekit.experiment.traces`).
    max_output_tokens
        Cap of each request's ``max_tokens``.
    prefix
        Workload name and request-id prefix.
    load_scale
        Arrival rates are ``rate * load_scale`` while cells keep the nominal ``rate`` (to
        compare a differently sized system at the same relative load as the paper).
    latency_from
        ``arrival`` (default): latencies from each request's scheduled arrival. ``sent``: from
        when the emulated client sent it, the original runner's measurement (docs/experiments.md,
        "Summary figures"), for
        comparison only; it matters with ``settings.client_max_in_flight``.
    """

    strategies: tuple[str, ...] = LEGACY_STRATEGIES
    rates: tuple[float, ...] = PAPER_RATES
    runs: int = 3
    num_requests: int = 1000
    seed: int = 42
    engine_config: EngineConfig = dataclasses.field(
        # The original runner's engine: vLLM with prefix caching off, synchronous scheduling.
        default_factory=lambda: EngineConfig(
            clock="cost-model",
            cost_model="a6000-llama3-8b",
            enable_prefix_caching=False,
            async_scheduling=False,
        )
    )
    settings: HookSettings = dataclasses.field(default_factory=HookSettings)
    slo: SloSpec = dataclasses.field(default_factory=SloSpec)
    pool_path: Path = DEFAULT_POOL_PATH
    pool_options: dict[str, Any] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_POOL_OPTIONS)
    )
    max_prompt_tokens: int | None = DEFAULT_POOL_MAX_PROMPT_TOKENS
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    prefix: str = "mixed"
    load_scale: float = 1.0
    latency_from: Literal["arrival", "sent"] = "arrival"

    def __post_init__(self) -> None:
        unknown = [s for s in self.strategies if s not in STRATEGY_PLANS]
        if unknown or not self.strategies or len(set(self.strategies)) != len(self.strategies):
            raise ConfigError(
                f"strategies must be distinct names among {', '.join(LEGACY_STRATEGIES)}; "
                f"found {', '.join(self.strategies) or 'none'}"
            )
        if not self.rates or any(not r > 0 for r in self.rates):
            raise ConfigError(f"rates must be positive requests per second; found {self.rates}")
        if not self.load_scale > 0:
            raise ConfigError(f"load_scale must be > 0; found {self.load_scale}")
        if self.latency_from not in ("arrival", "sent"):
            raise ConfigError(
                f"latency_from must be 'arrival' or 'sent'; found {self.latency_from!r}"
            )
        if self.runs < 1 or self.num_requests < 1:
            raise ConfigError(
                f"runs and num_requests must be >= 1; found {self.runs}, {self.num_requests}"
            )

    def describe(self) -> dict[str, Any]:
        """The specification as JSON-compatible values (for ``matrix.json``)."""
        return {
            "strategies": list(self.strategies),
            "rates": [float(r) for r in self.rates],
            "runs": self.runs,
            "num_requests": self.num_requests,
            "seed": self.seed,
            "engine_config": recorded_form(self.engine_config),
            "hooks": self.settings.as_dict(),
            "slo": dataclasses.asdict(self.slo),
            "pool_path": str(self.pool_path),
            "pool_options": self.pool_options,
            "max_prompt_tokens": self.max_prompt_tokens,
            "max_output_tokens": self.max_output_tokens,
            "prefix": self.prefix,
            "load_scale": self.load_scale,
            "arrival_rates": [self.arrival_rate(r) for r in self.rates],
            "latency_from": self.latency_from,
        }

    def arrival_rate(self, rate: float) -> float:
        """The arrival rate that stands for the nominal ``rate`` (rounded to 6 decimals)."""
        return round(float(rate) * self.load_scale, 6)


@dataclasses.dataclass(frozen=True, slots=True)
class MatrixCell:
    """One run of the matrix: strategy, nominal and arrival rate, run index, seed, files."""

    strategy: str
    rate: float
    arrival_rate: float
    run_index: int
    seed: int
    trace: Path
    bundle: Path

    @property
    def label(self) -> str:
        """``<strategy>__rate<rate>__run<i>``, the original runner's label without workload."""
        return f"{self.strategy}__rate{self.rate}__run{self.run_index}"


def matrix_cells(spec: MatrixSpec, out: str | Path) -> list[MatrixCell]:
    """Every run of ``spec`` under ``out``, in (run, rate, strategy) order (a sweep's expansion)."""
    root = Path(out)
    return [
        MatrixCell(
            strategy,
            float(rate),
            spec.arrival_rate(rate),
            run,
            spec.seed + run,
            root / "traces" / f"run{run}" / trace_filename(spec.prefix, spec.arrival_rate(rate)),
            root / "bundles" / strategy / f"rate{float(rate)}" / f"run{run}",
        )
        for run in range(spec.runs)
        for rate in spec.rates
        for strategy in spec.strategies
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class MatrixResult:
    """A finished matrix: its folder, per-run and per-cell frames, claims, and wall time."""

    folder: Path
    runs: pl.DataFrame
    summary: pl.DataFrame
    comparison: pl.DataFrame
    claims: pl.DataFrame
    wall_s: float


def _sent_path(root: Path, cell: MatrixCell) -> Path:
    return root / "sent" / f"{cell.label}.parquet"


def matrix_plan(spec: MatrixSpec, out: str | Path) -> list[PlannedRun]:
    """The runs of ``spec`` as an execution plan for :func:`tracekit.sweep.execute_runs`.

    Reads the frozen traces below ``out`` (each once), so call it after they were frozen. The
    plan is in execution order: costliest first (``largest-first`` scores every token position,
    then the highest rates), so that the workers finish together.
    """
    root = Path(out)
    workloads: dict[Path, Workload] = {}
    runs = []
    for cell in matrix_cells(spec, root):
        if cell.trace not in workloads:
            workloads[cell.trace] = load_workload(str(cell.trace))
        run = ExperimentRun(
            workloads[cell.trace],
            cell.strategy,
            spec.engine_config,
            seed=cell.seed,
            settings=spec.settings,
            labels={
                "rate": cell.rate,
                "arrival_rate": cell.arrival_rate,
                "run_index": cell.run_index,
            },
        )
        runs.append(
            PlannedRun(
                path=cell.bundle.relative_to(root).as_posix(),
                run=run,
                run_id=make_experiment_run_id(run),
                workload=spec.prefix,
                rate=cell.rate,
                strategy=cell.strategy,
                config=HOST_PATH,
                repeat=cell.run_index,
                seed=cell.seed,
                recorder=record_experiment_run,
                sidecar=_sent_path(root, cell).relative_to(root).as_posix(),
            )
        )
    runs.sort(key=lambda r: (r.strategy != "largest-first", -r.rate))
    return runs


def _counts(progress: Progress) -> ProgressCallback:
    """A sweep progress callback that reports ``(runs ended, runs total)`` to ``progress``."""

    def report(snapshot: ProgressSnapshot) -> None:
        if snapshot.event in ("start", "finished", "end"):
            ended = snapshot.skipped + snapshot.done + snapshot.failed
            progress(ended, snapshot.total)

    return report


def run_matrix(
    spec: MatrixSpec,
    out: str | Path,
    *,
    jobs: int = 1,
    resume: bool = False,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> MatrixResult:
    """Freeze the traces, record every run and summarise the matrix into ``out``.

    The runs go through the sweep's executor and resume mechanism
    (:func:`tracekit.sweep.execute_runs`).

    Parameters
    ----------
    spec
        The matrix.
    out
        Output folder (see the module docstring for its layout).
    jobs
        Worker processes recording runs in parallel (1: in this process).
    resume
        Keep complete bundles already in ``out`` (the original runner's ``--resume``) and
        record the rest; otherwise an existing bundle is an error.
    overwrite
        Record every run again in a folder an experiment run wrote: each bundle (and the
        traces, the send times, the summary) is replaced once its new one is complete.
    progress
        Called with ``(runs done, runs total)``.

    Returns
    -------
    MatrixResult
        Frames as written to ``out``.

    Raises
    ------
    tracekit.errors.ConfigError
        A bad ``jobs``, a bundle already in ``out`` without ``resume``, or a complete bundle
        that holds another run than ``spec`` gives.
    tracekit.sweep.RunFailedError
        A run failed (the complete ones are kept; ``resume`` records the rest).
    """
    refuse_in_bootstrap()  # a spawned worker re-running an unguarded script
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1; found {jobs}")
    if resume and overwrite:
        raise ConfigError(
            "--resume keeps the complete bundles and --overwrite records them again; pass one"
        )
    root = Path(out)
    # docs/guarantees.md, "Safe output": a new or empty folder, or one an experiment run wrote.
    safe_output.check_folder_output(root, mark=EXPERIMENT_MARK, resume=True)
    start = time.perf_counter()
    pool = load_length_pool(
        spec.pool_path, max_prompt_tokens=spec.max_prompt_tokens, **spec.pool_options
    )
    if not (resume or overwrite):
        # Before anything is written: a refused run must leave the folder as it was.
        cells = matrix_cells(spec, root)
        folders = [c.bundle for c in cells] + sorted({c.trace.parent for c in cells})
        existing = next((f for f in folders if f.exists()), None)
        if existing is not None:
            raise ConfigError(
                f"{existing}: output folder already exists; pass --resume to keep the "
                "complete bundles, --overwrite to record them all again, or choose a new --out"
            )
    safe_output.make_marked_folder(root, MARKER, "tracekit experiment run")
    for run in range(spec.runs):
        freeze_traces(
            pool,
            root / "traces" / f"run{run}",
            rates=[spec.arrival_rate(r) for r in spec.rates],
            seed=spec.seed + run,
            num_requests=spec.num_requests,
            prefix=spec.prefix,
            max_output_tokens=spec.max_output_tokens,
            overwrite=True,  # its own traces: the folder was checked above
        )
    plan = matrix_plan(spec, root)
    execution = execute_runs(
        plan,
        root,
        make_executor(jobs),
        redo=overwrite,
        progress=_counts(progress) if progress is not None else None,
    )
    execution.check()
    result = summarize_matrix(root, spec)
    wall = time.perf_counter() - start
    safe_output.write_json(
        root / "matrix.json",
        {
            "spec": spec.describe(),
            "tool_version": __version__,
            "finished_at": utc_now_iso(),
            "jobs": jobs,
            "runs_recorded": execution.count("done"),
            "wall_s": wall,
            "run_wall_s_total": sum(
                r.duration_s or 0.0 for r in execution.records if r.status == "done"
            ),
        },
    )
    return dataclasses.replace(result, wall_s=wall)


def summarize_matrix(
    out: str | Path, spec: MatrixSpec, cells: Sequence[MatrixCell] | None = None
) -> MatrixResult:
    """Summarise the bundles of a recorded matrix and write the frames and fragments.

    Parameters
    ----------
    out
        The matrix folder.
    spec
        Its specification (for the SLO targets and the cells).
    cells
        The runs to summarise; by default :func:`matrix_cells`.

    Returns
    -------
    MatrixResult
        With ``wall_s = 0``.
    """
    root = Path(out)
    cells = list(cells) if cells is not None else matrix_cells(spec, root)
    index_rows = []
    for cell in cells:
        bundle = open_trace(cell.bundle).bundles[0]
        index_rows.append(
            {
                "run_id": bundle.run_id,
                "strategy": cell.strategy,
                "rate": cell.rate,
                "arrival_rate": cell.arrival_rate,
                "run_index": cell.run_index,
                "seed": cell.seed,
                "bundle": str(cell.bundle.relative_to(root)),
            }
        )
    index = pl.DataFrame(index_rows)
    dataset = open_trace(root / "bundles")
    sent = None
    if spec.latency_from == "sent":
        sent = pl.scan_parquet([_sent_path(root, c) for c in cells])
    metrics = run_metrics(dataset.scan("requests"), dataset.scan("decisions"), spec.slo, sent=sent)
    runs = index.join(metrics, on="run_id", how="left").sort("strategy", "rate", "run_index")
    summary = aggregate_runs(runs, ("strategy", "rate"), METRICS)
    comparison = comparison_frame(summary)
    claims = claims_frame(runs)
    for name, frame in (
        ("runs", runs), ("summary", summary), ("comparison", comparison), ("claims", claims),
    ):  # fmt: skip
        with safe_output.replacing(root / f"{name}.parquet") as staging:
            frame.write_parquet(staging)
    safe_output.write_json(root / "summary.json", _summary_json(summary, spec))
    note = _matrix_note(spec)
    safe_output.write_files(
        {
            root / "comparison.md": render_markdown(comparison, claims, note=note),
            root / "comparison.html": render_html(comparison, claims, note=note),
        }
    )
    return MatrixResult(root, runs, summary, comparison, claims, 0.0)


def _matrix_note(spec: MatrixSpec) -> str:
    """What this matrix did that the caveat does not already say."""
    parts = [f"{spec.runs} runs of {spec.num_requests} requests per cell; SLO {spec.slo.label()}."]
    if spec.load_scale != 1.0:
        rates = ", ".join(f"{r:g} -> {spec.arrival_rate(r):g}" for r in spec.rates)
        parts.append(
            f"Rates are the paper's scaled by {spec.load_scale:g} (nominal -> arrival req/s: "
            f"{rates}) to keep its relative load."
        )
    cap = spec.settings.client_max_in_flight
    if cap is not None:
        parts.append(f"The original client's cap of {cap} requests in flight is emulated.")
    if spec.latency_from == "sent":
        parts.append(
            "Latencies count from when the client sent each request, as the original runner "
            "measured (client-side queueing left out)."
        )
    else:
        parts.append(
            "Latencies count from each request's scheduled arrival (the original runner left "
            "client-side queueing out)."
        )
    return " ".join(parts)


def _summary_json(summary: pl.DataFrame, spec: MatrixSpec) -> dict[str, Any]:
    """The original analysis' ``summary.json`` shape: ``{metric: {mean, ci95}}`` per cell."""
    aggregations = [
        {
            "strategy": row["strategy"],
            "workload": spec.prefix,
            "request_rate": row["rate"],
            "arrival_rate": spec.arrival_rate(row["rate"]),
            "num_runs": row["num_runs"],
            "slo": spec.slo.label(),
            **{m: {"mean": row[f"{m}_mean"], "ci95": row[f"{m}_ci95"]} for m in METRICS},
        }
        for row in summary.to_dicts()
    ]
    return {"aggregations": aggregations}
