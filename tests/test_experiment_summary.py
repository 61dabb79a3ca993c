"""Summary figures and the paper comparison (docs/experiments.md, "Summary figures")."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from tracekit.experiment.paper import (
    CAVEAT,
    CLAIMS,
    PAPER_METRICS,
    PAPER_TABLE,
    claims_frame,
    comparison_frame,
    paper_frame,
    render_html,
    render_markdown,
)
from tracekit.experiment.summary import (
    METRICS,
    SloSpec,
    aggregate_runs,
    ci95,
    original_percentile,
    original_t,
    run_metrics,
)


def python_percentile(values: list[float], p: float) -> float | None:
    """The original collector's ``_percentile`` over positive values."""
    kept = sorted(v for v in values if v > 0)
    return kept[max(0, int(len(kept) * p) - 1)] if kept else None


@pytest.mark.parametrize("n", [1, 2, 7, 20, 100, 1000])
@pytest.mark.parametrize("p", [0.5, 0.95, 0.99])
def test_original_percentile_matches_the_collector(n: int, p: float) -> None:
    rng = random.Random(n)
    values = [rng.choice([0.0, rng.uniform(0, 1000)]) for _ in range(n)]
    frame = pl.DataFrame({"v": values})
    assert frame.select(original_percentile("v", p)).item() == python_percentile(values, p)


def test_t_table_and_ci() -> None:
    assert [original_t(n) for n in (2, 3, 8, 9, 30)] == [12.706, 4.303, 2.365, 1.96, 1.96]
    assert ci95([5.0]) == (5.0, 0.0) and ci95([]) == (0.0, 0.0)
    mean, half = ci95([1.0, 2.0, 4.0])
    sd = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    assert (mean, half) == (pytest.approx(7 / 3), pytest.approx(4.303 * sd / math.sqrt(3)))


def test_aggregate_runs_by_hand() -> None:
    runs = pl.DataFrame(
        {
            "strategy": ["a", "a", "a", "b", "c", "c"],
            "rate": [1.0] * 6,
            "x": [1.0, 2.0, 4.0, 9.0, 3.0, 5.0],
        }
    )
    summary = aggregate_runs(runs, metrics=["x"])
    rows = {r["strategy"]: r for r in summary.to_dicts()}
    assert rows["a"]["num_runs"] == 3
    assert rows["a"]["x_mean"] == pytest.approx(7 / 3)
    assert rows["a"]["x_ci95"] == pytest.approx(ci95([1.0, 2.0, 4.0])[1])
    assert (rows["b"]["x_mean"], rows["b"]["x_ci95"]) == (9.0, 0.0)  # one run: no interval
    assert rows["c"]["x_ci95"] == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))


def requests_frame() -> pl.LazyFrame:
    # run r1: three requests. TTFT 0.1, 0.5, 1.0 s; q3 produces a single token.
    return pl.LazyFrame(
        {
            "run_id": ["r1"] * 3,
            "request_id": ["q1", "q2", "q3"],
            "arrival_s": [0.0, 1.0, 2.0],
            "first_token_s": [0.1, 1.5, 3.0],
            "finish_s": [1.1, 3.5, 3.0],
            "status": ["finished"] * 3,
            "output_tokens": [11, 5, 1],
            "num_preemptions": [0, 2, 1],
            "recomputed_tokens": [0, 300, 40],
        }
    )


def decisions_frame() -> pl.LazyFrame:
    return pl.LazyFrame(
        {
            "run_id": ["r1"] * 3,
            "outcome": ["builtin", "selected", "selected"],
            "decision_reason": [None, "proactive", "srpt"],
        },
        schema={"run_id": pl.String, "outcome": pl.String, "decision_reason": pl.String},
    )


def test_run_metrics_by_hand() -> None:
    row = run_metrics(requests_frame(), decisions_frame(), SloSpec(300.0)).row(0, named=True)
    assert (row["requests"], row["finished"], row["duration_s"]) == (3, 3, 3.5)
    assert row["throughput_rps"] == pytest.approx(3 / 3.5)
    # TTFTs 100, 500, 1000 ms: p50 = sorted[int(1.5) - 1] = 100, p95 = sorted[int(2.85)-1] = 500.
    assert row["ttft_p50_ms"] == pytest.approx(100.0)
    assert row["ttft_p95_ms"] == pytest.approx(500.0)
    # TPOT: q1 (1.1 - 0.1) / 10 = 100 ms, q2 2.0 / 4 = 500 ms; q3 (one token) has none.
    assert row["tpot_p99_ms"] == pytest.approx(100.0)  # int(2 * 0.99) - 1 = 0
    assert row["e2e_p99_ms"] == pytest.approx(1100.0)  # E2E 1100, 2500, 1000: sorted[1]
    assert row["slo_attainment_pct"] == pytest.approx(100 / 3)  # only q1 has TTFT <= 300 ms
    assert row["normalized_latency_ms_per_token"] == pytest.approx(
        (1100 + 2500 + 1000) / 3 / 17 * 3
    )
    assert (row["preemptions"], row["tokens_freed"]) == (3, 340)
    assert (row["native_preemptions"], row["proactive_preemptions"], row["srpt_preemptions"]) == (
        1, 1, 1,
    )  # fmt: skip


