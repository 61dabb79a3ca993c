"""The finished frames behind the report's charts and tables (pure polars, no plotting).

Every function takes a loaded :class:`~tracekit.qualify.results.Results` (or one of its parts) and
returns a small ``polars.DataFrame``: large series are reduced here (ECDFs to a fixed number of
quantile points, KV usage to at most ``max_points`` time buckets, preemption marks to at most
``max_marks`` per run) so that the HTML stays small. Floats are rounded for the same reason.
They live with the verdicts, not in ``tracekit.report``, because they read the traces and
aggregate: the report only lays out what they return. The legacy-versus-typed frames are in
:mod:`tracekit.qualify.diff_frames`.
"""

from __future__ import annotations

import polars as pl

from tracekit.analysis.cells import open_runs
from tracekit.qualify.results import BASELINE, Results, load_order

__all__ = [
    "agreement_frame",
    "cache_hit_frame",
    "cache_split_frame",
    "counter_frame",
    "kv_usage_frame",
    "latency_ecdf_frame",
    "most_preempted_frame",
    "preemption_histogram_frame",
    "recomputed_frame",
    "recomputed_summary_frame",
    "replay_summary_frame",
    "run_table",
]

_COUNTERS = {
    "calls": "calls",
    "selections": "selections",
    "liveness_abstentions": "abstentions: liveness",
    "cascade_abstentions": "abstentions: cascade",
    "other_abstentions": "abstentions: other",
    "gate_fallbacks": "gate fallbacks",
    "invalid_selections": "invalid selections",
    "failures": "failures",
}


def run_table(results: Results, table: str, runs: pl.DataFrame | None = None) -> pl.LazyFrame:
    """One trace table of the runs in ``runs`` (default: every cell), with repeat and strategy.

    Parameters
    ----------
    results
        A loaded results folder.
    table
        ``requests``, ``decisions``, ``steps`` or ``candidates``.
    runs
        Rows of ``cells`` to read (their ``bundle``, ``repeat`` and ``strategy``).

    Returns
    -------
    polars.LazyFrame
        The table of every run, plus ``repeat`` and ``strategy`` columns.
    """
    runs = results.cells if runs is None else runs
    # One multi-file scan of every run's table (a scan per bundle, concatenated, starts a
    # reader per file), then each row gets its run's repeat and strategy by the run id of its
    # bundle's manifest (one bundle per row of ``runs``, in order).
    dataset = open_runs(results.bundle("."), [results.bundle(b) for b in runs["bundle"]])
    keys = runs.select("repeat", "strategy").with_columns(
        pl.Series("run_id", [b.run_id for b in dataset.bundles], dtype=pl.String)
    )
    return dataset.scan(table).join(keys.lazy(), on="run_id", how="left", maintain_order="left")


def latency_ecdf_frame(results: Results, points: int = 200) -> pl.DataFrame:
    """ECDFs of TTFT and end-to-end latency per strategy, pooled over repeats.

    Parameters
    ----------
    results
        A loaded results folder.
    points
        Resolution: the ECDF is reduced to at most ``points + 1`` steps per series.

    Returns
    -------
    polars.DataFrame
        ``strategy, metric (TTFT | end-to-end), latency_s, share`` (share of finished requests
        with a latency at most ``latency_s``).
    """
    finished = run_table(results, "requests").filter(pl.col("status") == "finished")
    long = pl.concat(
        [
            finished.select(
                "strategy",
                pl.lit(name).alias("metric"),
                (pl.col(end) - pl.col("arrival_s")).alias("latency_s"),
            )
            for name, end in (("TTFT", "first_token_s"), ("end-to-end", "finish_s"))
        ]
    )
    group = ["strategy", "metric"]
    return (
        long.drop_nulls("latency_s")
        .sort([*group, "latency_s"])
        .with_columns(
            ((pl.int_range(pl.len()) + 1) / pl.len()).over(group).alias("share"),
        )
        .with_columns((pl.col("share") * points).floor().alias("bucket"))
        .group_by([*group, "bucket"])
        .agg(pl.col("latency_s").max(), pl.col("share").max())
        .select([*group, pl.col("latency_s").round(4), pl.col("share").round(4)])
        .sort([*group, "share"])
        .collect()
    )


