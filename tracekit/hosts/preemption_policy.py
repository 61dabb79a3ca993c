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
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
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
    "decision_reason_of",
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
    victim on abstention; on an exception or an id that is not a candidate, logs once and restores
    the built-in policy for the rest of the process
    (docs/contracts.md#the-controller-and-its-counters).

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
        """Ask the policy for a victim and return a valid candidate id."""
        if self._owner is not None and threading.get_ident() != self._owner:
            raise RuntimeError("PreemptionPolicyController must be used by its scheduler thread")
        fallback = builtin_victim_id(context)
        policy = self._policy
        if policy is None:
            self._notify(
                "disabled" if self.stats.policy_name != "builtin" else "builtin", None, fallback
            )
            return fallback
        stats = self.stats
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
        if not isinstance(selected, str) or not any(
            c.request_id == selected for c in context.candidates
        ):
            stats.invalid_selections += 1
            self._disable(f"returned unknown request ID {selected!r}")
            self._notify("invalid", selected, fallback)
            return fallback
        stats.selections += 1
        self._notify("selected", selected, selected)
        return selected

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
