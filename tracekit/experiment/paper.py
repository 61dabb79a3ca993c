"""The paper's published figures beside ours, and whether each of its claims holds in our runs.

The BidKV paper's Table 1/2 (docs/experiments.md#comparison-with-the-paper: mixed workload, legacy
monkey-patch path, Llama-3.1-8B-Instruct on an RTX A6000, 600 KV blocks, mean of 3 runs) gives,
per strategy and rate, throughput (req/s), SLO attainment at TTFT <= 300 ms (%), P95 TTFT (ms)
and P95 TPOT (ms). :func:`comparison_frame` puts our means beside them, with each strategy's
change against ``preempt-evict`` at the same rate on both sides; :func:`claims_frame` checks the
*direction* of each of the paper's claims in our runs.

Absolute numbers are not comparable: our runs use a modelled GPU (a roofline cost model), a
different length pool (ShareGPT length statistics instead of the original tokenised first turns),
exact token counts and latencies measured from the scheduled arrival. Directions and ratios are
what is compared, and every rendering says so.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

__all__ = [
    "CAVEAT",
    "CLAIMS",
    "PAPER_METRICS",
    "PAPER_TABLE",
    "Claim",
    "claims_frame",
    "comparison_frame",
    "paper_frame",
    "render_html",
    "render_markdown",
]

#: The four figures the paper's tables give per strategy and rate.
PAPER_METRICS: tuple[str, ...] = (
    "throughput_rps",
    "slo_attainment_pct",
    "ttft_p95_ms",
    "tpot_p95_ms",
)

#: Table 1/2 of the paper: (strategy, rate) -> throughput, SLO@300ms %, TTFT P95, TPOT P95.
PAPER_TABLE: dict[tuple[str, float], tuple[float, float, float, float]] = {
    ("preempt-evict", 2.0): (1.96, 92.0, 683.0, 78.1),
    ("preempt-evict", 3.8): (3.48, 68.4, 6769.0, 97.0),
    ("preempt-evict", 5.7): (3.49, 56.2, 8699.0, 119.9),
    ("preempt-evict-sjf", 2.0): (1.96, 94.2, 330.0, 84.6),
    ("preempt-evict-sjf", 3.8): (3.06, 79.6, 666.0, 153.5),
    ("preempt-evict-sjf", 5.7): (3.28, 74.6, 727.0, 150.6),
    ("static-random", 2.0): (1.96, 96.5, 266.0, 72.8),
    ("static-random", 3.8): (3.57, 84.1, 1216.0, 90.9),
    ("static-random", 5.7): (4.09, 80.4, 1792.0, 94.4),
    ("largest-first", 2.0): (1.96, 95.5, 291.0, 74.5),
    ("largest-first", 3.8): (3.28, 79.9, 677.0, 112.9),
    ("largest-first", 5.7): (3.53, 77.7, 793.0, 113.2),
    ("bidkv", 2.0): (1.96, 97.0, 258.0, 72.4),
    ("bidkv", 3.8): (3.42, 83.2, 631.0, 107.2),
    ("bidkv", 5.7): (3.60, 81.0, 797.0, 110.0),
}

BASELINE = "preempt-evict"

CAVEAT = (
    "Absolute numbers are not comparable with the paper: these runs use the embedded engine "
    "with a modelled A6000 (roofline cost model, no GPU), ShareGPT length statistics instead of "
    "the original tokenised first turns, every request generating its full max_tokens, and "
    "exact token counts. Compare directions and ratios against preempt-evict, not values."
)

Direction = Literal["lower", "higher", "equal"]


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of the paper, as a direction between two strategies on one metric.

    Parameters
    ----------
    claim_id
        Short stable id.
    text
        The claim in words.
    metric
        A per-run metric (one of :data:`PAPER_METRICS`).
    subject, baseline
        The strategies compared (``subject`` against ``baseline``).
    rates
        The rates it is about; several rates compare the means over those rates.
    change
        ``relative`` (percent of the baseline) or ``difference`` (points, for SLO %).
    paper_change
        The paper's change.
    expected
        The direction the claim states; ``equal`` means within ``tolerance``.
    tolerance
        Band (same unit as the change) within which the change counts as ``equal``.
    """

    claim_id: str
    text: str
    metric: str
    subject: str
    baseline: str
    rates: tuple[float, ...]
    change: Literal["relative", "difference"]
    paper_change: float
    expected: Direction
    tolerance: float = 0.0


