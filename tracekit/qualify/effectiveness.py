"""Effectiveness per cell and strategy: paired changes on every endpoint, and the label.

The rule: docs/report.md, "Effectiveness (per cell and strategy)".

Every repeat of a cell ran the reference (the built-in rule, or for the A/A control the first
arm) and each strategy on the same requests. Per endpoint (:mod:`tracekit.qualify.endpoints`)
the paired change of repeat ``k`` is

- relative endpoints: ``100 * (s_k - b_k) / mean(b)``, in percent of the reference runs' mean
  (so the mean change is the relative change of the means, and a repeat whose reference value
  is 0, a window without a preemption, still counts);
- absolute endpoints (shares): ``100 * (s_k - b_k)``, in percentage points.

Over the repeats the mean change gets a Student-t interval at confidence ``1 - alpha / m``, ``m``
being the number of comparisons of the report (Bonferroni), and the endpoint's *gain* (the
change signed so that positive is better) is compared with its margin ``d``:

- **worse** when the whole gain interval is below ``-d`` (the guardrail is broken);
- **better** when it is above ``+d``;
- **equivalent** when it lies inside ``(-d, +d)``;
- **not worse** when only its low end is above ``-d``; otherwise undecided.

A strategy is **harmful** in a cell when some endpoint is worse; **beneficial** when some primary
endpoint is better and every endpoint is at least not worse; **equivalent** when every endpoint
is equivalent; otherwise **inconclusive**, with the number of repeats that would decide it at
the observed variance (:func:`repeats_needed`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from tracekit.analysis.stats import Interval, paired_interval, t_critical
from tracekit.qualify.endpoints import Endpoint, VerdictRule

__all__ = [
    "BENEFICIAL",
    "EQUIVALENT",
    "HARMFUL",
    "INCONCLUSIVE",
    "LABELS",
    "MAX_REPEATS_NEEDED",
    "EndpointStats",
    "cell_label",
    "compare",
    "endpoint_stats",
    "interval_frame",
    "repeats_needed",
]

BENEFICIAL = "beneficial"
HARMFUL = "harmful"
EQUIVALENT = "equivalent"
INCONCLUSIVE = "inconclusive"
LABELS = (BENEFICIAL, HARMFUL, EQUIVALENT, INCONCLUSIVE)
#: Beyond this many repeats the report says "more than" instead of a number.
MAX_REPEATS_NEEDED = 10_000

Verdict = Literal["worse", "better", "equivalent", "not worse", "undecided", "no interval"]


@dataclass(frozen=True, slots=True)
class EndpointStats:
    """One endpoint's paired changes in one (cell, strategy) and what they show.

    Attributes
    ----------
    endpoint
        The endpoint.
    changes
        One change per paired repeat (``None`` where a value is missing).
    interval
        Mean and interval of the changes (in ``endpoint.unit``).
    verdict
        ``worse``, ``better``, ``equivalent``, ``not worse``, ``undecided`` or ``no interval``.
    note
        Why there is no interval, when there is none.
    """

    endpoint: Endpoint
    changes: tuple[float | None, ...]
    interval: Interval
    verdict: Verdict
    note: str = ""

    @property
    def gain(self) -> tuple[float, float, float] | None:
        """``(mean, low, high)`` of the change signed so that positive is better."""
        i = self.interval
        if i.low is None or i.high is None:
            return None
        sign = self.endpoint.sign
        low, high = sorted((sign * i.low, sign * i.high))
        return sign * i.mean, low, high

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``qualification.json``, ``effectiveness.cells[].endpoints``)."""
        i = self.interval
        return {
            "metric": self.endpoint.column,
            "unit": self.endpoint.unit,
            "better": self.endpoint.better,
            "margin": self.endpoint.margin,
            "primary": self.endpoint.primary,
            "changes": [_number(c) for c in self.changes],
            "n": i.n,
            "mean": _number(i.mean),
            "low": i.low,
            "high": i.high,
            "sd": i.sd,
            "verdict": self.verdict,
            "note": self.note,
        }


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _verdict(gain: tuple[float, float, float] | None, margin: float) -> Verdict:
    if gain is None:
        return "no interval"
    _, low, high = gain
    if high < -margin:
        return "worse"
    if low > margin:
        return "better"
    if low > -margin and high < margin:
        return "equivalent"
    if low > -margin:
        return "not worse"
    return "undecided"


