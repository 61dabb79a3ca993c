"""The fast path: the production strategies evaluated chunk by chunk without calling the policy.

Stateless rules (``builtin``, ``pe``, ``pe-sjf``, ``largest-first``, ``sglang-default``,
``slack-aware``) are polars expressions over the chunk (:mod:`tracekit.replay.rules`). The two
stateful strategies get one ordered pass in Python over per-decision values computed by polars,
the only loops over decisions in the fast path:

``bidkv`` (V4, ``utility_liveness_mode="abstain"``)
    The gates, the cooldown timer, the liveness offsets and the cascade rule applied in decision
    order exactly as ``BidkvPreemptionPolicy._pick_bidkv`` does, on the utility winner, the
    requester's tokens and the default victim precomputed per decision. The offsets live in the
    policy's own bounded ``LruTable`` with the policy's limit, touched in the same order, so
    even forgetting past the bound matches.
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

import math
import random

import polars as pl

from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from bidkv.adapters.vllm_hust.metrics import LruTable
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy
from tracekit.replay.contexts import Chunk
from tracekit.replay.rules import ChunkRules
from tracekit.replay.table import OUTCOME, RAW_TYPE, REASON
from tracekit.strategies import StrategySpec

__all__ = ["FAST_RULES", "FastStrategy", "fast_rule"]

#: The rules the fast path reproduces.
FAST_RULES: tuple[str, ...] = (
    "builtin", "bidkv", "pe", "pe-sjf", "static-random", "largest-first", "sglang-default",
    "slack-aware",
)  # fmt: skip


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

# Codes of the bidkv pass, in the order the policy tests them.
_UTILITY, _GATE, _LIVENESS, _CASCADE = 0, 1, 2, 3
# ... and the reason the policy's last_decision_reason() gives for each.
_REASONS = {
    _UTILITY: "strategy",
    _GATE: "gate_fallback",
    _LIVENESS: "liveness_abstain",
    _CASCADE: "cascade_abstain",
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
    if spec.kind == "builtin":
        return "builtin"
    if spec.kind != "production":
        return None
    config = BidkvSelectorConfig(**spec.settings)
    rule = config.resolved_strategy if config.utility_enabled else "pe"
    if rule == "bidkv" and config.utility_liveness_mode == "barrier":
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
        self.config = BidkvSelectorConfig(**spec.settings) if spec.kind == "production" else None
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
        self._last_pick = -math.inf
        self._offsets = LruTable(BidkvPreemptionPolicy.state_table_limit)
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
        if rule in ("pe", "pe-sjf"):
            rows = rules.default_rows
        elif rule == "largest-first":
            rows = rules.largest_first_rows
        elif rule == "sglang-default":
            rows = rules.sglang_default_rows
        elif rule == "slack-aware":
            assert self.config is not None
            rows = rules.slack_aware_rows(self.config.utility_slo_s)
        else:
            rows = self._static_random(rules.chunk)
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
        config = self.config
        assert config is not None
        top = rules.utility(
            config.utility_completion_weight,
            config.utility_preempt_weight,
            config.utility_epsilon,
            config.utility_default_max_tokens,
        )
        dec = rules.chunk.decisions
        top_row = rules.canonical(top.top_row)
        codes = self._bidkv_pass(
            dec["num_candidates"].to_list(),
            dec["kv_usage"].to_list(),
            dec["time_s"].to_list(),
            top.top_id,
            top_row.to_list(),
            top.top_tokens,
            top.top_preemptions,
            dec["requester_row"].to_list(),
            top.requester_tokens,
        )
        frame = pl.DataFrame(
            {
                "code": pl.Series(codes, dtype=pl.Int8),
                "top": top_row,
                "default": rules.canonical(rules.default_rows),
                "builtin": rules.builtin_rows,
            }
        )
        code = pl.col("code")
        picked = code <= _GATE
        return frame.select(
            pl.when(code == _UTILITY)
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
        top_id: list[str],
        top_row: list[int],
        top_tokens: list[int],
        top_preemptions: list[int],
        requester_row: list[int | None],
        requester_tokens: list[int | None],
    ) -> list[int]:
        """``_pick_bidkv`` in decision order, on precomputed values; one code per decision.

        Mirrors the policy line by line: the gates (too few candidates, KV usage below the
        gate, cooldown since the last utility pick), then liveness on the utility winner
        (abstain once its preemptions since its offset reach the bound, and move the offset),
        then the cascade rule (abstain when the requester is another candidate freeing at least
        ``1/ratio`` of the winner's tokens), else a utility pick that restarts the cooldown.
        Rows are the first rows of their ids, so comparing rows compares ids.
        """
        config = self.config
        assert config is not None
        min_running = config.utility_min_running
        gate = config.utility_kv_gate
        cooldown = config.utility_cooldown_s
        threshold = config.utility_liveness_preemptions
        ratio = config.utility_cascade_gain_ratio
        gated, cooling, live = gate > 0, cooldown > 0, threshold > 0
        offsets = self._offsets
        # LruTable.touch_get inlined (a dict read, then marking the id as recently used).
        get, move_to_end, put = offsets.get, offsets.move_to_end, offsets.put
        last = self._last_pick
        no_pick = -math.inf
        codes: list[int] = []
        append = codes.append
        for n, kv, t, tid, trow, tokens, preemptions, rq_row, rq_tokens in zip(
            num_candidates,
            kv_usage,
            now,
            top_id,
            top_row,
            top_tokens,
            top_preemptions,
            requester_row,
            requester_tokens,
            strict=True,
        ):
            if (
                n < min_running
                or (gated and kv < gate)
                or (cooling and last > no_pick and t - last < cooldown)
            ):
                append(_GATE)
                continue
            if live:
                seen = get(tid)
                if seen is None:
                    seen = 0
                else:
                    move_to_end(tid)
                if preemptions - seen >= threshold:
                    put(tid, preemptions)
                    append(_LIVENESS)
                    continue
            if rq_row is not None and rq_row != trow and rq_tokens * ratio >= tokens:
                append(_CASCADE)
                continue
            last = t
            append(_UTILITY)
        self._last_pick = last
        return codes


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