def _bidkv_vs_pe() -> list[Claim]:
    # The paper's "derived" BidKV vs PE: throughput %, SLO pp, TTFT P95 %, TPOT P95 %.
    derived = {
        2.0: (0.0, 5.0, -62.2, -7.3),
        3.8: (-1.7, 14.8, -90.7, 10.5),
        5.7: (3.2, 24.8, -90.8, -8.3),
    }
    claims = []
    for rate, (thr, slo, ttft, tpot) in derived.items():
        claims += [
            Claim(
                f"bidkv-pe-throughput-{rate}",
                f"BidKV throughput vs PE at rate {rate}: {thr:+.1f}%",
                "throughput_rps",
                "bidkv",
                BASELINE,
                (rate,),
                "relative",
                thr,
                "equal" if thr == 0.0 else "higher" if thr > 0 else "lower",
                1.0 if thr == 0.0 else 0.0,
            ),
            Claim(
                f"bidkv-pe-slo-{rate}",
                f"BidKV improves SLO@300ms over PE at rate {rate}: {slo:+.1f} pp",
                "slo_attainment_pct",
                "bidkv",
                BASELINE,
                (rate,),
                "difference",
                slo,
                "higher",
            ),
            Claim(
                f"bidkv-pe-ttft-{rate}",
                f"BidKV reduces P95 TTFT vs PE at rate {rate}: {ttft:+.1f}%",
                "ttft_p95_ms",
                "bidkv",
                BASELINE,
                (rate,),
                "relative",
                ttft,
                "lower",
            ),
            Claim(
                f"bidkv-pe-tpot-{rate}",
                f"BidKV P95 TPOT vs PE at rate {rate}: {tpot:+.1f}%",
                "tpot_p95_ms",
                "bidkv",
                BASELINE,
                (rate,),
                "relative",
                tpot,
                "higher" if tpot > 0 else "lower",
            ),
        ]
    return claims


#: The paper's claims :func:`claims_frame` checks (docs/experiments.md#comparison-with-the-paper).
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "abstract-ttft",
        "Abstract: BidKV reduces P95 TTFT by 89% vs vLLM's native policy (means over rates)",
        "ttft_p95_ms", "bidkv", BASELINE, (2.0, 3.8, 5.7), "relative", -89.6, "lower",
    ),
    Claim(
        "abstract-slo",
        "Abstract: BidKV improves 300 ms SLO attainment by 14.9 pp (means over rates)",
        "slo_attainment_pct", "bidkv", BASELINE, (2.0, 3.8, 5.7), "difference", 14.9, "higher",
    ),
    *_bidkv_vs_pe(),
    Claim(
        "sr-bidkv-throughput-3.8",
        "Static-Random beats BidKV on throughput at rate 3.8",
        "throughput_rps", "static-random", "bidkv", (3.8,), "relative", 4.4, "higher",
    ),
    Claim(
        "sr-bidkv-slo-3.8",
        "Static-Random beats BidKV on SLO@300ms at rate 3.8",
        "slo_attainment_pct", "static-random", "bidkv", (3.8,), "difference", 0.9, "higher",
    ),
    *(
        Claim(
            f"sjf-pe-ttft-{rate}",
            f"SJF admission alone (PE-SJF) reduces P95 TTFT vs PE at rate {rate}",
            "ttft_p95_ms", "preempt-evict-sjf", BASELINE, (rate,), "relative", change, "lower",
        )
        for rate, change in ((2.0, -51.7), (3.8, -90.2), (5.7, -91.6))
    ),
)  # fmt: skip


def paper_frame() -> pl.DataFrame:
    """The paper's Table 1/2 as a frame: ``strategy, rate`` and :data:`PAPER_METRICS`."""
    rows = [
        {"strategy": s, "rate": r, **dict(zip(PAPER_METRICS, values, strict=True))}
        for (s, r), values in PAPER_TABLE.items()
    ]
    return pl.DataFrame(rows)


def _versus_baseline(frame: pl.DataFrame, value: str, out: str) -> pl.DataFrame:
    """Each row's change against the baseline strategy at the same rate and metric."""
    base = frame.filter(pl.col("strategy") == BASELINE).select(
        "rate", "metric", pl.col(value).alias("_base")
    )
    change = (
        pl.when(pl.col("metric") == "slo_attainment_pct")
        .then(pl.col(value) - pl.col("_base"))
        .otherwise(100 * (pl.col(value) / pl.col("_base") - 1))
    )
    return (
        frame.join(base, on=["rate", "metric"], how="left")
        .with_columns(change.alias(out))
        .drop("_base")
    )


