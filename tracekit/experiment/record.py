"""Record one legacy-experiment run (engine + :class:`ExperimentHooks`) as a trace bundle.

The bundle has the ordinary trace format, so ``validate``, replay, diff and report read it
unchanged. What marks it: ``host_path = "experiment"``, ``strategy`` = the legacy strategy name
(``preempt-evict``, ... ``bidkv``), ``strategy_config`` = the hooks' plan and settings, and
``seed`` = the run's seed (which also seeds ``static-random``). Decisions: each native
preemption is a row with outcome ``builtin`` (vLLM's FCFS tail of the re-ordered running queue);
each proactive or SRPT preemption a row with outcome ``selected``, ``decision_reason``
``proactive`` or ``srpt`` and no requesting request. ``final_state.policy_metrics`` holds the
hooks' counters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import __version__, safe_output
from tracekit.engine import BuiltinHost, EngineConfig, run_engine
from tracekit.engine.config import recorded_form
from tracekit.engine.request import engine_requests
from tracekit.errors import ConfigError
from tracekit.experiment.hooks import (
    LEGACY_STRATEGIES,
    STRATEGY_PLANS,
    ExperimentHooks,
    HookSettings,
)
from tracekit.latency.spec import latency_manifest
from tracekit.recording.sim import ENGINE_NAMES, TraceObserver
from tracekit.trace.timestamps import utc_now_iso
from tracekit.trace.writer import BundleWriter
from tracekit.workloads import Workload

__all__ = [
    "HOST_PATH",
    "ExperimentRun",
    "RecordedExperiment",
    "make_experiment_run_id",
    "record_experiment",
    "record_experiment_run",
]

#: The manifest's ``host_path`` of legacy-experiment runs.
HOST_PATH = "experiment"


@dataclasses.dataclass(frozen=True, slots=True)
class ExperimentRun:
    """Everything that defines one experiment run (and so its deterministic run id).

    Parameters
    ----------
    workload
        The requests.
    strategy
        One of :data:`~tracekit.experiment.hooks.LEGACY_STRATEGIES`.
    engine_config
        A ``vllm``-mode, FCFS configuration.
    seed
        The run's seed (``static-random``'s per-refresh seeds are drawn from it).
    settings
        The hooks' constants.
    labels
        Free-form cell labels kept in the manifest (``rate``, ``run_index``, ...).
    """

    workload: Workload
    strategy: str
    engine_config: EngineConfig
    seed: int = 0
    settings: HookSettings = dataclasses.field(default_factory=HookSettings)
    labels: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGY_PLANS:
            known = ", ".join(LEGACY_STRATEGIES)
            raise ConfigError(f"strategy must be one of {known}; found {self.strategy!r}")
        config = self.engine_config
        if config.mode != "vllm" or config.scheduling_policy != "fcfs":
            raise ConfigError(
                "engine configuration: the experiment hooks need mode vllm and scheduling "
                f"policy fcfs; found {config.mode} / {config.scheduling_policy}"
            )

    def strategy_config(self) -> dict[str, Any]:
        """The manifest's ``strategy_config``: plan, settings and where the strategy came from."""
        config: dict[str, Any] = {
            # The original BidKV's name of the registry the strategies reproduce (ours is
            # bidkv.legacy.baselines.registry); kept so that recorded manifests do not change.
            "source": "bidkv.baselines.create_default_registry",
            "plan": dataclasses.asdict(STRATEGY_PLANS[self.strategy]),
            "hooks": self.settings.as_dict(),
            "time_base": "engine",
        }
        if self.strategy == "static-random":
            config["static_random_seed"] = self.seed
        return config

    def manifest(self, run_id: str) -> dict[str, Any]:
        """The bundle manifest's run fields."""
        workload = self.workload
        manifest = {
            "run_id": run_id,
            "tool_version": __version__,
            "created_at": utc_now_iso(),
            "engine": ENGINE_NAMES[self.engine_config.mode],
            "engine_config": recorded_form(self.engine_config),
            "scheduling_policy": self.engine_config.scheduling_policy,
            "host_path": HOST_PATH,
            "strategy": self.strategy,
            "strategy_config": self.strategy_config(),
            "workload": workload.describe(),
            "time_scaling": float(workload.options.get("rate_scale", 1.0)),
            "window": workload.options.get("window"),
            "seed": self.seed,
            "clock": self.engine_config.clock,
        }
        if self.labels:
            manifest["notes"] = json.dumps({"experiment": self.labels}, sort_keys=True)
        return manifest


