"""What the production policy computes from a decision's candidates, as polars expressions.

The diff verifies the contract explanations instead of trusting labels: "legacy selected the
policy's utility top" and "the cascade condition held" are recomputed from the recorded
candidates with the run's configuration. The utility is the replay fast path's column form of the
policy's scan (:func:`tracekit.replay.rules.utility_columns`, which calls the policy's own
``utility``), so the utilities are bit-identical to the policy's (docs/policy.md, "The bidkv
decision"), and the selections are the fast path's (:func:`tracekit.replay.rules.select_rows`,
and the built-in rule's declared order compiled by :func:`tracekit.replay.rules.order_picks`), so
each rule has one columnar form:

- ``r = max(num_computed_tokens, 0)``, ``c = clamp(num_output_tokens / M, 0, 1)`` with ``M`` the
  candidate's ``max_tokens`` or ``utility_default_max_tokens`` when not positive,
  ``P = max(num_preemptions, 0)``, ``U = r / ((1 + w_c c) + w_p P + eps)``;
- the utility top is the first candidate by ``(-U, arrival_time, request_id, position)``;
- the policy's own default victim is vLLM's built-in rule: the FCFS tail, or under PRIORITY the
  first candidate with the largest ``(priority, arrival_time)``;
- the cascade condition: the requester is a candidate other than the top and
  ``r_requester * rho >= r_top`` (the requester's best-ranked record).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from tracekit.replay.rules import order_picks, select_rows, utility_columns
from tracekit.strategies import BUILTIN_ORDER, decision_rules

__all__ = ["policy_views"]


def policy_views(
    candidates: pl.LazyFrame,
    decisions: pl.DataFrame,
    config: Mapping[str, Any],
    *,
    side: str = "typed",
) -> pl.DataFrame:
    """Per decision: the policy's default victim, utility top and cascade condition.

    Parameters
    ----------
    candidates
        Candidates joined on ``(seq, position)`` with ``_legacy``/``_typed`` suffixed columns
        (:attr:`tracekit.diff.align.Alignment.candidates`).
    decisions
        Rows with ``seq``, ``scheduling_policy_<side>`` and ``requesting_request_id_<side>``;
        only these decisions are computed.
    config
        The run's ``strategy_config`` (missing settings take the policy's defaults).
    side
        Whose candidates to read; on comparable decisions both sides are equal.

    Returns
    -------
    polars.DataFrame
        ``seq, default_id, top_id, top_r, requester_r, cascade`` (``cascade`` is False when the
        requester is absent).
    """
    # Settings the recording's configuration omits take the policy's defaults.
    rules = decision_rules(config)
    rho = rules.cascade_gain_ratio
    keys = decisions.select(
        "seq",
        pl.col(f"scheduling_policy_{side}").alias("policy"),
        pl.col(f"requesting_request_id_{side}").alias("requester"),
    ).lazy()

    def col(name: str) -> pl.Expr:
        return pl.col(f"{name}_{side}")

    tokens, _, utility = utility_columns(
        rules,
        col("num_computed_tokens"),
        col("num_output_tokens"),
        col("max_tokens"),
        col("num_preemptions"),
    )
    # One row per candidate in host order, named as the replay's rules expect: ``dec`` the
    # decision (its seq), ``row`` the candidate (its position).
    scored = (
        candidates.join(keys, on="seq", how="semi")
        .filter(col("request_id").is_not_null())
        .select(
            pl.col("seq").alias("dec"),
            pl.col("position").alias("row"),
            col("request_id").alias("rid"),
            col("priority").alias("priority"),
            col("arrival_time").alias("arrival_time"),
            tokens.alias("r"),
            utility.alias("utility"),
        )
        .join(keys.rename({"seq": "dec"}), on="dec", how="left")
        .with_columns(is_priority=pl.col("policy") == "priority")
        .sort("dec", "row")
        .collect()
    )
    # The same selections as the replay's fast path (tracekit.replay.rules), on the same
    # formula: the utility top by (-U, arrival, id), host order on ties; the requester's best
    # record; the built-in rule (its order compiled, the tail where it decides nothing).
    arrival = pl.col("arrival_time")
    top = select_rows(scored, [(pl.col("utility"), True), (arrival, False), (pl.col("rid"), False)])
    requester = select_rows(
        scored.filter(pl.col("rid") == pl.col("requester")),
        [(pl.col("utility"), True), (arrival, False)],
    )
    tail = scored.group_by("dec", maintain_order=True).agg(pl.col("row").last())
    priority = order_picks(scored, BUILTIN_ORDER)
    default = tail.join(priority, on="dec", how="left", suffix="_priority").select(
        "dec", pl.coalesce("row_priority", "row").alias("row")
    )

    def picked(rows: pl.DataFrame, **fields: str) -> pl.DataFrame:
        # The picked candidate's fields, by decision.
        return rows.join(scored, on=["dec", "row"], how="left").select(
            pl.col("dec").alias("seq"), *(pl.col(c).alias(name) for name, c in fields.items())
        )

    return (
        keys.collect()
        .join(picked(top, top_id="rid", top_r="r"), on="seq", how="left")
        .join(picked(requester, requester_r="r"), on="seq", how="left")
        .join(picked(default, default_id="rid"), on="seq", how="left")
        .select(
            "seq",
            "default_id",
            "top_id",
            "top_r",
            "requester_r",
            (
                pl.col("requester_r").is_not_null()
                & (pl.col("requester") != pl.col("top_id"))
                & (pl.col("requester_r").cast(pl.Float64) * rho >= pl.col("top_r"))
            )
            .fill_null(False)
            .alias("cascade"),
        )
    )
