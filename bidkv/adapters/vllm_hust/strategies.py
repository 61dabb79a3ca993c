"""The strategy table: every production strategy is one row (docs/policy.md, "Strategies").

A row (:class:`Strategy`) holds the strategy's name, its aliases, its victim function, its
victim order (the same rule declared as data, :class:`VictimOrder`), whether the function reads the
requester, the log line the policy writes for it and how the policy counts its picks. Everything
that dispatches on a strategy reads this table: the policy
(:class:`~bidkv.adapters.vllm_hust.policy.BidkvPreemptionPolicy`), the names ``utility_strategy``
accepts (:mod:`~bidkv.adapters.vllm_hust.config`), and, through ``tracekit.strategies``, the
replay's fast path (which compiles each row's order to polars) and the diff's classifier.

A victim function is pure: it takes the candidates (non-empty, in host order) and the call's
:class:`StrategyInputs`, and returns ``(victim, log_values)``: one of the candidate objects and
the values of the row's log fields. ``bidkv`` has no victim function here: its rule is
:func:`bidkv.adapters.vllm_hust.decision.decide`, which the policy runs with its state.

The order is standard-library data (this package imports no polars): the keys the function
compares and its tie rule. The function stays hand-written because the policy calls it on every
preemption (a generic evaluation of the order costs several times as much per call); a test
holds the two equal on random decisions full of ties.

Adding a strategy means one function here, one row in :data:`STRATEGY_TABLE` (with its order),
and its tests (docs/policy.md, "Adding a strategy").
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bidkv.adapters.vllm_hust.builtin import builtin_victim

__all__ = [
    "BUILTIN_ORDER",
    "STRATEGY_TABLE",
    "OrderKey",
    "Strategy",
    "StrategyInputs",
    "Victim",
    "VictimOrder",
    "computed_victim",
    "largest_first_victim",
    "lcf_victim",
    "mcf_victim",
    "pe_victim",
    "random_victim",
    "sglang_default_victim",
    "slack_aware_victim",
    "strategy_row",
]


class StrategyInputs:
    """What a victim function may read besides the candidates, for one call.

    The policy keeps one instance and sets the per-call fields before each call (building a new
    object per call cost a microsecond, a fifth of a call on eight candidates): a victim
    function reads it during its call and keeps no reference to it.

    Attributes
    ----------
    scheduling_policy
        The host's queue policy, ``"fcfs"`` or ``"priority"``.
    requester
        The requesting request's id for rows with ``needs_requester``; ``None`` otherwise. A
        legacy host names no requester, so it is ``""`` there.
    now
        The decision time, on the clock of the candidates' ``arrival_time``.
    rng
        The policy's own ``random.Random(utility_seed)``.
    slo_s
        ``utility_slo_s``, the latency objective of ``slack-aware``.
    """

    __slots__ = ("now", "requester", "rng", "scheduling_policy", "slo_s")

    def __init__(
        self,
        scheduling_policy: object,
        requester: object,
        now: float,
        rng: random.Random,
        slo_s: float,
    ) -> None:
        self.scheduling_policy = scheduling_policy
        self.requester = requester
        self.now = now
        self.rng = rng
        self.slo_s = slo_s


#: ``victim(candidates, inputs) -> (victim object, log values)``.
Victim = Callable[[Sequence[Any], StrategyInputs], tuple[Any, tuple[Any, ...]]]


def _as_int(candidate: Any, name: str) -> int:
    return int(getattr(candidate, name, 0) or 0)


def pe_victim(candidates: Sequence[Any], inputs: StrategyInputs) -> tuple[Any, tuple[Any, ...]]:
    """``pe`` and ``pe-sjf``: vLLM's built-in victim (SJF orders admissions, not victims)."""
    return builtin_victim(candidates, inputs.scheduling_policy), ()


def random_victim(candidates: Sequence[Any], inputs: StrategyInputs) -> tuple[Any, tuple[Any, ...]]:
    """``static-random``: one uniform draw from the policy's own generator per call."""
    return inputs.rng.choice(candidates), ()


def largest_first_victim(
    candidates: Sequence[Any], inputs: StrategyInputs
) -> tuple[Any, tuple[Any, ...]]:
    """``largest-first``: the most KV (``num_computed_tokens``); the first maximal one wins.

    Log values: the victim's tokens.
    """
    best = candidates[0]
    best_tokens = _as_int(best, "num_computed_tokens")
    for c in candidates:
        tokens = _as_int(c, "num_computed_tokens")
        if tokens > best_tokens:
            best, best_tokens = c, tokens
    return best, (best_tokens,)


def lcf_victim(candidates: Sequence[Any], inputs: StrategyInputs) -> tuple[Any, tuple[Any, ...]]:
    """``lcf``: :func:`computed_victim` with the fewest tokens."""
    return computed_victim(candidates, inputs, most=False)