def endpoint_stats(
    endpoint: Endpoint,
    values: Sequence[float | None],
    reference: Sequence[float | None],
    confidence: float,
) -> EndpointStats:
    """The paired changes of one endpoint and their verdict (see the module docstring).

    Parameters
    ----------
    endpoint
        The endpoint.
    values, reference
        The strategy's and the reference's values, repeat by repeat (``None``/NaN: missing;
        that repeat is left out).
    confidence
        The interval's confidence (``1 - alpha / m``).
    """
    pairs = [
        (float(v), float(r))
        for v, r in zip(values, reference, strict=True)
        if v is not None and r is not None and math.isfinite(v) and math.isfinite(r)
    ]
    note = ""
    changes: list[float | None]
    if not pairs:
        changes, note = [None] * len(values), "not recorded"
    elif endpoint.scale == "absolute":
        changes = [100.0 * (v - r) for v, r in pairs]
    else:
        base = math.fsum(r for _, r in pairs) / len(pairs)
        if base != 0:
            changes = [100.0 * (v - r) / base for v, r in pairs]
        elif all(v == 0 for v, _ in pairs):
            changes = [0.0] * len(pairs)  # both sides 0 in every repeat: no change at all
        else:
            changes, note = [None] * len(pairs), "the built-in runs' mean is 0"
    interval = paired_interval([math.nan if c is None else c for c in changes], confidence)
    stats = EndpointStats(endpoint, tuple(changes), interval, "no interval", note)
    verdict = _verdict(stats.gain, endpoint.margin)
    if verdict == "no interval" and not note:
        note = f"{interval.n} paired repeat(s)"
    return EndpointStats(endpoint, tuple(changes), interval, verdict, note)


def _needed(slack: float, sd: float, rule: VerdictRule, comparisons: int, start: int) -> int | None:
    """Fewest repeats ``n >= start`` with a half-width ``t(n - 1) sd / sqrt(n)`` below ``slack``."""
    if slack <= 0:
        return None
    if sd == 0:
        return start
    confidence = rule.confidence(comparisons)

    def fits(n: int) -> bool:
        return t_critical(confidence, n - 1) * sd / math.sqrt(n) < slack

    # The half-width falls with n (both t and 1 / sqrt(n) do): double, then bisect.
    low = max(2, start)
    if fits(low):
        return low
    high = low
    while not fits(high):
        if high >= MAX_REPEATS_NEEDED:
            return None
        low, high = high, min(2 * high, MAX_REPEATS_NEEDED)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high


