"""Paired Student-t confidence intervals and the effectiveness rule.

The rule: docs/report.md, "Effectiveness (per cell and strategy)".

A qualification compares a strategy with the built-in baseline over repeats (seeds or disjoint
windows). Each repeat gives one paired relative change ``100 * (strategy / baseline - 1)``; the
mean change and its 95% interval use Student's t with ``n - 1`` degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "EffectivenessLabel",
    "Interval",
    "effectiveness_label",
    "paired_interval",
    "relative_change",
    "t_critical_95",
]

# Two-sided 95% critical values of Student's t by degrees of freedom (1..30). The reference's
# analysers list df 1..9 with the same values and use 1.96 beyond; we keep exact values to 30.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip

EffectivenessLabel = Literal[
    "beneficial", "not-beneficial-in-tested-cell", "inconclusive", "not attributable"
]


def t_critical_95(df: int) -> float:
    """Two-sided 95% critical value of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its 95% confidence interval (``low``/``high`` are None for n < 2)."""

    n: int
    mean: float
    low: float | None
    high: float | None


def relative_change(value: float, baseline: float) -> float:
    """``100 * (value / baseline - 1)``, the paired change in percent (NaN if baseline is 0)."""
    return math.nan if baseline == 0 else 100.0 * (value / baseline - 1.0)


def paired_interval(changes: Sequence[float]) -> Interval:
    """Mean of the paired changes and its Student-t 95% interval."""
    values = [v for v in changes if not math.isnan(v)]
    n = len(values)
    if n == 0:
        return Interval(0, math.nan, None, None)
    mean = sum(values) / n
    if n < 2:
        return Interval(n, mean, None, None)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_critical_95(n - 1) * sd / math.sqrt(n)
    return Interval(n, mean, mean - half, mean + half)


def effectiveness_label(
    throughput: Interval, p95_latency: Interval, *, invoked_every_repeat: bool, min_repeats: int = 3
) -> EffectivenessLabel:
    """The effectiveness label of one cell (docs/report.md#effectiveness-per-cell-and-strategy).

    Beneficial iff the throughput interval's low end is above 0 and the P95-latency interval's
    high end is at most +5%; not beneficial in the tested cell iff the throughput high end is
    below 0 or the P95-latency low end is above +5%; otherwise inconclusive. A policy that was not
    invoked in every repeat is "not attributable"; fewer than ``min_repeats`` pairs is
    inconclusive.
    """
    if not invoked_every_repeat:
        return "not attributable"
    if min(throughput.n, p95_latency.n) < min_repeats:
        return "inconclusive"
    assert throughput.low is not None and throughput.high is not None
    assert p95_latency.low is not None and p95_latency.high is not None
    if throughput.low > 0 and p95_latency.high <= 5.0:
        return "beneficial"
    if throughput.high < 0 or p95_latency.low > 5.0:
        return "not-beneficial-in-tested-cell"
    return "inconclusive"