def comparison_frame(summary: pl.DataFrame) -> pl.DataFrame:
    """Per strategy, rate and paper metric: the paper's figure beside our mean and CI.

    Parameters
    ----------
    summary
        :func:`~tracekit.experiment.summary.aggregate_runs` output (``strategy``, ``rate``,
        ``<metric>_mean``, ``<metric>_ci95``).

    Returns
    -------
    pl.DataFrame
        ``strategy, rate, metric, paper, ours_mean, ours_ci95, paper_vs_pe, ours_vs_pe``, one
        row per cell of ``summary`` and paper metric: ``*_vs_pe`` is the change against
        preempt-evict at the same rate (percent, or points for SLO attainment); ``paper`` is
        null for a cell the paper does not have, ``*_vs_pe`` when preempt-evict is missing.
    """
    paper = paper_frame().unpivot(
        index=["strategy", "rate"],
        on=list(PAPER_METRICS),
        variable_name="metric",
        value_name="paper",
    )
    ours = pl.concat(
        [
            summary.select(
                "strategy",
                pl.col("rate").cast(pl.Float64),
                pl.lit(metric).alias("metric"),
                pl.col(f"{metric}_mean").alias("ours_mean"),
                pl.col(f"{metric}_ci95").alias("ours_ci95"),
            )
            for metric in PAPER_METRICS
        ]
    )
    frame = ours.join(paper, on=["strategy", "rate", "metric"], how="left")
    frame = _versus_baseline(frame, "paper", "paper_vs_pe")
    frame = _versus_baseline(frame, "ours_mean", "ours_vs_pe")
    order = {name: i for i, name in enumerate(PAPER_METRICS)}
    strategies = {name: i for i, name in enumerate(dict.fromkeys(s for s, _ in PAPER_TABLE))}
    return frame.sort(
        pl.col("rate"),
        pl.col("strategy").replace_strict(strategies, default=len(strategies)),
        pl.col("metric").replace_strict(order, default=len(order)),
    ).select(
        "strategy",
        "rate",
        "metric",
        "paper",
        "ours_mean",
        "ours_ci95",
        "paper_vs_pe",
        "ours_vs_pe",
    )


def _change(subject: str, baseline: str, kind: str) -> pl.Expr:
    if kind == "difference":
        return pl.col(subject) - pl.col(baseline)
    return 100.0 * (pl.col(subject) / pl.col(baseline) - 1.0)


def _direction(change: pl.Expr, tolerance: float) -> pl.Expr:
    return (
        pl.when(change.is_null() | change.is_nan())
        .then(pl.lit(None, dtype=pl.String))
        .when(change.abs() <= tolerance)
        .then(pl.lit("equal"))
        .when(change > 0)
        .then(pl.lit("higher"))
        .otherwise(pl.lit("lower"))
    )


def _claim_row(runs: pl.DataFrame, claim: Claim) -> dict[str, object]:
    sides = [claim.subject, claim.baseline]
    cell = runs.filter(
        pl.col("rate").cast(pl.Float64).is_in(list(claim.rates)), pl.col("strategy").is_in(sides)
    )
    change = _change(claim.subject, claim.baseline, claim.change)
    direction = _direction(change, claim.tolerance)
    # Means over every run (and rate) of each side, then the change between the two means.
    overall = cell.group_by("strategy").agg(pl.col(claim.metric).mean())
    # The same change run by run, paired by run index (means over the claim's rates).
    paired = cell.group_by("run_index", "strategy").agg(pl.col(claim.metric).mean())
    result: dict[str, object] = {
        "ours_change": None,
        "ours_direction": None,
        "holds": None,
        "runs_agreeing": 0,
        "runs_compared": 0,
    }
    complete = cell.select("strategy", "rate").unique().height == 2 * len(claim.rates)
    if complete:
        wide = overall.transpose(column_names="strategy")
        mean = wide.select(change.alias("change"), direction.alias("direction")).row(0)
        pairs = (
            paired.pivot(on="strategy", index="run_index", values=claim.metric)
            .drop_nulls(sides)
            .select((direction == claim.expected).fill_null(False).alias("agree"))
        )
        result.update(
            ours_change=mean[0],
            ours_direction=mean[1],
            holds=None if mean[1] is None else mean[1] == claim.expected,
            runs_agreeing=int(pairs.get_column("agree").sum()),
            runs_compared=pairs.height,
        )
    return result


