"""Engine side of the typed ``vllm.preemption-policy.v1`` contract.

This module emulates what a vLLM-HUST host provides
(docs/contracts.md#the-typed-host-vllmpreemption-policyv1): the
frozen candidate and context types, the ``PreemptionPolicy`` protocol, the statistics record, and
the ``PreemptionPolicyController`` that owns one policy per engine process. Standard library only:
engines and the embedded engine import it without the toolkit's dependencies.
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from typing import Any, Literal, Protocol, runtime_checkable

# vLLM's built-in victim rule, written once (docs/contracts.md, "The built-in victim"). It lives in
# the standard-library-only policy package because bidkv never imports tracekit.
from bidkv.adapters.vllm_hust.builtin import builtin_victim

__all__ = [
    "CANDIDATE_FIELDS",
    "PREEMPTION_POLICY_API_VERSION",
    "PolicyOutcome",
    "PreemptionCandidate",
    "PreemptionContext",
    "PreemptionPolicy",
    "PreemptionPolicyController",
    "PreemptionPolicyStats",
    "SchedulingPolicyName",
    "builtin_victim",
    "builtin_victim_id",
    "candidates_of",
    "context_problem",
    "decision_reason_of",
    "fallback_victim_id",
    "load_policy",
    "resolve_qualname",
]

PREEMPTION_POLICY_API_VERSION = "1.0"

SchedulingPolicyName = Literal["fcfs", "priority"]

# What the controller did with one call; recorded per decision in traces.
PolicyOutcome = Literal["selected", "abstained", "invalid", "exception", "disabled", "builtin"]

logger = logging.getLogger("vllm.preemption_policy")


@dataclass(frozen=True, slots=True)
class PreemptionCandidate:
    """One running request, as the host shows it to a policy (positional order is the contract)."""

    request_id: str
    priority: int
    arrival_time: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    num_preemptions: int
    max_tokens: int


# The candidate's field names in positional order: what recorders store and replays rebuild.
CANDIDATE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PreemptionCandidate))
# Each field read from a request of the running queue, by arrival attribute name.
_READERS = {
    arrival: attrgetter(*(arrival if f == "arrival_time" else f for f in CANDIDATE_FIELDS))
    for arrival in ("arrival_time", "arrival_s")
}


def candidates_of(
    running: Iterable[Any], arrival: Literal["arrival_time", "arrival_s"] = "arrival_time"
) -> tuple[PreemptionCandidate, ...]:
    """The running queue as a host shows it to a policy: one candidate per request, in order.

    Each request has the candidate's fields under the same names (vLLM's ``Request`` does),
    except its arrival, named ``arrival`` (the embedded engine's requests call it ``arrival_s``).
    """
    read = _READERS[arrival]
    return tuple(PreemptionCandidate(*read(r)) for r in running)


@dataclass(frozen=True, slots=True)
class PreemptionContext:
    """Everything a policy may read for one victim decision.

    ``candidates`` are in host (running-queue) order and include the requesting request.
    ``requesting_request_id`` is the running request whose KV allocation just failed.
    ``builtin_victim_id`` is the host's stable fallback victim (optional in API 1.0).
    """

    candidates: tuple[PreemptionCandidate, ...]
    scheduling_policy: SchedulingPolicyName
    requesting_request_id: str
    kv_cache_usage: float
    now: float
    builtin_victim_id: str | None = None


@runtime_checkable
class PreemptionPolicy(Protocol):
    """A victim policy: return a candidate's ``request_id``, or ``None`` to abstain.

    Abstaining hands the decision to the host's built-in victim; the policy stays enabled. Any
    other value that is not exactly a candidate id, or an exception, disables the policy for the
    rest of the engine process. A policy must not keep references to the context's objects.
    """

    def select_victim(self, context: PreemptionContext) -> str | None:
        """Choose the victim for ``context`` or abstain with ``None``."""
        ...


@dataclass(slots=True)
class PreemptionPolicyStats:
    """Cumulative per-process counters exported by the controller."""

    policy_name: str = "builtin"
    enabled: bool = False
    calls: int = 0
    selections: int = 0
    abstentions: int = 0
    failures: int = 0
    invalid_selections: int = 0


def builtin_victim_id(context: PreemptionContext) -> str:
    """The host's built-in victim (docs/contracts.md, "The built-in victim").

    A host-supplied ``builtin_victim_id`` that names a candidate wins; otherwise PRIORITY takes
    ``max(priority, arrival_time)`` (first maximal element in host order) and FCFS the tail.
    """
    candidates = context.candidates
    if not candidates:
        raise ValueError("cannot select a preemption victim from an empty set")
    supplied = context.builtin_victim_id
    if supplied is not None and any(c.request_id == supplied for c in candidates):
        return supplied
    return builtin_victim(candidates, context.scheduling_policy).request_id


# What the typed contract says each candidate field holds: a string id, a finite time, counts.
_GET_CANDIDATE = attrgetter(*CANDIDATE_FIELDS)
_POLICIES = ("fcfs", "priority")
_MISSING = object()


def context_problem(context: object) -> str | None:
    """What makes ``context`` break the typed contract, or ``None`` when it keeps it.

    Checked (docs/contracts.md, "Malformed contexts"): ``candidates`` is a non-empty tuple (or
    list); every candidate has every :data:`CANDIDATE_FIELDS` field, ``request_id`` a string,
    ``arrival_time`` a finite number and the other six integers (``bool`` is not one);
    ``scheduling_policy`` is ``"fcfs"`` or ``"priority"``; ``requesting_request_id`` is a string;
    ``kv_cache_usage`` and ``now`` are finite numbers; ``builtin_victim_id`` is ``None`` or a
    string. Values are not range-checked: the policy's own coercions apply to them.

    Parameters
    ----------
    context
        Any object.

    Returns
    -------
    str or None
        One line naming the candidate (its index and id) and the field, for example
        ``"candidates[2] (request_id 'r2'): priority is None; expected an int"``. Never raises.
    """
    return _checked(context)[0]


def _checked(context: object) -> tuple[str | None, bool]:
    """``context_problem``, and whether every value is of its exact type (no subclass)."""
    try:
        return _context_problem(context)
    except Exception as exc:  # an object whose attributes or length raise
        return f"the context cannot be read ({type(exc).__name__}: {_short(_safe_str(exc))})", True


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def _plain(value: object) -> Any:
    """An exact ``str``, ``int`` or ``float`` copy of ``value``, or None; never raises.

    A subclass's own methods (``__eq__``, ``__lt__``, ``__hash__``, ``__str__``, ...) are never
    called: the copy is made by the base type's slot. ``bool`` and every other type give None.
    """
    try:
        kind = type(value)
        if kind is str or kind is int or kind is float:
            return value
        if isinstance(value, bool):
            return None
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, int):
            return int.__int__(value)
        if isinstance(value, float):
            return float.__float__(value)
    except Exception:  # an object whose __class__ raises
        pass
    return None


def _plain_context(context: Any) -> PreemptionContext:
    """A checked context whose values include subclasses, rebuilt from exact copies of them.

    The policy and the built-in rule then compare, sort and hash plain values only: a ``str``,
    ``int`` or ``float`` subclass whose methods raise (or lie) cannot make them raise.
    """
    candidates = tuple(
        PreemptionCandidate(*(_plain(v) for v in _GET_CANDIDATE(c))) for c in context.candidates
    )
    return PreemptionContext(
        candidates,
        _plain(context.scheduling_policy),
        _plain(context.requesting_request_id),
        _plain(context.kv_cache_usage),
        _plain(context.now),
        _plain(getattr(context, "builtin_victim_id", None)),
    )


def _safe_repr(value: object) -> str:
    # repr() of anything, even of an object whose __repr__ raises.
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def _short(value: object, limit: int = 80) -> str:
    # A bounded, one-line repr of a value named in a malformed context's message.
    text = " ".join(_safe_repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return _is_int(value)


def _field_problem(name: str, value: object) -> str | None:
    if name == "request_id":
        ok, expected = isinstance(value, str), "a string"
    elif name == "arrival_time":
        ok, expected = _is_finite(value), "a finite number"
    else:
        ok, expected = _is_int(value), "an int"
    return None if ok else f"{name} is {_short(value)}; expected {expected}"


def _context_problem(context: object) -> tuple[str | None, bool]:
    candidates = getattr(context, "candidates", _MISSING)
    if candidates is _MISSING:
        return "the context has no candidates field", True
    if not isinstance(candidates, tuple | list):
        return f"candidates is a {type(candidates).__name__}; expected a tuple of candidates", True
    if not candidates:
        return "candidates is empty; a host asks only with at least one running request", True
    policy = getattr(context, "scheduling_policy", _MISSING)
    # Compared as a plain copy: a str subclass's own __eq__ is not called.
    if _plain(policy) not in _POLICIES or not isinstance(policy, str):
        return f"scheduling_policy is {_short(policy)}; expected 'fcfs' or 'priority'", True
    requester = getattr(context, "requesting_request_id", _MISSING)
    if not isinstance(requester, str):
        return f"requesting_request_id is {_short(requester)}; expected a string", True
    kv, now = getattr(context, "kv_cache_usage", _MISSING), getattr(context, "now", _MISSING)
    for name, value in (("kv_cache_usage", kv), ("now", now)):
        if not _is_finite(value):
            return f"{name} is {_short(value)}; expected a finite number", True
    supplied = getattr(context, "builtin_victim_id", None)
    if supplied is not None and not isinstance(supplied, str):
        return f"builtin_victim_id is {_short(supplied)}; expected a string or None", True
    exact = (
        type(policy) is str
        and type(requester) is str
        and type(kv) in _NUMBERS
        and type(now) in _NUMBERS
        and (supplied is None or type(supplied) is str)
    )
    get = _GET_CANDIDATE
    for index, candidate in enumerate(candidates):
        try:
            values = get(candidate)
        except AttributeError:
            rid = getattr(candidate, "request_id", None)
            missing = next(f for f in CANDIDATE_FIELDS if not hasattr(candidate, f))
            return f"{_which(index, rid)}: has no {missing} field", True
        rid, priority, arrival, prompt, output, computed, preemptions, max_tokens = values
        # Exact classes first, spelled out (a generator would cost three times as much): a typed
        # host's candidates pass with nine identity checks. ``arrival - arrival`` is NaN for an
        # infinite or NaN arrival, so the equality also checks that it is finite.
        if (
            rid.__class__ is str
            and priority.__class__ is int
            and arrival.__class__ is float
            and arrival - arrival == 0.0
            and prompt.__class__ is int
            and output.__class__ is int
            and computed.__class__ is int
            and preemptions.__class__ is int
            and max_tokens.__class__ is int
        ):
            continue
        for name, value in zip(CANDIDATE_FIELDS, values, strict=True):
            problem = _field_problem(name, value)
            if problem is not None:
                return f"{_which(index, rid)}: {problem}", True
            exact = exact and type(value) in _EXACT[name]
    return None, exact


#: The exact types of each candidate field (``arrival_time`` may be an int); a subclass of them
#: keeps the contract but is read as a plain copy (:func:`_plain_context`).
_NUMBERS: tuple[type, ...] = (int, float)
_EXACT: dict[str, tuple[type, ...]] = {
    name: (str,) if name == "request_id" else (int,) for name in CANDIDATE_FIELDS
}
_EXACT["arrival_time"] = _NUMBERS


def _which(index: int, rid: object) -> str:
    plain = _plain(rid)
    return (
        f"candidates[{index}] (request_id {plain!r})"
        if isinstance(plain, str)
        else (f"candidates[{index}]")
    )


def fallback_victim_id(context: object) -> str:
    """The victim the controller applies to a malformed context; never raises.

    In order (docs/contracts.md, "Malformed contexts"): the context's ``builtin_victim_id`` if it
    names a candidate; the built-in rule if every field it reads is well formed (PRIORITY: every
    candidate's id, priority and arrival; FCFS: the last candidate's id); the last candidate with
    a string id; the requester's id if it is a non-empty string (the request whose allocation
    failed is running, so it can always be preempted); ``""`` for a context that names no
    request at all. Every value is read as a plain copy (a ``str``, ``int`` or ``float``
    subclass's own methods are never called), and the id returned is a plain ``str``.
    """
    try:
        return _fallback_victim_id(context)
    except Exception:  # a context that defeats even plain reads (its length, its iteration)
        requester = _plain(_safe_get(context, "requesting_request_id"))
        return requester if type(requester) is str else ""


def _fallback_victim_id(context: object) -> str:
    candidates = _safe_get(context, "candidates")
    candidates = tuple(candidates) if isinstance(candidates, tuple | list) else ()
    ids = [_plain(_safe_get(c, "request_id")) for c in candidates]
    ids = [rid if type(rid) is str else None for rid in ids]
    named = [rid for rid in ids if rid is not None]
    supplied = _plain(_safe_get(context, "builtin_victim_id"))
    if type(supplied) is str and supplied in named:
        return supplied
    last = ids[-1] if ids else None
    if last is not None:
        policy = _plain(_safe_get(context, "scheduling_policy"))
        # Under PRIORITY the rule reads every candidate's key, which must be well formed; under
        # FCFS only the last id.
        keys: list[tuple[Any, Any]] = []
        if policy == "priority":
            keys = [
                (_plain(_safe_get(c, "priority")), _plain(_safe_get(c, "arrival_time")))
                for c in candidates
            ]
        if not keys or (
            len(named) == len(ids)
            and all(type(p) is int and type(a) in _NUMBERS and math.isfinite(a) for p, a in keys)
        ):
            victim = ids[builtin_victim(range(len(ids)), policy, keys.__getitem__)]
            assert victim is not None
            return victim
    if named:
        return named[-1]
    requester = _plain(_safe_get(context, "requesting_request_id"))
    return requester if type(requester) is str else ""


def _safe_get(obj: object, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def decision_reason_of(policy: object) -> str | None:
    """Why ``policy`` made its last decision, if it says; ``None`` otherwise.

    Not part of the host contract: recorders read it so that traces can say why (for BidKV:
    ``strategy``, ``gate_fallback``, ``liveness_abstain``, ``cascade_abstain``, ...). Tried in
    order: ``last_decision_reason()``, then the ``decision_reason`` of ``get_last_decision()``
    or ``last_decision``.
    """
    if policy is None:
        return None
    reason = getattr(policy, "last_decision_reason", None)
    if callable(reason):
        value = reason()
        return None if value is None else str(value)
    getter = getattr(policy, "get_last_decision", None)
    decision = getter() if callable(getter) else getattr(policy, "last_decision", None)
    if callable(decision):
        decision = decision()
    if isinstance(decision, dict):
        value = decision.get("decision_reason")
        return None if value is None else str(value)
    return None


def resolve_qualname(qualname: str) -> Any:
    """Import ``package.module.Object`` (or ``package.module:Object``) and return the object."""
    if ":" in qualname:
        module_name, _, attr = qualname.partition(":")
    else:
        module_name, _, attr = qualname.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"preemption_policy {qualname!r} is not a qualified name module.Object")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_policy(configured: Any, vllm_config: Any = None) -> PreemptionPolicy | None:
    """Load a policy the way the host does at startup (docs/contracts.md, "Loading").

    ``configured`` is ``None`` (built-in only), a qualified name, a class, a factory object with
    ``from_vllm_config``, or a policy instance. A name follows the host's rule exactly (factory,
    else class, else the object). A policy instance passed in code is used as it is. Constructor
    and configuration errors propagate so that the engine fails at startup.
    """
    if configured is None:
        return None
    if not isinstance(configured, str | type) and isinstance(configured, PreemptionPolicy):
        # A ready policy object passed in code (not by name) is used as it is: calling its
        # from_vllm_config would silently replace its configuration with a fresh one.
        return configured
    implementation = resolve_qualname(configured) if isinstance(configured, str) else configured
    factory = getattr(implementation, "from_vllm_config", None)
    if callable(factory):
        policy = factory(vllm_config)
    elif isinstance(implementation, type):
        policy = implementation()
    else:
        policy = implementation
    if not isinstance(policy, PreemptionPolicy):
        raise TypeError("preemption_policy must resolve to an object implementing PreemptionPolicy")
    return policy


class PreemptionPolicyController:
    """Owns one policy for one engine process and always returns a valid victim id.

    Counts calls, selections, abstentions, failures and invalid selections; applies the built-in
    victim on abstention; on an exception, an id that is not a candidate or a context that breaks
    the contract, logs once and restores the built-in policy for the rest of the process
    (docs/contracts.md#the-controller-and-its-counters, docs/contracts.md, "Malformed contexts").
    It never raises past :meth:`select_victim`, except on a call from another thread.

    Parameters
    ----------
    policy
        ``None``, a qualified name, a class, a factory or an instance (see :func:`load_policy`).
    vllm_config
        Passed to ``from_vllm_config`` factories.
    on_call
        Optional observer called after every policy call with ``(outcome, raw_result, victim)``.
        Recorders use it; it never changes the selection.
    check_thread
        Refuse calls from a thread other than the constructing one, as newer hosts do.
    """

    def __init__(
        self,
        policy: Any = None,
        vllm_config: Any = None,
        *,
        on_call: Callable[[PolicyOutcome, object, str], None] | None = None,
        check_thread: bool = True,
    ) -> None:
        self._policy = load_policy(policy, vllm_config)
        name = "builtin"
        if self._policy is not None:
            cls = type(self._policy)
            name = f"{cls.__module__}.{cls.__qualname__}"
        self.stats = PreemptionPolicyStats(policy_name=name, enabled=self._policy is not None)
        self._on_call = on_call
        self._owner = threading.get_ident() if check_thread else None
        logger.info("Preemption policy initialized: policy=%s enabled=%s", name, self.stats.enabled)

    @property
    def policy(self) -> PreemptionPolicy | None:
        """The active policy, or ``None`` once disabled or when none was configured."""
        return self._policy

    def select_victim(self, context: PreemptionContext) -> str:
        """Ask the policy for a victim and return a valid candidate id; never raises.

        The context is checked first and the built-in victim computed inside the same guard as
        the policy's call (docs/contracts.md, "Malformed contexts"): a context that breaks the
        contract is a contract failure, named by its candidate and field, and handled as one
        (the policy is not called but disabled, and :func:`fallback_victim_id` is applied).
        The one exception is a call from another thread, refused with ``RuntimeError``.
        """
        if self._owner is not None and threading.get_ident() != self._owner:
            raise RuntimeError("PreemptionPolicyController must be used by its scheduler thread")
        policy = self._policy
        stats = self.stats
        try:
            problem, exact = _checked(context)
            if problem is None and not exact:
                # Subclasses of str, int or float keep the contract, but their own methods may
                # raise or lie: the policy and the built-in rule get plain copies.
                context = _plain_context(context)
            fallback = fallback_victim_id(context) if problem else builtin_victim_id(context)
        except Exception as exc:  # unreachable on a checked context; kept inside the guard
            problem = f"the built-in victim cannot be computed ({type(exc).__name__})"
            fallback = fallback_victim_id(context)
        if problem is not None:
            return self._malformed(problem, fallback)
        if policy is None:
            self._notify(
                "disabled" if stats.policy_name != "builtin" else "builtin", None, fallback
            )
            return fallback
        stats.calls += 1
        try:
            selected = policy.select_victim(context)
        except Exception:
            self._disable("raised an exception", exc_info=True)
            self._notify("exception", None, fallback)
            return fallback
        if selected is None:
            stats.abstentions += 1
            self._notify("abstained", None, fallback)
            return fallback
        # Compared as a plain copy: a str subclass's __eq__ may raise, or say yes to anything.
        plain = _plain(selected)
        try:
            valid = type(plain) is str and any(c.request_id == plain for c in context.candidates)
        except Exception:  # unreachable: a checked context's ids are plain strings
            valid = False
        if not valid:
            stats.invalid_selections += 1
            self._disable(f"returned unknown request ID {_safe_repr(selected)}")
            self._notify("invalid", selected, fallback)
            return fallback
        stats.selections += 1
        self._notify("selected", selected, plain)
        return plain

    def _malformed(self, problem: str, fallback: str) -> str:
        """A context that breaks the contract: the policy is not asked, and is disabled."""
        if self._policy is None:
            logger.error(
                "Preemption context is malformed (%s); applying the fallback victim %r",
                problem,
                fallback,
            )
            outcome: PolicyOutcome = (
                "disabled" if self.stats.policy_name != "builtin" else "builtin"
            )
            self._notify(outcome, None, fallback)
            return fallback
        self.stats.calls += 1
        self._disable(f"received a malformed context: {problem}")
        self._notify("exception", None, fallback)
        return fallback

    def export_stats(self) -> dict[str, Any]:
        """The counters as a plain dictionary."""
        return asdict(self.stats)

    def _disable(self, reason: str, *, exc_info: bool = False) -> None:
        self.stats.failures += 1
        self.stats.enabled = False
        self._policy = None
        logger.error(
            "Preemption policy %s failed (%s); disabling it and restoring the built-in policy "
            "for this engine process",
            self.stats.policy_name,
            reason,
            exc_info=exc_info,
        )

    def _notify(self, outcome: PolicyOutcome, raw: object, victim: str) -> None:
        if self._on_call is not None:
            self._on_call(outcome, raw, victim)