def repeats_needed(
    stats: Sequence[EndpointStats], rule: VerdictRule, comparisons: int, repeats: int
) -> tuple[int | None, str | None]:
    """The paired repeats that would decide an inconclusive cell, at the observed variance.

    The label the means point to is taken as the target: *harmful* if some endpoint's mean gain
    is below ``-margin`` (its interval must then fall below it), *beneficial* if some primary
    endpoint's mean is above its margin and every mean above ``-margin``, *equivalent* if every
    mean lies inside its margins. For each condition the fewest repeats ``n`` whose interval
    half-width ``t_{1 - alpha / (2m)}(n - 1) * sd / sqrt(n)`` (``sd`` as observed, each repeat
    as large as now) is smaller than the mean's distance to the margin are found; the target
    needs the largest of its conditions (the smallest for "some endpoint").

    Returns
    -------
    tuple
        ``(repeats, target label)``; ``(None, None)`` when no target can be named (a mean sits
        on a margin, or an endpoint has no interval) or more than
        :data:`MAX_REPEATS_NEEDED` repeats would be needed.
    """
    measured = [(s, s.gain, s.interval.sd) for s in stats]
    if any(g is None or sd is None for _, g, sd in measured):
        return None, None
    start = repeats + 1

    def lower_above(s: EndpointStats, bound: float) -> int | None:
        mean, sd = s.gain[0], s.interval.sd  # type: ignore[index]
        return _needed(mean - bound, sd or 0.0, rule, comparisons, start)

    def upper_below(s: EndpointStats, bound: float) -> int | None:
        mean, sd = s.gain[0], s.interval.sd  # type: ignore[index]
        return _needed(bound - mean, sd or 0.0, rule, comparisons, start)

    means = {id(s): s.gain[0] for s in stats}  # type: ignore[index]
    worse = [s for s in stats if means[id(s)] < -s.endpoint.margin]
    if worse:
        options = [n for s in worse if (n := upper_below(s, -s.endpoint.margin)) is not None]
        return (min(options), HARMFUL) if options else (None, None)
    better = [s for s in stats if s.endpoint.primary and means[id(s)] > s.endpoint.margin]
    if better:
        superior = [n for s in better if (n := lower_above(s, s.endpoint.margin)) is not None]
        floors = [lower_above(s, -s.endpoint.margin) for s in stats]
        if not superior or any(n is None for n in floors):
            return None, None
        return max([min(superior), *[n for n in floors if n is not None]]), BENEFICIAL
    if all(abs(means[id(s)]) < s.endpoint.margin for s in stats):
        bounds = [
            (upper_below(s, s.endpoint.margin), lower_above(s, -s.endpoint.margin)) for s in stats
        ]
        flat = [n for pair in bounds for n in pair]
        if any(n is None for n in flat):
            return None, None
        return max(n for n in flat if n is not None), EQUIVALENT
    return None, None


def cell_label(stats: Sequence[EndpointStats], rule: VerdictRule, repeats: int) -> tuple[str, str]:
    """The label of one (cell, strategy) and the reason, from its endpoints' verdicts."""
    if repeats < rule.min_repeats:
        return INCONCLUSIVE, f"only {repeats} paired repeat(s); the rule needs {rule.min_repeats}"
    worse = [s for s in stats if s.verdict == "worse"]
    if worse:
        return HARMFUL, "worse beyond the margin: " + "; ".join(_shown(s) for s in worse)
    better = [s for s in stats if s.endpoint.primary and s.verdict == "better"]
    holding = all(s.verdict in ("better", "equivalent", "not worse") for s in stats)
    if better and holding:
        return BENEFICIAL, (
            "better beyond the margin: "
            + "; ".join(_shown(s) for s in better)
            + "; no endpoint worse than minus its margin"
        )
    if all(s.verdict == "equivalent" for s in stats):
        return EQUIVALENT, "every endpoint's interval lies inside its margins"
    open_ = [s for s in stats if s.verdict in ("undecided", "no interval")]
    if better and not holding:
        return INCONCLUSIVE, (
            "better on "
            + ", ".join(s.endpoint.name for s in better)
            + ", but not shown within the margin on "
            + ", ".join(s.endpoint.name for s in open_ or stats)
        )
    return INCONCLUSIVE, "not decided on " + ", ".join(
        s.endpoint.name for s in (open_ or [s for s in stats if s.verdict != "equivalent"])
    )


def _shown(s: EndpointStats) -> str:
    i = s.interval
    unit = "%" if s.endpoint.unit == "%" else " pp"
    return (
        f"{s.endpoint.name} {i.mean:+.2f}{unit} [{i.low:+.2f}{unit}, {i.high:+.2f}{unit}] "
        f"(margin {s.endpoint.margin:g}{unit})"
    )


