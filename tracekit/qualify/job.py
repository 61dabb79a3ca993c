"""``tracekit qualify``: the end-to-end qualification job.

For one workload and engine configuration it

1. records the built-in baseline and every requested strategy in closed loop over at least three
   repeats (disjoint windows of the workload, or seeds), into ``runs/r<k>/<strategy>/``;
2. summarises every run into ``cells.parquet`` (serving metrics and policy counters);
3. picks the reference repeat (the reference cell's repeat whose built-in run made the most
   victim decisions), records the candidate on it through the legacy and the typed hosts and
   diffs them (``diff/``), and runs the failure and rollback conformance checks
   (``conformance.json``);
4. replays every strategy in open mode on the reference repeat's baseline decisions
   (``replay/``);
5. renders the report (``report.html`` and ``qualification.json``).

The results folder appears only when the whole job completed. The recordings of steps 1 and 3 go
through the sweep's executor (:func:`tracekit.sweep.execute_runs`, ``--jobs``), and are
byte-identical for any number of jobs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import __version__, safe_output
from tracekit.analysis.cells import CellRun, cells_frame
from tracekit.analysis.serving import SloTargets
from tracekit.conformance import run_conformance
from tracekit.defaults import DEFAULT_REPEATS
from tracekit.diff import diff_traces
from tracekit.engine import EngineConfig
from tracekit.engine.config import recorded_form
from tracekit.errors import ConfigError
from tracekit.oracle.job import run_oracle
from tracekit.qualify.aa_control import AA_ARM, AA_SEED_OFFSET, AA_STRATEGY
from tracekit.qualify.endpoints import VerdictRule
from tracekit.qualify.loads import LoadCell, LoadPlan
from tracekit.qualify.reporting import write_report
from tracekit.qualify.results import BASELINE
from tracekit.recording.sim import SimRun, make_run_id
from tracekit.replay import replay_open
from tracekit.report.html import prefetch_javascript_bundle
from tracekit.strategies import (
    NAMED_SETTINGS,
    HostPath,
    StrategySpec,
    changed_settings,
    resolve_strategy,
)
from tracekit.sweep import PlannedRun, execute_runs, make_executor
from tracekit.sweep.executors import refuse_in_bootstrap
from tracekit.sweep.progress import ProgressCallback, ProgressSnapshot
from tracekit.trace.timestamps import utc_now_iso
from tracekit.workloads import Workload
from tracekit.workloads.arrivals import ArrivalKind, parse_arrivals
from tracekit.workloads.load_spec import LoadSpec, apply_load
from tracekit.workloads.repeats import Repeat, RepeatBy, RepeatKind, plan_repeats

__all__ = [
    "MARKER",
    "QualifyPlan",
    "check_results_folder",
    "diff_pair",
    "qualify_runs",
    "reference_repeat",
    "run_qualify",
]

# The file that marks a folder as qualify's own results: only such a folder is replaced.
MARKER = ".tracekit-qualify"
COMMAND = "tracekit qualify"
# Everything a results folder may hold (oracle/ with --oracle, output_gate.json from
# `tracekit outputs --results`); a folder holding anything else is not replaced.
RESULT_NAMES = frozenset(
    {
        MARKER, "cells.parquet", "conformance.json", "diff", "oracle", "output_gate.json",
        "qualification.json", "qualify.json", "replay", "report.html", "runs",
    }
)  # fmt: skip
RESULTS_MARK = safe_output.marker_files(COMMAND, MARKER, RESULT_NAMES, what="results folder")

Stage = Callable[[str, int, int], None]


@dataclasses.dataclass(frozen=True, slots=True)
class QualifyPlan:
    """Everything ``tracekit qualify`` runs.

    Attributes
    ----------
    workload
        The whole workload; repeats are cut from it.
    engine_config
        Engine configuration of every run.
    strategies
        Strategies run in closed loop; the built-in baseline is added if absent.
    candidate
        The policy under qualification (legacy/typed diff, gate and lifecycle labels).
    repeats, repeat_kind, seed
        Number of repeats, how they differ, and the base seed. ``auto`` (the default) repeats by
        seeds where the cell's arrivals are generated, so that each repeat draws its own (a
        fresh sample of the whole traffic), and by windows elsewhere (recorded arrivals, the
        closed loop).
    slo
        Latency targets of SLO attainment.
    rule
        The verdict rule (endpoints, margins, error rate), recorded in ``qualify.json`` before
        any run starts.
    aa_control
        Also run the A/A control (:mod:`tracekit.qualify.aa_control`): ``static-random`` a
        second time with another seed, judged against itself.
    base_workload, load_spec
        The workload before its load options and those options: with generated arrivals and
        repeats by seeds, each repeat draws its own arrivals from them (an independent sample of
        the traffic). Without them (or with recorded arrivals) repeats by seeds share one
        traffic, and the verdicts say that they are not independent.
    oracle
        Also run the hindsight oracle (``tracekit oracle``) on the reference repeat's baseline
        run, into ``oracle/`` (the report's headroom section). Off by default: it costs a
        rollout per candidate of every decision.
    loads
        The load plan (:func:`tracekit.qualify.loads.plan_loads`): one cell per load level,
        each with its own runs (``runs/<load>/r<k>/<strategy>``) and verdicts. ``None``: one
        cell, the workload as given (``runs/r<k>/<strategy>``).
    """

    workload: Workload
    engine_config: EngineConfig
    strategies: tuple[StrategySpec, ...]
    candidate: StrategySpec
    repeats: int = DEFAULT_REPEATS
    repeat_kind: RepeatBy = "auto"
    seed: int = 0
    slo: SloTargets = dataclasses.field(default_factory=SloTargets)
    oracle: bool = False
    loads: LoadPlan | None = None
    rule: VerdictRule = dataclasses.field(default_factory=VerdictRule)
    aa_control: bool = True
    base_workload: Workload | None = None
    load_spec: LoadSpec | None = None

    def __post_init__(self) -> None:
        if self.repeats < 3:
            raise ConfigError(
                f"--repeats {self.repeats}: qualification needs at least 3 repeats for its "
                "paired intervals"
            )
        if self.candidate.kind == "builtin":
            raise ConfigError(
                "--candidate builtin: the candidate must be a policy, not the baseline"
            )

    @property
    def run_strategies(self) -> list[StrategySpec]:
        """The strategies run per repeat: the baseline first, then the rest in order.

        With the A/A control, ``static-random`` (added when absent) and its second arm come
        last.
        """
        specs = [s for s in self.strategies if s.kind == "builtin"][:1]
        if not specs:
            specs = [StrategySpec("builtin", "builtin")]
        extra = ()
        if self.aa_control:
            arm = resolve_strategy(AA_STRATEGY, seed=self.seed)
            extra = (arm, dataclasses.replace(arm, name=AA_ARM))
        for spec in (*self.strategies, self.candidate, *extra):
            if all(s.name != spec.name for s in specs):
                specs.append(spec)
        return specs


def _cell_label(plan: QualifyPlan, load: LoadCell | None = None) -> str:
    changed = changed_settings(plan.candidate.settings, ignore=(*NAMED_SETTINGS, "utility_seed"))
    config = ",".join(f"{k}={v}" for k, v in changed.items()) or "defaults"
    if load is not None:
        return f"{plan.workload.name}|load={load.label}|{plan.candidate.name}:{config}"
    rate = plan.workload.options.get("rate_scale", 1.0)
    return f"{plan.workload.name}|rate={rate}|{plan.candidate.name}:{config}"


def _repeat_kind(plan: QualifyPlan, cell: LoadCell | None) -> RepeatKind:
    """How ``cell``'s repeats differ: ``--repeat-by``, with ``auto`` resolved for the cell."""
    if plan.repeat_kind != "auto":
        return plan.repeat_kind
    return "seeds" if _regenerator(plan, cell) is not None else "windows"


def _independent(plan: QualifyPlan, cell: LoadCell | None) -> bool:
    """Whether the repeats of ``cell`` are independent samples of its traffic.

    Windows always are (disjoint stretches of the arrivals). Seeds are only when the arrivals
    are generated and drawn anew for each repeat; otherwise every repeat is the same traffic and
    only seeded strategies differ between them.
    """
    if _repeat_kind(plan, cell) == "windows":
        return True
    return _regenerator(plan, cell) is not None


def _regenerator(plan: QualifyPlan, cell: LoadCell | None) -> Callable[[int], Workload] | None:
    """Draws a cell's arrivals anew for a repeat's seed, when they are generated."""
    if cell is not None:
        loads = plan.loads
        assert loads is not None
        if loads.regenerate(cell, plan.seed) is None:
            return None
        return lambda seed: loads.regenerate(cell, seed)  # type: ignore[return-value]
    base, spec = plan.base_workload, plan.load_spec
    if base is None or spec is None:
        return None
    if parse_arrivals(spec.arrivals, rate=spec.rate).kind is ArrivalKind.RECORDED:
        return None
    return lambda seed: apply_load(base, spec, seed=seed)


def _repeats(plan: QualifyPlan, cell: LoadCell | None) -> list[Repeat]:
    """The repeats of one cell; by seeds with generated arrivals, each draws its own arrivals."""
    workload = plan.workload if cell is None else cell.workload
    kind = _repeat_kind(plan, cell)
    repeats = plan_repeats(workload, plan.repeats, kind, plan.seed)
    regenerate = _regenerator(plan, cell) if kind == "seeds" else None
    if regenerate is None:
        return repeats
    return [dataclasses.replace(r, workload=regenerate(r.seed)) for r in repeats]


def _load_groups(
    plan: QualifyPlan,
) -> list[tuple[LoadCell | None, str, list[Repeat]]]:
    """``(load cell, runs folder, repeats)`` per cell: one unnamed cell without a load plan."""
    if plan.loads is None:
        return [(None, "runs", _repeats(plan, None))]
    return [(cell, f"runs/{cell.label}", _repeats(plan, cell)) for cell in plan.loads.cells]


def _reference(groups: list[tuple[LoadCell | None, str, list[Repeat]]]) -> int:
    """The cell the diff and the open-mode replay use: load 1.0x if planned, else the first."""
    for index, (cell, _, _) in enumerate(groups):
        if cell is not None and cell.fraction == 1.0:
            return index
    return 0


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n", "utf-8")


def run_qualify(
    plan: QualifyPlan,
    out: str | Path,
    *,
    stage: Stage | None = None,
    overwrite: bool = False,
    jobs: int | None = None,
) -> Path:
    """Run the whole qualification job into the results folder ``out``.

    Parameters
    ----------
    plan
        What to run.
    out
        The results folder to create (it appears only when the job completed).
    stage
        Progress callback ``(stage name, done, total)``.
    overwrite
        Replace an existing results folder (after the new one completed).
    jobs
        Worker processes recording the runs (default: the number of cores; 1 runs in this
        process). The results are byte-identical for any number.

    Returns
    -------
    Path
        The results folder; ``report.html`` is inside.

    Raises
    ------
    tracekit.sweep.RunFailedError
        A run failed (nothing is left behind).
    """
    refuse_in_bootstrap()  # a spawned worker re-running an unguarded script
    prefetch_javascript_bundle()  # seconds of work the report needs at the end
    final = Path(out)
    inputs = [plan.workload.source]
    check_results_folder(final, inputs, overwrite=overwrite)
    executor = make_executor(jobs)
    notify = stage or (lambda name, done, total: None)
    # docs/guarantees.md, "Safe output": staged beside OUT, renamed into place when complete.
    with safe_output.staged_folder(
        final, mark=RESULTS_MARK, overwrite=overwrite, inputs=inputs
    ) as staging:
        groups = _load_groups(plan)
        reference = _reference(groups)
        strategies = plan.run_strategies
        safe_output.write_marker(staging, MARKER, COMMAND)
        inputs = _inputs(plan, groups, reference, strategies)
        _write_json(staging / "qualify.json", inputs)

        per_cell = [
            qualify_runs(plan, repeats, strategies, folder=folder) for _, folder, repeats in groups
        ]
        runs = [run for cell_runs in per_cell for run in cell_runs]
        notify("closed-loop runs", 0, len(runs))
        execution = execute_runs(
            runs, staging, executor, progress=_stage_counts(notify, "closed-loop runs")
        )
        execution.check()
        cells = pl.concat(
            [
                cells_frame(
                    staging,
                    [CellRun(r.repeat, r.seed, r.strategy, staging / r.path) for r in cell_runs],
                    _cell_label(plan, load),
                    plan.slo,
                )
                for (load, _, _), cell_runs in zip(groups, per_cell, strict=True)
            ],
            how="diagonal_relaxed",
        )
        if plan.loads is not None:
            cells = _with_load_columns(cells, groups)
        cells.write_parquet(staging / "cells.parquet", compression="zstd")

        # The diff, the open-mode replay, the oracle and the report's per-run charts look at one
        # repeat of the reference cell: the one whose built-in run made the most victim
        # decisions (a light window may make none, and a diff of no decision shows nothing).
        load, folder, repeats = groups[reference]
        shown = reference_repeat(cells, _cell_label(plan, load), repeats)
        label = None if load is None else load.label
        inputs["reference"] = {"cell": _cell_label(plan, load), "load": label, **shown}
        _write_json(staging / "qualify.json", inputs)
        notify("legacy vs typed", 0, 1)
        repeat = next(r for r in repeats if r.index == shown["repeat"])
        execute_runs(diff_pair(plan, repeat), staging, executor).check()
        _diff_and_conformance(staging, plan)
        notify("legacy vs typed", 1, 1)
        runs_folder = staging / folder / repeat.label

        # The A/A control's second arm is static-random again: the replay and the oracle, which
        # compare victim choices, leave it out.
        compared = [s for s in strategies if s.name != AA_ARM]
        notify("open-mode replay", 0, 1)
        replay_open(runs_folder / compared[0].label, compared, staging / "replay")
        notify("open-mode replay", 1, 1)

        if plan.oracle:
            notify("oracle", 0, 1)
            run_oracle(runs_folder / compared[0].label, staging / "oracle", compared, jobs=jobs)
            notify("oracle", 1, 1)

        notify("report", 0, 1)
        write_report(staging, progress=lambda done, total: notify("report", done, total + 1))
        notify("report", 1, 1)
        _name_final_paths(staging, final)
    return final


def qualify_runs(
    plan: QualifyPlan,
    repeats: Sequence[Repeat],
    strategies: Sequence[StrategySpec],
    *,
    folder: str = "runs",
) -> list[PlannedRun]:
    """A cell's recordings as an execution plan for :func:`tracekit.sweep.execute_runs`.

    Every strategy on every repeat, through the typed host, into ``<folder>/r<k>/<strategy>``.
    The production policy is seeded with the repeat's seed.
    """
    cells = [
        (f"{folder}/{repeat.label}/{strategy.label}", repeat, strategy, "typed")
        for repeat in repeats
        for strategy in strategies
    ]
    return _planned(plan, cells)


def diff_pair(plan: QualifyPlan, repeat: Repeat) -> list[PlannedRun]:
    """The candidate on ``repeat`` through the legacy and the typed hosts, into ``diff/<host>``."""
    return _planned(
        plan, [(f"diff/{host}", repeat, plan.candidate, host) for host in ("legacy", "typed")]
    )


def reference_repeat(cells: pl.DataFrame, cell: str, repeats: Sequence[Repeat]) -> dict[str, int]:
    """The repeat of ``cell`` whose built-in run made the most victim decisions.

    The first on ties, so repeat 0 when none made any. Returns ``{"repeat": k, "decisions": n}``.
    """
    rows = cells.filter((pl.col("cell") == cell) & (pl.col("strategy") == BASELINE))
    counts = dict(
        zip(rows["repeat"].to_list(), rows["decisions"].fill_null(0).to_list(), strict=True)
    )
    indices = [r.index for r in repeats]
    best = max(indices, key=lambda k: (counts.get(k, 0), -k))
    return {"repeat": best, "decisions": int(counts.get(best, 0))}


def _planned(
    plan: QualifyPlan, cells: Sequence[tuple[str, Repeat, StrategySpec, HostPath]]
) -> list[PlannedRun]:
    """``(path, repeat, strategy, host path)`` rows as planned runs."""
    runs = []
    for path, repeat, strategy, host_path in cells:
        seeded = _seeded(strategy, repeat.seed)
        run = SimRun(repeat.workload, plan.engine_config, seeded, host_path, repeat.seed)
        rate = repeat.workload.options.get("rate_rps") or plan.workload.options.get(
            "rate_scale", 1.0
        )
        runs.append(
            PlannedRun(
                path=path,
                run=run,
                run_id=make_run_id(run),
                workload=plan.workload.name,
                rate=float(rate),
                strategy=strategy.name,
                config=host_path,
                repeat=repeat.index,
                seed=repeat.seed,
            )
        )
    return runs


def _stage_counts(notify: Stage, name: str) -> ProgressCallback:
    """A sweep progress callback that reports ``(name, runs ended, runs total)`` to ``notify``."""

    def report(snapshot: ProgressSnapshot) -> None:
        if snapshot.event in ("finished", "end"):
            notify(name, snapshot.skipped + snapshot.done + snapshot.failed, snapshot.total)

    return report


def _inputs(
    plan: QualifyPlan,
    groups: list[tuple[LoadCell | None, str, list[Repeat]]],
    reference: int,
    strategies: list[StrategySpec],
) -> dict:
    workload = plan.workload
    repeats = groups[reference][2]
    loads = {} if plan.loads is None else plan.loads.describe()
    if plan.loads is not None:
        for described, (cell, _, _) in zip(loads["loads"], groups, strict=True):
            described["independent_repeats"] = _independent(plan, cell)
            described["repeat_kind"] = _repeat_kind(plan, cell)
    kinds = sorted({_repeat_kind(plan, cell) for cell, _, _ in groups})
    return {
        **loads,
        "tool_version": __version__,
        "created_at": utc_now_iso(),
        "workload": workload.describe(),
        "engine_config": recorded_form(plan.engine_config),
        **_latency_measured_error(plan.engine_config),
        "strategies": [s.name for s in strategies],
        "strategy_configs": {s.name: s.settings or None for s in strategies},
        "candidate": plan.candidate.name,
        "policy_config": plan.candidate.settings,
        "repeats": plan.repeats,
        # How the repeats differ: one kind, or "seeds and windows" (auto, a load plan of
        # generated rate cells and a closed loop: each load records its own).
        "repeat_kind": " and ".join(reversed(kinds)),
        "repeat_by": plan.repeat_kind,
        "repeat_details": [
            {
                "repeat": r.index,
                "window": list(r.window) if r.window else None,
                "seed": r.seed,
                "num_requests": r.workload.num_requests,
            }
            for r in repeats
        ],
        "seed": plan.seed,
        # Whether the repeats are independent samples of the traffic (docs/qualify.md,
        # "Repeats"); with a load plan, each load says it too.
        "independent_repeats": all(_independent(plan, cell) for cell, _, _ in groups),
        "slo": dataclasses.asdict(plan.slo),
        # Registered before any run: the verdicts are computed with this rule.
        "rule": plan.rule.to_dict(),
        "aa_control": (
            {"strategy": AA_STRATEGY, "arm": AA_ARM, "seed_offset": AA_SEED_OFFSET}
            if plan.aa_control
            else None
        ),
        "cell": _cell_label(plan),
    }


def _latency_measured_error(config: EngineConfig) -> dict:
    """The measured error a calibrated model carries, for the report (docs/latency.md).

    ``{"latency_measured_error": ...}`` when the step times come from a ``calibrated:`` model
    fitted to measured runs (``tracekit calibrate RESULT ...``), else nothing.
    """
    spec = (config.latency or "").strip()
    if not spec.startswith("calibrated:"):
        return {}
    from tracekit.latency.calibrated import load_calibrated_model

    model = load_calibrated_model(spec.partition(":")[2])
    if not model.measured_error:
        return {}
    return {
        "latency_measured_error": {
            **model.measured_error,
            "request_overheads": model.request_overheads,
            "fitted_on": [r.get("source") for r in model.fit.get("runs") or []],
        }
    }


def _diff_and_conformance(staging: Path, plan: QualifyPlan) -> None:
    """Diff the legacy and typed recordings, and run the conformance checks."""
    report = diff_traces(staging / "diff" / "legacy", staging / "diff" / "typed")
    _write_json(staging / "diff" / "diff.json", report.to_dict())
    (staging / "diff" / "diff.txt").write_text(report.render_text() + "\n", "utf-8")
    names = (plan.candidate.name,) if plan.candidate.kind == "production" else ("bidkv",)
    conformance = run_conformance(names, _user_settings(plan.candidate))
    _write_json(staging / "conformance.json", conformance.to_dict())


def _seeded(spec: StrategySpec, seed: int) -> StrategySpec:
    """``spec`` with the production policy seeded by ``seed`` (the repeat's seed).

    The A/A control's second arm takes ``seed + AA_SEED_OFFSET``: the same strategy, other
    random draws.
    """
    if spec.kind != "production":
        return spec
    if spec.name == AA_ARM:
        seed += AA_SEED_OFFSET
    return dataclasses.replace(spec, settings={**spec.settings, "utility_seed": seed})


def _user_settings(spec: StrategySpec) -> dict[str, Any]:
    """The candidate's settings without the keys its name decides."""
    return {k: v for k, v in spec.settings.items() if k not in NAMED_SETTINGS}


def _with_load_columns(
    cells: pl.DataFrame, groups: list[tuple[LoadCell | None, str, list[Repeat]]]
) -> pl.DataFrame:
    """Add each run's load (``load``, ``offered_rps``), read from its folder name."""
    loads = {f"runs/{cell.label}/": cell for cell, _, _ in groups if cell is not None}

    def load_of(bundle: str) -> LoadCell:
        return next(cell for prefix, cell in loads.items() if bundle.startswith(prefix))

    bundles = cells["bundle"].to_list()
    return cells.with_columns(
        pl.Series("load", [load_of(b).label for b in bundles], dtype=pl.String),
        pl.Series("offered_rps", [load_of(b).rate_rps for b in bundles], dtype=pl.Float64),
    )


# Files that name input bundles by their path while the job runs (in the staging folder).
PATH_FILES = ("diff/diff.json", "diff/diff.txt", "replay/replay.json")


def _name_final_paths(staging: Path, final: Path) -> None:
    """Point the bundle paths of :data:`PATH_FILES` at the results folder, not the staging one.

    The staging folder's name holds the process id and disappears at the rename, so without
    this, two jobs with the same inputs would differ (and name folders that do not exist).
    """
    # Absolute first: the relative form (as given in ``out``) is a suffix of it.
    pairs = [(str(staging.absolute()), str(final.absolute())), (str(staging), str(final))]
    for name in PATH_FILES:
        file = staging / name
        text = file.read_text("utf-8")
        for old, new in pairs:
            if name.endswith(".json"):
                old, new = json.dumps(old)[1:-1], json.dumps(new)[1:-1]
            text = text.replace(old, new)
        file.write_text(text, "utf-8")


def check_results_folder(final: Path, inputs: Sequence[Path], *, overwrite: bool) -> None:
    """Refuse a results folder that writing (or replacing) could damage the user's data.

    Refused: ``.`` and the current folder or any folder above it, any folder that holds an
    input (the workload), a symbolic link, an existing folder without ``--overwrite``, and, with
    ``--overwrite``, a folder that qualify did not write (no :data:`MARKER`) or that holds
    other files (:func:`tracekit.safe_output.check_folder_output`).

    Raises
    ------
    tracekit.errors.ConfigError
        In one line, naming the folder and what to do.
    """
    safe_output.check_folder_output(final, mark=RESULTS_MARK, overwrite=overwrite, inputs=inputs)
