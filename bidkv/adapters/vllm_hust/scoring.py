"""Utility scoring and ranking of the ``bidkv`` strategy (docs/policy.md, "The bidkv decision").

``U = r / (delta + epsilon)`` with ``r = max(num_computed_tokens, 0)``,
``delta = 1 + w_c * completion + w_p * num_preemptions`` and
``completion = clamp(num_output_tokens / max_tokens, 0, 1)``. The ranking orders candidates by
``(-U, arrival_time, request_id)``; exact ties on that key keep host order.

The formula itself is :func:`utility`. Candidates are read duck-typed, with the original's ``or 0``
coercions, so any object with the ``PreemptionCandidate`` attribute names works.

:func:`scan_top` is the one pass that reads and scores candidates: it keeps only what a decision
needs (the hot path), and :func:`score_candidate` is the same pass over one candidate.
:func:`rank_candidates` sorts those records for snapshots and the barrier mode; the property
tests hold the scan equal to the sort, ties included.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

__all__ = [
    "ScanResult",
    "UtilityCandidateScore",
    "best_record_with_id",
    "last_with_id",
    "rank_candidates",
    "scan_top",
    "score_candidate",
    "utility",
]


@dataclass(frozen=True)
class UtilityCandidateScore:
    """Scoring record of one candidate (the original's public record type).

    Parameters
    ----------
    request_id
        The candidate's id as a string.
    utility
        ``U = r / (delta + epsilon)``.
    evict_score
        Equal to ``utility`` (kept for compatibility with the original's snapshots).
    tokens_freed
        ``r``, the KV tokens a preemption frees (``num_computed_tokens``, at least 0).
    completion
        ``num_output_tokens / max_tokens`` clamped to [0, 1].
    num_preemptions
        The host's cumulative preemption count of the request, at least 0.
    arrival_time
        The request's arrival time (``0.0`` when missing).
    """

    request_id: str
    utility: float
    evict_score: float
    tokens_freed: int
    completion: float
    num_preemptions: int
    arrival_time: float


def utility(
    tokens_freed: Any,
    completion: Any,
    num_preemptions: Any,
    completion_weight: float,
    preempt_weight: float,
    epsilon: float,
) -> Any:
    """The utility ``U = r / (delta + epsilon)``, ``delta = 1 + w_c * completion + w_p * P``.

    Written with arithmetic operators only, in the order ``((1 + w_c c) + w_p P) + epsilon``,
    so that it evaluates the same on Python numbers and on column expressions (tracekit builds
    its polars form of the utility by calling it). ``delta >= 1`` for the validated
    (non-negative) weights, so the original's ``max(delta + epsilon, epsilon)`` is
    ``delta + epsilon``.

    Parameters
    ----------
    tokens_freed
        ``r``, already coerced (an int at least 0).
    completion
        Already clamped to [0, 1].
    num_preemptions
        ``P``, already coerced (an int at least 0).
    completion_weight, preempt_weight, epsilon
        ``w_c``, ``w_p`` and ``epsilon``.

    Returns
    -------
    float or expression
        ``U``; the same type as the operands.

    Examples
    --------
    >>> round(utility(220, 12 / 128, 0, 0.5, 0.3, 1e-6), 6)
    210.149053
    """
    return tokens_freed / (
        1.0 + completion_weight * completion + preempt_weight * num_preemptions + epsilon
    )


def score_candidate(
    candidate: Any,
    completion_weight: float,
    preempt_weight: float,
    epsilon: float,
    default_max_tokens: int,
) -> UtilityCandidateScore:
    """Score one candidate.

    Parameters
    ----------
    candidate
        Any object with the ``PreemptionCandidate`` attribute names (missing ones count as 0).
    completion_weight, preempt_weight
        ``w_c`` and ``w_p``.
    epsilon
        ``epsilon`` of the utility formula.
    default_max_tokens
        ``max_tokens`` used when the candidate's is missing or not positive.

    Returns
    -------
    UtilityCandidateScore
        The candidate's record.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(request_id="r1", num_computed_tokens=220, num_output_tokens=12,
    ...                     max_tokens=128, num_preemptions=0, arrival_time=1.0)
    >>> round(score_candidate(c, 0.5, 0.3, 1e-6, 1024).utility, 6)
    210.149053
    """
    # The record is the scan of a one-candidate list, so it cannot drift from the hot path.
    _, _, request_id, utility, tokens_freed, completion, num_preemptions, _, _ = scan_top(
        (candidate,), completion_weight, preempt_weight, epsilon, default_max_tokens, None
    )
    return UtilityCandidateScore(
        request_id=request_id,
        utility=utility,
        evict_score=utility,
        tokens_freed=tokens_freed,
        completion=completion,
        num_preemptions=num_preemptions,
        arrival_time=float(getattr(candidate, "arrival_time", 0.0) or 0.0),
    )


def rank_candidates(
    candidates: Sequence[Any],
    completion_weight: float,
    preempt_weight: float,
    epsilon: float,
    default_max_tokens: int,
    limit: int | None = None,
) -> list[UtilityCandidateScore]:
    """Rank candidates by ``(-U, arrival_time, request_id)``, host order on exact ties.

    Parameters
    ----------
    candidates
        In host order.
    completion_weight, preempt_weight, epsilon, default_max_tokens
        As for :func:`score_candidate`.
    limit
        Return only the first ``limit`` records (same result as slicing the full ranking).

    Returns
    -------
    list of UtilityCandidateScore
        Best (most expendable) first.
    """
    scores = [
        score_candidate(c, completion_weight, preempt_weight, epsilon, default_max_tokens)
        for c in candidates
    ]
    keyed = [(-s.utility, s.arrival_time, s.request_id, i) for i, s in enumerate(scores)]
    # The host index as the last key element reproduces a stable sort exactly.
    top = sorted(keyed) if limit is None else heapq.nsmallest(limit, keyed)
    return [scores[k[3]] for k in top]


def last_with_id(candidates: Sequence[Any], request_id: object) -> Any:
    """The last candidate whose id (as a string) equals ``request_id``, or ``None``.

    The original resolved ids to objects through a dict, so a duplicated id meant its last object.
    """
    found = None
    for c in candidates:
        if str(getattr(c, "request_id", "")) == request_id:
            found = c
    return found


def best_record_with_id(
    candidates: Sequence[Any],
    request_id: object,
    completion_weight: float,
    preempt_weight: float,
    epsilon: float,
    default_max_tokens: int,
) -> UtilityCandidateScore | None:
    """The first record with ``request_id`` in ranking order, or ``None`` if there is none."""
    records = [
        score_candidate(c, completion_weight, preempt_weight, epsilon, default_max_tokens)
        for c in candidates
        if str(getattr(c, "request_id", "")) == request_id
    ]
    # min() keeps the first of equal keys, as the stable ranking does.
    return min(records, key=lambda s: (-s.utility, s.arrival_time), default=None)


# (top candidate object, last object sharing the top's id, top id, U, r, completion,
#  num_preemptions, requester found, requester r)
ScanResult = tuple[Any, Any, str, float, int, float, int, bool, int]


def scan_top(
    candidates: Sequence[Any],
    completion_weight: float,
    preempt_weight: float,
    epsilon: float,
    default_max_tokens: int,
    requester_id: object,
) -> ScanResult:
    """Find the utility winner and the requester's record in one pass.

    Equivalent to ``rank_candidates(...)[0]`` plus the first ranked record whose id equals
    ``requester_id``, without building records or sorting. The utility is :func:`utility`'s
    expression, inlined for speed (bit-identical, checked by a property test).

    Parameters
    ----------
    candidates
        Non-empty, in host order.
    completion_weight, preempt_weight, epsilon, default_max_tokens
        As for :func:`score_candidate`.
    requester_id
        The requesting request's id (``""`` or ``None`` when there is none).

    Returns
    -------
    ScanResult
        ``(top, victim, top_id, utility, tokens_freed, completion, num_preemptions,
        requester_found, requester_tokens_freed)``. ``victim`` is the last candidate in host
        order whose id equals the top's (the original mapped ids to objects with a dict, so a
        duplicated id resolves to its last object); it is ``top`` when ids are unique.
        ``requester_tokens_freed`` belongs to the best-ranked record with the requester's id.
    """
    args = (
        candidates,
        completion_weight,
        preempt_weight,
        epsilon,
        default_max_tokens,
        requester_id,
    )
    try:
        return _scan(*args, _SCAN_FIELDS)
    except AttributeError:
        # Some candidate lacks an attribute: redo the pass reading each field with a default.
        return _scan(*args, _read_with_defaults)


# Fields the scan reads with one C-level call per candidate.
_SCAN_FIELDS = attrgetter(
    "num_computed_tokens", "num_output_tokens", "max_tokens", "num_preemptions", "request_id"
)
# Below 2**53 an int converts to float exactly, so ``out / m`` equals ``float(out) / float(m)``.
_EXACT_INT = 2**53


def _read_with_defaults(candidate: Any) -> tuple[Any, Any, Any, Any, Any]:
    # The fields of _SCAN_FIELDS for duck-typed candidates; a missing one reads as absent.
    return (
        getattr(candidate, "num_computed_tokens", 0),
        getattr(candidate, "num_output_tokens", 0),
        getattr(candidate, "max_tokens", None),
        getattr(candidate, "num_preemptions", 0),
        getattr(candidate, "request_id", ""),
    )


def _scan(
    candidates: Sequence[Any],
    wc: float,
    wp: float,
    epsilon: float,
    default_max_tokens: int,
    requester_id: object,
    get: Callable[[Any], tuple[Any, Any, Any, Any, Any]],
) -> ScanResult:
    # The one pass, for typed and duck-typed candidates (``get`` reads the five fields). Each
    # value is coerced as the original did (``int(x or 0)``, at least 0; a ``max_tokens`` that
    # is not a positive number is replaced by the default), but only when it is not already of
    # the resulting type, so typed hosts pay only the type checks. ``out / m`` on ints below
    # 2**53 equals ``float(out) / float(m)``; at or above it the completion clamps to 1 either way.
    # Utilities are never negative, so -1.0 makes the first candidate the initial top.
    top: Any = None
    victim: Any = None
    b_id = ""
    b_u = -1.0
    b_a = b_comp = 0.0
    b_r = b_p = 0
    rq_found = False
    rq_u = rq_a = 0.0
    rq_r = 0
    exact = _EXACT_INT
    for c in candidates:
        r, out, m, p, rid = get(c)
        if r.__class__ is not int:
            r = int(r or 0)
        if r < 0:
            r = 0
        if out.__class__ is not int:
            out = int(out or 0)
        if m.__class__ is int:
            if m <= 0:
                m = default_max_tokens
            comp = out / m if m < exact else float(out) / float(m)
        else:
            if not isinstance(m, (int, float)) or not m > 0:
                m = default_max_tokens
            comp = float(out) / float(m)
        if comp > 1.0:
            comp = 1.0
        elif comp < 0.0:
            comp = 0.0
        if p.__class__ is not int:
            p = int(p or 0)
        if p < 0:
            p = 0
        # utility(), inlined: a call per candidate costs 5-8% of the scan. A property test
        # holds the two equal bit for bit.
        u = r / (1.0 + wc * comp + wp * p + epsilon)
        if rid.__class__ is not str:
            rid = str(rid)
        if u > b_u:
            take = True
        elif u == b_u:
            a = float(getattr(c, "arrival_time", 0.0) or 0.0)
            take = a < b_a or (a == b_a and rid < b_id)
        else:
            take = False
        if take:
            top = victim = c
            b_id, b_u, b_r, b_comp, b_p = rid, u, r, comp, p
            b_a = float(getattr(c, "arrival_time", 0.0) or 0.0)
        elif rid == b_id:
            victim = c
        if rid == requester_id:
            a = float(getattr(c, "arrival_time", 0.0) or 0.0)
            if not rq_found or u > rq_u or (u == rq_u and a < rq_a):
                rq_found, rq_u, rq_a, rq_r = True, u, a, r
    return (top, victim, b_id, b_u, b_r, b_comp, b_p, rq_found, rq_r)
