"""Victim rules of the strategies other than ``bidkv``, and their log lines.

``pe``/``pe-sjf`` use :func:`bidkv.adapters.vllm_hust.scoring.default_victim`. The ``*_victim``
functions are pure: each takes a non-empty candidate sequence in host order and returns one of
its objects, ties broken as documented per function. The ``pick_*`` functions add the strategy's
log line on the ``vllm`` logger; the policy records the decision.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

__all__ = [
    "computed_victim",
    "largest_first_victim",
    "pick_computed",
    "pick_largest_first",
    "pick_random",
    "pick_sglang_default",
    "pick_slack_aware",
    "sglang_default_victim",
    "slack_aware_victim",
]

_LOGGER = logging.getLogger("vllm")


def _as_int(candidate: Any, name: str) -> int:
    return int(getattr(candidate, name, 0) or 0)


def largest_first_victim(candidates: Sequence[Any]) -> Any:
    """The candidate holding the most KV (``num_computed_tokens``); the first maximal one wins.

    Parameters
    ----------
    candidates
        Non-empty, in host order.

    Returns
    -------
    object
        The victim.
    """
    best = candidates[0]
    best_tokens = _as_int(best, "num_computed_tokens")
    for c in candidates:
        tokens = _as_int(c, "num_computed_tokens")
        if tokens > best_tokens:
            best, best_tokens = c, tokens
    return best


def computed_victim(candidates: Sequence[Any], requester: object, *, most: bool) -> Any:
    """``lcf`` (``most=False``) and ``mcf`` (``most=True``): the victim by ``num_computed_tokens``.

    The rule of vLLM PR #53723 (``--preemption-victim lcf``), as its author describes it there:
    the request being scheduled (``requester``) is not eligible, the running queue is walked in
    reverse so that equal counts go to the last-admitted request, and when no other request is
    eligible the FCFS tail is the victim (the requester preempts itself). The scheduling policy
    (FCFS or PRIORITY) plays no part: the victim axis is separate from the admission policy.
    ``mcf`` is the same rule with the largest count (the RFC's "most-computed-first" ablation).

    Parameters
    ----------
    candidates
        Non-empty, in host order (vLLM's ``running``).
    requester
        The id of the request being scheduled (every candidate with that id is skipped);
        ``None`` when the host names none.
    most
        Take the largest count instead of the smallest.

    Returns
    -------
    object
        The victim.
    """
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
    return candidates[-1] if best is None else best


def sglang_default_victim(candidates: Sequence[Any], scheduling_policy: object) -> Any:
    """SGLang's retraction order (``ScheduleBatch.retract_decode``; docs/policy.md, "Strategies").

    SGLang sorts the running batch by ``(len(output_ids), -len(origin_input_ids))`` descending
    with a stable sort and retracts from the end. The first victim therefore has the fewest
    output tokens, then the longest prompt (``num_prompt_tokens``), then, among exact ties, it
    is the last in host order.

    Parameters
    ----------
    candidates
        Non-empty, in host order.
    scheduling_policy
        ``"priority"`` prefixes the key with the priority, as SGLang's
        ``--retraction-policy priority`` does: the least important request goes first. Candidate
        priorities follow vLLM's convention (a larger value is less important).

    Returns
    -------
    object
        The victim.
    """
    by_priority = scheduling_policy == "priority"
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
    return best


def slack_aware_victim(candidates: Sequence[Any], now: float, slo_s: float) -> tuple[Any, float]:
    """The candidate with the most slack before its latency objective.

    ``slack = (arrival_time + slo_s) - now``: the request that can best afford to be recomputed.
    With one objective for every request this is the latest arrival; ties (equal slack) go to the
    last in host order, the request vLLM's FCFS rule would also pick among them.

    Parameters
    ----------
    candidates
        Non-empty, in host order.
    now
        Decision time, on the same clock as ``arrival_time``.
    slo_s
        The latency objective in seconds.

    Returns
    -------
    tuple
        ``(victim, slack_s)``.
    """
    best: Any = None
    best_slack = 0.0
    for c in candidates:
        slack = (float(getattr(c, "arrival_time", 0.0) or 0.0) + slo_s) - now
        if best is None or slack >= best_slack:
            best, best_slack = c, slack
    return best, best_slack


def pick_random(rng: random.Random, candidates: Sequence[Any], kv: Any) -> Any:
    """``static-random``: one uniform draw from ``rng``; logs ``RANDOM``."""
    victim = rng.choice(candidates)
    _LOGGER.info(
        "[BidKV] RANDOM | victim=%s | kv_util=%.2f | running=%d",
        getattr(victim, "request_id", "?"),
        kv or 0.0,
        len(candidates),
    )
    return victim


def pick_largest_first(candidates: Sequence[Any], kv: Any) -> Any:
    """``largest-first``: :func:`largest_first_victim`; logs ``LARGEST_FIRST``."""
    victim = largest_first_victim(candidates)
    _LOGGER.info(
        "[BidKV] LARGEST_FIRST | victim=%s | tokens=%d | kv_util=%.2f | running=%d",
        getattr(victim, "request_id", "?"),
        _as_int(victim, "num_computed_tokens"),
        kv or 0.0,
        len(candidates),
    )
    return victim


def pick_computed(candidates: Sequence[Any], requester: object, kv: Any, *, most: bool) -> Any:
    """``lcf``/``mcf``: :func:`computed_victim`; logs ``LCF`` or ``MCF``."""
    victim = computed_victim(candidates, requester, most=most)
    _LOGGER.info(
        "[BidKV] %s | victim=%s | tokens=%d | requester=%s | kv_util=%.2f | running=%d",
        "MCF" if most else "LCF",
        getattr(victim, "request_id", "?"),
        _as_int(victim, "num_computed_tokens"),
        requester or "",
        kv or 0.0,
        len(candidates),
    )
    return victim


def pick_sglang_default(candidates: Sequence[Any], scheduling_policy: object, kv: Any) -> Any:
    """``sglang-default``: :func:`sglang_default_victim`; logs ``SGLANG_DEFAULT``."""
    victim = sglang_default_victim(candidates, scheduling_policy)
    _LOGGER.info(
        "[BidKV] SGLANG_DEFAULT | victim=%s | output_tokens=%d | prompt_tokens=%d | "
        "kv_util=%.2f | running=%d",
        getattr(victim, "request_id", "?"),
        _as_int(victim, "num_output_tokens"),
        _as_int(victim, "num_prompt_tokens"),
        kv or 0.0,
        len(candidates),
    )
    return victim


def pick_slack_aware(candidates: Sequence[Any], now: float, slo_s: float, kv: Any) -> Any:
    """``slack-aware``: :func:`slack_aware_victim`; logs ``SLACK_AWARE``."""
    victim, slack = slack_aware_victim(candidates, now, slo_s)
    _LOGGER.info(
        "[BidKV] SLACK_AWARE | victim=%s | slack_s=%.3f | slo_s=%.1f | kv_util=%.2f | running=%d",
        getattr(victim, "request_id", "?"),
        slack,
        slo_s,
        kv or 0.0,
        len(candidates),
    )
    return victim