def test_slo_with_a_tpot_target_and_latency_from_sent_times() -> None:
    both = run_metrics(requests_frame(), decisions_frame(), SloSpec(600.0, 200.0))
    # q1: TTFT 100, TPOT 100 -> yes; q2: TTFT 500 but TPOT 500 -> no; q3: TTFT 1000 -> no.
    assert both.item(0, "slo_attainment_pct") == pytest.approx(100 / 3)
    assert SloSpec(600.0, 200.0).label() == "TTFT<=600ms & TPOT<=200ms"
    sent = pl.LazyFrame({"run_id": ["r1"], "request_id": ["q3"], "sent_s": [2.8]})
    row = run_metrics(requests_frame(), decisions_frame(), SloSpec(300.0), sent=sent)
    # q3 measured from 2.8 s: TTFT 200 ms, so it now meets the SLO; q1, q2 keep their arrivals.
    assert row.item(0, "slo_attainment_pct") == pytest.approx(200 / 3)
    assert row.item(0, "ttft_p95_ms") == pytest.approx(200.0)


def test_paper_table_and_its_derived_claims_agree() -> None:
    frame = paper_frame()
    assert frame.height == 15 and set(frame.columns) == {"strategy", "rate", *PAPER_METRICS}
    for claim in CLAIMS:
        subject = [PAPER_TABLE[(claim.subject, r)] for r in claim.rates]
        baseline = [PAPER_TABLE[(claim.baseline, r)] for r in claim.rates]
        column = PAPER_METRICS.index(claim.metric)
        s = sum(v[column] for v in subject) / len(subject)
        b = sum(v[column] for v in baseline) / len(baseline)
        change = s - b if claim.change == "difference" else 100 * (s / b - 1)
        assert change == pytest.approx(claim.paper_change, abs=0.15), claim.claim_id


def paper_as_runs(noise: float = 0.0) -> pl.DataFrame:
    """Three runs per cell whose means are the paper's figures."""
    rows = []
    for (strategy, rate), values in PAPER_TABLE.items():
        for run, factor in enumerate((1 - noise, 1.0, 1 + noise)):
            rows.append(
                {
                    "strategy": strategy, "rate": rate, "run_index": run,
                    **{m: v * factor for m, v in zip(PAPER_METRICS, values, strict=True)},
                }
            )  # fmt: skip
    return pl.DataFrame(rows)


def test_every_claim_holds_on_the_papers_own_numbers() -> None:
    claims = claims_frame(paper_as_runs())
    assert claims.height == len(CLAIMS)
    assert claims.get_column("holds").to_list() == [True] * len(CLAIMS)
    assert (claims.get_column("runs_agreeing") == 3).all()
    assert claims.get_column("ours_change").to_list() == pytest.approx(
        claims.get_column("paper_change").to_list(), abs=0.15
    )


def test_comparison_frame_puts_ours_beside_the_paper() -> None:
    runs = paper_as_runs(noise=0.01)
    summary = aggregate_runs(runs, metrics=PAPER_METRICS)
    comparison = comparison_frame(summary)
    assert comparison.height == 15 * 4
    assert comparison.get_column("ours_mean").to_list() == pytest.approx(
        comparison.get_column("paper").to_list()
    )
    assert comparison.get_column("ours_vs_pe").to_list() == pytest.approx(
        comparison.get_column("paper_vs_pe").to_list()
    )
    bidkv = comparison.filter(
        (pl.col("strategy") == "bidkv") & (pl.col("rate") == 3.8)
    ).rows_by_key("metric", named=True, unique=True)
    assert bidkv["ttft_p95_ms"]["paper_vs_pe"] == pytest.approx(100 * (631 / 6769 - 1))
    assert bidkv["slo_attainment_pct"]["paper_vs_pe"] == pytest.approx(83.2 - 68.4)
    assert bidkv["throughput_rps"]["ours_ci95"] > 0


def test_claims_are_unchecked_where_cells_are_missing() -> None:
    runs = paper_as_runs().filter(pl.col("rate") != 5.7)
    claims = claims_frame(runs).rows_by_key("claim_id", named=True, unique=True)
    assert claims["abstract-ttft"]["holds"] is None  # needs all three rates
    assert claims["bidkv-pe-ttft-5.7"]["holds"] is None
    assert claims["bidkv-pe-ttft-3.8"]["holds"] is True


def test_renderings_say_what_is_compared() -> None:
    runs = paper_as_runs()
    comparison = comparison_frame(aggregate_runs(runs, metrics=PAPER_METRICS))
    claims = claims_frame(runs)
    markdown = render_markdown(comparison, claims, note="A note.")
    assert markdown.startswith(f"> {CAVEAT}\n\n> A note.\n")
    assert "| claim | paper | ours | holds | runs agreeing |" in markdown
    assert "| bidkv | 3.8 | ttft_p95_ms | 631 | 631 ± 0.0 | -90.7 % | -90.7 % |" in markdown
    page = render_html(comparison, claims)
    assert page.startswith('<section class="experiment-comparison">')
    assert "Absolute numbers are not comparable" in page and "<table>" in page


def test_metrics_list_covers_the_paper_metrics() -> None:
    assert set(PAPER_METRICS) <= set(METRICS)
