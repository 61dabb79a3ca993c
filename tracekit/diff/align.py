"""Aligning two runs' decisions by sequence number and finding where their histories split.

The decisions of both runs are joined on ``seq`` and their candidates on ``(seq, position)``
(polars joins, nothing row by row). A decision is *comparable* while both runs showed the policy
the same context: the same candidates with the same fields in the same order, the same
requester, KV usage, time, step, scheduling policy and built-in victim. The first ``seq`` where
that fails is the first divergence; from there on the runs follow different histories and their
decisions are not compared.

The legacy contract passes no requester (docs/contracts.md, "Legacy versus typed"), so a legacy
recording may hold a null ``requesting_request_id``; that is not a difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.diff.pairing import RunPair
from tracekit.trace.schema import added_columns, trace_schema

__all__ = [
    "CANDIDATE_FIELDS",
    "CONTEXT_FIELDS",
    "COUNTER_FIELDS",
    "RESULT_FIELDS",
    "Alignment",
    "align",
    "decision_context",
]

# What the host showed the policy (compared to find the first divergence).
CONTEXT_FIELDS = (
    "step",
    "time_s",
    "requesting_request_id",
    "kv_usage",
    "scheduling_policy",
    "num_candidates",
    "builtin_victim_id",
)
# What came back and was applied (compared on comparable decisions).
RESULT_FIELDS = (
    "applied_victim_id",
    "outcome",
    "raw_result",
    "raw_result_type",
    "decision_reason",
    "policy_enabled",
)
COUNTER_FIELDS = ("calls", "selections", "abstentions", "failures", "invalid_selections")
# Every stored candidate column but the row key (the schema is the one source), and but the
# prefix-cache blocks of trace v2: engine state the policy never sees (null in v1 bundles).
CANDIDATE_FIELDS: tuple[str, ...] = tuple(
    c
    for c in trace_schema().table("candidates").column_names
    if c not in ("run_id", "seq", "position")
    and c not in {a.name for a in added_columns("candidates", 1)}
)
SIDES = ("legacy", "typed")


@dataclass(frozen=True, slots=True)
class Alignment:
    """Both runs' decisions side by side.

    Attributes
    ----------
    decisions
        One row per ``seq`` of either run: every decision column as ``<column>_legacy`` and
        ``<column>_typed``, ``missing`` (only one run has this decision), ``context_fields``
        (differing context fields), ``candidate_fields`` (candidate fields differing at some
        position), ``order_only`` (same candidates with the same fields, other positions) and
        ``diverged`` (any of those).
    divergence_seq
        The first ``seq`` whose contexts differ, or None.
    candidates
        Both runs' candidates of every ``seq``, joined on ``(seq, position)``.
    n_legacy, n_typed
        Number of decisions of each run.
    """

    decisions: pl.DataFrame
    divergence_seq: int | None
    candidates: pl.LazyFrame
    n_legacy: int
    n_typed: int

    def comparable(self) -> pl.DataFrame:
        """The decisions before the first divergence (all of them when there is none)."""
        if self.divergence_seq is None:
            return self.decisions
        return self.decisions.filter(pl.col("seq") < self.divergence_seq)


def _side(frame: pl.LazyFrame, run_id: str, side: str, keys: tuple[str, ...]) -> pl.LazyFrame:
    """One run's rows without ``run_id``, every non-key column suffixed with ``_<side>``."""
    rows = frame.filter(pl.col("run_id") == run_id).drop("run_id")
    names = rows.collect_schema().names()
    return rows.rename({c: f"{c}_{side}" for c in names if c not in keys})


def _differs(name: str) -> pl.Expr:
    return ~pl.col(f"{name}_legacy").eq_missing(pl.col(f"{name}_typed"))


def _context_differs(name: str) -> pl.Expr:
    if name == "requesting_request_id":
        # The legacy contract has no requester; a legacy recorder may leave it null.
        return pl.col(f"{name}_legacy").is_not_null() & _differs(name)
    return _differs(name)


def _field_list(flags: dict[str, pl.Expr]) -> pl.Expr:
    """The names whose flag is true, as a list column (in the given order)."""
    return pl.concat_list(
        [pl.when(flag).then(pl.lit(name)).otherwise(pl.lit(None)) for name, flag in flags.items()]
    ).list.drop_nulls()


