"""Engine side of the legacy ``VictimSelector`` contract (pre-0.28 vLLM-HUST).

This module emulates the host module ``vllm/v1/core/sched/victim_selector.py``
(docs/contracts.md, "The legacy host: VictimSelector"): the ``VictimSelector`` protocol, the
built-in :class:`NoOpVictimSelector`, and :func:`get_victim_selector`, which the scheduler calls
once at startup. Discovery order:

1. ``additional_config["victim_selector_plugin_disabled"]`` truthy: the built-in selector
   (emergency bypass; nothing is discovered or imported).
2. Typed: the admitted ``vllm.scheduler.policy.v1`` components on plane ``scheduler``
   (:mod:`tracekit.hosts.bundles`), selected by ``victim_selector_component``. Once a typed
   component is selected every failure raises :class:`VictimSelectorMaterializationError`, with
   the root cause chained; the legacy path is never tried after it.
3. Legacy: ``additional_config["victim_selector_plugin"]`` names an entry point in the group
   ``vllm.victim_selector``.
4. Otherwise the built-in selector.

:class:`VictimSelectorHost` drives a selector through the
:class:`~tracekit.hosts.contract.HostContract` so that replays can compare it with the typed host.
Standard library only.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from importlib import import_module, metadata
from typing import Any, Protocol, runtime_checkable

from tracekit.hosts.bundles import (
    AdmittedComponent,
    admitted_bundle_ids,
    components_for,
    resolve_admitted_bundles,
)
from tracekit.hosts.preemption_policy import PreemptionContext, builtin_victim

__all__ = [
    "SCHEDULER_PLANE",
    "SCHEDULER_POLICY_CONTRACT",
    "VICTIM_SELECTOR_API_VERSION",
    "VICTIM_SELECTOR_COMPONENT_KEY",
    "VICTIM_SELECTOR_DISABLED_KEY",
    "VICTIM_SELECTOR_PLUGINS_GROUP",
    "VICTIM_SELECTOR_PLUGIN_CONFIG_KEY",
    "LegacyRequest",
    "NoOpVictimSelector",
    "SchedulingPolicy",
    "VictimSelector",
    "VictimSelectorHost",
    "VictimSelectorMaterializationError",
    "get_victim_selector",
    "infer_kv_utilization_from_scheduler",
]

# A selector class must declare ``vllm_victim_selector_api_version`` equal to this.
VICTIM_SELECTOR_API_VERSION = 1

# Legacy discovery: entry-point group and the additional_config key naming an entry point.
VICTIM_SELECTOR_PLUGINS_GROUP = "vllm.victim_selector"
VICTIM_SELECTOR_PLUGIN_CONFIG_KEY = "victim_selector_plugin"

# Typed discovery: the qualified component id ``<bundle_id>/<component_id>`` to materialize.
VICTIM_SELECTOR_COMPONENT_KEY = "victim_selector_component"

# Emergency bypass: a truthy value forces the built-in selector.
VICTIM_SELECTOR_DISABLED_KEY = "victim_selector_plugin_disabled"

# The typed contract and execution plane a victim selector component must declare.
SCHEDULER_POLICY_CONTRACT = "vllm.scheduler.policy.v1"
SCHEDULER_PLANE = "scheduler"

logger = logging.getLogger("vllm.victim_selector")


class SchedulingPolicy(enum.Enum):
    """The scheduler's queue policy, as the host passes it to ``pick_victim``."""

    FCFS = "fcfs"
    PRIORITY = "priority"


class LegacyRequest(Protocol):
    """What the built-in rule reads from a running request (vLLM's ``Request`` has more)."""

    @property
    def request_id(self) -> str:
        """The request's id."""
        ...

    @property
    def priority(self) -> int:
        """Larger values are preempted first under PRIORITY."""
        ...

    @property
    def arrival_time(self) -> float:
        """Later arrivals are preempted first among equal priorities."""
        ...


@runtime_checkable
class VictimSelector(Protocol):
    """A legacy victim selector, built once per scheduler by ``from_vllm_config``.

    ``pick_victim`` is called once per victim decision with the running requests in queue order
    and must return one of those request objects. The implementing class must also declare
    ``vllm_victim_selector_api_version = 1``; the host checks it before calling the factory.
    ``emit_observability_log`` is called after a step that preempted, and ``export_metrics``
    returns a flat dictionary of the selector's own counters.
    """

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> VictimSelector:
        """Build the selector from the engine configuration (``additional_config``)."""
        ...

    def pick_victim(
        self,
        running: Sequence[Any],
        policy: SchedulingPolicy,
        *,
        kv_utilization: float | None = None,
        now_s: float | None = None,
    ) -> Any:
        """Return the request of ``running`` to preempt."""
        ...

    def emit_observability_log(self, logger: logging.Logger, scheduler_name: str) -> None:
        """Log the selector's summary for one scheduler."""
        ...

    def export_metrics(self) -> dict[str, Any]:
        """The selector's counters as a flat dictionary."""
        ...


