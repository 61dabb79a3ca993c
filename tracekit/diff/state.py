"""Comparing the two runs' end state: host counters, policy metrics, snapshots, steps, requests.

The values come from each manifest's ``final_state`` (``controller_stats``, ``policy_metrics``,
``recent_snapshots``, ``num_steps``, ``end_s``) and from the ``requests`` tables.

Once the runs applied different victims (the *split*), their end states belong to different
histories: every difference is then ``after-divergence``, explained exactly when the split is.
Without a split the rules are:

- counters: the legacy host has no controller and exports ``calls`` only. ``calls`` must be
  equal. ``selections``, ``abstentions``, ``failures``, ``invalid_selections`` and ``enabled``
  exist on the typed path alone; they must agree with the decisions (the typed abstentions are
  exactly the contract-explained ones; no failure, still enabled), else they are differences;
- metrics and snapshots must be equal, except the keys the policy counts differently because of
  a contract difference in the decisions (:data:`CONTRACT_METRICS`);
- steps, end time and every request's outcome must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.diff import classes as k
from tracekit.diff.pairing import RunPair
from tracekit.diff.report import CounterRow, Difference

__all__ = ["CONTRACT_METRICS", "Split", "compare_state"]

# export_metrics() keys that a contract difference in the decisions changes
# (docs/policy.md, "Counters, snapshots, logs"):
# the typed cascade guard counts a hit and an abstention and records the policy's default as the
# victim, where the legacy path records a utility pick of the top.
_VICTIM_KEYS = (
    "total_tokens_freed",
    "preempted_req_ids",
    "consecutive_preempt_ratio",
    "preemptions_per_request_p95",
)
CONTRACT_METRICS: dict[str, tuple[str, ...]] = {
    k.CASCADE: (
        "cascade_guard_hits",
        "policy_abstentions",
        "utility_strategy_hits",
        "default_strategy_hits",
        "strategy_hit_rate",
        *_VICTIM_KEYS,
    ),
    k.BARRIER_REQUESTER: _VICTIM_KEYS,
    # The policy records an abstention identically on both paths: nothing differs.
    k.ABSTENTION: (),
}
_TYPED_ONLY = ("selections", "abstentions", "failures", "invalid_selections", "enabled")
_REQUEST_FIELDS = ("status", "finish_s", "output_tokens", "num_preemptions", "recomputed_tokens")


@dataclass(frozen=True, slots=True)
class Split:
    """Where the two histories split, if they did."""

    seq: int | None
    contract: bool
    detail: str

    def difference(self, scope: Any, name: str, legacy: Any, typed: Any) -> Difference:
        """An ``after-divergence`` difference of one end-state value."""
        return Difference(
            k.AFTER_DIVERGENCE,
            self.contract,
            scope,
            None,
            (name,),
            {name: legacy},
            {name: typed},
            self.detail,
        )


def _final(pair: RunPair) -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        dict(pair.legacy.manifest.get("final_state") or {}),
        dict(pair.typed.manifest.get("final_state") or {}),
    )


def _counters(
    legacy: dict[str, Any], typed: dict[str, Any], decisions: pl.DataFrame, split: Split
) -> tuple[list[CounterRow], list[Difference]]:
    rows: list[CounterRow] = []
    found: list[Difference] = []
    if not legacy or not typed:
        # A recording without final_state (an import, a killed live recorder): nothing to check.
        return rows, found

    def differ(name: str, kind: str, detail: str) -> None:
        rows.append(CounterRow(name, legacy.get(name), typed.get(name), "different"))
        found.append(
            Difference(
                kind,
                k.is_contract(kind),
                "counter",
                None,
                (name,),
                {name: legacy.get(name)},
                {name: typed.get(name)},
                detail,
            )
        )

    failed = bool(typed.get("failures")) or typed.get("enabled") is False
    if legacy.get("calls") == typed.get("calls"):
        rows.append(CounterRow("calls", legacy.get("calls"), typed.get("calls"), "equal"))
    elif split.seq is not None:
        rows.append(CounterRow("calls", legacy.get("calls"), typed.get("calls"), "different"))
        found.append(split.difference("counter", "calls", legacy.get("calls"), typed.get("calls")))
    elif failed:
        differ("calls", k.POLICY_FAILURE, "the disabled typed policy is no longer called")
    else:
        differ("calls", k.UNEXPLAINED, "the same decisions made a different number of calls")
    # The typed abstentions the decisions explain: the legacy path recorded those as selections.
    explained = decisions.filter(
        pl.col("kind").is_in([k.ABSTENTION, k.CASCADE])
        & (pl.col("typed").struct.field("outcome") == "abstained")
    ).height
    expected = {
        "failures": 0,
        "invalid_selections": 0,
        "enabled": True,
        "abstentions": explained,
        "selections": None if legacy.get("calls") is None else legacy["calls"] - explained,
    }
    for name in _TYPED_ONLY:
        value = typed.get(name)
        if value is None:
            rows.append(CounterRow(name, None, None, "not-comparable"))
        elif name in ("failures", "invalid_selections", "enabled") and value != expected[name]:
            differ(name, k.POLICY_FAILURE, "the typed controller disabled the policy")
        elif name in ("failures", "invalid_selections", "enabled"):
            rows.append(CounterRow(name, None, value, "typed-only"))
        elif split.seq is not None or failed:
            rows.append(CounterRow(name, None, value, "not-comparable"))
        elif value == expected[name]:
            rows.append(CounterRow(name, None, value, "typed-only"))
        else:
            differ(
                name,
                k.UNEXPLAINED,
                f"the decisions explain {expected[name]} {name}, the typed controller counted "
                f"{value}",
            )
    return rows, found


def _metrics(
    legacy: dict[str, Any], typed: dict[str, Any], decisions: pl.DataFrame, split: Split
) -> list[Difference]:
    contract_kinds = set(decisions.filter(pl.col("contract"))["kind"].to_list())
    explained = {key: kind for kind in contract_kinds for key in CONTRACT_METRICS.get(kind, ())}
    found = []
    for key in dict.fromkeys([*typed, *legacy]):
        a, b = legacy.get(key), typed.get(key)
        if a == b:
            continue
        if split.seq is not None:
            found.append(split.difference("metric", key, a, b))
            continue
        kind = explained.get(key, k.UNEXPLAINED)
        detail = "" if kind == k.UNEXPLAINED else "counted differently by the policy"
        found.append(
            Difference(
                kind, k.is_contract(kind), "metric", None, (key,), {key: a}, {key: b}, detail
            )
        )
    return found


def _snapshots(
    legacy: list[Any], typed: list[Any], decisions: pl.DataFrame, split: Split
) -> list[Difference]:
    if legacy == typed:
        return []
    index = next(
        (i for i, (a, b) in enumerate(zip(legacy, typed, strict=False)) if a != b),
        min(len(legacy), len(typed)),
    )
    values = (
        {"count": len(legacy), "first_differing": legacy[index] if index < len(legacy) else None},
        {"count": len(typed), "first_differing": typed[index] if index < len(typed) else None},
    )
    if split.seq is not None:
        return [
            Difference(
                k.AFTER_DIVERGENCE,
                split.contract,
                "snapshot",
                None,
                ("recent_snapshots",),
                values[0],
                values[1],
                split.detail,
            )
        ]
    kinds = set(decisions.filter(pl.col("contract"))["kind"].to_list())
    kind = k.CASCADE if k.CASCADE in kinds else k.UNEXPLAINED
    detail = f"snapshot {index} differs (the policy records the cascade guard's decisions)"
    return [
        Difference(
            kind,
            k.is_contract(kind),
            "snapshot",
            None,
            ("recent_snapshots",),
            values[0],
            values[1],
            detail if kind == k.CASCADE else f"snapshot {index} differs",
        )
    ]


def _requests(pair: RunPair) -> tuple[int, int, dict[str, Any], dict[str, Any]]:
    """Requests whose outcome differs, the total, and each side's totals."""
    sides = []
    for data, run in ((pair.legacy_data, pair.legacy), (pair.typed_data, pair.typed)):
        sides.append(
            data.scan("requests")
            .filter(pl.col("run_id") == run.run_id)
            .select("request_id", *_REQUEST_FIELDS)
        )
    joined = sides[0].join(sides[1], on="request_id", how="full", coalesce=True, suffix="_typed")
    differs = pl.any_horizontal(
        [~pl.col(f).eq_missing(pl.col(f"{f}_typed")) for f in _REQUEST_FIELDS]
    )
    row = (
        joined.select(
            differs.sum().alias("differing"),
            pl.len().alias("total"),
            pl.col("num_preemptions").sum().alias("legacy_preemptions"),
            pl.col("num_preemptions_typed").sum().alias("typed_preemptions"),
            pl.col("recomputed_tokens").sum().alias("legacy_recomputed"),
            pl.col("recomputed_tokens_typed").sum().alias("typed_recomputed"),
        )
        .collect()
        .row(0, named=True)
    )
    totals = [
        {"preemptions": row[f"{s}_preemptions"], "recomputed_tokens": row[f"{s}_recomputed"]}
        for s in ("legacy", "typed")
    ]
    return int(row["differing"] or 0), int(row["total"]), totals[0], totals[1]