def claims_frame(runs: pl.DataFrame, claims: Sequence[Claim] = CLAIMS) -> pl.DataFrame:
    """Whether the direction of each claim holds in our runs, overall and run by run.

    Parameters
    ----------
    runs
        One row per run with ``strategy``, ``rate``, ``run_index`` and the paper metrics.
    claims
        The claims to check.

    Returns
    -------
    pl.DataFrame
        ``claim_id, claim, metric, rates, paper_change, expected, ours_change, ours_direction,
        holds, runs_agreeing, runs_compared``. Means are taken over the runs (and over the
        claim's rates), then compared; ``runs_agreeing`` counts the run indices whose paired
        change has the claimed direction. ``holds`` is null when a strategy or rate is missing.
    """
    rows = [
        {
            "claim_id": claim.claim_id,
            "claim": claim.text,
            "metric": claim.metric,
            "rates": ", ".join(f"{r:g}" for r in claim.rates),
            "paper_change": claim.paper_change,
            "expected": claim.expected,
            **_claim_row(runs, claim),
        }
        for claim in claims
    ]
    schema = {
        "claim_id": pl.String, "claim": pl.String, "metric": pl.String, "rates": pl.String,
        "paper_change": pl.Float64, "expected": pl.String, "ours_change": pl.Float64,
        "ours_direction": pl.String, "holds": pl.Boolean, "runs_agreeing": pl.Int64,
        "runs_compared": pl.Int64,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def _fmt(value: object, metric: str = "") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if not isinstance(value, int | float):
        return str(value)
    if metric == "throughput_rps":
        return f"{value:.2f}"
    if metric == "slo_attainment_pct":
        return f"{value:.1f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _unit(metric: str) -> str:
    return "pp" if metric == "slo_attainment_pct" else "%"


def _table_rows(
    comparison: pl.DataFrame, claims: pl.DataFrame
) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    head = [
        "strategy",
        "rate",
        "metric",
        "paper",
        "ours (mean ± CI95)",
        "paper vs PE",
        "ours vs PE",
    ]
    body = []
    for row in comparison.iter_rows(named=True):
        metric = row["metric"]
        ours = _fmt(row["ours_mean"], metric)
        if row["ours_ci95"] is not None:
            ours = f"{ours} ± {_fmt(row['ours_ci95'], metric)}"
        body.append(
            [
                row["strategy"],
                f"{row['rate']:g}",
                metric,
                _fmt(row["paper"], metric),
                ours,
                _signed(row["paper_vs_pe"], metric),
                _signed(row["ours_vs_pe"], metric),
            ]
        )
    claim_head = ["claim", "paper", "ours", "holds", "runs agreeing"]
    claim_body = []
    for row in claims.iter_rows(named=True):
        unit = _unit(row["metric"])
        holds = "n/a" if row["holds"] is None else "yes" if row["holds"] else "no"
        claim_body.append(
            [
                row["claim"],
                f"{row['paper_change']:+.1f} {unit}",
                "-" if row["ours_change"] is None else f"{row['ours_change']:+.1f} {unit}",
                holds,
                f"{row['runs_agreeing']}/{row['runs_compared']}",
            ]
        )
    return head, body, claim_head, claim_body


def _signed(value: float | None, metric: str) -> str:
    return "-" if value is None else f"{value:+.1f} {_unit(metric)}"


def render_markdown(
    comparison: pl.DataFrame, claims: pl.DataFrame, *, note: str | None = None
) -> str:
    """A markdown fragment: the caveat (and ``note``), the claims and the cell-by-cell table."""
    head, body, claim_head, claim_body = _table_rows(comparison, claims)

    def table(columns: list[str], rows: list[list[str]]) -> list[str]:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
        return lines

    lines = [f"> {CAVEAT}", ""]
    if note:
        lines += [f"> {note}", ""]
    lines += ["**The paper's claims in our runs**", ""]
    lines += table(claim_head, claim_body)
    lines += ["", "**Cell by cell (paper Table 1/2 beside ours)**", ""]
    lines += table(head, body)
    return "\n".join(lines) + "\n"


def render_html(comparison: pl.DataFrame, claims: pl.DataFrame, *, note: str | None = None) -> str:
    """The same fragment as :func:`render_markdown`, as HTML (a ``<section>``, no page)."""
    head, body, claim_head, claim_body = _table_rows(comparison, claims)

    def table(columns: list[str], rows: list[list[str]]) -> str:
        header = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        cells = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        return f"<table><thead><tr>{header}</tr></thead><tbody>{cells}</tbody></table>"

    return (
        '<section class="experiment-comparison">'
        f'<p class="caveat">{html.escape(CAVEAT)}</p>'
        + (f'<p class="note">{html.escape(note)}</p>' if note else "")
        + f"<h3>The paper's claims in our runs</h3>{table(claim_head, claim_body)}"
        f"<h3>Cell by cell (paper Table 1/2 beside ours)</h3>{table(head, body)}"
        "</section>\n"
    )
