"""The report's one line on the candidate's recomputation, against figures worked by hand.

Two repeats of one load. The candidate discarded 300 + 100 = 400 tokens of KV against the built-in
rule's 150 + 50 = 200 (+100%); the prefix cache served all but 60 + 30 = 90 of its tokens back
(90 truly recomputed against the built-in rule's 50 + 25 = 75: +20%; 1 - 90/400 = 78% served),
out of 10,000 + 10,000 computed tokens each (recompute tax 0.45% against 0.375%: +0.075 pp).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit.qualify.endpoints import VerdictRule
from tracekit.qualify.results import Results
from tracekit.qualify.verdicts import recomputation_note

CELL = "w|load=rate-1x|bidkv:defaults"


def _results() -> Results:
    cells = pl.DataFrame(
        {
            "cell": [CELL] * 4,
            "repeat": [0, 0, 1, 1],
            "strategy": ["bidkv", "builtin"] * 2,
            "recomputed_tokens": [300, 150, 100, 50],
            "truly_recomputed_tokens": [60, 50, 30, 25],
            "computed_tokens": [10_000] * 4,
        }
    )
    return Results(Path("."), {"candidate": "bidkv"}, cells, None, None, None, None)


def _entry(verdicts: dict[str, tuple[str, float, float, float]]) -> dict[str, Any]:
    units = {"recomputed_tokens": ("%", 10.0), "recompute_tax": ("pp", 0.5)}
    return {
        "cell": CELL,
        "load": "rate-1x",
        "strategy": "bidkv",
        "label": "inconclusive",
        "endpoints": {
            name: {"verdict": v, "mean": m, "low": lo, "high": hi, "unit": units[name][0],
                   "margin": units[name][1]}
            for name, (v, m, lo, hi) in verdicts.items()
        },
    }  # fmt: skip


def test_an_undecided_interval_is_named_with_its_bounds_not_called_no_harm() -> None:
    entry = _entry(
        {
            "recomputed_tokens": ("undecided", 20.0, -35.5, 75.5),
            "recompute_tax": ("not worse", 0.075, -0.3, 0.45),
        }
    )
    text = recomputation_note(_results(), [entry], VerdictRule())
    assert text == (
        "Harm not shown: bidkv discarded +100% more KV than the built-in rule over the judged "
        "loads, but the prefix cache served 78% of its discarded tokens back, so it truly "
        "recomputed +20% and its recompute tax moved +0.07 pp; at no load is either shown beyond "
        "its margin (10% for recomputed_tokens, 0.5 pp for recompute_tax), nor within it: "
        "recomputed_tokens at rate-1x is +20.0% [-35.5%, +75.5%], an interval that spans the "
        "margin"
    )


def test_intervals_below_the_margin_say_so() -> None:
    entry = _entry(
        {
            "recomputed_tokens": ("not worse", 20.0, -30.0, 9.0),
            "recompute_tax": ("equivalent", 0.075, -0.3, 0.45),
        }
    )
    text = recomputation_note(_results(), [entry], VerdictRule())
    assert text is not None
    assert text.endswith("and at every load the interval stays below the margin")


def test_harm_beyond_the_margin_is_called_harm() -> None:
    entry = _entry(
        {
            "recomputed_tokens": ("worse", 40.0, 12.0, 68.0),
            "recompute_tax": ("undecided", 0.075, -0.3, 0.6),
        }
    )
    assert recomputation_note(_results(), [entry], VerdictRule()) == (
        "bidkv's extra recomputation is harm: recomputed_tokens +40.0% [+12.0%, +68.0%] at "
        "rate-1x, beyond the margin of 10%"
    )
