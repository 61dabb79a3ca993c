"""Seeded random preemption contexts for the controller's fuzz test, well formed or broken once.

Each context is either well formed (typed candidates, as a host builds them) or broken in exactly
one place, and says where: :attr:`FuzzCase.broken` is ``None`` or ``(index, field)`` with
``index`` the candidate's position, or ``None`` for a field of the context itself. The breaks are
the ones an audit found escaping the controller (a ``None`` priority under PRIORITY, a candidate
lacking a field) and their relatives: wrong types, NaN and infinite numbers, empty or missing
candidates, an unknown scheduling policy, a requester or built-in id that is not a string.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from tracekit.hosts.preemption_policy import (
    CANDIDATE_FIELDS,
    PreemptionCandidate,
    PreemptionContext,
)

# Values that break each kind of field (none of them is a valid value of that kind).
_NOT_AN_INT = [None, "7", 1.5, True, float("nan"), [1], b"1"]
_NOT_A_TIME = [None, "1.0", float("nan"), float("inf"), -float("inf"), True, [0.0]]
_NOT_AN_ID = [None, 7, b"r0", ("r0",), 1.5]
_BAD_CONTEXT = {
    "scheduling_policy": [None, "PRIORITY", "lifo", 1, ""],
    "requesting_request_id": [None, 7, b"r0"],
    "kv_cache_usage": [None, float("nan"), float("inf"), "0.5", True],
    "now": [None, float("nan"), -float("inf"), "3.0", False],
    "builtin_victim_id": [7, b"r0", 1.5],
    "candidates": [None, "r0,r1", 5, {"r0"}, ()],
}


class Hostile(Exception):
    """What a hostile value's methods raise."""


def _raise(*args: Any) -> Any:
    raise Hostile("a hostile subclass's method")


_RAISING = {
    name: _raise
    for name in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
                 "__str__", "__repr__", "__format__", "__bool__", "__int__", "__index__",
                 "__float__", "__len__", "__iter__", "__contains__", "__add__", "__sub__")
}  # fmt: skip
_LYING = {
    "__eq__": lambda self, other: True,
    "__ne__": lambda self, other: False,
    "__lt__": lambda self, other: True,
    "__gt__": lambda self, other: True,
    "__hash__": lambda self: 0,
}


def _subclass(base: type, name: str, methods: dict[str, Any]) -> type:
    return type(name, (base,), dict(methods))


#: ``str``, ``int`` and ``float`` subclasses whose comparisons, hash, conversions and text raise
#: (``Raising*``), or lie (``Lying*``: equal to and less than everything). They keep the typed
#: contract (``isinstance`` says ``str``/``int``/``float``), so the controller must read them as
#: plain copies: an audit found 2,590 of 20,000 such contexts raising out of select_victim.
HOSTILE_TYPES: dict[type, tuple[type, ...]] = {
    base: (_subclass(base, f"Raising{base.__name__.title()}", _RAISING),
           _subclass(base, f"Lying{base.__name__.title()}", _LYING))
    for base in (str, int, float)
}  # fmt: skip

_HOSTILE_CONTEXT_FIELDS = (
    "scheduling_policy", "requesting_request_id", "kv_cache_usage", "now", "builtin_victim_id",
)  # fmt: skip


def hostile(value: Any, rng: random.Random) -> Any:
    """``value`` (a str, int or float) as an instance of one of its hostile subclasses."""
    base = str if isinstance(value, str) else float if isinstance(value, float) else int
    plain = {str: str.__str__, float: float.__float__, int: int.__int__}[base](value)
    return rng.choice(HOSTILE_TYPES[base])(plain)


@dataclass(frozen=True)
class FuzzCase:
    """One fuzzed context and where it is broken (``None`` when it is well formed).

    ``plain`` is set when the context keeps the contract through hostile subclasses: the same
    context with plain values, which the controller must answer exactly as it answers it.
    """

    context: Any
    broken: tuple[int | None, str] | None
    plain: Any = None


def _candidate(rng: random.Random, index: int, ids: list[str]) -> PreemptionCandidate:
    rid = rng.choice(ids) if rng.random() < 0.05 else f"r{index}"
    computed = rng.randint(0, 4000)
    return PreemptionCandidate(
        rid,
        rng.randint(0, 3),
        rng.choice([0.0, 1.0, rng.uniform(0.0, 100.0)]),
        rng.randint(1, 2000),
        rng.randint(0, 600),
        computed,
        rng.randint(0, 4),
        rng.choice([0, 16, 256, 1024]),
    )


def _break_value(field: str, rng: random.Random) -> Any:
    if field == "request_id":
        return rng.choice(_NOT_AN_ID)
    if field == "arrival_time":
        return rng.choice(_NOT_A_TIME)
    return rng.choice(_NOT_AN_INT)


