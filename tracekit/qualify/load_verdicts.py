"""Verdict wording across loads: overloaded cells, identical decisions, the matrix and go/no-go.

Applied on top of the effectiveness entries of :mod:`tracekit.qualify.effectiveness`:

* **overloaded** — a cell whose built-in runs meet the SLO for less than
  :data:`~tracekit.qualify.loads.OVERLOAD_SLO` (50%) of their requests, averaged over the
  repeats. Queueing, not the victim policy, decides latency there, so no strategy is judged in
  it: every entry of the cell is labelled ``overloaded``.
* **identical to built-in** — a strategy whose every decision in every repeat of a cell chose
  the built-in rule's victim (``differing_decisions`` is 0 in all its runs). Its runs are the
  baseline's runs, so it is neither better nor worse: it simply did nothing different.
* **the matrix** — one row per load, lightest first (by offered rate; closed loops after the
  open loops, by their number of users), one column per strategy, each the label.
* **go / no-go** — one sentence naming the decision, the loads and the reason: *NO-GO* when the
  functional gate failed, the A/A control's false-positive rate exceeds the nominal rate, or the
  candidate is harmful in some judged load; *GO* when it is beneficial in at least one judged
  load and harmful in none; otherwise *NO-GO (no evidence of benefit)*.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.qualify.effectiveness import BENEFICIAL, EQUIVALENT, HARMFUL, INCONCLUSIVE
from tracekit.qualify.loads import OVERLOAD_SLO
from tracekit.qualify.results import BASELINE, load_order

__all__ = [
    "IDENTICAL",
    "OVERLOADED",
    "cell_facts",
    "go_no_go",
    "judged_comparisons",
    "label_matrix",
    "load_headlines",
    "relabel_entries",
]

OVERLOADED = "overloaded"
IDENTICAL = "identical to built-in"


def cell_facts(cells: pl.DataFrame) -> pl.DataFrame:
    """Per cell, lightest load first: its name, load, offered and achieved rate, SLO attainment.

    Returns
    -------
    polars.DataFrame
        ``cell, load, offered_rps, achieved_rps, builtin_slo, order``: ``load`` is the load
        cell's label (the cell itself without a load plan); the built-in runs' means over the
        repeats; ``order`` ranks cells by offered rate (a sweep's ``rate``), closed loops last
        by users, then by name.
    """
    base = cells.filter(pl.col("strategy") == BASELINE)
    if base.height == 0:
        base = cells
    aggs = [pl.col("throughput_rps").mean().alias("achieved_rps")]
    aggs.append(
        pl.col("slo_attainment").mean().alias("builtin_slo")
        if "slo_attainment" in cells.columns
        else pl.lit(None, dtype=pl.Float64).alias("builtin_slo")
    )
    # Without a load plan the load is the cell's name without its last part (the candidate's
    # settings): "azure|rate=1.0|bidkv:defaults" is load "azure|rate=1.0".
    short = pl.when(pl.col("cell").str.count_matches(r"\|") >= 2).then(
        pl.col("cell").str.replace(r"\|[^|]*$", "")
    )
    aggs.append(
        pl.col("load").first()
        if "load" in cells.columns
        else short.otherwise(pl.col("cell")).first().alias("load")
    )
    if "offered_rps" in cells.columns:
        aggs.append(pl.col("offered_rps").first().cast(pl.Float64))
    elif "rate" in cells.columns and cells.schema["rate"].is_numeric():
        aggs.append(pl.col("rate").first().cast(pl.Float64).alias("offered_rps"))
    else:
        aggs.append(pl.lit(None, dtype=pl.Float64).alias("offered_rps"))
    facts = base.group_by("cell", maintain_order=True).agg(*aggs)
    order = load_order(cells)
    return (
        facts.with_columns(
            pl.col("load").fill_null(pl.col("cell")),
            pl.col("cell").replace_strict(order, default=len(order)).cast(pl.Int64).alias("order"),
        )
        .sort("order")
        .select("cell", "load", "offered_rps", "achieved_rps", "builtin_slo", "order")
    )


def relabel_entries(
    entries: list[dict[str, Any]], cells: pl.DataFrame, *, identical: bool = True
) -> list[dict[str, Any]]:
    """Return ``entries`` with their load and the ``overloaded``/``identical`` labels applied.

    Parameters
    ----------
    entries
        :func:`~tracekit.qualify.effectiveness.compare` output.
    cells
        ``cells.parquet``.
    identical
        Apply ``identical to built-in`` (entries against the built-in rule; not the A/A
        control's, which compares two random arms).

    Returns
    -------
    list of dict
        New entries, lightest load first, with ``load``, ``offered_rps`` and ``rule_label`` (the
        label the rule gave, before relabelling); a relabelled one keeps its intervals and gets
        a new ``reason``.
    """
    facts = {row["cell"]: row for row in cell_facts(cells).to_dicts()}
    same_runs = _same_runs(cells) if identical else set()
    out = []
    for entry in entries:
        fact = facts.get(entry["cell"], {})
        entry = {
            **entry,
            "load": fact.get("load", entry["cell"]),
            "offered_rps": fact.get("offered_rps"),
            "rule_label": entry["label"],
        }
        slo = fact.get("builtin_slo")
        if slo is not None and slo < OVERLOAD_SLO:
            entry["label"] = OVERLOADED
            entry["reason"] = (
                f"built-in SLO attainment {slo:.0%} < {OVERLOAD_SLO:.0%}: queueing decides "
                "latency in this cell, so no strategy is judged in it"
            )
        elif (entry["cell"], entry["strategy"]) in same_runs:
            entry["label"] = IDENTICAL
            entry["reason"] = "every decision in every repeat chose the built-in rule's victim"
        out.append(entry)
    order = {cell: fact["order"] for cell, fact in facts.items()}
    out.sort(key=lambda e: order.get(e["cell"], len(order)))
    return out


def _same_runs(cells: pl.DataFrame) -> set[tuple[str, str]]:
    """``(cell, strategy)`` pairs whose every decision in every repeat chose the built-in victim."""
    if "differing_decisions" not in cells.columns:
        return set()
    same = (
        cells.group_by("cell", "strategy")
        .agg((pl.col("differing_decisions").fill_null(1) == 0).all().alias("same"))
        .filter(pl.col("same"))
    )
    return {(c, s) for c, s in same.select("cell", "strategy").iter_rows()}


def judged_comparisons(
    cells: pl.DataFrame,
    strategies: list[str],
    withheld_loads: set[str] | None,
    *,
    identical: bool = True,
) -> list[tuple[str, str]]:
    """The ``(cell, strategy)`` pairs the rule judges: the family of the error control.

    Left out are the pairs whose label follows from the runs' structure, not from their
    numbers, so that no interval of theirs can make a false label: a strategy identical to
    built-in in a cell (with ``identical``; its runs *are* the baseline's, every change is 0), an
    overloaded cell, and a load whose repeats are not independent samples (``withheld_loads``;
    ``None``: every load). Counting them in ``m`` would only widen every other interval.
    """
    if withheld_loads is None:
        return []
    facts = {row["cell"]: row for row in cell_facts(cells).to_dicts()}
    same_runs = _same_runs(cells) if identical else set()
    present = set(cells.select("cell", "strategy").unique().iter_rows())
    judged = []
    for cell, fact in facts.items():
        slo = fact.get("builtin_slo")
        if (slo is not None and slo < OVERLOAD_SLO) or fact["load"] in withheld_loads:
            continue
        judged += [
            (cell, s) for s in strategies if (cell, s) in present and (cell, s) not in same_runs
        ]
    return judged


def label_matrix(
    entries: list[dict[str, Any]], cells: pl.DataFrame, strategies: list[str], aa: list[dict]
) -> dict[str, Any]:
    """The load x strategy matrix of labels (the report's second line).

    Returns
    -------
    dict
        ``loads`` (lightest first), ``strategies`` (the candidate first, then the others,
        then ``A/A`` when the control ran), ``labels`` (one row per load; ``None`` where a
        strategy did not run in a load) and ``repeats_needed`` (the same shape; for
        inconclusive cells).
    """
    facts = cell_facts(cells)
    by_cell = {(e["cell"], e["strategy"]): e for e in entries}
    aa_by_cell = {e["cell"]: e for e in aa}
    columns = [s for s in strategies if any(e["strategy"] == s for e in entries)]
    labels, needed = [], []
    for cell in facts["cell"].to_list():
        row = [by_cell.get((cell, s)) for s in columns]
        if aa:
            row.append(aa_by_cell.get(cell))
        labels.append([None if e is None else e["label"] for e in row])
        needed.append([None if e is None else e.get("repeats_needed") for e in row])
    return {
        "loads": facts["load"].to_list(),
        "strategies": columns + (["A/A"] if aa else []),
        "labels": labels,
        "repeats_needed": needed,
    }


def _signed(value: float | None, unit: str = "%") -> str:
    return "n/a" if value is None else f"{value:+.1f}{' pp' if unit == 'pp' else '%'}"


def _worst(entry: dict[str, Any]) -> str:
    """The endpoints that broke their margin (harmful) or beat it (beneficial), briefly."""
    wanted = "worse" if entry["label"] == HARMFUL else "better"
    parts = [
        f"{name} {_signed(s['mean'], s['unit'])} [{_signed(s['low'], s['unit'])}, "
        f"{_signed(s['high'], s['unit'])}]"
        for name, s in entry["endpoints"].items()
        if s["verdict"] == wanted and (wanted == "worse" or s["primary"])
    ]
    return ", ".join(parts[:2])


def load_headlines(
    entries: list[dict[str, Any]], cells: pl.DataFrame, candidate: str
) -> list[dict[str, Any]]:
    """One headline per cell: its load, the built-in SLO attainment and the candidate's label.

    Returns
    -------
    list of dict
        ``cell, load, offered_rps, achieved_rps, builtin_slo, label, repeats_needed, text`` per
        cell, lightest load first.
    """
    labels = {e["cell"]: e for e in entries if e["strategy"] == candidate}
    out = []
    for fact in cell_facts(cells).to_dicts():
        cell = fact["cell"]
        entry = labels.get(cell)
        label = entry["label"] if entry else "not run"
        offered = fact.get("offered_rps")
        rate = f"offered {offered:.3g} req/s, " if offered is not None else ""
        slo = fact.get("builtin_slo")
        slo_text = f", built-in SLO attainment {slo:.0%}" if slo is not None else ""
        achieved = fact["achieved_rps"]
        achieved_text = "n/a" if achieved is None else f"{achieved:.3g}"
        text = (
            f"{fact['load']}: {rate}achieved {achieved_text} req/s{slo_text}; {candidate} {label}"
        )
        if entry and label in (HARMFUL, BENEFICIAL):
            text += f" ({_worst(entry)})"
        elif entry and label == INCONCLUSIVE and entry.get("repeats_needed"):
            text += f" (about {entry['repeats_needed']} repeats would decide it)"
        out.append(
            {
                "cell": cell,
                "load": fact["load"],
                "offered_rps": offered,
                "achieved_rps": achieved,
                "builtin_slo": slo,
                "label": label,
                "repeats_needed": entry.get("repeats_needed") if entry else None,
                "text": text,
            }
        )
    return out


def _loads_text(loads: list[str]) -> str:
    if not loads:
        return "no load"
    return loads[0] if len(loads) == 1 else ", ".join(loads[:-1]) + " and " + loads[-1]


def go_no_go(
    gate: dict[str, Any],
    entries: list[dict[str, Any]],
    candidate: str,
    aa: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The report's first line: ``{"decision": "go"|"no-go", "text": one sentence}``.

    The sentence names the decision, the loads the candidate was judged at, and the reason.
    """
    mine = [e for e in entries if e["strategy"] == candidate]
    loads = [e["load"] for e in mine]
    judged = [e for e in mine if e["label"] != OVERLOADED]
    where = f"for {candidate} at {_loads_text(loads)}"
    if gate["status"] != "passed":
        return {
            "decision": "no-go",
            "text": f"NO-GO {where}: it failed the functional compatibility gate "
            f"({'; '.join(gate['reasons'][:2])}).",
        }
    if aa is not None and not aa["trusted"]:
        return {
            "decision": "no-go",
            "text": f"NO-GO {where}: the verdicts cannot be trusted, because the A/A control "
            f"found {aa['false_positives']} false positive(s) in {aa['judged']} cells "
            f"({aa['rate']:.0%} > the nominal {aa['nominal']:.0%}).",
        }
    harmful = [e for e in judged if e["label"] == HARMFUL]
    better = [e for e in judged if e["label"] == BENEFICIAL]
    if harmful:
        first = harmful[0]
        return {
            "decision": "no-go",
            "text": f"NO-GO {where}: it is harmful at {_loads_text([e['load'] for e in harmful])}"
            f" ({_worst(first)} at {first['load']}, beyond the margins).",
        }
    if better:
        first = better[0]
        return {
            "decision": "go",
            "text": f"GO {where}: it is beneficial at {_loads_text([e['load'] for e in better])}"
            f" ({_worst(first)} at {first['load']}) and harmful at none.",
        }
    if not judged:
        why = "every load is overloaded" if mine else "it was paired with the built-in rule nowhere"
    else:
        counts = {
            label: sum(e["label"] == label for e in judged)
            for label in (EQUIVALENT, IDENTICAL, INCONCLUSIVE)
        }
        shown = ", ".join(f"{label} at {n}" for label, n in counts.items() if n)
        why = f"no load shows a benefit beyond the margins ({shown} of {len(judged)} judged)"
    return {"decision": "no-go", "text": f"NO-GO (no evidence of benefit) {where}: {why}."}
