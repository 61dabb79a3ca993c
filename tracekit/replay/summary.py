"""Per-strategy summaries of an open-mode replay, built chunk by chunk.

:class:`SummaryAccumulator` reads the ``replay_decisions`` rows of each chunk (all strategies of
the same decisions) and keeps only small partial aggregates: counts per strategy, an agreement
count per pair of strategies, and victim counts of the current run. Victim counts are cut to the
top ``top_k`` per strategy when a run ends, which is exact because a request belongs to one run.
:func:`summarize` applies it to a whole table at once.

Counters follow the controller (docs/contracts.md, "The controller and its counters"): ``calls`` =
selected + abstained + invalid +
exception, ``failures`` = invalid + exception. ``gate_fallbacks`` counts the decisions whose
reason is ``gate_fallback``: the production ``bidkv`` strategy returned its default victim at a
gate (too few candidates, KV usage below the gate, cooldown), as ``last_decision_reason()``
reports it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit.trace.text import Align, text_table

__all__ = ["SummaryAccumulator", "render_summary", "summarize", "summary_records"]

TOP_K = 5

# Per chunk, rows are counted by (strategy, outcome, reason); the counters derive from these
# few groups at the end, which is cheaper than one expression per counter over every row.
_GROUPS = ("strategy", "outcome", "decision_reason")
_SUMS = {
    "rows": pl.len(),
    "agreements": pl.col("agrees_with_recorded").sum(),
    "picked_requester": pl.col("picked_requester").sum(),
    "tokens_freed": pl.col("victim_tokens_freed").sum(),
    "recorded_tokens_freed": pl.col("recorded_tokens_freed").sum(),
    # Estimate against actual, over the decisions whose actual freed tokens the trace records.
    "freed_known": pl.col("victim_tokens_freed_actual").is_not_null().sum(),
    "estimated_tokens_freed": pl.col("victim_tokens_freed")
    .filter(pl.col("victim_tokens_freed_actual").is_not_null())
    .sum(),
    "actual_tokens_freed": pl.col("victim_tokens_freed_actual").sum(),
}
# Replay tables written before trace v2 lack the actual columns: they read as unknown.
_ACTUAL_COLUMNS = ("victim_tokens_freed_actual", "recorded_tokens_freed_actual")


def _when(outcomes: Sequence[str] | None = None, reason: str | None = None) -> pl.Expr:
    test = pl.lit(True)
    if outcomes is not None:
        test = test & pl.col("outcome").is_in(list(outcomes))
    if reason is not None:
        test = test & (pl.col("decision_reason") == reason)
    return pl.when(test).then(pl.col("rows")).otherwise(0).sum()


_COUNTS = {
    "decisions": pl.col("rows").sum(),
    "agreements": pl.col("agreements").sum(),
    "calls": _when(["selected", "abstained", "invalid", "exception"]),
    "selections": _when(["selected"]),
    "abstentions": _when(["abstained"]),
    "abstentions_liveness": _when(["abstained"], "liveness_abstain"),
    "abstentions_cascade": _when(["abstained"], "cascade_abstain"),
    "gate_fallbacks": _when(reason="gate_fallback"),
    "liveness_fallbacks": _when(reason="liveness_fallback"),
    "invalid_selections": _when(["invalid"]),
    "failures": _when(["invalid", "exception"]),
    "disabled_decisions": _when(["disabled"]),
    "picked_requester": pl.col("picked_requester").sum(),
    "tokens_freed": pl.col("tokens_freed").sum(),
    "recorded_tokens_freed": pl.col("recorded_tokens_freed").sum(),
    "freed_known": pl.col("freed_known").sum(),
    "estimated_tokens_freed": pl.col("estimated_tokens_freed").sum(),
    "actual_tokens_freed": pl.col("actual_tokens_freed").sum(),
}


class SummaryAccumulator:
    """Partial aggregates of replay rows, mergeable across runs and worker processes.

    Parameters
    ----------
    labels
        The strategies, in output order.
    top_k
        How many most-preempted requests to keep per strategy.
    """

    def __init__(self, labels: Sequence[str], top_k: int = TOP_K) -> None:
        self.labels = list(labels)
        self.top_k = top_k
        self._counts: list[pl.DataFrame] = []
        self._victims: list[pl.DataFrame] = []
        self._run_victims: list[pl.DataFrame] = []
        width = len(self.labels)
        self._pairs = [[0] * width for _ in range(width)]

    def add(self, frame: pl.DataFrame) -> None:
        """Add the rows of one chunk: every strategy for the same decisions, interleaved."""
        if frame.height == 0:
            return
        missing = [c for c in _ACTUAL_COLUMNS if c not in frame.columns]
        if missing:
            frame = frame.with_columns(pl.lit(None, pl.Int64).alias(c) for c in missing)
        # Partial results are small: their keys become plain strings, whatever the chunk used.
        self._counts.append(
            frame.group_by(*_GROUPS)
            .agg(**{k: e.cast(pl.Int64) for k, e in _SUMS.items()})
            .with_columns(pl.col(k).cast(pl.String) for k in _GROUPS)
        )
        # Victims are grouped by an integer standing for the id where the chunk has one.
        key = "applied_id_row" if "applied_id_row" in frame.columns else "applied_victim_id"
        firsts = [pl.col("run_id").first()]
        if key != "applied_victim_id":
            firsts.append(pl.col("applied_victim_id").first())
        self._run_victims.append(
            frame.group_by("strategy", key)
            .agg(pl.len().cast(pl.Int64).alias("count"), *firsts)
            .select(
                *(pl.col(k).cast(pl.String) for k in ("strategy", "run_id", "applied_victim_id")),
                "count",
            )
        )
        width = len(self.labels)
        # Candidate rows stand for ids within a chunk (one row per id), and compare faster.
        applied = [frame["applied_row"].gather_every(width, s) for s in range(width)]
        for a in range(width):
            for b in range(a + 1, width):
                same = int((applied[a] == applied[b]).sum())
                self._pairs[a][b] += same
                self._pairs[b][a] += same
        if len(self._counts) > 64:
            self._counts = [_sum_counts(self._counts)]
        if len(self._run_victims) > 64:
            self._run_victims = [_sum_victims(self._run_victims)]

    def end_run(self) -> None:
        """Keep only each strategy's top requests of the run that just ended."""
        if self._run_victims:
            self._victims.append(_top(_sum_victims(self._run_victims), self.top_k))
            self._run_victims = []

    def merge(self, other: SummaryAccumulator) -> None:
        """Add another accumulator's aggregates (for example a worker's runs)."""
        other.end_run()
        self.end_run()
        self._counts.extend(other._counts)
        self._victims.extend(other._victims)
        for a, row in enumerate(other._pairs):
            for b, value in enumerate(row):
                self._pairs[a][b] += value

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The summary (one row per strategy) and the pairwise agreement table."""
        self.end_run()
        labels = pl.DataFrame({"strategy": self.labels}, schema={"strategy": pl.String})
        counts = labels.join(
            _sum_counts(self._counts).group_by("strategy").agg(**_COUNTS),
            on="strategy",
            how="left",
        ).fill_null(0)
        victims = (
            _top(_sum_victims(self._victims), self.top_k)
            .group_by("strategy", maintain_order=True)
            .agg(
                pl.struct("run_id", pl.col("applied_victim_id").alias("request_id"), "count").alias(
                    "top_victims"
                )
            )
        )
        decisions = pl.col("decisions")
        summary = counts.join(victims, on="strategy", how="left", maintain_order="left").select(
            "strategy",
            "decisions",
            _rate(pl.col("agreements"), decisions).alias("agreement_rate"),
            "agreements",
            "calls",
            "selections",
            "abstentions",
            "abstentions_liveness",
            "abstentions_cascade",
            (
                pl.col("abstentions")
                - pl.col("abstentions_liveness")
                - pl.col("abstentions_cascade")
            ).alias("abstentions_other"),
            "gate_fallbacks",
            "liveness_fallbacks",
            "invalid_selections",
            "failures",
            "disabled_decisions",
            "picked_requester",
            _rate(pl.col("picked_requester"), decisions).alias("requester_rate"),
            "tokens_freed",
            "recorded_tokens_freed",
            _rate(pl.col("tokens_freed"), pl.col("recorded_tokens_freed")).alias("tokens_ratio"),
            # Tokens freed: the estimate (victims' computed tokens) against what the victims'
            # exclusive blocks actually free, over the decisions the trace records it for.
            pl.col("freed_known").alias("freed_known_decisions"),
            pl.when(pl.col("freed_known") > 0).then(pl.col("estimated_tokens_freed")),
            pl.when(pl.col("freed_known") > 0).then(pl.col("actual_tokens_freed")),
            _rate(pl.col("actual_tokens_freed"), pl.col("estimated_tokens_freed")).alias(
                "freed_actual_ratio"
            ),
            pl.col("top_victims").fill_null(pl.lit([], dtype=_VICTIMS_DTYPE)),
        )
        total = summary["decisions"].max() if summary.height else 0
        rows = []
        for a, name_a in enumerate(self.labels):
            for b, name_b in enumerate(self.labels):
                same = total if a == b else self._pairs[a][b]
                rows.append((name_a, name_b, total, same))
        agreement = pl.DataFrame(
            rows,
            schema={
                "strategy_a": pl.String,
                "strategy_b": pl.String,
                "decisions": pl.Int64,
                "agreements": pl.Int64,
            },
            orient="row",
        ).with_columns(_rate(pl.col("agreements"), pl.col("decisions")).alias("agree_rate"))
        return summary, agreement.select(
            "strategy_a", "strategy_b", "agree_rate", "decisions", "agreements"
        )


_VICTIMS_DTYPE = pl.List(
    pl.Struct({"run_id": pl.String, "request_id": pl.String, "count": pl.Int64})
)


def _rate(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    return pl.when(denominator > 0).then(numerator / denominator).otherwise(None)


def _sum_counts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    if not parts:
        return pl.DataFrame(
            schema={**{k: pl.String for k in _GROUPS}, **{k: pl.Int64 for k in _SUMS}}
        )
    return pl.concat(parts).group_by(*_GROUPS).agg(pl.all().sum())


def _sum_victims(parts: list[pl.DataFrame]) -> pl.DataFrame:
    if not parts:
        return pl.DataFrame(
            schema={
                "strategy": pl.String,
                "run_id": pl.String,
                "applied_victim_id": pl.String,
                "count": pl.Int64,
            }
        )
    return (
        pl.concat(parts)
        .group_by("strategy", "run_id", "applied_victim_id")
        .agg(pl.col("count").sum())
    )


def _top(victims: pl.DataFrame, k: int) -> pl.DataFrame:
    # Most preempted first; ties by run and request id, so the result never depends on order.
    return (
        victims.sort(
            ["strategy", "count", "run_id", "applied_victim_id"],
            descending=[False, True, False, False],
        )
        .group_by("strategy", maintain_order=True)
        .head(k)
    )


def summarize(
    frame: pl.DataFrame, labels: Sequence[str] | None = None, top_k: int = TOP_K
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Summary and agreement tables of a whole ``replay_decisions`` table.

    Parameters
    ----------
    frame
        Rows ordered by run, ``seq`` and strategy, every strategy present for every decision
        (as ``replay_open`` writes them). Read from a file, it lacks the internal
        ``applied_row``; the applied ids are compared instead.
    labels
        Strategy order; by default the order of first appearance.
    top_k
        Most-preempted requests kept per strategy.

    Returns
    -------
    tuple of pl.DataFrame
        ``(summary, agreement)`` as :meth:`SummaryAccumulator.finish`.
    """
    if labels is None:
        labels = frame["strategy"].unique(maintain_order=True).to_list()
    accumulator = SummaryAccumulator(labels, top_k)
    if "applied_row" not in frame.columns:
        frame = frame.with_columns(pl.col("applied_victim_id").alias("applied_row"))
    for (_,), run in frame.group_by("run_id", maintain_order=True):
        accumulator.add(run)
        accumulator.end_run()
    return accumulator.finish()


