"""The built-in A/A control: the measured false-positive rate of the verdict rule.

Every qualification also runs the seeded random strategy (``static-random``) a second time with
another seed (:data:`AA_ARM`, seed ``s + AA_SEED_OFFSET``) in every repeat of every load cell,
and judges the second arm against the first by the same rule, with the same margins and the same
multiple-comparison correction as every strategy against the built-in rule (the A/A pairs are
counted in the report's family of comparisons). The two arms differ only in their random
draws, so any *beneficial* or *harmful* label between them is a false positive.

The measured false-positive rate is the share of judged A/A cells (not overloaded, and where the
two arms' runs differed at all) that came out beneficial or harmful. The rule's error control
promises at most ``alpha`` (docs/report.md, "Error control"); a measured rate above it means the
assumptions behind the intervals (independent repeats, roughly normal means) do not hold on this
workload, and the report says that its verdicts cannot be trusted.
"""

from __future__ import annotations

from typing import Any

from tracekit.qualify.effectiveness import BENEFICIAL, HARMFUL

__all__ = [
    "AA_ARM",
    "AA_SEED_OFFSET",
    "AA_STRATEGY",
    "aa_summary",
    "is_trivial",
]

#: The strategy the A/A control runs twice.
AA_STRATEGY = "static-random"
#: The name of its second arm in ``cells.parquet`` and ``runs/<load>/r<k>/``.
AA_ARM = "static-random-aa"
#: The second arm's seed is the repeat's seed plus this (far from the seeds of other repeats).
AA_SEED_OFFSET = 1_000_003


def is_trivial(entry: dict[str, Any]) -> bool:
    """Whether the two arms' runs were the same in every repeat (every change exactly 0)."""
    changes = [c for s in entry["endpoints"].values() for c in s["changes"] if c is not None]
    return bool(changes) and all(c == 0 for c in changes)


def aa_summary(
    entries: list[dict[str, Any]], alpha: float, skipped: dict[str, str]
) -> dict[str, Any]:
    """The A/A control's section of ``qualification.json``.

    Parameters
    ----------
    entries
        The A/A comparisons (:data:`AA_ARM` against :data:`AA_STRATEGY`), one per cell.
    alpha
        The nominal family-wise error rate.
    skipped
        Cells not judged and why (overloaded cells).

    Returns
    -------
    dict
        ``strategy, arms, cells`` (the entries), ``judged``, ``false_positives`` (cells),
        ``rate`` (``None`` when nothing was judged), ``nominal``, ``trusted`` and ``text``.
    """
    judged = [e for e in entries if e["cell"] not in skipped and not is_trivial(e)]
    false = [e for e in judged if e["label"] in (BENEFICIAL, HARMFUL)]
    rate = len(false) / len(judged) if judged else None
    trusted = rate is None or rate <= alpha
    if rate is None:
        text = (
            f"A/A control: no judged cell (the two {AA_STRATEGY} arms never decided differently "
            "in a judged cell), so the false-positive rate is not measured"
        )
    else:
        cells = ", ".join(e.get("load") or e["cell"] for e in false)
        text = (
            f"A/A control ({AA_STRATEGY} against itself with another seed): "
            f"{len(false)} false positive(s) in {len(judged)} judged cell(s), a measured "
            f"false-positive rate of {rate:.0%} against the nominal {alpha:.0%}"
        )
        if false:
            text += f" ({cells})"
        if not trusted:
            text += (
                "; this exceeds the nominal rate, so the verdicts of this report cannot be "
                "trusted (the repeats are not independent samples, or too few for the "
                "intervals' normal approximation)"
            )
    return {
        "strategy": AA_STRATEGY,
        "arms": [AA_STRATEGY, AA_ARM],
        "seed_offset": AA_SEED_OFFSET,
        "cells": entries,
        "judged": len(judged),
        "false_positives": len(false),
        "rate": rate,
        "nominal": alpha,
        "trusted": trusted,
        "text": text,
    }