def kv_usage_frame(
    results: Results,
    strategies: list[str],
    *,
    max_points: int = 2000,
    max_marks: int = 400,
) -> pl.DataFrame:
    """KV-cache usage over time and the preemption decisions of the reference runs.

    Parameters
    ----------
    results
        A loaded results folder.
    strategies
        The runs to show (typically the baseline and the candidate), in the reference repeat
        (:attr:`Results.reference <tracekit.qualify.results.Results.reference>`).
    max_points
        Time buckets over all series (each series gets ``max_points / len(strategies)``).
    max_marks
        Preemption marks per series at most (every k-th decision beyond that).

    Returns
    -------
    polars.DataFrame
        ``strategy, kind, time_s, usage, usage_min, usage_max, victim, outcome, reason``:
        ``kind = "usage"`` rows hold the mean, min and max usage of a time bucket,
        ``kind = "preemption"`` rows one decision (its applied victim, outcome and reason).
    """
    runs = results.reference_runs(strategies)
    if runs.height == 0:
        return pl.DataFrame()
    buckets = max(1, max_points // max(1, runs.height))
    steps = run_table(results, "steps", runs).with_columns(
        (pl.col("kv_blocks_used") / pl.col("kv_blocks_total")).alias("usage")
    )
    span = (pl.col("time_s").max() - pl.col("time_s").min()).over("strategy")
    usage = (
        steps.with_columns(
            ((pl.col("time_s") - pl.col("time_s").min().over("strategy")) / span * buckets)
            .floor()
            .fill_nan(0)
            .clip(0, buckets - 1)
            .alias("bucket")
        )
        .group_by("strategy", "bucket")
        .agg(
            pl.col("time_s").min(),
            pl.col("usage").mean(),
            pl.col("usage").min().alias("usage_min"),
            pl.col("usage").max().alias("usage_max"),
        )
        .select(
            "strategy",
            pl.lit("usage").alias("kind"),
            pl.col("time_s").round(3),
            *[pl.col(c).round(4) for c in ("usage", "usage_min", "usage_max")],
        )
    )
    decisions = run_table(results, "decisions", runs)
    every = (pl.len().over("strategy") // max_marks + 1).cast(pl.Int64)
    marks = decisions.filter(pl.int_range(pl.len()).over("strategy") % every == 0).select(
        "strategy",
        pl.lit("preemption").alias("kind"),
        pl.col("time_s").round(3),
        pl.col("kv_usage").round(4).alias("usage"),
        pl.col("applied_victim_id").alias("victim"),
        "outcome",
        pl.col("decision_reason").fill_null("-").alias("reason"),
    )
    return (
        pl.concat([usage, marks], how="diagonal_relaxed")
        .sort("strategy", "kind", "time_s")
        .collect()
    )


def preemption_histogram_frame(results: Results) -> pl.DataFrame:
    """How many requests were preempted 0, 1, 2, ... times, per strategy (all repeats).

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    polars.DataFrame
        ``strategy, preemptions, requests, share`` (share of the strategy's requests).
    """
    return (
        run_table(results, "requests")
        .group_by("strategy", pl.col("num_preemptions").alias("preemptions"))
        .agg(pl.len().alias("requests"))
        .with_columns(
            (pl.col("requests") / pl.col("requests").sum().over("strategy")).round(4).alias("share")
        )
        .sort("strategy", "preemptions")
        .collect()
    )


def most_preempted_frame(results: Results, limit: int = 10) -> pl.DataFrame:
    """The requests preempted most often (any strategy or repeat), most first.

    Parameters
    ----------
    results
        A loaded results folder.
    limit
        Rows to keep.

    Returns
    -------
    polars.DataFrame
        ``strategy, repeat, request_id, num_preemptions, recomputed_tokens, e2e_s`` of requests
        preempted at least once.
    """
    runs = results.cells
    if "max_preemptions_per_request" in runs.columns and runs.height > limit:
        # Only runs whose most-preempted request reaches the limit-th largest of the runs'
        # maxima can hold one of the top requests: every other request is below that value.
        floor = runs["max_preemptions_per_request"].fill_null(0).sort(descending=True)[limit - 1]
        runs = runs.filter(pl.col("max_preemptions_per_request").fill_null(0) >= max(floor, 1))
    if runs.height == 0:
        runs = results.cells.head(1)
    return (
        run_table(results, "requests", runs)
        .filter(pl.col("num_preemptions") > 0)
        .select(
            "strategy",
            "repeat",
            "request_id",
            "num_preemptions",
            "recomputed_tokens",
            (pl.col("finish_s") - pl.col("arrival_s")).alias("e2e_s"),
        )
        # A sweep folder holds several cells with the same (strategy, repeat, request_id): a
        # stable sort keeps such ties in the cells' order, so the page is the same every time.
        .sort(
            ["num_preemptions", "recomputed_tokens", "strategy", "repeat", "request_id"],
            descending=[True, True, False, False, False],
            maintain_order=True,
        )
        .head(limit)
        .collect()
    )


def recomputed_frame(results: Results) -> pl.DataFrame:
    """Recomputed tokens and preemptions per load, strategy and repeat, from ``cells``.

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    polars.DataFrame
        ``load, load_order, strategy, repeat, recomputed_tokens, truly_recomputed_tokens,
        recompute_tax, preemptions, requests_preempted`` (one row per run; ``load`` is the cell
        without a load plan; ``load_order`` ranks loads lightest first; the last two token
        columns are null in folders that do not have them).
    """
    cells = results.cells
    order = load_order(cells)
    load = pl.col("load") if "load" in cells.columns else pl.col("cell")
    optional = [
        pl.col(c) if c in cells.columns else pl.lit(None, dtype=pl.Float64).alias(c)
        for c in ("truly_recomputed_tokens", "recompute_tax")
    ]
    return (
        cells.select(
            load.alias("load"),
            pl.col("cell").replace_strict(order, default=len(order)).alias("load_order"),
            "strategy",
            "repeat",
            "recomputed_tokens",
            *optional,
            "preemptions",
            "requests_preempted",
        )
        .with_columns(pl.col("load_order").cast(pl.Int64))
        .sort("load_order", "strategy", "repeat")
    )


def recomputed_summary_frame(recomputed: pl.DataFrame, strategies: list[str]) -> pl.DataFrame:
    """Means per run of recomputed tokens and preemptions, per load and strategy.

    Parameters
    ----------
    recomputed
        :func:`recomputed_frame`.
    strategies
        Row order within a load; strategies not listed come last.

    Returns
    -------
    polars.DataFrame
        ``load, strategy, runs, recomputed_tokens, truly_recomputed_tokens, recompute_tax,
        preemptions, requests_preempted``: means over the load's repeats (``runs`` of them),
        lightest load first.
    """
    means = (
        "recomputed_tokens", "truly_recomputed_tokens", "recompute_tax", "preemptions",
        "requests_preempted",
    )  # fmt: skip
    return (
        recomputed.group_by("load", "strategy")
        .agg(
            pl.col("load_order").first(),
            pl.len().alias("runs"),
            *[pl.col(c).mean() for c in means],
        )
        .with_columns(
            pl.col("strategy")
            .replace_strict(strategies, range(len(strategies)), default=len(strategies))
            .alias("o")
        )
        .sort("load_order", "o")
        .select("load", "strategy", "runs", *means)
    )


# --- prefix cache (trace v2) ------------------------------------------------------------------


def cache_hit_frame(
    results: Results, strategies: list[str], *, max_points: int = 400
) -> pl.DataFrame | None:
    """Prefix-cache hit rate over time of the reference runs, in time buckets.

    The hit rate of a bucket is ``cache_hit_tokens / (cache_hit_tokens +
    scheduled_prefill_tokens)``: the share of the tokens the admitted requests needed that the
    cache served (vLLM's hits / queries, summed over the bucket).

    Parameters
    ----------
    results
        A loaded results folder.
    strategies
        The runs to show, in the reference repeat (as for :func:`kv_usage_frame`).
    max_points
        Time buckets over all series.

    Returns
    -------
    polars.DataFrame or None
        ``strategy, time_s, cache_hit_tokens, prefill_tokens, hit_rate``; None when no run hit
        the cache (prefix caching off) or the traces do not record it (version 1).
    """
    runs = results.reference_runs(strategies)
    if runs.height == 0:
        return None
    steps = run_table(results, "steps", runs).select(
        "strategy", "time_s", "cache_hit_tokens", "scheduled_prefill_tokens"
    )
    if not (steps.select(pl.col("cache_hit_tokens").sum()).collect().item() or 0):
        return None
    buckets = max(1, max_points // max(1, runs.height))
    span = (pl.col("time_s").max() - pl.col("time_s").min()).over("strategy")
    return (
        steps.with_columns(
            ((pl.col("time_s") - pl.col("time_s").min().over("strategy")) / span * buckets)
            .floor()
            .fill_nan(0)
            .clip(0, buckets - 1)
            .alias("bucket")
        )
        .group_by("strategy", "bucket")
        .agg(
            pl.col("time_s").min().round(3),
            pl.col("cache_hit_tokens").sum(),
            pl.col("scheduled_prefill_tokens").sum().alias("prefill_tokens"),
        )
        .with_columns(
            pl.when(pl.col("cache_hit_tokens") + pl.col("prefill_tokens") > 0)
            .then(
                pl.col("cache_hit_tokens") / (pl.col("cache_hit_tokens") + pl.col("prefill_tokens"))
            )
            .round(4)
            .alias("hit_rate")
        )
        .drop("bucket")
        .sort("strategy", "time_s")
        .collect()
    )


def cache_split_frame(results: Results, strategies: list[str]) -> pl.DataFrame | None:
    """Recomputed tokens split into prefix-cache hits and truly recomputed, per strategy.

    Of a request's ``recomputed_tokens``, ``min(resume_cached_tokens, recomputed_tokens)`` came
    back from the cache on resume (free); the rest was truly recomputed (docs/trace-format.md,
    "Prefix caching").

    Returns
    -------
    polars.DataFrame or None
        ``strategy, recomputed_tokens, from_cache_tokens, truly_recomputed_tokens,
        cache_hit_tokens`` (means per run over the repeats), in ``strategies`` order; None when
        no run hit the cache or the traces do not record it.
    """
    requests = run_table(results, "requests").select(
        "strategy",
        "repeat",
        "recomputed_tokens",
        pl.min_horizontal("resume_cached_tokens", "recomputed_tokens").alias("from_cache"),
        # A request never scheduled has no first-schedule hit (null there): it counts 0.
        (pl.col("num_cached_tokens").fill_null(0) + pl.col("resume_cached_tokens")).alias("hits"),
    )
    per_run = (
        requests.group_by("strategy", "repeat")
        .agg(
            pl.col("recomputed_tokens").sum(),
            pl.col("from_cache").sum().alias("from_cache_tokens"),
            pl.col("hits").sum().alias("cache_hit_tokens"),
            pl.col("hits").is_null().any().alias("unknown"),
        )
        .collect()
    )
    if per_run.height == 0 or per_run["unknown"].any() or not per_run["cache_hit_tokens"].sum():
        return None
    return (
        per_run.with_columns(
            (pl.col("recomputed_tokens") - pl.col("from_cache_tokens")).alias(
                "truly_recomputed_tokens"
            )
        )
        .group_by("strategy")
        .agg(
            pl.col(c).mean()
            for c in (
                "recomputed_tokens",
                "from_cache_tokens",
                "truly_recomputed_tokens",
                "cache_hit_tokens",
            )
        )
        .with_columns(
            pl.col("strategy")
            .replace_strict(strategies, range(len(strategies)), default=len(strategies))
            .alias("o")
        )
        .sort("o")
        .drop("o")
    )


def counter_frame(results: Results) -> pl.DataFrame:
    """Policy counters per strategy, summed over repeats, in long form.

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    polars.DataFrame
        ``strategy, counter, value, order``; abstentions are split by reason (liveness,
        cascade, other). The baseline (no policy) is left out.
    """
    cells = results.cells.filter(pl.col("strategy") != BASELINE).with_columns(
        (
            pl.col("abstentions") - pl.col("liveness_abstentions") - pl.col("cascade_abstentions")
        ).alias("other_abstentions")
    )
    return (
        cells.group_by("strategy")
        .agg(pl.col(c).sum() for c in _COUNTERS)
        .unpivot(index="strategy", variable_name="counter", value_name="value")
        .with_columns(
            pl.col("counter")
            .replace_strict(list(_COUNTERS), list(range(len(_COUNTERS))))
            .alias("order"),
            pl.col("counter").replace_strict(_COUNTERS),
            pl.col("value").cast(pl.Int64),
        )
        .sort("order", "strategy")
    )


def agreement_frame(results: Results) -> pl.DataFrame | None:
    """The pairwise victim agreement of the open-mode replay, made symmetric.

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    polars.DataFrame or None
        ``strategy_a, strategy_b, agree_rate`` for every ordered pair; ``None`` when
        ``replay/agreement.parquet`` is absent.
    """
    frame = results.replay_agreement
    if frame is None:
        return None
    base = frame.select("strategy_a", "strategy_b", pl.col("agree_rate").cast(pl.Float64))
    swapped = base.select(
        pl.col("strategy_b").alias("strategy_a"), pl.col("strategy_a").alias("strategy_b"),
        "agree_rate",
    )  # fmt: skip
    names = pl.concat([base["strategy_a"], base["strategy_b"]]).unique()
    diagonal = pl.DataFrame({"strategy_a": names, "strategy_b": names, "agree_rate": 1.0})
    return (
        pl.concat([base, swapped, diagonal])
        .unique(["strategy_a", "strategy_b"], keep="first", maintain_order=True)
        .with_columns(pl.col("agree_rate").round(4))
        .sort("strategy_a", "strategy_b")
    )


# The open-mode replay summary's columns the report shows, in order (others are left out).
REPLAY_COLUMNS = (
    "strategy",
    "agreement_rate",
    "calls",
    "selections",
    "abstentions_liveness",
    "abstentions_cascade",
    "abstentions_other",
    "gate_fallbacks",
    "liveness_fallbacks",
    "invalid_selections",
    "failures",
    "disabled_decisions",
    "picked_requester",
    "requester_rate",
    "tokens_ratio",
)


def replay_summary_frame(summary: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The open-mode replay summary as two flat tables: counts, and most-picked victims.

    Parameters
    ----------
    summary
        ``replay/summary.parquet``.

    Returns
    -------
    tuple of polars.DataFrame
        The :data:`REPLAY_COLUMNS` present (one row per strategy), and
        ``strategy, request_id, count`` from its ``top_victims`` lists (three per strategy;
        empty when the column is absent).
    """
    counts = summary.select([c for c in REPLAY_COLUMNS if c in summary.columns])
    victims = pl.DataFrame(
        schema={"strategy": pl.String, "request_id": pl.String, "count": pl.Int64}
    )
    if "top_victims" in summary.columns and isinstance(summary.schema["top_victims"], pl.List):
        victims = (
            summary.select("strategy", pl.col("top_victims").list.head(3))
            .explode("top_victims")
            .drop_nulls("top_victims")
            .unnest("top_victims")
            .select("strategy", "request_id", "count")
        )
    return counts, victims
