"""The difference classes of ``tracekit diff`` and the cause each one stands for.

Every difference between a legacy-host and a typed-host recording of the same run gets exactly
one class. A class is either a *contract* class (the typed ``vllm.preemption-policy.v1`` contract
gives the policy information or outcomes the legacy ``VictimSelector`` contract lacks, so the two
paths legitimately differ there) or not (the hosts are wired differently, the recordings are not
what they claim, or nobody knows why). ``docs/diff.md`` lists the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.strategies import STRATEGY_TABLE

__all__ = [
    "ABSTENTION",
    "AFTER_DIVERGENCE",
    "BARRIER_REQUESTER",
    "CANDIDATE_ORDER",
    "CASCADE",
    "CLASSES",
    "DECISION_COUNT",
    "HISTORY",
    "KV_OR_TIME",
    "POLICY_FAILURE",
    "UNEXPLAINED",
    "DifferenceClass",
    "is_contract",
]


@dataclass(frozen=True, slots=True)
class DifferenceClass:
    """One kind of difference and its cause.

    Attributes
    ----------
    kind
        Short stable id, used in the JSON output.
    contract
        Whether the contracts explain it (``None``: inherited from the difference that split the
        two runs' histories, see :data:`HISTORY` and :data:`AFTER_DIVERGENCE`).
    cause
        One sentence for operators.
    """

    kind: str
    contract: bool | None
    cause: str


# The strategy table's rows that skip the requester: the rows that need it, but the decision rule
# (bidkv), which has the cascade classes instead.
_SKIPPERS = [row.name for row in STRATEGY_TABLE if row.needs_requester and row.victim is not None]
_SKIPPER_NAMES = " and ".join(
    [", ".join(_SKIPPERS[:-1]), _SKIPPERS[-1]] if _SKIPPERS[1:] else _SKIPPERS
)

CASCADE = "cascade-contract"
ABSTENTION = "abstention-contract"
BARRIER_REQUESTER = "barrier-requester-contract"
REQUESTER_SKIP = "requester-skip-contract"
POLICY_FAILURE = "policy-failure"
HISTORY = "history"
AFTER_DIVERGENCE = "after-divergence"
KV_OR_TIME = "kv-or-time"
CANDIDATE_ORDER = "candidate-order"
DECISION_COUNT = "decision-count"
UNEXPLAINED = "unexplained"

CLASSES: dict[str, DifferenceClass] = {
    c.kind: c
    for c in (
        DifferenceClass(
            CASCADE,
            True,
            "the legacy contract passes no requesting request, so the cascade guard cannot fire "
            "there: the typed path abstained (or, in barrier mode, took the requester) where the "
            "legacy path took the policy's utility top",
        ),
        DifferenceClass(
            ABSTENTION,
            True,
            "legacy has no abstention: the policy's None becomes its own default victim (which "
            "may differ from the host's builtin_victim_id), recorded as a selection",
        ),
        DifferenceClass(
            BARRIER_REQUESTER,
            True,
            "the legacy contract passes no requesting request, so the barrier fallback takes the "
            "policy's default victim there instead of the requester",
        ),
        DifferenceClass(
            REQUESTER_SKIP,
            True,
            f"the legacy contract passes no requesting request, so {_SKIPPER_NAMES} cannot skip "
            "it there: the legacy path took the requester where the typed path took the next "
            "candidate by computed tokens",
        ),
        DifferenceClass(
            POLICY_FAILURE,
            False,
            "the policy raised or returned an invalid id on one path only; the typed controller "
            "then restored the built-in policy (a legacy host has no failure isolation)",
        ),
        DifferenceClass(
            HISTORY,
            None,
            "the runs follow different histories after an earlier decision applied different "
            "victims; later decisions are not comparable",
        ),
        DifferenceClass(
            AFTER_DIVERGENCE,
            None,
            "end-of-run state of two different histories (counters, metrics, snapshots, steps)",
        ),
        DifferenceClass(
            KV_OR_TIME,
            False,
            "kv usage or time differ with identical candidates: the hosts pass the engine's KV "
            "usage or clock differently (host wiring)",
        ),
        DifferenceClass(
            CANDIDATE_ORDER,
            False,
            "candidate order differs: the same running requests reach the policy in another "
            "order, which changes the FCFS built-in victim and host-order tie-breaks",
        ),
        DifferenceClass(
            DECISION_COUNT,
            False,
            "one run made decisions the other did not, although every earlier decision applied "
            "the same victim",
        ),
        DifferenceClass(
            UNEXPLAINED,
            False,
            "unexplained: no contract difference accounts for it",
        ),
    )
}


def is_contract(kind: str, inherited: bool | None = None) -> bool:
    """Whether a difference of class ``kind`` is explained by the contracts.

    Parameters
    ----------
    kind
        A key of :data:`CLASSES`.
    inherited
        For :data:`HISTORY` and :data:`AFTER_DIVERGENCE`: whether the difference that split the
        histories is a contract difference (``None`` counts as not explained).

    Returns
    -------
    bool
        The class's own flag, or ``inherited`` for the inheriting classes.
    """
    contract = CLASSES[kind].contract
    return bool(inherited) if contract is None else contract
