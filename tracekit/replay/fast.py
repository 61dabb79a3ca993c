"""The fast path: the production strategies evaluated chunk by chunk without calling the policy.

Every row of the strategy table (``tracekit.strategies.STRATEGY_TABLE``) has a fast form here.
The built-in rule and the stateless rows (``pe``, ``pe-sjf``, ``largest-first``,
``sglang-default``, ``slack-aware``, ``lcf``, ``mcf``) are their declared orders compiled to
polars expressions over the chunk (:func:`tracekit.replay.rules.order_picks`). The two stateful rows
(:data:`ORDERED_PASSES`) get one ordered pass in Python over per-decision values computed by
polars, the only loops over decisions in the fast path:

``bidkv`` (V4, ``utility_liveness_mode="abstain"``)
    The policy's own decision function (``decide``, through :mod:`tracekit.strategies`) on
    every decision in order, with a fresh policy's state per run, so the gates, the cooldown,
    the liveness offsets (and their bound) and the cascade rule are the policy's code. Only its
    scan is replaced: the utility winner and the requester's tokens are computed column-wise
    (:meth:`~tracekit.replay.rules.ChunkRules.utility`, built on the policy's ``utility``).
``static-random``
    The policy calls ``rng.choice(candidates)`` once per call on its own
    ``random.Random(utility_seed)``. ``choice`` reads only ``len()`` of its argument, so the
    same generator gives the same index for ``range(n)``; the draw is inlined when CPython's
    sampler is the one in use (checked at import).

Each strategy is then mapped to the controller's outcome: production policies never raise and
always return a candidate id or ``None`` on a valid trace, so the outcome is ``selected``, or
``abstained`` with the host's built-in victim applied. What is not covered here (user policies,
``utility_liveness_mode="barrier"``) goes through the reference path in
:mod:`tracekit.replay.plain`.
"""

from __future__ import annotations

import random
from itertools import repeat

import polars as pl

from tracekit.replay.contexts import Chunk
from tracekit.replay.rules import ChunkRules, UtilityTop
from tracekit.replay.table import OUTCOME, RAW_TYPE, REASON
from tracekit.strategies import (
    BUILTIN_ORDER,
    STRATEGY_TABLE,
    Step,
    StrategySpec,
    decide,
    strategy_row,
)

__all__ = ["FAST_RULES", "NO_FAST_FORM", "ORDERED_PASSES", "FastStrategy", "fast_rule"]

#: The strategy table's rows whose fast form is an ordered pass over the decisions, because their
#: victim functions carry state (the bidkv decision state, the static-random generator); every
#: other row's fast form is its order.
ORDERED_PASSES: tuple[str, ...] = ("bidkv", "static-random")
#: Rows declared to have no fast form: the reference path replays them (none today).
NO_FAST_FORM: tuple[str, ...] = ()
#: The rules the fast path reproduces: the built-in rule and every row with a fast form.
FAST_RULES: tuple[str, ...] = (
    "builtin",
    *(row.name for row in STRATEGY_TABLE if row.order is not None or row.name in ORDERED_PASSES),
)


# Whether random.Random.choice is CPython's getrandbits rejection sampler, which the fast path
# may inline (checked once against the real method; any other implementation calls choice()).
def _randbelow_is_standard() -> bool:
    probe, reference = random.Random(12345), random.Random(12345)
    for n in (1, 2, 3, 5, 7, 8, 100, 1000, 65_537):
        k = n.bit_length()
        r = probe.getrandbits(k)
        while r >= n:
            r = probe.getrandbits(k)
        if reference.choice(range(n)) != r:
            return False
    return reference.random() == probe.random()


_INLINE_RANDBELOW = _randbelow_is_standard()

# The reason the policy's last_decision_reason() gives for each step of the bidkv rule.
_REASONS = {
    int(Step.UTILITY): "strategy",
    int(Step.GATE): "gate_fallback",
    int(Step.LIVENESS): "liveness_abstain",
    int(Step.CASCADE): "cascade_abstain",
}


def fast_rule(spec: StrategySpec) -> str | None:
    """The fast-path rule that reproduces ``spec``, or ``None`` if only the reference path can.

    Parameters
    ----------
    spec
        A resolved strategy.

    Returns
    -------
    str or None
        ``builtin`` for the built-in rule; the production policy's strategy in force (``pe``
        when its switch is off or its kill switch on); ``None`` for user policies and for
        ``bidkv`` in barrier mode.
    """
    rule = spec.rule
    config = spec.policy_config()
    if rule not in FAST_RULES:
        return None
    if rule == "bidkv" and config is not None and config.utility_liveness_mode == "barrier":
        return None
    return rule


