"""Effectiveness per cell and strategy: paired changes against the baseline.

The rule: docs/report.md, "Effectiveness (per cell and strategy)".

Every repeat of a cell ran the baseline (``builtin``) and each strategy on the same requests.
The paired relative change of a metric in one repeat is ``100 * (strategy / baseline - 1)``; the
changes of a cell's repeats give a mean and a Student-t 95% interval
(:func:`tracekit.analysis.stats.paired_interval`), and the two intervals give the label
(:func:`tracekit.analysis.stats.effectiveness_label`):

- **beneficial**: throughput interval entirely above 0 and P95-latency interval's high end at
  most +5%;
- **not-beneficial-in-tested-cell**: throughput interval entirely below 0, or P95-latency
  interval's low end above +5%;
- **inconclusive**: anything else, fewer than three pairs, or a policy that was not invoked in
  every repeat (then also marked *not attributable*: the runs cannot show the policy's effect).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from tracekit.analysis.stats import Interval, effectiveness_label, paired_interval

__all__ = [
    "CHANGE_METRICS",
    "LATENCY_MARGIN_PCT",
    "LATENCY_METRIC",
    "MIN_REPEATS",
    "THROUGHPUT_METRIC",
    "effectiveness_entries",
    "interval_frame",
    "paired_changes",
]

# The throughput of the rule: output tokens per second of makespan (the reference's A/B harness
# compares vLLM's output_throughput).
THROUGHPUT_METRIC = "output_tokens_per_s"
# The latency of the rule: end-to-end P95 (TTFT P95 is shown beside it, for information).
LATENCY_METRIC = "e2e_p95_s"
# Metrics whose paired changes the report shows, with their display names.
CHANGE_METRICS = {
    THROUGHPUT_METRIC: "output throughput",
    LATENCY_METRIC: "P95 end-to-end latency",
    "ttft_p95_s": "P95 TTFT",
    # Shown beside throughput and latency (issue 14); not part of the rule.
    "recomputed_tokens": "recomputed tokens",
}
LATENCY_MARGIN_PCT = 5.0
MIN_REPEATS = 3


def paired_changes(cells: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """Per (cell, strategy, repeat): the paired relative change of each metric, in percent.

    Parameters
    ----------
    cells
        ``cells.parquet``.
    baseline
        The strategy every other one is paired with, repeat by repeat.

    Returns
    -------
    polars.DataFrame
        ``cell, strategy, repeat, calls`` and ``<metric>_change_pct`` for each of
        :data:`CHANGE_METRICS`; NaN where the baseline's value is 0 or either value is missing.
        Repeats without a baseline run are left out.
    """
    metrics = list(CHANGE_METRICS)
    base = cells.filter(pl.col("strategy") == baseline).select(
        "cell", "repeat", *[pl.col(m).alias(f"{m}__base") for m in metrics]
    )
    changes = [
        pl.when(pl.col(f"{m}__base").is_null() | pl.col(m).is_null() | (pl.col(f"{m}__base") == 0))
        .then(float("nan"))
        .otherwise(100.0 * (pl.col(m) / pl.col(f"{m}__base") - 1.0))
        .alias(f"{m}_change_pct")
        for m in metrics
    ]
    return (
        cells.filter(pl.col("strategy") != baseline)
        .join(base, on=["cell", "repeat"], how="inner")
        .select("cell", "strategy", "repeat", "calls", *changes)
        .sort("cell", "strategy", "repeat")
    )


def _interval(values: list[float]) -> Interval:
    return paired_interval([math.nan if v is None else float(v) for v in values])


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def _interval_dict(metric: str, changes: list[float], interval: Interval) -> dict[str, Any]:
    return {
        "metric": metric,
        "changes_pct": [_number(c) for c in changes],
        "n": interval.n,
        "mean_pct": _number(interval.mean),
        "low_pct": interval.low,
        "high_pct": interval.high,
    }


def _reason(
    label: str,
    attributable: bool,
    never: list[int],
    n: int,
    throughput: Interval,
    latency: Interval,
) -> str:
    if not attributable:
        shown = ", ".join(str(r) for r in never)
        return (
            f"not attributable: the policy was not invoked in every repeat (no call in repeat "
            f"{shown}), so the runs cannot show its effect"
        )
    if n < MIN_REPEATS:
        return f"only {n} paired repeat(s); the rule needs at least {MIN_REPEATS}"
    margin = f"+{LATENCY_MARGIN_PCT:g}%"
    if label == "beneficial":
        return f"throughput interval above 0 and P95-latency interval high end at most {margin}"
    if label == "not-beneficial-in-tested-cell":
        held = []
        if throughput.high is not None and throughput.high < 0:
            held.append("throughput interval entirely below 0")
        if latency.low is not None and latency.low > LATENCY_MARGIN_PCT:
            held.append(f"P95-latency interval low end above {margin}")
        return " and ".join(held)
    held = []
    if throughput.low is not None and throughput.low <= 0:
        held.append("throughput interval includes 0")
    if latency.high is not None and latency.high > LATENCY_MARGIN_PCT:
        held.append(f"P95-latency interval reaches above {margin}")
    return "; ".join(held) or "the intervals allow more than one outcome"


def effectiveness_entries(changes: pl.DataFrame) -> list[dict[str, Any]]:
    """The effectiveness verdict of every (cell, strategy) of :func:`paired_changes`.

    Parameters
    ----------
    changes
        The output of :func:`paired_changes`.

    Returns
    -------
    list of dict
        One entry per (cell, strategy), sorted: ``cell``, ``strategy``, ``label``,
        ``attributable``, ``reason``, ``repeats``, ``throughput``, ``p95_latency``,
        ``p95_ttft`` and ``recomputed_tokens`` (each ``metric, changes_pct, n, mean_pct,
        low_pct, high_pct``; the change in recomputed tokens is NaN where the baseline
        recomputed none).
    """
    grouped = (
        changes.group_by("cell", "strategy")
        .agg(
            pl.col("repeat"),
            pl.col("repeat").filter(pl.col("calls").fill_null(0) <= 0).alias("never"),
            *[pl.col(f"{m}_change_pct") for m in CHANGE_METRICS],
        )
        .sort("cell", "strategy")
    )
    entries = []
    # One iteration per (cell, strategy) group: a handful, not data rows.
    for group in grouped.to_dicts():
        throughput = _interval(group[f"{THROUGHPUT_METRIC}_change_pct"])
        latency = _interval(group[f"{LATENCY_METRIC}_change_pct"])
        ttft = _interval(group["ttft_p95_s_change_pct"])
        recomputed = _interval(group["recomputed_tokens_change_pct"])
        attributable = not group["never"]
        rule = effectiveness_label(
            throughput, latency, invoked_every_repeat=attributable, min_repeats=MIN_REPEATS
        )
        label = "inconclusive" if rule == "not attributable" else rule
        n = min(throughput.n, latency.n)
        entries.append(
            {
                "cell": group["cell"],
                "strategy": group["strategy"],
                "label": label,
                "attributable": attributable,
                "reason": _reason(label, attributable, group["never"], n, throughput, latency),
                "repeats": group["repeat"],
                "throughput": _interval_dict(
                    THROUGHPUT_METRIC, group[f"{THROUGHPUT_METRIC}_change_pct"], throughput
                ),
                "p95_latency": _interval_dict(
                    LATENCY_METRIC, group[f"{LATENCY_METRIC}_change_pct"], latency
                ),
                "p95_ttft": _interval_dict("ttft_p95_s", group["ttft_p95_s_change_pct"], ttft),
                "recomputed_tokens": _interval_dict(
                    "recomputed_tokens", group["recomputed_tokens_change_pct"], recomputed
                ),
            }
        )
    return entries


def interval_frame(entries: list[dict[str, Any]]) -> pl.DataFrame:
    """The intervals of :func:`effectiveness_entries` as one long frame, for charts and tables.

    Parameters
    ----------
    entries
        The output of :func:`effectiveness_entries`.

    Returns
    -------
    polars.DataFrame
        ``cell, strategy, label, metric, measure, n, mean_pct, low_pct, high_pct``, one row per
        entry and measure (``throughput``, ``p95_latency``, ``p95_ttft``).
    """
    schema = {
        "cell": pl.String,
        "strategy": pl.String,
        "label": pl.String,
        "metric": pl.String,
        "measure": pl.String,
        "n": pl.Int64,
        "mean_pct": pl.Float64,
        "low_pct": pl.Float64,
        "high_pct": pl.Float64,
    }
    rows = [
        {
            "cell": e["cell"],
            "strategy": e["strategy"],
            "label": e["label"],
            "metric": e[measure]["metric"],
            "measure": measure,
            "n": e[measure]["n"],
            "mean_pct": e[measure]["mean_pct"],
            "low_pct": e[measure]["low_pct"],
            "high_pct": e[measure]["high_pct"],
        }
        for e in entries
        for measure in ("throughput", "p95_latency", "p95_ttft")
    ]
    return pl.DataFrame(rows, schema=schema)
