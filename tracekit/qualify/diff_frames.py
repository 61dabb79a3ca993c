"""The frames of the legacy-versus-typed comparison, from ``diff/diff.json`` and its bundles.

``tracekit.diff`` writes, per pair of runs, the differences with their classes and the first
divergence with both contexts. These functions flatten that document (and the decisions of the
two recordings under ``diff/legacy`` and ``diff/typed``) into what the report's diff section
shows. A ``diff.json`` without ``pairs`` is read as one pair.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.hosts.preemption_policy import CANDIDATE_FIELDS
from tracekit.qualify.results import Results
from tracekit.trace.bundle import open_trace

__all__ = ["diff_classes_frame", "diff_timeline_frame", "first_difference"]


def _pairs(diff: dict[str, Any] | None) -> list[dict[str, Any]]:
    if diff is None:
        return []
    pairs = diff.get("pairs")
    return [p for p in pairs if isinstance(p, dict)] if isinstance(pairs, list) else [diff]


def diff_classes_frame(diff: dict[str, Any] | None) -> pl.DataFrame:
    """The difference classes of every pair, in the order of ``diff.json``.

    Parameters
    ----------
    diff
        ``diff/diff.json``, or ``None``.

    Returns
    -------
    polars.DataFrame
        ``kind, contract, count, cause``: the class, whether the contracts explain it, how many
        differences it holds and its cause; no rows when there is no class.
    """
    rows = [
        {
            "kind": str(c.get("kind")),
            "contract": bool(c.get("contract")),
            "count": int(c.get("count") or 0),
            "cause": str(c.get("cause", "")),
        }
        for p in _pairs(diff)
        for c in p.get("classes") or []
    ]
    schema = {"kind": pl.String, "contract": pl.Boolean, "count": pl.Int64, "cause": pl.String}
    return pl.DataFrame(rows, schema=schema)


def diff_timeline_frame(results: Results, max_marks: int = 1000) -> pl.DataFrame | None:
    """The legacy and typed runs' decisions and their differences, on one decision axis.

    Parameters
    ----------
    results
        A loaded results folder.
    max_marks
        Decisions per side at most (every k-th beyond that; differences are all kept).

    Returns
    -------
    polars.DataFrame or None
        ``lane, seq, time_s, label, contract, detail``: ``lane`` is ``legacy`` or ``typed``
        (one row per decision: ``label`` its outcome, ``detail`` its applied victim) or
        ``difference`` (``label`` the class, ``contract`` whether the contracts explain it,
        ``detail`` the explanation). ``None`` without ``diff/diff.json``.
    """
    if results.diff is None:
        return None
    rows = [
        {
            "lane": "difference",
            "seq": d.get("seq"),
            "label": str(d.get("kind")),
            "contract": bool(d.get("contract")),
            "detail": str(d.get("detail", "")),
        }
        for pair in _pairs(results.diff)
        for d in pair.get("differences") or []
        if isinstance(d, dict) and d.get("seq") is not None
    ]
    schema = {
        "lane": pl.String, "seq": pl.Int64, "label": pl.String, "contract": pl.Boolean,
        "detail": pl.String,
    }  # fmt: skip
    differences = pl.DataFrame(rows, schema=schema).unique(
        ["seq", "label"], keep="first", maintain_order=True
    )
    sides = []
    for lane in ("legacy", "typed"):
        folder = results.root / "diff" / lane
        if not folder.is_dir() or not any(folder.rglob("manifest.json")):
            continue
        decisions = open_trace(folder).scan("decisions").sort("seq")
        every = (pl.len() // max_marks + 1).cast(pl.Int64)
        sides.append(
            decisions.filter(pl.int_range(pl.len()) % every == 0)
            .select(
                pl.lit(lane).alias("lane"),
                "seq",
                pl.col("time_s").round(3),
                pl.col("outcome").alias("label"),
                pl.col("applied_victim_id").alias("detail"),
            )
            .collect()
        )
    times = pl.DataFrame(schema={"seq": pl.Int64, "time_s": pl.Float64})
    if sides:
        times = sides[-1].select("seq", "time_s").unique("seq", keep="first")
    differences = differences.join(times, on="seq", how="left")
    return pl.concat([*sides, differences], how="diagonal_relaxed").sort("lane", "seq")


def _contract_order(candidate: dict[str, Any]) -> dict[str, Any]:
    """A candidate's fields: ``position``, the contract's fields in order, then any others."""
    first = ["position", *CANDIDATE_FIELDS]
    keys = [k for k in first if k in candidate] + [k for k in candidate if k not in first]
    return {k: candidate[k] for k in keys}


def _ordered_divergence(divergence: dict[str, Any]) -> dict[str, Any]:
    """A copy of a divergence whose candidates list their fields in the contract's order.

    ``diff.json`` is written with sorted keys, so its candidates' fields come alphabetically.
    """
    ordered = dict(divergence)
    for side in ("legacy", "typed"):
        value = divergence.get(side)
        if isinstance(value, dict) and isinstance(value.get("candidates"), list):
            ordered[side] = {
                **value,
                "candidates": [
                    _contract_order(c) if isinstance(c, dict) else c for c in value["candidates"]
                ],
            }
    return ordered


def first_difference(diff: dict[str, Any] | None) -> dict[str, Any] | None:
    """The earliest differing decision and the first divergence of the contexts, if any.

    Parameters
    ----------
    diff
        ``diff/diff.json``.

    Returns
    -------
    dict or None
        ``{"decision": <first decision-scope difference or None>, "divergence": <the first
        pair's divergence or None>, "verdict": ...}``; ``None`` when there is no diff at all.
        The divergence's candidates list ``position`` first, then the fields of
        :class:`~tracekit.hosts.preemption_policy.PreemptionCandidate` in its order.
    """
    if diff is None:
        return None
    pairs = _pairs(diff)
    decision = None
    divergence = None
    for pair in pairs:
        decisions = [
            d for d in pair.get("differences") or []
            if isinstance(d, dict) and d.get("scope", "decision") == "decision"
            and d.get("seq") is not None
        ]  # fmt: skip
        if decisions and decision is None:
            decision = min(decisions, key=lambda d: int(d["seq"]))
        if divergence is None and isinstance(pair.get("divergence"), dict):
            divergence = _ordered_divergence(pair["divergence"])
    return {"verdict": diff.get("verdict"), "decision": decision, "divergence": divergence}
