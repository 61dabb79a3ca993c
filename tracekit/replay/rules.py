"""The production strategies' victim rules as polars expressions over a chunk's candidates.

Every rule gives, per decision, the row of the chosen candidate in the chunk's candidates table.

Each rule is the columnar twin of one victim function of the strategy table
(``bidkv.adapters.vllm_hust.strategies``, through :mod:`tracekit.strategies`) or of vLLM's
built-in rule (``builtin_victim``), exact, ties included; :data:`ROW_RULES` maps the table's
stateless rows to their twins by name, and a test holds each twin equal to its function. They
match exactly: :func:`select_rows` picks, per decision, the candidate that is best on a
list of keys compared lexicographically, exact ties going to the first (or last) in host order,
which is what the policy's ``max``/``<=`` loops do. The utility is the policy's own formula
(``utility``, through :mod:`tracekit.strategies`) evaluated on columns, after the policy's
coercions (:func:`utility_columns`), so every float is bit-identical (IEEE-754 doubles in both;
tests hold it equal to the policy's scan). The fast path relies on the trace's floats being finite
(``open_mode`` checks it per run): NaN orders differently in Python comparisons and in polars
sorts.

``ChunkRules`` caches each rule per chunk, since several strategies share one (``pe`` and
``pe-sjf`` the default victim, ``bidkv`` the default and the built-in victims).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property

import polars as pl

from tracekit.replay.contexts import Chunk
from tracekit.strategies import BidkvSelectorConfig, DecisionRules, utility

__all__ = ["ROW_RULES", "ChunkRules", "RowRule", "UtilityTop", "select_rows", "utility_columns"]

_DEC = "dec"
_ROW = "row"


def select_rows(
    frame: pl.DataFrame, keys: Sequence[tuple[pl.Expr, bool]], *, last: bool = False
) -> pl.DataFrame:
    """Per decision, the candidate row that is best on ``keys``.

    Parameters
    ----------
    frame
        Candidate rows with ``dec`` (decision) and ``row`` (row in the chunk's candidates), in
        host order within each decision.
    keys
        ``(expression, maximise)`` pairs compared lexicographically.
    last
        Exact ties on every key go to the last row in host order instead of the first.

    Returns
    -------
    pl.DataFrame
        ``dec, row``, one row per decision present in ``frame``, in decision order.
    """
    names = [f"k{i}" for i in range(len(keys))]
    df = frame.select(
        _DEC, _ROW, *(expr.alias(n) for (expr, _), n in zip(keys, names, strict=True))
    )
    if df.height == 0:
        return df.select(_DEC, _ROW)
    groups = df[_DEC].n_unique()
    # Keep the rows equal to the best value of each key in turn. Ties are rare: once a single
    # row per decision is left, the remaining keys cannot change the choice.
    for name, (_, maximise) in zip(names, keys, strict=True):
        column = pl.col(name)
        best = column.max() if maximise else column.min()
        df = df.filter(column == best.over(_DEC))
        if df.height == groups:
            return df.select(_DEC, _ROW)
    return df.unique(subset=_DEC, keep="last" if last else "first", maintain_order=True).select(
        _DEC, _ROW
    )


def utility_columns(
    rules: DecisionRules,
    tokens: pl.Expr,
    output_tokens: pl.Expr,
    max_tokens: pl.Expr,
    preemptions: pl.Expr,
) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """The policy's scan, column-wise: ``r``, ``P`` and ``U`` from the candidate columns.

    The coercions are the scan's (``r`` and ``P`` at least 0, a ``max_tokens`` not above 0
    replaced by ``default_max_tokens``, the completion clamped to [0, 1]); ``U`` is the policy's
    ``utility`` called on float64 columns, so its operations run in the policy's order.

    Returns
    -------
    tuple of pl.Expr
        ``(r, P, U)``.
    """
    f64 = pl.Float64
    r = tokens.clip(lower_bound=0)
    p = preemptions.clip(lower_bound=0)
    m = pl.when(max_tokens > 0).then(max_tokens).otherwise(pl.lit(rules.default_max_tokens))
    completion = (output_tokens.cast(f64) / m.cast(f64)).clip(0.0, 1.0)
    u = utility(
        r.cast(f64),
        completion,
        p.cast(f64),
        rules.completion_weight,
        rules.preempt_weight,
        rules.epsilon,
    )
    return r, p, u


class UtilityTop:
    """Per decision, what the ``bidkv`` strategy reads from its one-pass scan (``scan_top``).

    Attributes
    ----------
    top_row
        The utility winner's candidate row.
    top_id, top_tokens, top_preemptions
        The utility winner by ``(-U, arrival_time, request_id)``: its id, ``r`` and ``P``.
    requester_found, requester_tokens
        Whether the requester is a candidate, and ``r`` of its best-ranked record (``None``
        when it is not a candidate).
    """

    __slots__ = (
        "requester_found",
        "requester_tokens",
        "top_id",
        "top_preemptions",
        "top_row",
        "top_tokens",
    )

    def __init__(
        self,
        top_row: pl.Series,
        top_id: list[str],
        top_tokens: list[int],
        top_preemptions: list[int],
        requester_found: list[bool],
        requester_tokens: list[int | None],
    ) -> None:
        self.top_row = top_row
        self.top_id = top_id
        self.top_tokens = top_tokens
        self.top_preemptions = top_preemptions
        self.requester_found = requester_found
        self.requester_tokens = requester_tokens


class ChunkRules:
    """The victim rules evaluated on one chunk, each computed once.

    Parameters
    ----------
    chunk
        The decisions and their candidates.
    """

    def __init__(self, chunk: Chunk) -> None:
        self.chunk = chunk
        dec = chunk.decisions
        # Decision columns broadcast to their candidate rows (rows are grouped by decision).
        index = chunk.candidates[_DEC]
        self.frame = chunk.candidates.with_columns(
            dec["scheduling_policy"].eq("priority").gather(index).alias("is_priority"),
            dec["time_s"].gather(index).alias("now"),
            dec["requester_row"].gather(index).alias("requester_row"),
        )
        self.any_priority = bool((dec["scheduling_policy"] == "priority").any())
        self._utility: dict[tuple[float, float, float, int], UtilityTop] = {}
        self._slack: dict[float, pl.Series] = {}

    def canonical(self, rows: pl.Series) -> pl.Series:
        """``rows`` with each replaced by the first row of its decision with the same id."""
        return self.chunk.candidates["first_row"].gather(rows)

    def _one_per_decision(self, fallback: pl.Series, picked: pl.DataFrame) -> pl.Series:
        # ``fallback`` has a row for every decision; ``picked`` replaces it where present.
        if picked.height == 0:
            return fallback
        return fallback.scatter(picked[_DEC], picked[_ROW])

    @cached_property
    def default_rows(self) -> pl.Series:
        """The built-in rule of vLLM (``builtin_victim``), the policy's own default victim.

        PRIORITY: the first candidate with the largest ``(priority, arrival_time)``; otherwise
        the last candidate (the FCFS tail).
        """
        dec = self.chunk.decisions
        tail = (dec["offset"] + dec["num_candidates"] - 1).alias(_ROW)
        priority = self.frame.filter(pl.col("is_priority"))
        if priority.height == 0:
            return tail
        picked = select_rows(priority, [(pl.col("priority"), True), (pl.col("arrival_time"), True)])
        return self._one_per_decision(tail, picked)

    @cached_property
    def builtin_rows(self) -> pl.Series:
        """The host's built-in victim (docs/contracts.md#the-built-in-victim).

        The recorded ``builtin_victim_id`` when it names a candidate, else the policy's default
        rule (the host's PRIORITY and FCFS rules are the same as the policy's).
        """
        dec = self.chunk.decisions
        named = dec.select(
            pl.int_range(pl.len(), dtype=pl.Int64).alias(_DEC), pl.col("builtin_row").alias(_ROW)
        ).drop_nulls()
        return self._one_per_decision(self.canonical(self.default_rows), named)

    @cached_property
    def largest_first_rows(self) -> pl.Series:
        """``largest-first``: most ``num_computed_tokens``, first maximal in host order."""
        return select_rows(self.frame, [(pl.col("num_computed_tokens"), True)])[_ROW]

    @cached_property
    def sglang_default_rows(self) -> pl.Series:
        """``sglang-default``: min ``(-priority if PRIORITY, out, -prompt)``, last on ties."""
        keys = [(pl.col("num_output_tokens"), False), (pl.col("num_prompt_tokens"), True)]
        if self.any_priority:
            priority = pl.when(pl.col("is_priority")).then(pl.col("priority")).otherwise(0)
            keys.insert(0, (priority, True))
        return select_rows(self.frame, keys, last=True)[_ROW]

    def computed_rows(self, *, most: bool) -> pl.Series:
        """``lcf``, ``mcf`` (``computed_victim``): least (most) ``num_computed_tokens``.

        The requester's rows (every row with its id) are not eligible; exact ties go to the last
        in host order; a decision with no eligible row takes the last candidate (the FCFS tail).
        """
        key = "mcf_rows" if most else "lcf_rows"
        cached = self.__dict__.get(key)
        if cached is not None:
            return cached
        dec = self.chunk.decisions
        tail = (dec["offset"] + dec["num_candidates"] - 1).alias(_ROW)
        eligible = self.frame.filter(
            pl.col("requester_row").is_null() | (pl.col("first_row") != pl.col("requester_row"))
        )
        picked = select_rows(eligible, [(pl.col("num_computed_tokens"), most)], last=True)
        rows = self._one_per_decision(tail, picked)
        self.__dict__[key] = rows
        return rows

    def slack_aware_rows(self, slo_s: float) -> pl.Series:
        """``slack-aware``: most ``(arrival_time + slo_s) - now``, last on ties."""
        if slo_s not in self._slack:
            slack = (pl.col("arrival_time") + pl.lit(slo_s, pl.Float64)) - pl.col("now")
            self._slack[slo_s] = select_rows(self.frame, [(slack, True)], last=True)[_ROW]
        return self._slack[slo_s]

    def utility(self, rules: DecisionRules) -> UtilityTop:
        """``scan_top`` per decision: the utility winner and the requester's record.

        ``U`` from :func:`utility_columns`; ranking key ``(-U, arrival_time, request_id)``, host
        order on ties.
        """
        key = (
            rules.completion_weight,
            rules.preempt_weight,
            rules.epsilon,
            rules.default_max_tokens,
        )
        if key in self._utility:
            return self._utility[key]
        tokens, preemptions, u = utility_columns(
            rules,
            pl.col("num_computed_tokens"),
            pl.col("num_output_tokens"),
            pl.col("max_tokens"),
            pl.col("num_preemptions"),
        )
        scored = self.frame.select(
            _DEC,
            _ROW,
            "arrival_time",
            "request_id",
            "first_row",
            "requester_row",
            tokens.alias("r"),
            preemptions.alias("p"),
            u.alias("u"),
        )
        top = select_rows(
            scored,
            [(pl.col("u"), True), (pl.col("arrival_time"), False), (pl.col("request_id"), False)],
        )[_ROW]
        # The requester's records: every row with its id (its first row is requester_row).
        requester = select_rows(
            scored.filter(pl.col("first_row") == pl.col("requester_row")),
            [(pl.col("u"), True), (pl.col("arrival_time"), False)],
        )
        rq_tokens = pl.Series([None] * self.chunk.size, dtype=pl.Int64)
        if requester.height:
            rq_tokens = rq_tokens.scatter(requester[_DEC], scored["r"].gather(requester[_ROW]))
        result = UtilityTop(
            top,
            self.chunk.candidates["request_id"].gather(top).to_list(),
            scored["r"].gather(top).to_list(),
            scored["p"].gather(top).to_list(),
            rq_tokens.is_not_null().to_list(),
            rq_tokens.to_list(),
        )
        self._utility[key] = result
        return result


#: ``rule(chunk_rules, config) -> rows``: a stateless row's victim per decision of the chunk.
RowRule = Callable[[ChunkRules, BidkvSelectorConfig], pl.Series]

#: The columnar twins of the strategy table's stateless victim functions, by row name. The
#: stateful rows (``bidkv``, ``static-random``) are ordered passes of the fast path
#: (:data:`tracekit.replay.fast.ORDERED_PASSES`).
ROW_RULES: Mapping[str, RowRule] = {
    "pe": lambda rules, config: rules.default_rows,
    "pe-sjf": lambda rules, config: rules.default_rows,
    "largest-first": lambda rules, config: rules.largest_first_rows,
    "sglang-default": lambda rules, config: rules.sglang_default_rows,
    "slack-aware": lambda rules, config: rules.slack_aware_rows(config.utility_slo_s),
    "lcf": lambda rules, config: rules.computed_rows(most=False),
    "mcf": lambda rules, config: rules.computed_rows(most=True),
}