def _candidate_summary(candidates: pl.LazyFrame, by_id: pl.LazyFrame) -> pl.LazyFrame:
    """Per ``seq``: candidate fields that differ by position, and whether only the order does."""
    positional = candidates.group_by("seq").agg(
        _field_list({f: _differs(f).any() for f in CANDIDATE_FIELDS})
        .first()
        .alias("candidate_fields")
    )
    content = [f for f in CANDIDATE_FIELDS if f != "request_id"]
    reordered = by_id.group_by("seq").agg(
        pl.any_horizontal([_differs(f) for f in content]).any().alias("content_differs")
    )
    return positional.join(reordered, on="seq", how="left").with_columns(
        ((pl.col("candidate_fields").list.len() > 0) & ~pl.col("content_differs")).alias(
            "order_only"
        )
    )


def align(pair: RunPair) -> Alignment:
    """Join both runs' decisions and candidates and locate the first divergence.

    Parameters
    ----------
    pair
        The legacy-host and typed-host runs.

    Returns
    -------
    Alignment
        The joined decisions with their mismatch flags.
    """
    runs = {
        "legacy": (pair.legacy_data, pair.legacy.run_id),
        "typed": (pair.typed_data, pair.typed.run_id),
    }
    decisions = [_side(data.scan("decisions"), run, s, ("seq",)) for s, (data, run) in runs.items()]
    candidates = [
        _side(data.scan("candidates"), run, s, ("seq", "position"))
        for s, (data, run) in runs.items()
    ]
    by_position = candidates[0].join(
        candidates[1], on=["seq", "position"], how="full", coalesce=True
    )
    # Joined on the id as well, to tell a reordering from different candidates.
    by_id = (
        candidates[0]
        .rename({"request_id_legacy": "request_id"})
        .join(
            candidates[1].rename({"request_id_typed": "request_id"}),
            on=["seq", "request_id"],
            how="full",
            coalesce=True,
        )
    )
    summary = _candidate_summary(by_position, by_id)
    joined = (
        decisions[0]
        .join(decisions[1], on="seq", how="full", coalesce=True)
        .join(summary, on="seq", how="left")
        .with_columns(
            (pl.col("outcome_legacy").is_null() | pl.col("outcome_typed").is_null()).alias(
                "missing"
            ),
            _field_list({f: _context_differs(f) for f in CONTEXT_FIELDS}).alias("context_fields"),
            pl.col("candidate_fields").fill_null(pl.lit([], dtype=pl.List(pl.String))),
            pl.col("order_only").fill_null(False),
        )
        .with_columns(
            (
                pl.col("missing")
                | (pl.col("context_fields").list.len() > 0)
                | (pl.col("candidate_fields").list.len() > 0)
            ).alias("diverged")
        )
        .sort("seq")
        .collect()
    )
    first = joined.filter(pl.col("diverged")).select(pl.col("seq").min()).item()
    return Alignment(
        decisions=joined,
        divergence_seq=None if first is None else int(first),
        candidates=by_position,
        n_legacy=int(joined["outcome_legacy"].is_not_null().sum()),
        n_typed=int(joined["outcome_typed"].is_not_null().sum()),
    )


def decision_context(alignment: Alignment, seq: int) -> dict[str, Any]:
    """Both sides' context and candidates at ``seq``, for the side-by-side report.

    Returns
    -------
    dict
        ``{"legacy": {"context": {...} | None, "candidates": [...]}, "typed": {...},
        "differing_cells": [{"position": int, "field": str}, ...]}``; a side without that
        decision has ``context`` None and no candidates.
    """
    row = alignment.decisions.filter(pl.col("seq") == seq).row(0, named=True)
    cands = alignment.candidates.filter(pl.col("seq") == seq).sort("position").collect()
    out: dict[str, Any] = {}
    for side in SIDES:
        present = row[f"outcome_{side}"] is not None
        context = {f: row[f"{f}_{side}"] for f in CONTEXT_FIELDS} if present else None
        rows = cands.filter(pl.col(f"request_id_{side}").is_not_null())
        # Formatting only: a handful of rows of one decision.
        listed = [
            {"position": r["position"], **{f: r[f"{f}_{side}"] for f in CANDIDATE_FIELDS}}
            for r in rows.iter_rows(named=True)
        ]
        out[side] = {"context": context, "candidates": listed}
    cells = cands.select("position", *[_differs(f).alias(f) for f in CANDIDATE_FIELDS]).unpivot(
        index="position", variable_name="field", value_name="differs"
    )
    out["differing_cells"] = [
        {"position": r["position"], "field": r["field"]}
        for r in cells.filter(pl.col("differs")).sort("position").iter_rows(named=True)
    ]
    return out
