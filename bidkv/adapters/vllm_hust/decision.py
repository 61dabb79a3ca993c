"""The ``bidkv`` strategy's decision rule: gates, utility winner, liveness and cascade.

:func:`decide` is the one implementation of the rule (docs/policy.md, "The `bidkv` decision").
``BidkvPreemptionPolicy`` calls it on every ``bidkv`` decision, and tracekit's open-mode replay
calls it on recorded decisions, with the utility winners computed column-wise. It is pure: it
logs nothing, counts nothing and changes nothing. What a decision changes (the cooldown timer
and the liveness offsets) is applied afterwards by :meth:`DecisionState.commit`.

Steps, in order:

1. gates: fewer than ``min_running`` candidates, KV usage below the gate (or unknown while a
   gate is set), or the cooldown since the last utility pick still running: the policy returns
   its default victim (:attr:`Step.GATE`);
2. the utility winner by ``(-U, arrival_time, request_id)`` and the requester's best record, in
   one pass (:func:`~bidkv.adapters.vllm_hust.scoring.scan_top`);
3. liveness (V4): the winner's preemptions since its offset reach ``liveness_preemptions``:
   abstain, and its offset moves to its current count (:attr:`Step.LIVENESS`);
4. cascade: the requester is another candidate and frees at least ``1 / cascade_gain_ratio`` of
   the winner's tokens: abstain (:attr:`Step.CASCADE`);
5. otherwise select the winner and restart the cooldown (:attr:`Step.UTILITY`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from bidkv.adapters.vllm_hust.metrics import DEFAULT_STATE_LIMIT, LruTable
from bidkv.adapters.vllm_hust.scoring import ScanResult, scan_top, utility

__all__ = [
    "Decision",
    "DecisionRules",
    "DecisionState",
    "Step",
    "decide",
    "gate_reasons",
    "utility",
]


class Step(IntEnum):
    """How a ``bidkv`` decision ended (tracekit's replay keeps the values in an integer column)."""

    UTILITY = 0  #: the utility winner is selected
    GATE = 1  #: a gate is closed: the policy's default victim is selected
    LIVENESS = 2  #: abstain: the winner reached the liveness bound
    CASCADE = 3  #: abstain: the requester would free almost as much


#: ``(step, scan, relative_preemptions)``: the scan is ``None`` for :attr:`Step.GATE`, and the
#: winner's preemptions since its offset are 0 unless the step is :attr:`Step.LIVENESS`. A plain
#: tuple: building a frozen dataclass costs 0.6 µs, about a sixth of a policy call on eight
#: candidates.
Decision = tuple[Step, "ScanResult | None", int]

_GATE: Decision = (Step.GATE, None, 0)
# Module constants: cheaper to read than the enum's class attributes on every decision.
_UTILITY, _LIVENESS, _CASCADE = Step.UTILITY, Step.LIVENESS, Step.CASCADE


@dataclass(frozen=True, slots=True)
class DecisionRules:
    """The settings :func:`decide` reads; :meth:`from_config` takes them from a policy config.

    Attributes
    ----------
    min_running, kv_gate, cooldown_s
        The gates (``utility_min_running``, ``utility_kv_gate``, ``utility_cooldown_s``); a
        gate or cooldown of 0 is off.
    liveness_preemptions
        The per-victim liveness bound of V4 (0: off). :meth:`from_config` sets 0 in barrier
        mode, whose epoch barrier the policy applies itself.
    cascade_gain_ratio
        ``rho`` of the cascade rule.
    completion_weight, preempt_weight, epsilon, default_max_tokens
        The utility's settings (:func:`~bidkv.adapters.vllm_hust.scoring.scan_top`).
    """

    min_running: int = 1
    kv_gate: float = 0.0
    cooldown_s: float = 0.0
    liveness_preemptions: int = 2
    cascade_gain_ratio: float = 1.25
    completion_weight: float = 0.5
    preempt_weight: float = 0.3
    epsilon: float = 1e-6
    default_max_tokens: int = 1024

    @classmethod
    def from_config(cls, config: BidkvSelectorConfig) -> DecisionRules:
        """The rules of a (validated) policy configuration."""
        return cls(
            min_running=config.utility_min_running,
            kv_gate=config.utility_kv_gate,
            cooldown_s=config.utility_cooldown_s,
            liveness_preemptions=(
                config.utility_liveness_preemptions
                if config.utility_liveness_mode == "abstain"
                else 0
            ),
            cascade_gain_ratio=config.utility_cascade_gain_ratio,
            completion_weight=config.utility_completion_weight,
            preempt_weight=config.utility_preempt_weight,
            epsilon=config.utility_epsilon,
            default_max_tokens=config.utility_default_max_tokens,
        )


class DecisionState:
    """What the rule carries from one decision to the next, for one policy instance.

    Parameters
    ----------
    limit
        Bound of the liveness-offset table (:class:`~bidkv.adapters.vllm_hust.metrics.LruTable`).

    Attributes
    ----------
    last_pick
        Time of the last utility pick (``-inf`` before the first); the cooldown counts from it.
    offsets
        Request id -> its preemption count at its last liveness epoch.
    """

    __slots__ = ("last_pick", "offsets")

    def __init__(self, limit: int = DEFAULT_STATE_LIMIT) -> None:
        self.last_pick = -math.inf
        self.offsets = LruTable(limit)

    def commit(self, rules: DecisionRules, decision: Decision, now: float) -> Step:
        """Apply what ``decision`` changes, as the steps of :func:`decide` would have.

        Past the gates the liveness step reads the winner's offset, which marks it recently
        used; a liveness abstention then stores the winner's count, and a utility pick restarts
        the cooldown.

        Returns
        -------
        Step
            The decision's step (so that a loop over decisions needs no second lookup).
        """
        step = decision[0]
        found = decision[1]
        if found is None:
            return step
        if step is _LIVENESS:
            # put() makes the id the most recently used, which covers the read's touch.
            self.offsets.put(found[2], found[6])
            return step
        if rules.liveness_preemptions > 0:
            offsets = self.offsets
            top_id = found[2]
            if top_id in offsets:
                offsets.move_to_end(top_id)
        if step is _UTILITY:
            self.last_pick = now
        return step


def gate_reasons(rules: DecisionRules, num_candidates: int, kv_cache_usage: float | None) -> str:
    """The ``FALLBACK`` log line's reasons: ``unknown`` when only the cooldown applies."""
    reasons = []
    if num_candidates < rules.min_running:
        reasons.append(f"running({num_candidates})<min({rules.min_running})")
    gate = rules.kv_gate
    if gate > 0 and (kv_cache_usage or 0) < gate:
        # The original formatted None with :.2f and raised; print it (docs/policy.md,
        # "Deliberate differences from the original").
        shown = "None" if kv_cache_usage is None else f"{kv_cache_usage:.2f}"
        reasons.append(f"kv({shown})<gate({gate})")
    return ",".join(reasons) or "unknown"


def decide(
    rules: DecisionRules,
    candidates: Sequence[Any] | None,
    num_candidates: int,
    kv_cache_usage: float | None,
    now: float,
    requester_id: object,
    last_pick: float,
    offsets: Mapping[str, int],
    found: ScanResult | None = None,
) -> Decision:
    """One ``bidkv`` decision: the steps of the module docstring, without side effects.

    Parameters
    ----------
    rules
        The settings.
    candidates
        In host order; scanned (:func:`~bidkv.adapters.vllm_hust.scoring.scan_top`) only past
        the gates. ``None`` when ``found`` is given.
    num_candidates
        ``len(candidates)``.
    kv_cache_usage
        The context's KV usage (``None`` when unknown).
    now
        Decision time in seconds.
    requester_id
        The requesting request's id (``""`` when there is none; then no cascade).
    last_pick, offsets
        The state (:class:`DecisionState`); ``offsets`` is only read.
    found
        The scan's result, when the caller has it already: tracekit's replay computes the
        winners of many decisions column-wise (and its tests hold them equal to the scan's). It
        must carry the fields the rule reads: the winner's id, ``r`` and preemptions, and the
        requester's ``found`` flag and ``r`` (indices 2, 4, 6, 7, 8).

    Returns
    -------
    Decision
        ``(step, scan result, relative preemptions)``; apply it with
        :meth:`DecisionState.commit`.

    Examples
    --------
    >>> from types import SimpleNamespace as C
    >>> a = C(request_id="a", num_computed_tokens=300, num_output_tokens=10, max_tokens=100,
    ...       num_preemptions=0, arrival_time=1.0)
    >>> b = C(request_id="b", num_computed_tokens=100, num_output_tokens=10, max_tokens=100,
    ...       num_preemptions=0, arrival_time=2.0)
    >>> step, found, _ = decide(DecisionRules(), [a, b], 2, 0.9, 5.0, "", -math.inf, {})
    >>> step.name, found[2]
    ('UTILITY', 'a')
    >>> decide(DecisionRules(), [a, b], 2, 0.9, 5.0, "b", -math.inf, {})[0].name  # 100*1.25 < 300
    'UTILITY'
    >>> decide(DecisionRules(), [a, b], 2, 0.9, 5.0, "", -math.inf, {"a": -2})[0].name
    'LIVENESS'
    """
    gate = rules.kv_gate
    cooldown = rules.cooldown_s
    if (
        num_candidates < rules.min_running
        or (gate > 0 and (kv_cache_usage is None or kv_cache_usage < gate))
        or (cooldown > 0 and last_pick > -math.inf and now - last_pick < cooldown)
    ):
        return _GATE
    if found is None:
        found = scan_top(
            candidates,  # type: ignore[arg-type]
            rules.completion_weight,
            rules.preempt_weight,
            rules.epsilon,
            rules.default_max_tokens,
            requester_id,
        )
    top_id = found[2]
    tokens = found[4]
    threshold = rules.liveness_preemptions
    if threshold > 0:
        relative = found[6] - offsets.get(top_id, 0)
        if relative >= threshold:
            # A per-victim bound (V4): one abstention hands this decision to the host's built-in
            # victim and re-arms utility for the same request right away.
            return (_LIVENESS, found, relative)
    if found[7] and requester_id != top_id and found[8] * rules.cascade_gain_ratio >= tokens:
        # Selecting the requester resets its KV and may make it retry forever; a marginal gain
        # is not worth it, so let the host apply its stable built-in order.
        return (_CASCADE, found, 0)
    return (_UTILITY, found, 0)
