"""Expanding a sweep matrix into its runs, their folders, seeds and cells.

The plan loads every workload once per rate (so a bad workload or window fails before anything
runs), cuts the repeats with the qualification rule
(:func:`tracekit.workloads.repeats.plan_repeats`), and
lists one :class:`PlannedRun` per closed-loop run in a fixed order:

    workload x rate x repeat x engine configuration x policy point x strategy

Strategies that take no policy settings (``builtin``, ``module:Object``) run once per engine
configuration, not once per policy point. A *cell* is one (workload, rate, engine configuration,
policy point): its runs are every strategy and repeat at that point, the built-in baseline
included, as ``cells.parquet`` groups them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError, TracekitError
from tracekit.recording.sim import SimRun, make_run_id
from tracekit.strategies import StrategySpec, resolve_strategy
from tracekit.sweep.checks import LABEL
from tracekit.sweep.matrix import EngineSpec, Matrix, PolicyPoint, WorkloadSpec, is_production
from tracekit.sweep.task import Recorder, record_sim_run
from tracekit.workloads import Workload, load_workload, with_shared_prefix
from tracekit.workloads.arrivals import ArrivalKind, parse_arrivals
from tracekit.workloads.client import ClientModel
from tracekit.workloads.load_spec import LoadSpec, apply_load
from tracekit.workloads.repeats import plan_repeats

__all__ = ["PlannedCell", "PlannedRun", "PlannedWorkload", "SweepPlan", "plan_sweep"]

RUNS_DIR = "runs"


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """One run to record: its inputs, identity and labels.

    The one execution plan type: a sequence of ``PlannedRun`` is what
    :func:`tracekit.sweep.execute.execute_runs` runs on any executor. Sweeps expand their TOML
    matrix into it (:func:`plan_sweep`); ``qualify``, the experiment matrix and closed-mode
    replay build it from their own specifications.

    Attributes
    ----------
    path
        The bundle folder relative to the output folder (``runs/workload=.../repeat=k``).
    run
        Everything ``recorder`` needs (for the default, a
        :class:`~tracekit.recording.sim.SimRun`).
    run_id
        The run's deterministic id (checked when resuming).
    workload, rate, strategy, config, repeat
        Labels (a sweep's partition values: ``config`` is the engine label, plus
        ``+<policy label>`` for production strategies when the matrix has a ``[policy]`` grid).
    seed
        The run's seed (repeat seed; also the policy's ``utility_seed`` unless the grid sets it).
    engine, policy
        Engine label and policy point label (empty for strategies without settings).
    cells
        Labels of the cells the run belongs to (a baseline belongs to every policy point's cell).
    recorder
        Records the run (:func:`tracekit.sweep.task.record_sim_run` by default).
    sidecar
        A file the recorder writes beside the bundle, relative to the output folder, or ``None``.
    """

    path: str
    run: Any
    run_id: str
    workload: str
    rate: float
    strategy: str
    config: str
    repeat: int
    seed: int
    engine: str = ""
    policy: str = ""
    cells: tuple[str, ...] = ()
    recorder: Recorder = record_sim_run
    sidecar: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedCell:
    """One (workload, rate, engine configuration, policy point) and the runs that make it."""

    label: str
    workload: str
    rate: float
    rate_scale: float
    config: str
    engine: str
    policy: PolicyPoint
    runs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PlannedWorkload:
    """A workload at one rate: the scale applied and its repeats (for ``sweep.json``)."""

    name: str
    rate: float
    rate_scale: float
    workload: Workload
    repeats: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The expanded matrix: every run in execution order, and the cells they form."""

    matrix: Matrix
    runs: tuple[PlannedRun, ...]
    cells: tuple[PlannedCell, ...]
    workloads: tuple[PlannedWorkload, ...]

    def render(self) -> str:
        """A summary of the expansion (what ``tracekit sweep --dry-run`` prints)."""
        m = self.matrix
        seen: dict[str, int] = {}
        for w in self.workloads:
            seen.setdefault(w.name, w.workload.num_requests)
        points = "; ".join(f"{p.label} {p.describe}" for p in m.policy if p.label) or "defaults"
        strategies = ", ".join(m.strategies)
        rates = ", ".join(str(r) for r in m.rates)
        return "\n".join(
            [
                f"{m.name}: {len(self.runs)} runs in {len(self.cells)} cells",
                "  workloads: " + ", ".join(f"{n} ({k} requests)" for n, k in seen.items()),
                f"  rates ({'rate_rps' if m.rate_unit == 'rps' else 'rate_scale'}): {rates}",
                f"  strategies: {strategies} (host {m.host}, candidate {m.candidate})",
                f"  repeats: {m.repeats} {m.repeat_kind}, seed {m.seed}",
                "  engines: " + ", ".join(e.label for e in m.engines),
                f"  policy points: {points}",
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """Workloads, rates, repeats and cells as JSON-compatible values."""
        return {
            "workloads": [
                {
                    "name": w.name,
                    "rate": w.rate,
                    "rate_scale": w.rate_scale,
                    "source": str(w.workload.source),
                    "sha256": w.workload.sha256,
                    "format": w.workload.format,
                    "num_requests": w.workload.num_requests,
                    "repeats": list(w.repeats),
                }
                for w in self.workloads
            ],
            "cells": [
                {
                    "cell": c.label,
                    "workload": c.workload,
                    "rate": c.rate,
                    "rate_scale": c.rate_scale,
                    "config": c.config,
                    "engine": c.engine,
                    "policy": c.policy.settings,
                    "runs": [self.runs[i].path for i in c.runs],
                }
                for c in self.cells
            ],
        }


def _load(matrix: Matrix, spec: WorkloadSpec, rate_scale: float) -> Workload:
    try:
        workload = load_workload(
            spec.path,
            format=spec.format,
            limit=spec.limit,
            window=spec.window,
            rate_scale=rate_scale,
            priority_seed=spec.priority_seed,
            priority_levels=spec.priority_levels,
            **spec.options,
        )
        if spec.shared_prefix_tokens is not None or spec.prefix_groups is not None:
            if spec.shared_prefix_tokens is None:
                raise ConfigError(
                    "prefix_groups: expected only with shared_prefix_tokens; fix: add "
                    "shared_prefix_tokens = N or drop prefix_groups"
                )
            workload = with_shared_prefix(
                workload, spec.shared_prefix_tokens, spec.prefix_groups or 1, spec.prefix_seed
            )
    except TracekitError as exc:
        raise ConfigError(f"{matrix.path}: key '{spec.key}': {exc}") from None
    # The source as written in the matrix: run ids must not depend on the checkout's location.
    return dataclasses.replace(workload, source=Path(spec.source), name=spec.name or workload.name)


def _rate_scale(matrix: Matrix, spec: WorkloadSpec, base: Workload, rate: float) -> float:
    """The rate scale that gives ``rate``: itself, or target / the workload's mean rate."""
    if matrix.rate_unit == "scale":
        return rate
    if base.duration_s <= 0:
        raise ConfigError(
            f"{matrix.path}: key 'rate_rps': workload {spec.key} has all its requests at one "
            "instant, so it has no mean rate; use rate_scale instead"
        )
    # Mean rate = requests per second of the span from the workload start to its last arrival.
    return rate * base.duration_s / base.num_requests


def _apply_client(
    matrix: Matrix, spec: WorkloadSpec, base: Workload, workload: Workload, rate: float
) -> Workload:
    """The entry's ``client`` table applied at one rate (``docs/sweep.md``, "Client models").

    Generated arrivals are generated at the cell's rate in requests per second (``rate_rps``,
    or ``rate_scale`` times the workload's mean rate); recorded ones keep the rescaled times.
    """
    table = dict(spec.client)
    arrivals = str(table.pop("arrivals", "recorded"))
    try:
        generated = parse_arrivals(arrivals, rate=1.0 if arrivals != "recorded" else None)
        rps = None
        if generated.kind is not ArrivalKind.RECORDED:
            rps = rate if matrix.rate_unit == "rps" else rate * base.num_requests / base.duration_s
        load = LoadSpec(
            arrivals=arrivals,
            rate=rps,
            order=str(table.pop("order", "recorded")),
            max_tokens=table.pop("max_tokens", None),
            client=ClientModel(**table),
        )
        return apply_load(workload, load, seed=matrix.seed)
    except (ConfigError, ZeroDivisionError) as exc:
        raise ConfigError(f"{matrix.path}: key '{spec.key}.client': {exc}") from None


def _planned_workloads(matrix: Matrix) -> list[tuple[WorkloadSpec, PlannedWorkload, list[Any]]]:
    out = []
    names: dict[str, str] = {}
    for spec in matrix.workloads:
        base = _load(matrix, spec, 1.0)
        if base.name in names:
            raise ConfigError(
                f"{matrix.path}: key '{spec.key}' has the name {base.name!r} of "
                f'{names[base.name]}; give one of them another name = "..."'
            )
        names[base.name] = spec.key
        if not LABEL.match(base.name):
            raise ConfigError(
                f"{matrix.path}: key '{spec.key}' loads a workload named {base.name!r}, which is "
                'not a folder-safe label; add name = "my-workload" to the entry'
            )
        for rate in matrix.rates:
            scale = _rate_scale(matrix, spec, base, rate)
            workload = base if scale == 1.0 else _load(matrix, spec, scale)
            if matrix.rate_unit == "rps":
                options = {**workload.options, "rate_rps": rate}
                workload = dataclasses.replace(workload, options=options)
            if spec.client:
                workload = _apply_client(matrix, spec, base, workload, rate)
            try:
                repeats = plan_repeats(workload, matrix.repeats, matrix.repeat_kind, matrix.seed)
            except ConfigError as exc:
                raise ConfigError(
                    f"{matrix.path}: key 'repeats': {spec.key} at rate {rate}: "
                    f'{str(exc).split("; ")[0]}; lower repeats.count or use kind = "seeds"'
                ) from None
            details = tuple(
                {
                    "repeat": r.index,
                    "seed": r.seed,
                    "window": list(r.window) if r.window else None,
                    "num_requests": r.workload.num_requests,
                }
                for r in repeats
            )
            out.append((spec, PlannedWorkload(base.name, rate, scale, workload, details), repeats))
    return out


def _folder(name: str, value: object) -> str:
    return f"{name}={value}"


def plan_sweep(matrix: Matrix) -> SweepPlan:
    """Expand ``matrix`` into runs and cells (loading every workload).

    Parameters
    ----------
    matrix
        A validated matrix (:func:`tracekit.sweep.matrix.load_matrix`).

    Returns
    -------
    SweepPlan
        Runs in execution order, the cells they form, and each workload at each rate.

    Raises
    ------
    tracekit.errors.ConfigError
        A workload cannot be loaded, two workloads share a name, a workload cannot be cut into
        the repeats, or two runs would get the same run id.
    """
    runs: list[PlannedRun] = []
    cells: dict[str, dict[str, Any]] = {}
    planned = _planned_workloads(matrix)
    for _spec, loaded, repeats in planned:
        for repeat in repeats:
            for engine in matrix.engines:
                baseline_index: dict[str, int] = {}
                for point in matrix.policy:
                    cell = _cell(matrix, loaded, engine, point)
                    entry = cells.setdefault(cell["label"], {**cell, "runs": []})
                    for name in matrix.strategies:
                        production = is_production(name)
                        if not production and name in baseline_index:
                            entry["runs"].append(baseline_index[name])
                            continue
                        strategy = _strategy(name, point, repeat.seed)
                        run = SimRun(
                            repeat.workload, engine.config, strategy, matrix.host, repeat.seed
                        )
                        config = cell["config"] if production else engine.label
                        path = "/".join(
                            (
                                RUNS_DIR,
                                _folder("workload", loaded.name),
                                _folder("rate", loaded.rate),
                                _folder("strategy", strategy.label),
                                _folder("config", config),
                                _folder("repeat", repeat.index),
                            )
                        )
                        runs.append(
                            PlannedRun(
                                path=path,
                                run=run,
                                run_id=make_run_id(run),
                                workload=loaded.name,
                                rate=loaded.rate,
                                strategy=strategy.name,
                                config=config,
                                engine=engine.label,
                                policy=point.label if production else "",
                                repeat=repeat.index,
                                seed=repeat.seed,
                                cells=(),
                            )
                        )
                        if not production:
                            baseline_index[name] = len(runs) - 1
                        entry["runs"].append(len(runs) - 1)
    memberships: dict[int, list[str]] = {}
    for label, entry in cells.items():
        for index in entry["runs"]:
            memberships.setdefault(index, []).append(label)
    runs = [dataclasses.replace(r, cells=tuple(memberships[i])) for i, r in enumerate(runs)]
    _check_unique(matrix, runs)
    return SweepPlan(
        matrix=matrix,
        runs=tuple(runs),
        cells=tuple(
            PlannedCell(**{k: v for k, v in e.items() if k != "runs"}, runs=tuple(e["runs"]))
            for e in cells.values()
        ),
        workloads=tuple(p for _, p, _ in planned),
    )


def _cell(
    matrix: Matrix, loaded: PlannedWorkload, engine: EngineSpec, point: PolicyPoint
) -> dict[str, Any]:
    config = engine.label if not point.label else f"{engine.label}+{point.label}"
    return {
        "label": f"{loaded.name}|rate={loaded.rate}|{engine.label}|{point.describe}",
        "workload": loaded.name,
        "rate": loaded.rate,
        "rate_scale": loaded.rate_scale,
        "config": config,
        "engine": engine.label,
        "policy": point,
    }


def _strategy(name: str, point: PolicyPoint, seed: int) -> StrategySpec:
    settings = point.settings if is_production(name) else None
    return resolve_strategy(name, settings, seed=seed)


def _check_unique(matrix: Matrix, runs: list[PlannedRun]) -> None:
    seen: dict[str, str] = {}
    for run in runs:
        if run.run_id in seen:
            raise ConfigError(
                f"{matrix.path}: runs {seen[run.run_id]} and {run.path} are the same run "
                f"({run.run_id}); make the workloads, engines or policy values differ"
            )
        seen[run.run_id] = run.path
    folders = [r.path for r in runs]
    if len(set(folders)) != len(folders):  # pragma: no cover - labels are checked unique
        raise ConfigError(f"{matrix.path}: two runs share a folder; give them distinct labels")
