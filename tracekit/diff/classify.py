"""Classifying the differing decisions and the first divergence.

A comparable decision (same context on both paths) differs when its applied victim, outcome, raw
result, reason or enabled flag differ. Each such decision gets one class, checked in this order,
every condition a polars expression over the joined decisions and the policy's recomputed view
of the candidates (:mod:`tracekit.diff.policy_views`):

1. ``policy-failure``: either side's outcome is ``invalid``, ``exception`` or ``disabled``.
The strategy table (:data:`tracekit.strategies.STRATEGY_TABLE`) says which classes a run's
strategy can have: the cascade and barrier classes belong to the row whose rule is the policy's
decision (``bidkv``), the requester-skip class to the other rows that need the requester.

2. ``cascade-contract`` (``bidkv`` only): the cascade condition holds on the candidates, the
   legacy path took the utility top with reason ``strategy``, and the typed path abstained with
   ``cascade_abstain`` (or, in barrier mode, took the requester).
3. ``barrier-requester-contract`` (``bidkv`` barrier mode): both paths fell back with
   ``liveness_fallback``; typed took the requester, legacy the policy's default victim.
4. ``abstention-contract``: the typed path abstained and applied the host's built-in victim; the
   legacy path, with the same reason, applied the policy's own default victim.
5. ``requester-skip-contract`` (``lcf``, ``mcf``: the rows with ``needs_requester`` other than
   ``bidkv``): both paths selected by the strategy; the
   legacy path took the typed path's requester, which the typed rule skips (the legacy contract
   names no requester). Only a legacy victim equal to the requester can differ: the rule without
   the requester picks the same victim otherwise.
6. ``unexplained``: anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from tracekit.diff import classes as k
from tracekit.diff.align import RESULT_FIELDS, Alignment, decision_context
from tracekit.diff.policy_views import policy_views
from tracekit.diff.report import Divergence
from tracekit.strategies import strategy_row

__all__ = ["DECISION_SCHEMA", "classify_decisions", "find_divergence"]

_FAILED = ("invalid", "exception", "disabled")
# Shown for each side of a differing decision.
_SHOWN = ("applied_victim_id", "outcome", "raw_result", "decision_reason")

DECISION_SCHEMA = {
    "seq": pl.Int64,
    "kind": pl.String,
    "contract": pl.Boolean,
    "fields": pl.List(pl.String),
    "legacy": pl.Struct({f: pl.String for f in _SHOWN}),
    "typed": pl.Struct({f: pl.String for f in _SHOWN}),
    "detail": pl.String,
}


def _l(name: str) -> pl.Expr:
    return pl.col(f"{name}_legacy")


def _t(name: str) -> pl.Expr:
    return pl.col(f"{name}_typed")


def _text(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String).fill_null("-")


def _differing_fields() -> pl.Expr:
    return pl.concat_list(
        [
            pl.when(~_l(f).eq_missing(_t(f))).then(pl.lit(f)).otherwise(pl.lit(None))
            for f in RESULT_FIELDS
        ]
    ).list.drop_nulls()


def classify_decisions(
    alignment: Alignment, strategy: str, config: Mapping[str, Any]
) -> pl.DataFrame:
    """The differing comparable decisions, each with its class.

    Parameters
    ----------
    alignment
        Both runs' aligned decisions.
    strategy
        The run's strategy name (the cascade and barrier classes apply to ``bidkv`` only).
    config
        The run's ``strategy_config``.

    Returns
    -------
    polars.DataFrame
        :data:`DECISION_SCHEMA`: ``seq, kind, contract, fields, legacy, typed, detail``.
    """
    rows = (
        alignment.comparable()
        .with_columns(_differing_fields().alias("fields"))
        .filter(pl.col("fields").list.len() > 0)
    )
    if rows.is_empty():
        return pl.DataFrame(schema=DECISION_SCHEMA)
    rows = rows.join(policy_views(alignment.candidates, rows, config), on="seq", how="left")
    row = strategy_row(strategy)
    # The row whose rule is the policy's decision (bidkv) has the cascade and barrier classes;
    # another row that reads the requester skips it, which the legacy contract cannot pass.
    bidkv = row is not None and row.victim is None
    skips_requester = row is not None and row.needs_requester and not bidkv
    barrier = bidkv and config.get("utility_liveness_mode") == "barrier"
    requester = _t("requesting_request_id")
    legacy_top = (
        pl.lit(bidkv)
        & _l("applied_victim_id").eq_missing(pl.col("top_id"))
        & _l("decision_reason").eq_missing(pl.lit("strategy"))
        & pl.col("cascade")
    )
    cascade_abstain = (
        pl.lit(not barrier)
        & legacy_top
        & _t("outcome").eq_missing(pl.lit("abstained"))
        & _t("decision_reason").eq_missing(pl.lit("cascade_abstain"))
    )
    cascade_barrier = (
        pl.lit(barrier)
        & legacy_top
        & _t("outcome").eq_missing(pl.lit("selected"))
        & _t("applied_victim_id").eq_missing(requester)
    )
    barrier_requester = (
        pl.lit(barrier)
        & _t("decision_reason").eq_missing(pl.lit("liveness_fallback"))
        & _l("decision_reason").eq_missing(pl.lit("liveness_fallback"))
        & _t("applied_victim_id").eq_missing(requester)
        & _l("applied_victim_id").eq_missing(pl.col("default_id"))
    )
    abstention = (
        _t("outcome").eq_missing(pl.lit("abstained"))
        & _l("outcome").eq_missing(pl.lit("selected"))
        & _l("decision_reason").eq_missing(_t("decision_reason"))
        & _l("applied_victim_id").eq_missing(pl.col("default_id"))
        & _t("applied_victim_id").eq_missing(_t("builtin_victim_id"))
    )
    requester_skip = (
        pl.lit(skips_requester)
        & requester.is_not_null()
        & _l("applied_victim_id").eq_missing(requester)
        & _t("applied_victim_id").ne_missing(requester)
        & _l("outcome").eq_missing(pl.lit("selected"))
        & _t("outcome").eq_missing(pl.lit("selected"))
        & _l("decision_reason").eq_missing(pl.lit("strategy"))
        & _t("decision_reason").eq_missing(pl.lit("strategy"))
    )
    failure = _t("outcome").is_in(_FAILED) | _l("outcome").is_in(_FAILED)
    kind = (
        pl.when(failure)
        .then(pl.lit(k.POLICY_FAILURE))
        .when(cascade_abstain | cascade_barrier)
        .then(pl.lit(k.CASCADE))
        .when(barrier_requester)
        .then(pl.lit(k.BARRIER_REQUESTER))
        .when(abstention)
        .then(pl.lit(k.ABSTENTION))
        .when(requester_skip)
        .then(pl.lit(k.REQUESTER_SKIP))
        .otherwise(pl.lit(k.UNEXPLAINED))
    )
    same_victim = _l("applied_victim_id").eq_missing(_t("applied_victim_id"))
    detail = (
        pl.when(pl.col("kind") == k.CASCADE)
        .then(
            pl.format(
                "requester {} frees {} tokens, x{} >= top {} with {}: typed {}, legacy took the "
                "utility top",
                _text(requester),
                _text(pl.col("requester_r")),
                pl.lit(str(config.get("utility_cascade_gain_ratio", 1.25))),
                _text(pl.col("top_id")),
                _text(pl.col("top_r")),
                pl.when(pl.lit(barrier))
                .then(pl.lit("took the requester"))
                .otherwise(pl.format("abstained (built-in {})", _text(_t("builtin_victim_id")))),
            )
        )
        .when(pl.col("kind") == k.ABSTENTION)
        .then(
            pl.format(
                "{}: typed abstained and applied the built-in {}; legacy applied the policy's "
                "default {}{}",
                _text(_t("decision_reason")),
                _text(_t("applied_victim_id")),
                _text(_l("applied_victim_id")),
                pl.when(same_victim).then(pl.lit(" (same victim)")).otherwise(pl.lit("")),
            )
        )
        .when(pl.col("kind") == k.REQUESTER_SKIP)
        .then(
            pl.format(
                "{}: legacy took the requester {}, which the typed rule skips; typed took {}",
                pl.lit(strategy),
                _text(requester),
                _text(_t("applied_victim_id")),
            )
        )
        .when(pl.col("kind") == k.BARRIER_REQUESTER)
        .then(
            pl.format(
                "barrier fallback: typed took the requester {}, legacy the default {}",
                _text(requester),
                _text(_l("applied_victim_id")),
            )
        )
        .otherwise(
            pl.format(
                "victim {} / {}, outcome {} / {}, reason {} / {} (legacy / typed)",
                *[
                    _text(side(f))
                    for f in ("applied_victim_id", "outcome", "decision_reason")
                    for side in (_l, _t)
                ],
            )
        )
    )
    return (
        rows.with_columns(kind.alias("kind"))
        .with_columns(
            pl.col("kind")
            .replace_strict({c: k.is_contract(c) for c in k.CLASSES}, return_dtype=pl.Boolean)
            .alias("contract"),
            pl.struct([_l(f).cast(pl.String).alias(f) for f in _SHOWN]).alias("legacy"),
            pl.struct([_t(f).cast(pl.String).alias(f) for f in _SHOWN]).alias("typed"),
            detail.alias("detail"),
        )
        .select(list(DECISION_SCHEMA))
        .cast(DECISION_SCHEMA)  # type: ignore[arg-type]
    )


def find_divergence(alignment: Alignment, decisions: pl.DataFrame) -> Divergence | None:
    """Describe the first divergence, attributing it to an earlier different victim if any.

    Parameters
    ----------
    alignment
        Both runs' aligned decisions.
    decisions
        The classified differing decisions (:func:`classify_decisions`).

    Returns
    -------
    Divergence or None
        None when every decision of both runs is comparable.
    """
    seq = alignment.divergence_seq
    if seq is None:
        return None
    row = alignment.decisions.filter(pl.col("seq") == seq).row(0, named=True)
    context_fields = tuple(row["context_fields"] or ())
    candidate_fields = tuple(row["candidate_fields"] or ())
    cause = (
        decisions.filter(pl.col("fields").list.contains("applied_victim_id")).sort("seq").head(1)
    )
    caused_by = None
    if cause.height:
        caused_by, cause_kind, cause_contract = cause.select("seq", "kind", "contract").row(0)
        kind, contract = k.HISTORY, bool(cause_contract)
        detail = f"caused by the different victim at seq {caused_by} ({cause_kind})"
    elif row["missing"]:
        kind, contract = k.DECISION_COUNT, False
        shorter = "legacy" if row["outcome_legacy"] is None else "typed"
        detail = f"the {shorter} run has no decision {seq}; every earlier victim was the same"
    elif row["order_only"] and not context_fields:
        kind, contract = k.CANDIDATE_ORDER, False
        detail = "the same candidates with the same fields reach the policy in another order"
    elif not candidate_fields and set(context_fields) <= {"kv_usage", "time_s"}:
        kind, contract = k.KV_OR_TIME, False
        detail = f"{' and '.join(context_fields)} differ with identical candidates"
    else:
        kind, contract = k.UNEXPLAINED, False
        detail = "the contexts differ although every earlier victim was the same"
    sides = decision_context(alignment, seq)
    return Divergence(
        seq=seq,
        kind=kind,
        contract=contract,
        detail=detail,
        context_fields=context_fields,
        candidate_fields=candidate_fields,
        caused_by_seq=caused_by,
        legacy=sides["legacy"],
        typed=sides["typed"],
        differing_cells=sides["differing_cells"],
    )