def _end_state(
    pair: RunPair, legacy: dict[str, Any], typed: dict[str, Any], split: Split
) -> list[Difference]:
    found = []
    for name in ("num_steps", "end_s"):
        a, b = legacy.get(name), typed.get(name)
        if a == b:
            continue
        if split.seq is not None:
            found.append(split.difference("end-state", name, a, b))
        else:
            found.append(
                Difference(k.UNEXPLAINED, False, "end-state", None, (name,), {name: a}, {name: b})
            )
    differing, total, legacy_totals, typed_totals = _requests(pair)
    if differing:
        detail = f"{differing} of {total} requests finished differently"
        if split.seq is not None:
            found.append(
                Difference(
                    k.AFTER_DIVERGENCE,
                    split.contract,
                    "end-state",
                    None,
                    ("requests",),
                    legacy_totals,
                    typed_totals,
                    f"{detail}; {split.detail}",
                )
            )
        else:
            found.append(
                Difference(
                    k.UNEXPLAINED,
                    False,
                    "end-state",
                    None,
                    ("requests",),
                    legacy_totals,
                    typed_totals,
                    detail,
                )
            )
    return found


def compare_state(
    pair: RunPair, decisions: pl.DataFrame, split: Split
) -> tuple[list[CounterRow], list[Difference]]:
    """Compare counters, metrics, snapshots and the end state of both runs.

    Parameters
    ----------
    pair
        The two runs.
    decisions
        The classified differing decisions.
    split
        Where the histories split (``seq`` None when they never did).

    Returns
    -------
    tuple
        The counter table and the differences found.
    """
    legacy, typed = _final(pair)
    rows, found = _counters(
        dict(legacy.get("controller_stats") or {}),
        dict(typed.get("controller_stats") or {}),
        decisions,
        split,
    )
    found += _metrics(
        dict(legacy.get("policy_metrics") or {}),
        dict(typed.get("policy_metrics") or {}),
        decisions,
        split,
    )
    found += _snapshots(
        list(legacy.get("recent_snapshots") or []),
        list(typed.get("recent_snapshots") or []),
        decisions,
        split,
    )
    found += _end_state(pair, legacy, typed, split)
    return rows, found