def summary_records(summary: pl.DataFrame, agreement: pl.DataFrame) -> dict[str, Any]:
    """The two tables as JSON-ready records (``summary.json``)."""
    return {"strategies": summary.to_dicts(), "agreement": agreement.to_dicts()}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_summary(summary: pl.DataFrame, agreement: pl.DataFrame) -> str:
    """A plain-text report: one line per strategy, the agreement matrix, top victims.

    Parameters
    ----------
    summary, agreement
        As returned by :meth:`SummaryAccumulator.finish`.

    Returns
    -------
    str
        Lines ending in a newline.
    """
    header = (
        "strategy", "decisions", "agree", "calls", "select", "abstain", "liveness", "cascade",
        "gate", "invalid", "failures", "requester", "tokens/rec", "freed act/est",
    )  # fmt: skip
    rows = [header]
    for r in summary.iter_rows(named=True):
        ratio = r["tokens_ratio"]
        rows.append(
            (
                r["strategy"],
                str(r["decisions"]),
                _pct(r["agreement_rate"]),
                str(r["calls"]),
                str(r["selections"]),
                str(r["abstentions"]),
                str(r["abstentions_liveness"]),
                str(r["abstentions_cascade"]),
                str(r["gate_fallbacks"]),
                str(r["invalid_selections"]),
                str(r["failures"]),
                _pct(r["requester_rate"]),
                "-" if ratio is None else f"{ratio:.3f}",
                _freed(r),
            )
        )
    lines = _table(rows)
    labels = summary["strategy"].to_list()
    rates = {
        (a, b): v
        for a, b, v in agreement.select("strategy_a", "strategy_b", "agree_rate").iter_rows()
    }
    lines.append("")
    lines.append("pairwise agreement (share of decisions with the same applied victim)")
    matrix = [("", *labels)]
    matrix += [(a, *(_pct(rates.get((a, b))) for b in labels)) for a in labels]
    lines += _table(matrix)
    lines.append("")
    lines.append(f"most preempted requests (top {TOP_K}: run/request x count)")
    for r in summary.iter_rows(named=True):
        victims = ", ".join(
            f"{v['run_id']}/{v['request_id']} x{v['count']}" for v in r["top_victims"]
        )
        lines.append(f"  {r['strategy']}: {victims or '-'}")
    return "\n".join(lines) + "\n"


def _freed(row: dict[str, Any]) -> str:
    """``actual/estimate (ratio)`` tokens freed, or ``-`` when the trace does not record it."""
    ratio = row.get("freed_actual_ratio")
    if not row.get("freed_known_decisions"):
        return "-"
    shown = "-" if ratio is None else f"{ratio:.3f}"
    return f"{row['actual_tokens_freed']}/{row['estimated_tokens_freed']} ({shown})"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Labels left, numbers right."""
    align: list[Align] = ["left"] + ["right"] * (len(rows[0]) - 1)
    return [line.rstrip() for line in text_table(rows, align=align)]


def dumps(payload: dict[str, Any]) -> str:
    """Deterministic JSON text (sorted keys, two-space indent, trailing newline)."""
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"