class FastStrategy:
    """One strategy on the fast path, with the state a fresh policy would carry through a run.

    Parameters
    ----------
    spec
        A strategy for which :func:`fast_rule` is not ``None``.
    """

    def __init__(self, spec: StrategySpec) -> None:
        rule = fast_rule(spec)
        if rule is None:
            raise ValueError(f"strategy {spec.name} has no fast path")
        self.spec = spec
        self.rule = rule
        self.config = spec.policy_config()
        self.decision_rules = spec.decision_rules() if rule == "bidkv" else None
        row = strategy_row(rule)
        self.order = None if row is None else row.order
        # What last_decision_reason() says of a pick that is not bidkv's: a switched-off policy
        # behaves as pe and reports "disabled".
        self.reason = (
            "disabled"
            if self.config is not None and not self.config.utility_enabled
            else "strategy"
        )
        self.start_run()

    def start_run(self) -> None:
        """Reset to the state of a freshly constructed policy (one per run)."""
        config = self.config
        self._state = self.spec.new_decision_state()
        self._rng = random.Random(config.utility_seed if config is not None else 0)

    def evaluate(self, rules: ChunkRules) -> pl.DataFrame:
        """The controller's result for every decision of the chunk, in decision order.

        Returns
        -------
        pl.DataFrame
            :data:`~tracekit.replay.plain.RESULT_COLUMNS`.
        """
        rule = self.rule
        if rule == "builtin":
            return _builtin_result(rules.builtin_rows)
        if rule == "bidkv":
            return self._bidkv(rules)
        if rule == "static-random":
            rows = self._static_random(rules.chunk)
        else:
            # Every other rule is a production strategy's, with an order.
            assert self.config is not None and self.order is not None
            rows = rules.rows(self.order, self.config.utility_slo_s)
        return _selected_result(rules.canonical(rows), self.reason)

    def _static_random(self, chunk: Chunk) -> pl.Series:
        # The ordered pass of static-random: one draw per decision, as the policy makes them.
        counts = chunk.decisions["num_candidates"].to_list()
        rng = self._rng
        if _INLINE_RANDBELOW:
            # choice(seq) is seq[_randbelow(len(seq))], and _randbelow draws k = n.bit_length()
            # bits until the value is below n; inlined, it costs a third of choice().
            getrandbits = rng.getrandbits
            picks = []
            append = picks.append
            for n in counts:
                k = n.bit_length()
                r = getrandbits(k)
                while r >= n:
                    r = getrandbits(k)
                append(r)
        else:
            choice = rng.choice
            picks = [choice(range(n)) for n in counts]
        return chunk.decisions["offset"] + pl.Series(picks, dtype=pl.Int64)

    def _bidkv(self, rules: ChunkRules) -> pl.DataFrame:
        decision_rules = self.decision_rules
        assert decision_rules is not None
        top = rules.utility(decision_rules)
        dec = rules.chunk.decisions
        top_row = rules.canonical(top.top_row)
        # decide() reads the requester's id only when the requester is a candidate, and only
        # compares it with the winner's: the winner's id where they are the same candidate
        # (rows stand for ids) and None elsewhere say the same, without a string per decision.
        requester = (
            pl.DataFrame(
                {
                    "same": dec["requester_row"] == top_row,
                    "id": rules.chunk.candidates["request_id"].gather(top_row),
                }
            )
            .select(pl.when("same").then("id"))
            .to_series()
        )
        codes = self._bidkv_pass(
            dec["num_candidates"].to_list(),
            dec["kv_usage"].to_list(),
            dec["time_s"].to_list(),
            requester.to_list(),
            top,
        )
        frame = pl.DataFrame(
            {
                "code": pl.Series(codes, dtype=pl.Int8),
                "top": top_row,
                "default": rules.canonical(rules.rows(BUILTIN_ORDER)),
                "builtin": rules.builtin_rows,
            }
        )
        code = pl.col("code")
        picked = code <= int(Step.GATE)
        return frame.select(
            pl.when(code == int(Step.UTILITY))
            .then("top")
            .when(picked)
            .then("default")
            .otherwise("builtin")
            .alias("applied_row"),
            pl.when(picked)
            .then(pl.lit("selected", OUTCOME))
            .otherwise(pl.lit("abstained", OUTCOME))
            .alias("outcome"),
            pl.when(picked)
            .then(pl.lit("str", RAW_TYPE))
            .otherwise(pl.lit("none", RAW_TYPE))
            .alias("raw_result_type"),
            code.replace_strict(_REASONS, return_dtype=REASON).alias("decision_reason"),
            pl.lit(None, pl.String).alias("raw_other"),
        )

    def _bidkv_pass(
        self,
        num_candidates: list[int],
        kv_usage: list[float],
        now: list[float],
        requester: list[str | None],
        top: UtilityTop,
    ) -> list[Step]:
        """The policy's decision function in decision order; one :class:`Step` per decision.

        ``decide`` runs on every decision, given the winner computed column-wise instead of
        scanning, and its result is committed to this run's state, as the policy does.
        """
        rules = self.decision_rules
        assert rules is not None
        state = self._state
        # The scan's tuples, with None for the fields the rule does not read.
        blank = repeat(None)
        found = zip(
            blank,
            blank,
            top.top_id,
            blank,
            top.top_tokens,
            blank,
            top.top_preemptions,
            top.requester_found,
            top.requester_tokens,
            strict=False,  # the blanks are endless; the columns have one entry per decision
        )
        commit = state.commit
        offsets = state.offsets  # the table object never changes; only its entries do
        # One decide() and one commit() per decision, in order; last_pick is read after the
        # previous commit.
        return [
            commit(rules, decide(rules, None, n, kv, t, rq, state.last_pick, offsets, winner), t)
            for n, kv, t, rq, winner in zip(
                num_candidates, kv_usage, now, requester, found, strict=True
            )
        ]


def _selected_result(rows: pl.Series, reason: str) -> pl.DataFrame:
    # What the controller reports for a policy that returned a candidate id.
    return pl.DataFrame({"applied_row": rows.rename("applied_row")}).with_columns(
        pl.lit("selected", OUTCOME).alias("outcome"),
        pl.lit("str", RAW_TYPE).alias("raw_result_type"),
        pl.lit(reason, REASON).alias("decision_reason"),
        pl.lit(None, pl.String).alias("raw_other"),
    )


def _builtin_result(rows: pl.Series) -> pl.DataFrame:
    # No policy configured: the host applies its rule and calls nothing.
    return pl.DataFrame({"applied_row": rows.rename("applied_row")}).with_columns(
        pl.lit("builtin", OUTCOME).alias("outcome"),
        pl.lit("not-called", RAW_TYPE).alias("raw_result_type"),
        pl.lit(None, REASON).alias("decision_reason"),
        pl.lit(None, pl.String).alias("raw_other"),
    )