def compare(
    cells: pl.DataFrame,
    strategy: str,
    reference: str,
    rule: VerdictRule,
    comparisons: int,
) -> list[dict[str, Any]]:
    """One entry per cell in which both ``strategy`` and ``reference`` ran, paired by repeat.

    Parameters
    ----------
    cells
        ``cells.parquet``.
    strategy, reference
        The strategy judged and the one it is paired with (``builtin``, or the A/A control's
        first arm).
    rule
        The verdict rule.
    comparisons
        ``m``, the number of comparisons of the whole report (for the correction).

    Returns
    -------
    list of dict
        ``cell, strategy, baseline, label, reason, repeats, n, calls_repeats, repeats_needed,
        repeats_needed_label, endpoints`` (``{name: EndpointStats.to_dict()}``), in cell order.
    """
    present = [e for e in rule.endpoints if e.column in cells.columns]
    columns = [e.column for e in present]
    calls = ["calls"] if "calls" in cells.columns else []
    mine = cells.filter(pl.col("strategy") == strategy).select("cell", "repeat", *columns, *calls)
    base = cells.filter(pl.col("strategy") == reference).select(
        "cell", "repeat", *[pl.col(c).alias(f"{c}__ref") for c in columns]
    )
    joined = mine.join(base, on=["cell", "repeat"], how="inner").sort("cell", "repeat")
    confidence = rule.confidence(comparisons)
    entries = []
    for (cell,), group in joined.group_by("cell", maintain_order=True):
        repeats = group["repeat"].to_list()
        stats = [
            endpoint_stats(
                e, group[e.column].cast(pl.Float64).to_list(),
                group[f"{e.column}__ref"].cast(pl.Float64).to_list(), confidence,
            )
            for e in present
        ]  # fmt: skip
        missing = [e for e in rule.endpoints if e.column not in cells.columns]
        stats += [
            EndpointStats(e, (), Interval(0, math.nan, None, None), "no interval", "not recorded")
            for e in missing
        ]
        stats.sort(key=lambda s: rule.endpoints.index(s.endpoint))
        label, reason = cell_label(stats, rule, len(repeats))
        needed, target = (None, None)
        if label == INCONCLUSIVE and len(repeats) >= 2:
            needed, target = repeats_needed(stats, rule, comparisons, len(repeats))
        called = group["calls"].fill_null(0).gt(0).sum() if calls else None
        entries.append(
            {
                "cell": cell,
                "strategy": strategy,
                "baseline": reference,
                "label": label,
                "reason": reason,
                "repeats": repeats,
                "n": len(repeats),
                "calls_repeats": called,
                "repeats_needed": needed,
                "repeats_needed_label": target,
                "endpoints": {s.endpoint.name: s.to_dict() for s in stats},
            }
        )
    return entries


def interval_frame(entries: list[dict[str, Any]]) -> pl.DataFrame:
    """The endpoints' intervals of ``entries`` as one long frame, for charts and tables.

    Returns
    -------
    polars.DataFrame
        ``cell, load, order, strategy, label, endpoint, unit, margin, better, n, mean, low,
        high, verdict, gain_mean, gain_low, gain_high``, one row per entry and endpoint, in the
        entries' order (``order``); the ``gain_*`` columns are the change signed so that
        positive is better and divided by the margin (the margins sit at -1 and +1).
    """
    schema = {
        "cell": pl.String,
        "load": pl.String,
        "order": pl.Int64,
        "strategy": pl.String,
        "label": pl.String,
        "endpoint": pl.String,
        "unit": pl.String,
        "margin": pl.Float64,
        "better": pl.String,
        "n": pl.Int64,
        "mean": pl.Float64,
        "low": pl.Float64,
        "high": pl.Float64,
        "verdict": pl.String,
    }
    rows = [
        {
            "cell": e["cell"],
            "load": e.get("load") or e["cell"],
            "order": index,
            "strategy": e["strategy"],
            "label": e["label"],
            "endpoint": name,
            "unit": s["unit"],
            "margin": s["margin"],
            "better": s["better"],
            "n": s["n"],
            "mean": s["mean"],
            "low": s["low"],
            "high": s["high"],
            "verdict": s["verdict"],
        }
        for index, e in enumerate(entries)
        for name, s in e["endpoints"].items()
    ]
    frame = pl.DataFrame(rows, schema=schema)
    sign = pl.when(pl.col("better") == "higher").then(1.0).otherwise(-1.0)
    scaled = {c: sign * pl.col(c) / pl.col("margin") for c in ("mean", "low", "high")}
    return frame.with_columns(
        scaled["mean"].alias("gain_mean"),
        pl.min_horizontal(scaled["low"], scaled["high"]).alias("gain_low"),
        pl.max_horizontal(scaled["low"], scaled["high"]).alias("gain_high"),
    )