def make_experiment_run_id(run: ExperimentRun) -> str:
    """A stable id from everything that defines the run: same inputs, same id."""
    identity = run.manifest("")
    identity.pop("created_at")
    identity.pop("tool_version")
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    return f"{run.strategy}-{HOST_PATH}-{digest[:10]}"


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedExperiment:
    """A recorded run: its bundle, run id, and the hooks (counters, send times) after the run."""

    path: Path
    run_id: str
    hooks: ExperimentHooks

    def sent_frame(self) -> pl.DataFrame:
        """``run_id, request_id, sent_s``: when the emulated client sent each request."""
        sent = self.hooks.sent_s
        return pl.DataFrame(
            {
                "run_id": [self.run_id] * len(sent),
                "request_id": list(sent),
                "sent_s": list(sent.values()),
            },
            schema={"run_id": pl.String, "request_id": pl.String, "sent_s": pl.Float64},
        )


def record_experiment(
    run: ExperimentRun,
    out: str | Path,
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    sent: str | Path | None = None,
) -> RecordedExperiment:
    """Run ``run`` on the embedded engine with the legacy hooks and write its bundle to ``out``.

    Parameters
    ----------
    run
        Workload, strategy, engine configuration and seed.
    out
        The bundle folder to create; it appears only once the run completed.
    run_id
        Defaults to :func:`make_experiment_run_id`.
    overwrite
        Replace an existing bundle at ``out`` (once the new one is complete).
    sent
        Also write :meth:`RecordedExperiment.sent_frame` to this Parquet file, atomically and
        before the bundle is renamed into place (a complete bundle implies its send times).

    Returns
    -------
    RecordedExperiment
        The bundle folder, the run id and the run's hooks.
    """
    run_id = run_id or make_experiment_run_id(run)
    requests = engine_requests(run.workload)
    hooks = ExperimentHooks(run.strategy, settings=run.settings, seed=run.seed)
    tables = ["requests", "decisions", "candidates", "steps"]
    # The step-time model that produced the times (docs/latency.md); not part of the run id.
    manifest = {**run.manifest(run_id), "latency": latency_manifest(run.engine_config)}
    with BundleWriter(out, manifest, tables=tables, overwrite=overwrite) as writer:
        observer = TraceObserver(
            writer,
            run_id,
            policy_name=run.strategy,
            scheduling_policy=run.engine_config.scheduling_policy,
            total_requests=len(requests),
        )
        result = run_engine(
            requests,
            run.engine_config,
            BuiltinHost(),
            observer,
            collect=False,
            scheduler_factory=hooks.make_scheduler,
        )
        writer.manifest["final_state"] = {
            "num_steps": result.num_steps,
            "end_s": result.end_s,
            "controller_stats": dataclasses.asdict(observer.stats),
            "policy_metrics": hooks.export_metrics(),
        }
        recorded = RecordedExperiment(Path(out), run_id, hooks)
        if sent is not None:
            _write_parquet_atomic(recorded.sent_frame(), Path(sent))
    return recorded


def _write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with safe_output.replacing(path) as staging:
        frame.write_parquet(staging)


def record_experiment_run(
    run: ExperimentRun, out: Path, sent: Path | None, run_id: str, overwrite: bool
) -> None:
    """The executor's recorder of an experiment run (:data:`tracekit.sweep.task.Recorder`).

    The sidecar file is the run's client send times (see :func:`record_experiment`).
    """
    record_experiment(run, out, run_id=run_id, overwrite=overwrite, sent=sent)