class NoOpVictimSelector:
    """The built-in victim rule, identical to upstream vLLM.

    FCFS preempts the last running request; PRIORITY preempts the request with the largest
    ``(priority, arrival_time)``, i.e. the lowest-priority request, latest arrival on ties (the
    first such request in running order if both are equal).
    """

    vllm_victim_selector_api_version = VICTIM_SELECTOR_API_VERSION

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> NoOpVictimSelector:
        """Build the built-in selector; the configuration is ignored."""
        return cls()

    def pick_victim(
        self,
        running: Sequence[LegacyRequest],
        policy: SchedulingPolicy | str,
        *,
        kv_utilization: float | None = None,
        now_s: float | None = None,
    ) -> LegacyRequest:
        """Apply the built-in rule; ``kv_utilization`` and ``now_s`` are ignored.

        Raises
        ------
        ValueError
            If ``running`` is empty or ``policy`` is not a :class:`SchedulingPolicy` (or its
            value).
        """
        if not running:
            raise ValueError("cannot pick a victim from an empty running list")
        return builtin_victim(running, SchedulingPolicy(policy).value)

    def emit_observability_log(self, logger: logging.Logger, scheduler_name: str) -> None:
        """Log nothing: the built-in rule keeps no state."""

    def export_metrics(self) -> dict[str, Any]:
        """No metrics: an empty dictionary."""
        return {}


class VictimSelectorMaterializationError(RuntimeError):
    """A selected typed component could not be materialized; startup fails closed.

    The underlying error, if any, is chained as ``__cause__``.
    """


def get_victim_selector(
    vllm_config: Any,
    *,
    entry_points: Iterable[metadata.EntryPoint] | None = None,
    bundles: Iterable[str] | None = None,
) -> VictimSelector:
    """Discover and build the scheduler's victim selector, as the host does at startup.

    Parameters
    ----------
    vllm_config
        Any object; only its ``additional_config`` mapping (may be ``None``) is read here, and
        the whole object is passed to the selector's ``from_vllm_config``.
    entry_points
        Entry points to search instead of the installed ones (``importlib.metadata``); entries
        of other groups are ignored. Tests inject lists of ``importlib.metadata.EntryPoint``.
    bundles
        Admitted bundle ids (the host's allow-list); ``None`` reads ``VLLM_EXTENSION_BUNDLES``.
        No bundle is admitted by default, so an installed but unlisted bundle is inert.

    Returns
    -------
    VictimSelector
        The typed component's selector, the legacy plugin's selector, or a
        :class:`NoOpVictimSelector` (see the module docstring for the order).

    Raises
    ------
    VictimSelectorMaterializationError
        ``victim_selector_component`` names no admitted provider, several providers are
        admitted and none is named, or the selected component fails to import, declares
        another API version, has no callable factory, raises in its factory, or returns an
        object that is not a :class:`VictimSelector`.
    tracekit.hosts.bundles.BundleAdmissionError
        An admitted bundle is missing or has an unreadable manifest.
    ValueError
        ``victim_selector_plugin`` is not a non-empty string, or names no installed entry point
        (the message lists the available ones).
    RuntimeError
        Several entry points share the requested name, or the plugin fails to load, declares
        another API version, has no callable factory, raises in its factory, or returns an
        object that is not a :class:`VictimSelector` (root cause chained).
    """
    additional_config = _additional_config(vllm_config)
    if additional_config.get(VICTIM_SELECTOR_DISABLED_KEY):
        return NoOpVictimSelector()
    if entry_points is not None:
        entry_points = list(entry_points)
    component = _select_typed_component(additional_config, bundles, entry_points)
    if component is not None:
        return _materialize_typed(component, vllm_config)
    requested = additional_config.get(VICTIM_SELECTOR_PLUGIN_CONFIG_KEY)
    if requested is None:
        return NoOpVictimSelector()
    return _load_legacy_plugin(requested, vllm_config, entry_points)


