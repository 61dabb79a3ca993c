"""The human report of ``tracekit diff``.

A few lines per difference class, then the first divergence with both contexts side by side,
then the host counters.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from tracekit.diff.align import CANDIDATE_FIELDS, CONTEXT_FIELDS
from tracekit.diff.report import DiffReport, Divergence, PairDiff
from tracekit.trace.text import text_table

__all__ = ["render_diff"]

EXAMPLES = 3
NAMES = 6
# Short headers of the candidate columns (the SGLang lengths only when present).
_HEADERS = {
    "request_id": "request_id",
    "priority": "prio",
    "arrival_time": "arrival",
    "num_prompt_tokens": "prompt",
    "num_output_tokens": "out",
    "num_computed_tokens": "computed",
    "num_preemptions": "pre",
    "max_tokens": "max",
    "sglang_output_len": "sg_out",
    "sglang_prompt_len": "sg_prompt",
}
_VERDICT_TEXT = {
    "equivalent": "no difference",
    "equivalent-modulo-contract": "every difference is explained by the contracts",
    "different": "some differences are not explained by the contracts",
}


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.6f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.1f}"
    return str(value)


def _class_lines(pair: PairDiff) -> list[str]:
    lines = []
    decisions = pair.decisions
    for summary in pair.classes():
        kind, contract = summary["kind"], summary["contract"]
        tag = "contract" if contract else "NOT EXPLAINED"
        scopes = summary["scopes"]
        if scopes == ["decision"]:
            rows = decisions.filter((pl.col("kind") == kind) & (pl.col("contract") == contract))
            seqs = ", ".join(str(s) for s in rows["seq"].head(EXAMPLES).to_list())
            more = ", ..." if rows.height > EXAMPLES else ""
            lines.append(f"  [{tag}] {kind}: {rows.height} decision(s) (seq {seqs}{more})")
            lines.append(f"      {summary['cause']}")
            lines.extend(
                f"      seq {seq}: {detail}"
                for seq, detail in rows.select("seq", "detail").head(EXAMPLES).iter_rows()
            )
            continue
        items = [d for d in pair.differences if d.kind == kind and d.contract == contract]
        if scopes == ["divergence"]:
            lines.append(f"  [{tag}] {kind}: first divergence at seq {items[0].seq}")
        else:
            fields = list(dict.fromkeys(f for d in items for f in d.fields))
            names = ", ".join(fields[:NAMES]) + (", ..." if len(fields) > NAMES else "")
            lines.append(f"  [{tag}] {kind}: {len(items)} ({', '.join(scopes)}): {names}")
        lines.append(f"      {summary['cause']}")
        details = dict.fromkeys(d.detail for d in items if d.detail)
        lines.extend(f"      {detail}" for detail in list(details)[:EXAMPLES])
    return lines


def _candidate_table(divergence: Divergence) -> list[str]:
    legacy = {c["position"]: c for c in divergence.legacy["candidates"]}
    typed = {c["position"]: c for c in divergence.typed["candidates"]}
    cells = {(c["position"], c["field"]) for c in divergence.differing_cells}
    fields = [
        f
        for f in CANDIDATE_FIELDS
        if not f.startswith("sglang")
        or any(c.get(f) is not None for c in (*legacy.values(), *typed.values()))
    ]
    rows: list[list[str]] = [
        ["pos", *[_HEADERS[f] for f in fields], "|", *[_HEADERS[f] for f in fields]]
    ]
    for position in sorted(set(legacy) | set(typed)):
        row = [str(position)]
        for side in (legacy, typed):
            candidate = side.get(position)
            for f in fields:
                mark = "*" if (position, f) in cells else ""
                row.append("" if candidate is None else _value(candidate.get(f)) + mark)
            if side is legacy:
                row.append("|")
        rows.append(row)
    return ["    " + line for line in text_table(rows, align="right")]


def _divergence_lines(divergence: Divergence) -> list[str]:
    lines = [
        f"first divergence at seq {divergence.seq} [{divergence.kind}]: {divergence.detail}",
        "  later decisions are not compared: the runs follow different histories from here",
    ]
    legacy, typed = divergence.legacy["context"], divergence.typed["context"]
    table = [["context", "legacy", "typed", ""]]
    for name in CONTEXT_FIELDS:
        a = "(no decision)" if legacy is None else _value(legacy.get(name))
        b = "(no decision)" if typed is None else _value(typed.get(name))
        table.append([name, a, b, "*" if name in divergence.context_fields else ""])
    lines += [("  " + line).rstrip() for line in text_table(table)]
    lines.append("  candidates, legacy | typed (* marks a field that differs at that position)")
    lines += _candidate_table(divergence)
    return lines


def _counter_lines(pair: PairDiff) -> list[str]:
    if not pair.counters:
        return []
    table = [["counter", "legacy", "typed", "status"]] + [
        [c.name, _value(c.legacy), _value(c.typed), c.status] for c in pair.counters
    ]
    return [
        "host counters (the legacy host has no controller: it exports calls only)",
        *[("  " + line).rstrip() for line in text_table(table)],
    ]


def _pair_lines(pair: PairDiff) -> list[str]:
    key = pair.key
    sha = str(key.get("workload_sha256") or "-")[:12]
    lines = [
        f"legacy  {pair.legacy.run_id}  {pair.legacy.path}  ({pair.legacy.policy_name}, "
        f"{pair.legacy.decisions} decisions)",
        f"typed   {pair.typed.run_id}  {pair.typed.path}  ({pair.typed.policy_name}, "
        f"{pair.typed.decisions} decisions)",
        f"run     {key.get('workload')} ({sha}), {key.get('engine')} "
        f"{key.get('scheduling_policy')}, strategy {key.get('strategy')}, seed {key.get('seed')}",
    ]
    where = (
        "no divergence"
        if pair.divergence is None
        else f"first divergence at seq {pair.divergence.seq}"
    )
    lines.append(
        f"verdict {pair.verdict}: {pair.comparable_decisions} comparable decisions, {where}"
    )
    exposure = pair.exposure
    if exposure.get("legacy_cascade_condition"):
        lines.append(
            f"        the cascade condition held at {exposure['legacy_cascade_condition']} of "
            f"{exposure['legacy_utility_picks']} legacy utility picks (the typed path abstains "
            "there)"
        )
    if pair.classes():
        lines += ["", "differences by class", *_class_lines(pair)]
    if pair.divergence is not None:
        lines += ["", *_divergence_lines(pair.divergence)]
    counters = _counter_lines(pair)
    if counters:
        lines += ["", *counters]
    return lines


def render_diff(report: DiffReport) -> str:
    """The human report of ``report``.

    Parameters
    ----------
    report
        A :class:`~tracekit.diff.report.DiffReport`.

    Returns
    -------
    str
        Lines without a trailing newline.
    """
    verdict = report.verdict
    allowed = (
        " (allowed)"
        if report.allow_contract_differences and report.exit_code == 0 and (verdict != "equivalent")
        else ""
    )
    lines = [
        f"tracekit diff: {verdict}{allowed}: {_VERDICT_TEXT[verdict]} (exit {report.exit_code})"
    ]
    for pair in report.pairs:
        lines += ["", *_pair_lines(pair)]
    return "\n".join(lines)
