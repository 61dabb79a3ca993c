"""Reading a qualification results folder (what ``tracekit qualify`` writes).

Layout (``docs/report.md`` describes every file)::

    results/
      qualify.json              inputs: workload, engine config, strategies, candidate, repeats, SLO
      cells.parquet             one row per (repeat, strategy): serving metrics + policy counters
      runs/r<k>/<strategy>/     the closed-loop trace bundles behind the cells
      replay/summary.parquet    open-mode replay of every strategy on the baseline's decisions
      replay/agreement.parquet  pairwise victim agreement (strategy_a, strategy_b, agree_rate)
      diff/diff.json            legacy-versus-typed diff (verdict, classes, first divergence)
      diff/conformance.json     named conformance checks (also accepted at the root)

Only ``qualify.json`` and ``cells.parquet`` are required; the report says what is missing
instead of failing when the replay or diff parts are absent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import TracekitError
from tracekit.strategies import changed_settings

__all__ = [
    "BASELINE",
    "CELL_COLUMNS",
    "COUNTER_COLUMNS",
    "Results",
    "ResultsError",
    "load_order",
    "load_results",
]

# The strategy every other strategy is compared with, repeat by repeat.
BASELINE = "builtin"

# Policy counters of a cell (from the run's decisions).
COUNTER_COLUMNS = (
    "calls",
    "selections",
    "abstentions",
    "failures",
    "invalid_selections",
    "liveness_abstentions",
    "cascade_abstentions",
    "gate_fallbacks",
)

# Columns the report reads from cells.parquet.
CELL_COLUMNS = (
    "repeat",
    "strategy",
    "host_path",
    "run_id",
    "bundle",
    "cell",
    "requests",
    "finished",
    "all_finished",
    "throughput_rps",
    "output_tokens_per_s",
    "ttft_p95_s",
    "e2e_p95_s",
    "preemptions",
    "recomputed_tokens",
    *COUNTER_COLUMNS,
    "policy_enabled",
)


def _users(cell: str) -> float:
    # A closed loop's load label is "concurrency-<users>" (tracekit.qualify.loads).
    _, sep, tail = cell.rpartition("concurrency-")
    try:
        return float(tail.split("|")[0]) if sep else math.inf
    except ValueError:
        return math.inf


def load_order(cells: pl.DataFrame) -> dict[str, int]:
    """Each cell's rank, lightest load first: by offered rate, then closed loops by users.

    The offered rate is ``offered_rps`` (qualify's load plan) or a numeric ``rate`` (a sweep);
    a cell without one (a closed loop) comes after those with one, by its number of users, then
    by name. Loads are never sorted as text ("rate-1.2x" before "rate-1x").
    """
    if "offered_rps" in cells.columns:
        rate = pl.col("offered_rps").cast(pl.Float64)
    elif "rate" in cells.columns and cells.schema["rate"].is_numeric():
        rate = pl.col("rate").cast(pl.Float64)
    else:
        rate = pl.lit(None, dtype=pl.Float64)
    name = pl.col("load") if "load" in cells.columns else pl.col("cell")
    keys = cells.group_by("cell").agg(rate.first().alias("rate"), name.first().alias("name"))
    rows = sorted(
        keys.iter_rows(),
        key=lambda r: (math.inf if r[1] is None else r[1], _users(r[0]), str(r[2]), r[0]),
    )
    return {cell: index for index, (cell, _, _) in enumerate(rows)}


class ResultsError(TracekitError):
    """A results folder is missing a required file or column."""


@dataclass(frozen=True)
class Results:
    """One results folder, loaded.

    Attributes
    ----------
    root
        The results folder.
    inputs
        ``qualify.json`` as a dictionary.
    cells
        ``cells.parquet``, sorted by cell, repeat and strategy.
    replay_summary, replay_agreement
        ``replay/summary.parquet`` and ``replay/agreement.parquet``, or ``None`` when absent.
    diff, conformance
        ``diff/diff.json`` and ``conformance.json``, or ``None`` when absent.
    output_gate
        ``output_gate.json`` (``tracekit outputs --results``: the greedy-output equality of two
        live recordings), or ``None`` when absent.
    """

    root: Path
    inputs: dict[str, Any]
    cells: pl.DataFrame
    replay_summary: pl.DataFrame | None
    replay_agreement: pl.DataFrame | None
    diff: dict[str, Any] | None
    conformance: dict[str, Any] | None
    output_gate: dict[str, Any] | None = None

    @property
    def candidate(self) -> str:
        """The qualified strategy (``bidkv`` by default)."""
        return str(self.inputs.get("candidate") or "bidkv")

    @property
    def strategies(self) -> list[str]:
        """Strategies in the order of ``qualify.json`` (then any others found in the cells)."""
        listed = [str(s) for s in self.inputs.get("strategies") or []]
        found = self.cells.get_column("strategy").unique(maintain_order=True).to_list()
        return listed + sorted(s for s in found if s not in listed)

    @property
    def changed_settings(self) -> dict[str, Any]:
        """The candidate's settings that differ from the policy's defaults (sorted by name).

        ``enable_utility_victim_selection`` and ``utility_strategy`` are left out: the candidate's
        name already says them.
        """
        return changed_settings(self.inputs.get("policy_config") or {})

    @property
    def reference(self) -> tuple[str | None, int]:
        """``(cell, repeat)`` of the runs the diff, the replay and the per-run charts show.

        ``qualify.json``'s ``reference`` (the reference cell's repeat whose built-in run made the
        most victim decisions); repeat 0 of every cell (``cell`` None) for an older folder or a
        sweep.
        """
        reference = self.inputs.get("reference") or {}
        cell = reference.get("cell")
        return (str(cell) if cell is not None else None), int(reference.get("repeat") or 0)

    def reference_runs(self, strategies: list[str]) -> pl.DataFrame:
        """The cells rows of ``strategies`` in the reference repeat (see :attr:`reference`)."""
        cell, repeat = self.reference
        chosen = (pl.col("repeat") == repeat) & pl.col("strategy").is_in(strategies)
        rows = self.cells.filter(chosen)
        return rows if cell is None else rows.filter(pl.col("cell") == cell)

    def bundle(self, relative: str) -> Path:
        """The absolute path of a bundle named relative to the results folder."""
        return self.root / relative


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(
            f"{path}: not valid JSON (line {exc.lineno}: {exc.msg}); re-run tracekit qualify"
        ) from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not UTF-8 text; re-run tracekit qualify") from None
    except OSError as exc:
        raise ResultsError(
            f"{path}: cannot be read ({exc.strerror or exc}); check its permissions or re-run "
            "tracekit qualify"
        ) from None
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply; re-run tracekit qualify") from None
    if not isinstance(value, dict):
        raise ResultsError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _read_parquet(path: Path) -> pl.DataFrame | None:
    if not path.is_file():
        return None
    try:
        return pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        # A truncated, empty, overwritten or unreadable table: one line, not a traceback.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        reason = " ".join(str(reason).split())[:200]
        raise ResultsError(
            f"{path}: cannot be read as a Parquet table ({reason}); re-run tracekit qualify "
            "(or tracekit sweep) to write it again"
        ) from None


def load_results(results_dir: str | Path) -> Results:
    """Load a results folder.

    Parameters
    ----------
    results_dir
        The folder ``tracekit qualify`` (or ``tracekit sweep``) wrote.

    Returns
    -------
    Results
        Its files; optional parts are ``None`` when absent.

    Raises
    ------
    ResultsError
        ``qualify.json`` or ``cells.parquet`` is missing or unreadable, a required column
        of ``cells.parquet`` is missing or it has no rows, or a replay table is unreadable.
    """
    root = Path(results_dir)
    # A sweep folder carries the same input fields in sweep.json (docs/sweep.md).
    inputs = _read_json(root / "qualify.json") or _read_json(root / "sweep.json")
    if inputs is None:
        raise ResultsError(
            f"{root / 'qualify.json'}: missing (and no sweep.json); is {root} a folder written "
            "by tracekit qualify or tracekit sweep?"
        )
    cells_path = root / "cells.parquet"
    cells = _read_parquet(cells_path)
    if cells is None:
        raise ResultsError(f"{cells_path}: missing; re-run tracekit qualify")
    missing = [c for c in CELL_COLUMNS if c not in cells.columns]
    if missing:
        raise ResultsError(
            f"{cells_path}: missing column(s) {', '.join(missing)}; re-run tracekit qualify"
        )
    if cells.height == 0:
        raise ResultsError(f"{cells_path}: no rows (no run finished); re-run tracekit qualify")
    conformance = _read_json(root / "diff" / "conformance.json")
    if conformance is None:
        conformance = _read_json(root / "conformance.json")
    return Results(
        root=root,
        inputs=inputs,
        cells=cells.sort("cell", "repeat", "strategy"),
        replay_summary=_read_parquet(root / "replay" / "summary.parquet"),
        replay_agreement=_read_parquet(root / "replay" / "agreement.parquet"),
        diff=_read_json(root / "diff" / "diff.json"),
        conformance=conformance,
        output_gate=_read_json(root / "output_gate.json"),
    )