def infer_kv_utilization_from_scheduler(scheduler: Any) -> float | None:
    """The scheduler's KV-cache usage in ``[0, 1]``, or ``None`` when it cannot be read."""
    try:
        return float(scheduler.kv_cache_manager.usage)
    except (AttributeError, TypeError, ValueError):
        return None


class VictimSelectorHost:
    """Drives one legacy :class:`VictimSelector` through the ``HostContract``.

    Each :meth:`select_victim` is one host decision: the candidates are passed as the running
    requests (a :class:`~tracekit.hosts.preemption_policy.PreemptionCandidate` carries every
    attribute a selector reads), ``kv_cache_usage`` as ``kv_utilization`` and ``now`` as
    ``now_s``. Unlike the typed controller, the legacy host has no failure isolation: an
    exception from ``pick_victim`` propagates, and so does a victim that is not one of the
    running request objects. ``requesting_request_id`` and ``builtin_victim_id`` are not part
    of the legacy call.

    Parameters
    ----------
    selector
        The selector returned by :func:`get_victim_selector` (or any ``VictimSelector``).
    """

    def __init__(self, selector: VictimSelector) -> None:
        self._selector = selector
        cls = type(selector)
        self.policy_name = f"{cls.__module__}.{cls.__qualname__}"
        self.calls = 0

    @classmethod
    def from_vllm_config(
        cls,
        vllm_config: Any,
        *,
        entry_points: Iterable[metadata.EntryPoint] | None = None,
        bundles: Iterable[str] | None = None,
    ) -> VictimSelectorHost:
        """Discover the selector with :func:`get_victim_selector` and wrap it."""
        return cls(get_victim_selector(vllm_config, entry_points=entry_points, bundles=bundles))

    @property
    def selector(self) -> VictimSelector:
        """The wrapped selector (for ``export_metrics`` and snapshots)."""
        return self._selector

    def select_victim(self, context: PreemptionContext) -> str:
        """Call ``pick_victim`` once and return the victim's ``request_id``."""
        running = list(context.candidates)
        self.calls += 1
        victim = self._selector.pick_victim(
            running,
            SchedulingPolicy(context.scheduling_policy),
            kv_utilization=context.kv_cache_usage,
            now_s=context.now,
        )
        if not any(victim is request for request in running):
            raise RuntimeError(
                f"victim selector {self.policy_name} returned {victim!r}, which is not one of "
                "the running requests"
            )
        return str(victim.request_id)

    def export_stats(self) -> dict[str, Any]:
        """``policy_name`` (the selector's class) and the number of ``pick_victim`` calls."""
        return {"policy_name": self.policy_name, "calls": self.calls}


def _additional_config(vllm_config: Any) -> Mapping[str, Any]:
    additional_config = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(additional_config, Mapping):
        raise TypeError(
            f"vllm_config.additional_config must be a mapping; found "
            f"{type(additional_config).__name__}"
        )
    return additional_config


def _select_typed_component(
    additional_config: Mapping[str, Any],
    bundles: Iterable[str] | None,
    entry_points: Iterable[metadata.EntryPoint] | None,
) -> AdmittedComponent | None:
    """The one admitted scheduler-policy provider to materialize, or ``None`` for legacy."""
    admitted = admitted_bundle_ids(bundles)
    providers = components_for(
        resolve_admitted_bundles(admitted, entry_points=entry_points),
        SCHEDULER_POLICY_CONTRACT,
        SCHEDULER_PLANE,
    )
    available = sorted(provider.qualified_id for provider in providers)
    selected_id = additional_config.get(VICTIM_SELECTOR_COMPONENT_KEY)
    if selected_id is not None:
        for provider in providers:
            if provider.qualified_id == selected_id:
                return provider
        raise VictimSelectorMaterializationError(
            f"{VICTIM_SELECTOR_COMPONENT_KEY} selects no admitted scheduler-policy provider: "
            f"{selected_id!r}; available providers: {available} (admitted bundles: "
            f"{list(admitted)}; admit a bundle with bundles=[...] or VLLM_EXTENSION_BUNDLES)"
        )
    if len(providers) > 1:
        raise VictimSelectorMaterializationError(
            "multiple admitted scheduler-policy providers require an explicit "
            f"{VICTIM_SELECTOR_COMPONENT_KEY}: {available}"
        )
    return providers[0] if providers else None


def _import_reference(implementation_ref: str) -> Any:
    """Import ``module:attribute.path``; errors propagate to the caller."""
    module_name, separator, attribute_path = implementation_ref.partition(":")
    if not separator or not module_name or not attribute_path:
        raise ValueError(
            f"implementation_ref must use module:attribute syntax; found {implementation_ref!r}"
        )
    implementation: Any = import_module(module_name)
    for attribute in attribute_path.split("."):
        implementation = getattr(implementation, attribute)
    return implementation