def fuzz_cases(
    seed: int, count: int, broken_share: float = 0.5, hostile_share: float = 0.0
) -> Iterator[FuzzCase]:
    """``count`` contexts from ``random.Random(seed)``; about ``broken_share`` of them broken.

    Broken contexts are, in equal parts: a candidate field replaced by a wrong value (``None``
    priorities among them, half of those under PRIORITY), a candidate lacking a field, and a
    context field replaced by a wrong value (empty or missing candidates among them). About
    ``hostile_share`` of the others carry hostile subclasses (:data:`HOSTILE_TYPES`) in one to
    three places, candidates' fields or the context's, with their :attr:`FuzzCase.plain` twin.
    """
    rng = random.Random(seed)
    for _ in range(count):
        if rng.random() < hostile_share:
            yield _hostile_case(rng)
            continue
        n = rng.randint(1, 12)
        ids = [f"r{i}" for i in range(n)]
        candidates: list[Any] = [_candidate(rng, i, ids) for i in range(n)]
        fields: dict[str, Any] = {
            "scheduling_policy": rng.choice(["fcfs", "priority"]),
            "requesting_request_id": rng.choice([*ids, ""]),
            "kv_cache_usage": rng.random(),
            "now": rng.uniform(0.0, 200.0),
            "builtin_victim_id": rng.choice([None, None, None, rng.choice(ids), "gone"]),
        }
        broken: tuple[int | None, str] | None = None
        if rng.random() < broken_share:
            kind = rng.randrange(3)
            index = rng.randrange(n)
            if kind == 0:
                field = rng.choice(CANDIDATE_FIELDS)
                value = _break_value(field, rng)
                if field == "priority" and rng.random() < 0.5:
                    value, fields["scheduling_policy"] = None, "priority"
                values = dict(zip(CANDIDATE_FIELDS, _fields_of(candidates[index]), strict=True))
                values[field] = value
                candidates[index] = SimpleNamespace(**values)
                broken = (index, field)
            elif kind == 1:
                field = rng.choice(CANDIDATE_FIELDS)
                values = dict(zip(CANDIDATE_FIELDS, _fields_of(candidates[index]), strict=True))
                del values[field]
                candidates[index] = SimpleNamespace(**values)
                broken = (index, field)
            else:
                field = rng.choice(sorted(_BAD_CONTEXT))
                fields[field] = rng.choice(_BAD_CONTEXT[field])
                broken = (None, field)
        fields.setdefault("candidates", tuple(candidates))
        if broken is not None and broken[1] == "candidates":
            context: Any = SimpleNamespace(**fields)
        elif rng.random() < 0.5:
            context = PreemptionContext(**fields)
        else:
            context = SimpleNamespace(**fields)
        yield FuzzCase(context, broken)


def _hostile_case(rng: random.Random) -> FuzzCase:
    """A well-formed context with hostile subclasses in one to three places, and its twin."""
    n = rng.randint(1, 12)
    ids = [f"r{i}" for i in range(n)]
    candidates = [_candidate(rng, i, ids) for i in range(n)]
    fields: dict[str, Any] = {
        "scheduling_policy": rng.choice(["fcfs", "priority"]),
        "requesting_request_id": rng.choice([*ids, ""]),
        "kv_cache_usage": rng.random(),
        "now": rng.uniform(0.0, 200.0),
        "builtin_victim_id": rng.choice([None, None, rng.choice(ids), "gone"]),
    }
    plain = PreemptionContext(candidates=tuple(candidates), **fields)
    hostile_candidates: list[Any] = list(candidates)
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.7:
            index = rng.randrange(n)
            values = dict(zip(CANDIDATE_FIELDS, _fields_of(hostile_candidates[index]), strict=True))
            field = rng.choice(CANDIDATE_FIELDS)
            values[field] = hostile(values[field], rng)
            # Half as the typed class, half as another object with the same fields.
            kind = PreemptionCandidate if rng.random() < 0.5 else SimpleNamespace
            hostile_candidates[index] = kind(**values)
        else:
            field = rng.choice(_HOSTILE_CONTEXT_FIELDS)
            if fields[field] is not None:
                fields[field] = hostile(fields[field], rng)
    make = PreemptionContext if rng.random() < 0.5 else SimpleNamespace
    return FuzzCase(make(candidates=tuple(hostile_candidates), **fields), None, plain)


def _fields_of(candidate: Any) -> tuple[Any, ...]:
    return tuple(getattr(candidate, f) for f in CANDIDATE_FIELDS)


def reference_builtin(context: Any) -> str:
    """vLLM's built-in victim of a well-formed context, written out independently."""
    candidates = context.candidates
    supplied = context.builtin_victim_id
    if supplied is not None and supplied in [c.request_id for c in candidates]:
        return str(supplied)
    if context.scheduling_policy == "priority":
        best = candidates[0]
        for c in candidates[1:]:
            if (c.priority, c.arrival_time) > (best.priority, best.arrival_time):
                best = c
        return str(best.request_id)
    return str(candidates[-1].request_id)
