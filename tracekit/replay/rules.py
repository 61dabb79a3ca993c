"""The production strategies' victim rules as polars expressions over a chunk's candidates.

Every rule gives, per decision, the row of the chosen candidate in the chunk's candidates table.

The stateless rows of the strategy table (``bidkv.adapters.vllm_hust.strategies``, through
:mod:`tracekit.strategies`) declare their rule as an :class:`~tracekit.strategies.VictimOrder`; this
module compiles any order to polars (:func:`order_picks`), so no rule is written here by name,
and a test holds each compiled order equal to its row's victim function, ties included. They
match exactly: :func:`select_rows` picks, per decision, the candidate that is best on a
list of keys compared lexicographically, exact ties going to the first (or last) in host order,
which is what the policy's ``max``/``<=`` loops do. The utility is the policy's own formula
(``utility``, through :mod:`tracekit.strategies`) evaluated on columns, after the policy's
coercions (:func:`utility_columns`), so every float is bit-identical (IEEE-754 doubles in both;
tests hold it equal to the policy's scan). The fast path relies on the trace's floats being finite
(``open_mode`` checks it per run): NaN orders differently in Python comparisons and in polars
sorts.

``ChunkRules`` caches each order's rows per chunk, since several strategies share one (``pe`` and
``pe-sjf`` the built-in order, ``bidkv`` the default and the built-in victims).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import polars as pl

from tracekit.replay.contexts import Chunk
from tracekit.strategies import BUILTIN_ORDER, DecisionRules, Term, VictimOrder, utility

__all__ = [
    "ChunkRules",
    "UtilityTop",
    "order_picks",
    "select_rows",
    "term_expr",
    "utility_columns",
]

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


def _reads(order: VictimOrder, name: str) -> bool:
    def reads(term: Term) -> bool:
        return term == name if isinstance(term, str) else reads(term[1]) or reads(term[2])

    return any(reads(key.term) for key in order.keys)


def term_expr(term: Term, slo_s: float) -> pl.Expr:
    """A key's term as a polars expression: a column, ``slo_s`` a literal, ``+``/``-`` of two."""
    if isinstance(term, str):
        return pl.lit(slo_s, pl.Float64) if term == "slo_s" else pl.col(term)
    op, left, right = term
    a, b = term_expr(left, slo_s), term_expr(right, slo_s)
    return a + b if op == "+" else a - b


def order_picks(frame: pl.DataFrame, order: VictimOrder, slo_s: float = 0.0) -> pl.DataFrame:
    """The columnar form of a strategy row's :class:`~tracekit.strategies.VictimOrder`.

    Parameters
    ----------
    frame
        Candidate rows in host order within each decision: ``dec``, ``row``, the columns the
        order's keys name, ``is_priority`` (the decision is under PRIORITY scheduling), and for
        ``skip_requester`` orders ``first_row`` and ``requester_row`` (the first row of the
        candidate's id and of the requester's; null when the requester is not a candidate).
    order
        The row's order.
    slo_s
        ``utility_slo_s``, for keys that name it.

    Returns
    -------
    pl.DataFrame
        ``dec, row`` for the decisions the keys decide; every other decision's victim is its
        last candidate (FCFS under ``fcfs_tail``, nothing eligible under ``skip_requester``).
    """
    if order.fcfs_tail:
        frame = frame.filter(pl.col("is_priority"))
    if order.skip_requester:
        frame = frame.filter(
            pl.col("requester_row").is_null() | (pl.col("first_row") != pl.col("requester_row"))
        )
    priority = order.fcfs_tail or bool(frame["is_priority"].any())
    keys = []
    for key in order.keys:
        expr = term_expr(key.term, slo_s)
        if key.priority_only and not order.fcfs_tail:
            if not priority:
                continue  # 0 for every candidate: it orders nothing
            expr = pl.when(pl.col("is_priority")).then(expr).otherwise(0)
        keys.append((expr, key.most))
    return select_rows(frame, keys, last=order.last)


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
        self._utility: dict[tuple[float, float, float, int], UtilityTop] = {}
        self._rows: dict[tuple[VictimOrder, float], pl.Series] = {}

    def canonical(self, rows: pl.Series) -> pl.Series:
        """``rows`` with each replaced by the first row of its decision with the same id."""
        return self.chunk.candidates["first_row"].gather(rows)

    def _one_per_decision(self, fallback: pl.Series, picked: pl.DataFrame) -> pl.Series:
        # ``fallback`` has a row for every decision; ``picked`` replaces it where present.
        if picked.height == 0:
            return fallback
        return fallback.scatter(picked[_DEC], picked[_ROW])

    def rows(self, order: VictimOrder, slo_s: float = 0.0) -> pl.Series:
        """The victim row of every decision under ``order`` (:func:`order_picks`), cached.

        ``slo_s`` is read only by orders whose keys name it (``slack-aware``).
        """
        key = (order, slo_s if _reads(order, "slo_s") else 0.0)
        rows = self._rows.get(key)
        if rows is None:
            dec = self.chunk.decisions
            tail = (dec["offset"] + dec["num_candidates"] - 1).alias(_ROW)
            rows = self._rows[key] = self._one_per_decision(
                tail, order_picks(self.frame, order, slo_s)
            )
        return rows

    @cached_property
    def builtin_rows(self) -> pl.Series:
        """The host's built-in victim (docs/contracts.md#the-built-in-victim).

        The recorded ``builtin_victim_id`` when it names a candidate, else vLLM's rule
        (:data:`BUILTIN_ORDER`, the policy's own default victim: the host's PRIORITY and FCFS
        rules are the same as the policy's).
        """
        dec = self.chunk.decisions
        named = dec.select(
            pl.int_range(pl.len(), dtype=pl.Int64).alias(_DEC), pl.col("builtin_row").alias(_ROW)
        ).drop_nulls()
        return self._one_per_decision(self.canonical(self.rows(BUILTIN_ORDER)), named)

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