def _source_of(implementation: Any, fallback: str) -> str:
    try:
        return inspect.getsourcefile(implementation) or inspect.getfile(implementation)
    except (OSError, TypeError):
        return fallback


def _materialize_typed(component: AdmittedComponent, vllm_config: Any) -> VictimSelector:
    """Import, check and build the selected component; every failure fails closed."""
    name = component.qualified_id
    try:
        implementation = _import_reference(component.implementation_ref)
    except Exception as error:
        raise VictimSelectorMaterializationError(
            f"failed to import scheduler-policy implementation {component.implementation_ref!r} "
            f"of component {name!r}"
        ) from error
    api_version = getattr(implementation, "vllm_victim_selector_api_version", None)
    if api_version != VICTIM_SELECTOR_API_VERSION:
        raise VictimSelectorMaterializationError(
            f"scheduler-policy component {name!r} declares API version {api_version!r}; "
            f"expected {VICTIM_SELECTOR_API_VERSION}"
        )
    factory = getattr(implementation, "from_vllm_config", None)
    if not callable(factory):
        raise VictimSelectorMaterializationError(
            f"scheduler-policy component {name!r} does not expose a callable from_vllm_config"
        )
    try:
        selector = factory(vllm_config)
    except Exception as error:
        raise VictimSelectorMaterializationError(
            f"scheduler-policy component {name!r} failed to initialize"
        ) from error
    if not isinstance(selector, VictimSelector):
        raise VictimSelectorMaterializationError(
            f"scheduler-policy component {name!r} returned an object that does not implement "
            "VictimSelector"
        )
    logger.info(
        "Loaded typed victim selector component=%s source=%s api_version=%s",
        name,
        _source_of(implementation, component.implementation_ref),
        api_version,
    )
    return selector


def _load_legacy_plugin(
    requested: Any,
    vllm_config: Any,
    entry_points: Iterable[metadata.EntryPoint] | None,
) -> VictimSelector:
    """Load the ``vllm.victim_selector`` entry point named by ``victim_selector_plugin``."""
    if not isinstance(requested, str) or not requested.strip():
        raise ValueError(
            f"additional_config.{VICTIM_SELECTOR_PLUGIN_CONFIG_KEY} must be a non-empty string; "
            f"found {requested!r}"
        )
    requested = requested.strip()
    if entry_points is None:
        group = list(metadata.entry_points(group=VICTIM_SELECTOR_PLUGINS_GROUP))
    else:
        group = [ep for ep in entry_points if ep.group == VICTIM_SELECTOR_PLUGINS_GROUP]
    candidates = [ep for ep in group if ep.name == requested]
    if not candidates:
        available = ", ".join(sorted({ep.name for ep in group})) or "none"
        raise ValueError(
            f"Requested victim selector plugin {requested!r} is not installed; available "
            f"plugins: {available}"
        )
    if len(candidates) > 1:
        raise RuntimeError(
            f"Multiple victim selector entry points are registered as {requested!r} "
            f"({', '.join(ep.value for ep in candidates)}); uninstall the duplicate distributions"
        )
    selected = candidates[0]
    try:
        selector_cls = selected.load()
        api_version = getattr(selector_cls, "vllm_victim_selector_api_version", None)
        if api_version != VICTIM_SELECTOR_API_VERSION:
            raise TypeError(
                f"plugin declares victim-selector API version {api_version!r}; expected "
                f"{VICTIM_SELECTOR_API_VERSION}"
            )
        factory = getattr(selector_cls, "from_vllm_config", None)
        if not callable(factory):
            raise TypeError("plugin does not define a callable from_vllm_config()")
        selector = factory(vllm_config)
        if not isinstance(selector, VictimSelector):
            raise TypeError("plugin does not implement the VictimSelector protocol")
    except Exception as error:
        raise RuntimeError(
            f"Failed to load requested victim selector plugin {selected.name!r}: {error}"
        ) from error
    distribution = getattr(selected, "dist", None)
    logger.info(
        "Loaded victim selector plugin %r distribution=%s==%s source=%s api_version=%s",
        selected.name,
        getattr(distribution, "name", None) or "unknown",
        getattr(distribution, "version", None) or "unknown",
        _source_of(selector_cls, selected.value),
        api_version,
    )
    return selector
