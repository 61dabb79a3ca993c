"""``diff_traces``: compare a legacy-host recording with the typed-host recording of the same run.

The steps, each in its own module: pair the runs (:mod:`tracekit.diff.pairing`), align their
decisions and find the first divergence (:mod:`tracekit.diff.align`), classify every differing
decision and the divergence (:mod:`tracekit.diff.classify`), compare the end state
(:mod:`tracekit.diff.state`). The report (:mod:`tracekit.diff.report`) holds the verdict and the
exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit.diff.align import Alignment, align
from tracekit.diff.classify import classify_decisions, find_divergence
from tracekit.diff.pairing import RunPair, pair_runs
from tracekit.diff.policy_views import policy_views
from tracekit.diff.report import Difference, DiffReport, Divergence, PairDiff, RunInfo
from tracekit.diff.state import Split, compare_state
from tracekit.strategies import strategy_row

__all__ = ["diff_pair", "diff_traces"]


def _run_info(pair: RunPair, side: str, decisions: int) -> RunInfo:
    bundle = pair.legacy if side == "legacy" else pair.typed
    stats = (bundle.manifest.get("final_state") or {}).get("controller_stats") or {}
    return RunInfo(bundle.run_id, str(bundle.path), stats.get("policy_name"), decisions)


def _split(decisions: pl.DataFrame, divergence: Divergence | None) -> Split:
    """The first decision that applied different victims, else the divergence, else none."""
    first = (
        decisions.filter(pl.col("fields").list.contains("applied_victim_id")).sort("seq").head(1)
    )
    if first.height:
        seq, kind, contract = first.select("seq", "kind", "contract").row(0)
        return Split(seq, bool(contract), f"histories split at seq {seq} ({kind})")
    if divergence is not None:
        return Split(
            divergence.seq,
            divergence.contract,
            f"histories split at seq {divergence.seq} ({divergence.kind})",
        )
    return Split(None, True, "")


def _exposure(alignment: Alignment, strategy: str, config: dict[str, Any]) -> dict[str, int]:
    """How often the legacy run's utility picks met the cascade condition (``bidkv`` only).

    Past the first divergence the runs are not comparable, but this counts, over the whole
    legacy run, the decisions a typed host would have answered differently.
    """
    row = strategy_row(strategy)
    if row is None or row.victim is not None:  # only the decision rule (bidkv) has a cascade
        return {}
    picks = alignment.decisions.filter(pl.col("decision_reason_legacy") == "strategy")
    if picks.is_empty():
        return {"legacy_utility_picks": 0, "legacy_cascade_condition": 0}
    views = policy_views(alignment.candidates, picks, config, side="legacy")
    return {
        "legacy_utility_picks": picks.height,
        "legacy_cascade_condition": int(views["cascade"].sum()),
    }


def diff_pair(pair: RunPair) -> PairDiff:
    """Compare one legacy run with its typed twin.

    Parameters
    ----------
    pair
        The paired runs (:func:`tracekit.diff.pairing.pair_runs`).

    Returns
    -------
    PairDiff
        Differing decisions, the first divergence, counters and end-state differences.
    """
    alignment = align(pair)
    strategy = str(pair.typed.manifest.get("strategy"))
    decisions = classify_decisions(alignment, strategy, pair.strategy_config)
    divergence = find_divergence(alignment, decisions)
    counters, state = compare_state(pair, decisions, _split(decisions, divergence))
    differences: list[Difference] = []
    if divergence is not None:
        differences.append(
            Difference(
                divergence.kind,
                divergence.contract,
                "divergence",
                divergence.seq,
                divergence.context_fields + divergence.candidate_fields,
                divergence.legacy["context"] or {},
                divergence.typed["context"] or {},
                divergence.detail,
            )
        )
    return PairDiff(
        legacy=_run_info(pair, "legacy", alignment.n_legacy),
        typed=_run_info(pair, "typed", alignment.n_typed),
        key=pair.describe(),
        comparable_decisions=alignment.comparable()
        .filter(pl.col("outcome_legacy").is_not_null() & pl.col("outcome_typed").is_not_null())
        .height,
        divergence=divergence,
        decisions=decisions,
        differences=differences + state,
        counters=counters,
        exposure=_exposure(alignment, strategy, pair.strategy_config),
    )


def diff_traces(
    legacy_path: str | Path,
    typed_path: str | Path,
    *,
    allow_contract_differences: bool = False,
) -> DiffReport:
    """Compare a legacy-host recording with the typed-host recording of the same runs.

    Parameters
    ----------
    legacy_path
        A bundle or dataset recorded with ``--host legacy``.
    typed_path
        A bundle or dataset of the same workloads, engine configurations, strategies and
        configurations recorded with ``--host typed``.
    allow_contract_differences
        Let the verdict ``equivalent-modulo-contract`` exit with 0.

    Returns
    -------
    DiffReport
        Per pair: the differences with their classes, the first divergence, the counters and
        the verdict; ``exit_code`` is 0 or 1.

    Raises
    ------
    tracekit.diff.pairing.IncomparableTracesError
        The recordings are not two host paths of the same runs (exit status 2).
    tracekit.errors.TraceSchemaError
        A path holds no readable trace (exit status 2).
    """
    pairs = pair_runs(legacy_path, typed_path)
    return DiffReport([diff_pair(pair) for pair in pairs], allow_contract_differences)
