"""Verdict wording that depends on load (issue 14): overloaded cells, identical decisions, go/no-go.

Applied on top of the effectiveness entries of :mod:`tracekit.qualify.effectiveness`:

* **overloaded** — a cell whose built-in runs meet the SLO for less than
  :data:`~tracekit.qualify.loads.OVERLOAD_SLO` (50%) of their requests, averaged over the
  repeats. Queueing, not the victim policy, decides latency there, so no strategy is judged in
  it: every entry of the cell is labelled ``overloaded``.
* **identical to built-in** — a strategy whose every decision in every repeat of a cell chose
  the built-in rule's victim (``differing_decisions`` is 0 in all its runs). Its runs are the
  baseline's runs, so "inconclusive" would hide that it simply did nothing different.
* **go / no-go** — one line saying what the evidence supports, for the candidate: *no-go* when
  the functional gate failed or the candidate is not beneficial in some judged cell; *go* when
  it is beneficial in at least one judged cell and worse in none; otherwise *no-go (no
  evidence of benefit)*, naming why (identical decisions, inconclusive intervals, or every cell
  overloaded).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.qualify.loads import OVERLOAD_SLO
from tracekit.qualify.results import BASELINE

__all__ = ["IDENTICAL", "OVERLOADED", "go_no_go", "load_headlines", "relabel_entries"]

OVERLOADED = "overloaded"
IDENTICAL = "identical to built-in"


def _cell_facts(cells: pl.DataFrame) -> pl.DataFrame:
    """Per cell: the built-in runs' mean SLO attainment and offered/achieved rates."""
    base = cells.filter(pl.col("strategy") == BASELINE)
    aggs = [pl.col("throughput_rps").mean().alias("achieved_rps")]
    if "slo_attainment" in cells.columns:
        aggs.append(pl.col("slo_attainment").mean().alias("builtin_slo"))
    else:
        aggs.append(pl.lit(None, dtype=pl.Float64).alias("builtin_slo"))
    for column in ("load", "offered_rps"):
        if column in cells.columns:
            aggs.append(pl.col(column).first())
    return base.group_by("cell", maintain_order=True).agg(*aggs)


def relabel_entries(entries: list[dict[str, Any]], cells: pl.DataFrame) -> list[dict[str, Any]]:
    """Return ``entries`` with the ``overloaded`` and ``identical to built-in`` labels applied.

    Parameters
    ----------
    entries
        :func:`~tracekit.qualify.effectiveness.effectiveness_entries` output.
    cells
        ``cells.parquet``.

    Returns
    -------
    list of dict
        New entries; a relabelled one keeps its intervals and gets a new ``reason``.
    """
    facts = {row["cell"]: row for row in _cell_facts(cells).to_dicts()}
    identical: set[tuple[str, str]] = set()
    if "differing_decisions" in cells.columns:
        same = (
            cells.group_by("cell", "strategy")
            .agg(
                (pl.col("differing_decisions").fill_null(1) == 0).all().alias("same"),
                pl.col("calls").sum().alias("calls"),
            )
            .filter(pl.col("same"))
        )
        identical = {(c, s) for c, s in same.select("cell", "strategy").iter_rows()}
    out = []
    for entry in entries:
        fact = facts.get(entry["cell"], {})
        slo = fact.get("builtin_slo")
        if slo is not None and slo < OVERLOAD_SLO:
            entry = {
                **entry,
                "label": OVERLOADED,
                "reason": f"built-in SLO attainment {slo:.0%} < {OVERLOAD_SLO:.0%}: queueing "
                "decides latency in this cell, so no strategy is judged in it",
            }
        elif (entry["cell"], entry["strategy"]) in identical and entry["attributable"]:
            entry = {
                **entry,
                "label": IDENTICAL,
                "reason": "every decision in every repeat chose the built-in rule's victim",
            }
        out.append(entry)
    return out


def load_headlines(
    entries: list[dict[str, Any]], cells: pl.DataFrame, candidate: str
) -> list[dict[str, Any]]:
    """One headline per cell: its load, the built-in SLO attainment and the candidate's label.

    Returns
    -------
    list of dict
        ``cell, load, offered_rps, achieved_rps, builtin_slo, label, text`` per cell, by
        offered rate (the closed loop last), else in cell order.
    """
    labels = {e["cell"]: e for e in entries if e["strategy"] == candidate}
    facts = _cell_facts(cells)
    if "offered_rps" in facts.columns:
        # Lightest load first; the closed loop (no offered rate) last.
        facts = facts.sort(pl.col("offered_rps").fill_null(float("inf")), "cell")
    out = []
    for fact in facts.to_dicts():
        cell = fact["cell"]
        entry = labels.get(cell)
        label = entry["label"] if entry else "not run"
        load = fact.get("load") or cell
        offered = fact.get("offered_rps")
        rate = f"offered {offered:.3g} req/s, " if offered is not None else ""
        slo = fact.get("builtin_slo")
        slo_text = f"built-in SLO attainment {slo:.0%}" if slo is not None else ""
        achieved = fact["achieved_rps"]
        achieved_text = "n/a" if achieved is None else f"{achieved:.3g}"
        text = f"{load}: {rate}achieved {achieved_text} req/s, {slo_text}; "
        text += f"{candidate} {label}"
        if entry and label not in (OVERLOADED, IDENTICAL):
            text += f" (throughput {_signed(entry['throughput']['mean_pct'])}, P95 latency "
            text += f"{_signed(entry['p95_latency']['mean_pct'])})"
        out.append(
            {
                "cell": cell,
                "load": fact.get("load"),
                "offered_rps": offered,
                "achieved_rps": fact["achieved_rps"],
                "builtin_slo": slo,
                "label": label,
                "text": text,
            }
        )
    return out


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def go_no_go(gate: dict[str, Any], entries: list[dict[str, Any]], candidate: str) -> dict[str, str]:
    """The one go/no-go line of the report: ``{"decision": "go"|"no-go", "text": ...}``."""
    mine = [e for e in entries if e["strategy"] == candidate]
    if gate["status"] != "passed":
        return {
            "decision": "no-go",
            "text": f"NO-GO: {candidate} failed the functional compatibility gate "
            f"({'; '.join(gate['reasons'][:2])})",
        }
    judged = [e for e in mine if e["label"] != OVERLOADED]
    worse = [e["cell"] for e in judged if e["label"] == "not-beneficial-in-tested-cell"]
    better = [e["cell"] for e in judged if e["label"] == "beneficial"]
    if worse:
        return {
            "decision": "no-go",
            "text": f"NO-GO: {candidate} is worse than the built-in rule in "
            f"{len(worse)} of {len(judged)} judged cells ({', '.join(worse)})",
        }
    if better:
        return {
            "decision": "go",
            "text": f"GO: {candidate} is beneficial in {len(better)} of {len(judged)} judged "
            f"cells ({', '.join(better)}) and worse in none",
        }
    if not judged:
        why = "every cell is overloaded" if mine else "it was paired in no cell"
    elif all(e["label"] == IDENTICAL for e in judged):
        why = "its decisions are identical to the built-in rule's in every judged cell"
    else:
        why = "every judged cell is inconclusive or identical to built-in"
    return {
        "decision": "no-go",
        "text": f"NO-GO (no evidence of benefit): {candidate}: {why}",
    }
