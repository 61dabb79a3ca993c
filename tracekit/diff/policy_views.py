"""What the production policy computes from a decision's candidates, as polars expressions.

The diff verifies the contract explanations instead of trusting labels: "legacy selected the
policy's utility top" and "the cascade condition held" are recomputed from the recorded
candidates with the run's configuration. The utility is the replay fast path's column form of the
policy's scan (:func:`tracekit.replay.rules.utility_columns`, which calls the policy's own
``utility``), so the utilities are bit-identical to the policy's (docs/policy.md, "The bidkv
decision"):

- ``r = max(num_computed_tokens, 0)``, ``c = clamp(num_output_tokens / M, 0, 1)`` with ``M`` the
  candidate's ``max_tokens`` or ``utility_default_max_tokens`` when not positive,
  ``P = max(num_preemptions, 0)``, ``U = r / ((1 + w_c c) + w_p P + eps)``;
- the utility top is the first candidate by ``(-U, arrival_time, request_id, position)``;
- the policy's own default victim is the FCFS tail, or under PRIORITY the first candidate with
  the largest ``(priority, arrival_time)``;
- the cascade condition: the requester is a candidate other than the top and
  ``r_requester * rho >= r_top`` (the requester's best-ranked record).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from tracekit.replay.rules import utility_columns
from tracekit.strategies import decision_rules

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
    scored = (
        candidates.join(keys, on="seq", how="semi")
        .filter(col("request_id").is_not_null())
        .select(
            "seq",
            "position",
            col("request_id").alias("rid"),
            col("priority").alias("priority"),
            col("arrival_time").alias("arrival"),
            tokens.alias("r"),
            utility.alias("utility"),
        )
    )
    ranked = scored.sort(
        ["seq", "utility", "arrival", "rid", "position"],
        descending=[False, True, False, False, False],
    )
    top = ranked.group_by("seq", maintain_order=True).agg(
        pl.col("rid").first().alias("top_id"), pl.col("r").first().alias("top_r")
    )
    requester = (
        ranked.join(keys, on="seq")
        .filter(pl.col("rid") == pl.col("requester"))
        .group_by("seq", maintain_order=True)
        .agg(pl.col("r").first().alias("requester_r"))
    )
    fcfs = (
        scored.sort("seq", "position")
        .group_by("seq")
        .agg(pl.col("rid").last().alias("fcfs_default"))
    )
    priority = (
        scored.sort(
            ["seq", "priority", "arrival", "position"], descending=[False, True, True, False]
        )
        .group_by("seq", maintain_order=True)
        .agg(pl.col("rid").first().alias("priority_default"))
    )
    return (
        keys.join(top, on="seq", how="left")
        .join(requester, on="seq", how="left")
        .join(fcfs, on="seq", how="left")
        .join(priority, on="seq", how="left")
        .select(
            "seq",
            pl.when(pl.col("policy") == "priority")
            .then(pl.col("priority_default"))
            .otherwise(pl.col("fcfs_default"))
            .alias("default_id"),
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
        .collect()
    )