def mcf_victim(candidates: Sequence[Any], inputs: StrategyInputs) -> tuple[Any, tuple[Any, ...]]:
    """``mcf``: :func:`computed_victim` with the most tokens."""
    return computed_victim(candidates, inputs, most=True)


def computed_victim(
    candidates: Sequence[Any], inputs: StrategyInputs, *, most: bool
) -> tuple[Any, tuple[Any, ...]]:
    """``lcf`` (``most=False``) and ``mcf`` (``most=True``): the victim by ``num_computed_tokens``.

    The rule of vLLM PR #53723 (``--preemption-victim lcf``), as its author describes it there:
    the request being scheduled (``inputs.requester``) is not eligible, the running queue is
    walked in reverse so that equal counts go to the last-admitted request, and when no other
    request is eligible the FCFS tail is the victim (the requester preempts itself). The
    scheduling policy (FCFS or PRIORITY) plays no part: the victim axis is separate from the
    admission policy. ``mcf`` is the same rule with the largest count (the RFC's
    "most-computed-first" ablation).

    Log values: the victim's tokens and the requester (``""`` when there is none).
    """
    requester = inputs.requester
    rid = None if requester is None else str(requester)
    best: Any = None
    best_tokens = 0
    # Reverse host order, and a strict comparison: the last-admitted of equal counts wins.
    for c in reversed(candidates):
        if rid is not None and str(getattr(c, "request_id", "")) == rid:
            continue
        tokens = _as_int(c, "num_computed_tokens")
        if best is None or (tokens > best_tokens if most else tokens < best_tokens):
            best, best_tokens = c, tokens
    if best is None:
        best = candidates[-1]
        best_tokens = _as_int(best, "num_computed_tokens")
    return best, (best_tokens, requester or "")


def sglang_default_victim(
    candidates: Sequence[Any], inputs: StrategyInputs
) -> tuple[Any, tuple[Any, ...]]:
    """SGLang's retraction order (``ScheduleBatch.retract_decode``; docs/policy.md, "Strategies").

    SGLang sorts the running batch by ``(len(output_ids), -len(origin_input_ids))`` descending
    with a stable sort and retracts from the end. The first victim therefore has the fewest
    output tokens, then the longest prompt (``num_prompt_tokens``), then, among exact ties, it
    is the last in host order. Under ``"priority"`` scheduling the key starts with the priority,
    as SGLang's ``--retraction-policy priority`` does: the least important request goes first
    (a larger value is less important, vLLM's convention).

    Log values: the victim's output and prompt tokens.
    """
    by_priority = inputs.scheduling_policy == "priority"
    best: Any = None
    best_key: tuple[int, int, int] = (0, 0, 0)
    for c in candidates:
        key = (
            -_as_int(c, "priority") if by_priority else 0,
            _as_int(c, "num_output_tokens"),
            -_as_int(c, "num_prompt_tokens"),
        )
        # ``<=``: a later candidate with an equal key replaces the earlier one (last in order).
        if best is None or key <= best_key:
            best, best_key = c, key
    return best, (best_key[1], -best_key[2])


def slack_aware_victim(
    candidates: Sequence[Any], inputs: StrategyInputs
) -> tuple[Any, tuple[Any, ...]]:
    """``slack-aware``: the candidate with the most slack before its latency objective.

    ``slack = (arrival_time + slo_s) - now``: the request that can best afford to be recomputed.
    With one objective for every request this is the latest arrival; ties (equal slack) go to the
    last in host order, the request vLLM's FCFS rule would also pick among them.

    Log values: the victim's slack and the objective, in seconds.
    """
    slo_s = inputs.slo_s
    now = inputs.now
    best: Any = None
    best_slack = 0.0
    for c in candidates:
        slack = (float(getattr(c, "arrival_time", 0.0) or 0.0) + slo_s) - now
        if best is None or slack >= best_slack:
            best, best_slack = c, slack
    return best, (best_slack, slo_s)


#: A key's term: a candidate field (``num_computed_tokens``, ...), an input (``now``, the
#: decision time; ``slo_s``, ``utility_slo_s``), or ``("+" | "-", term, term)``.
Term = str | tuple[str, "Term", "Term"]


@dataclass(frozen=True, slots=True)
class OrderKey:
    """One key of a :class:`VictimOrder`: a term the victim maximises (``most``) or minimises.

    ``priority_only``: the key counts under PRIORITY scheduling only (it is 0 for every
    candidate under FCFS).
    """

    term: Term
    most: bool
    priority_only: bool = False


@dataclass(frozen=True, slots=True)
class VictimOrder:
    """A victim rule declared as data: the victim is the candidate best on ``keys``.

    Attributes
    ----------
    keys
        Compared lexicographically (Python's tuple comparison, as the functions' loops do).
    last
        Exact ties on every key go to the last candidate in host order (else the first).
    fcfs_tail
        Under FCFS scheduling the victim is the last candidate (the running queue's tail); the
        keys order PRIORITY decisions only.
    skip_requester
        The requester's records are not eligible; when no other candidate is, the victim is the
        last candidate.
    """

    keys: tuple[OrderKey, ...]
    last: bool = False
    fcfs_tail: bool = False
    skip_requester: bool = False


#: vLLM's built-in rule (:func:`~bidkv.adapters.vllm_hust.builtin.builtin_victim`) as an order:
#: the FCFS tail, or under PRIORITY the first with the largest ``(priority, arrival_time)``.
BUILTIN_ORDER = VictimOrder(
    (OrderKey("priority", True), OrderKey("arrival_time", True)), fcfs_tail=True
)


@dataclass(frozen=True, slots=True)
class Strategy:
    """One production strategy (a row of :data:`STRATEGY_TABLE`).

    Attributes
    ----------
    name
        The canonical name ``utility_strategy`` and ``--strategy`` take.
    victim
        The victim function (:data:`Victim`); ``None`` for ``bidkv``, whose rule is the policy's
        stateful decision (:func:`bidkv.adapters.vllm_hust.decision.decide`).
    aliases
        Other names of the same rule.
    needs_requester
        Whether the rule reads the requesting request's id; only these rows get it in
        :attr:`StrategyInputs.requester`. A legacy host names no requester, so these are the
        strategies whose typed and legacy decisions can differ by contract.
    log
        The policy's log line for a pick, between ``"[BidKV] "`` and ``" | kv_util=..."``: a tag,
        ``victim=%s`` and the row's fields, formatted with the victim's id and the function's log
        values; ``None`` for no line (``bidkv`` writes its own lines).
    default_hit
        Picks count as default hits (the built-in victim), not as strategy ("utility") hits.
    order
        The victim function's rule as data (:class:`VictimOrder`), from which the replay's fast path
        compiles its columnar form; ``None`` for the rows whose rule carries state (``bidkv``,
        ``static-random``), which the fast path runs as ordered passes.
    """

    name: str
    victim: Victim | None
    aliases: tuple[str, ...] = ()
    needs_requester: bool = False
    log: str | None = None
    default_hit: bool = False
    order: VictimOrder | None = None


_COMPUTED = OrderKey("num_computed_tokens", True)

#: Every production strategy, in the order ``--strategy all`` runs them.
STRATEGY_TABLE: tuple[Strategy, ...] = (
    Strategy("bidkv", None, needs_requester=True),
    Strategy("pe", pe_victim, ("preempt-evict",), default_hit=True, order=BUILTIN_ORDER),
    Strategy("pe-sjf", pe_victim, ("preempt-evict-sjf",), default_hit=True, order=BUILTIN_ORDER),
    Strategy("static-random", random_victim, log="RANDOM | victim=%s"),
    Strategy(
        "largest-first",
        largest_first_victim,
        log="LARGEST_FIRST | victim=%s | tokens=%d",
        order=VictimOrder((_COMPUTED,)),
    ),
    Strategy(
        "sglang-default",
        sglang_default_victim,
        # SGLang's length order (fewest output tokens, then longest prompt) is this rule.
        ("fewest-output",),
        log="SGLANG_DEFAULT | victim=%s | output_tokens=%d | prompt_tokens=%d",
        order=VictimOrder(
            (
                OrderKey("priority", True, priority_only=True),
                OrderKey("num_output_tokens", False),
                OrderKey("num_prompt_tokens", True),
            ),
            last=True,
        ),
    ),
    Strategy(
        "slack-aware",
        slack_aware_victim,
        log="SLACK_AWARE | victim=%s | slack_s=%.3f | slo_s=%.1f",
        order=VictimOrder(
            (OrderKey(("-", ("+", "arrival_time", "slo_s"), "now"), True),), last=True
        ),
    ),
    Strategy(
        "lcf",
        lcf_victim,
        ("least-computed-first",),
        needs_requester=True,
        log="LCF | victim=%s | tokens=%d | requester=%s",
        order=VictimOrder(
            (OrderKey("num_computed_tokens", False),), last=True, skip_requester=True
        ),
    ),
    Strategy(
        "mcf",
        mcf_victim,
        ("most-computed-first",),
        needs_requester=True,
        log="MCF | victim=%s | tokens=%d | requester=%s",
        order=VictimOrder((_COMPUTED,), last=True, skip_requester=True),
    ),
)

_ROWS: dict[str, Strategy] = {
    name: row for row in STRATEGY_TABLE for name in (row.name, *row.aliases)
}


def strategy_row(name: str) -> Strategy | None:
    """The row named ``name`` (a canonical name or an alias), or ``None`` if there is none."""
    return _ROWS.get(name)
