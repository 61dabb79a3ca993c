"""``run_conformance``: the failure and rollback checks through both hosts.

The checks: docs/diff.md, "Conformance: tracekit diff --conformance [--strategy ...]".

For every production strategy, with its full configuration in ``additional_config``, the policy
is loaded the three ways an engine loads it:

- legacy entry point: ``get_victim_selector`` with ``victim_selector_plugin: "bidkv"``;
- legacy typed bundle: ``get_victim_selector`` with ``victim_selector_component:
  "org.vllm-hust.bidkv/victim-selector"`` and the bundle admitted;
- typed: ``PreemptionPolicyController("bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy",
  vllm_config)``.

Checks (``<strategy>/<group>/<check>``):

- ``startup/valid``: every path starts and the three policies choose the same victims on the
  probe contexts (contexts of a built-in run, without a requester, so that the cascade guard,
  which only the typed contract can trigger, stays out of it);
- ``startup/<case>``: each invalid configuration fails startup on every path with the same root
  cause (the innermost chained exception: same type, same message);
- ``rollback/disable-switch``: ``victim_selector_plugin_disabled: true`` gives the built-in
  selector even with a plugin and an admitted component configured; the typed host without
  ``--preemption-policy`` is the built-in policy;
- ``rollback/manifest-removed-legacy-plugin``: with no bundle admitted, the entry point still
  loads the policy (the legacy rollback of the reference);
- ``rollback/manifest-removed-builtin``: with the bundle and the entry point gone and no plugin
  configured, both hosts apply the built-in rule;
- ``rollback/manifest-removed-component-fails-closed``: a component still configured while its
  bundle is gone fails startup instead of silently running something else;
- ``rollback/typed-invalid-selection``, ``rollback/typed-exception``: see
  :mod:`tracekit.conformance.rollback`;
- ``rollback/legacy-no-isolation``: the same exception stops a legacy engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from types import SimpleNamespace
from typing import Any

from tracekit.conformance.report import Check, ConformanceReport
from tracekit.conformance.rollback import (
    captured_logs,
    check_legacy_no_isolation,
    check_typed_rollback,
    default_engine_config,
    default_workload,
)
from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
from tracekit.errors import ConfigError
from tracekit.hosts import preemption_policy as typed_host
from tracekit.hosts import victim_selector as legacy_host
from tracekit.hosts.preemption_policy import PreemptionContext
from tracekit.strategies import POLICY_CLASS, PRODUCTION_STRATEGIES, resolve_strategy

__all__ = [
    "INVALID_CONFIGS",
    "ConformanceTargets",
    "run_conformance",
]

# Invalid configurations and the setting each breaks (docs/policy.md, "Settings").
INVALID_CONFIGS: dict[str, dict[str, Any]] = {
    "negative-completion-weight": {"utility_completion_weight": -1},
    "kv-gate-above-one": {"utility_kv_gate": 2},
    "unknown-strategy": {"utility_strategy": "no-such-strategy"},
}
PROBES = 12


@dataclass(frozen=True, slots=True)
class ConformanceTargets:
    """What the hosts load; the defaults are the shipped policy.

    Attributes
    ----------
    typed_policy
        ``--preemption-policy`` of the typed host.
    legacy_plugin
        ``victim_selector_plugin``: the ``vllm.victim_selector`` entry point name.
    component
        ``victim_selector_component``: ``<bundle_id>/<component_id>`` of the Bundle v1 manifest.
    entry_points
        Entry points the legacy host searches (both the ``vllm.victim_selector`` and the
        extension-bundle groups); None means the installed ones.
    """

    typed_policy: str = POLICY_CLASS
    legacy_plugin: str = "bidkv"
    component: str = "org.vllm-hust.bidkv/victim-selector"
    entry_points: tuple[EntryPoint, ...] | None = None

    @property
    def bundle_id(self) -> str:
        """The bundle the component belongs to."""
        return self.component.partition("/")[0]

    def without_plugin(self) -> tuple[EntryPoint, ...]:
        """The entry points with the policy's distribution uninstalled (no plugin, no bundle)."""
        if self.entry_points is None:
            from importlib.metadata import entry_points

            found = [
                ep
                for group in (legacy_host.VICTIM_SELECTOR_PLUGINS_GROUP, "vllm.extension_bundles")
                for ep in entry_points(group=group)
            ]
        else:
            found = list(self.entry_points)
        return tuple(ep for ep in found if ep.name not in (self.legacy_plugin, self.bundle_id))


def _config(additional_config: Mapping[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(additional_config=dict(additional_config))


def _root(error: BaseException) -> BaseException:
    """The innermost chained cause: what the policy itself raised."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error


class _Paths:
    """The three ways to load the policy, for one target."""

    def __init__(self, targets: ConformanceTargets) -> None:
        self.targets = targets

    def legacy_plugin(self, settings: Mapping[str, Any], **kw: Any) -> Any:
        ac = {**settings, legacy_host.VICTIM_SELECTOR_PLUGIN_CONFIG_KEY: self.targets.legacy_plugin}
        return legacy_host.get_victim_selector(
            _config(ac), entry_points=kw.get("entry_points", self.targets.entry_points), bundles=[]
        )

    def legacy_bundle(self, settings: Mapping[str, Any]) -> Any:
        ac = {**settings, legacy_host.VICTIM_SELECTOR_COMPONENT_KEY: self.targets.component}
        return legacy_host.get_victim_selector(
            _config(ac), entry_points=self.targets.entry_points, bundles=[self.targets.bundle_id]
        )

    def typed(self, settings: Mapping[str, Any] | None) -> typed_host.PreemptionPolicyController:
        policy = None if settings is None else self.targets.typed_policy
        return typed_host.PreemptionPolicyController(
            policy, _config(settings or {}), check_thread=False
        )

    def all(self, settings: Mapping[str, Any]) -> dict[str, Callable[[], Any]]:
        return {
            "legacy entry point": lambda: self.legacy_plugin(settings),
            "legacy bundle": lambda: self.legacy_bundle(settings),
            "typed": lambda: self.typed(settings),
        }


def probe_contexts(
    workload: Sequence[EngineRequest], engine_config: EngineConfig, limit: int = PROBES
) -> list[PreemptionContext]:
    """The first ``limit`` decision contexts of a built-in run, without a requester."""
    result = run_engine(workload, engine_config, BuiltinHost())
    return [
        PreemptionContext(
            d.candidates,
            engine_config.scheduling_policy,
            "",
            d.kv_cache_usage,
            d.time_s,
            d.builtin_victim_id,
        )
        for d in result.decisions[:limit]
    ]


def _choices(host: Any, contexts: list[PreemptionContext]) -> list[str]:
    if isinstance(host, typed_host.PreemptionPolicyController):
        return [host.select_victim(c) for c in contexts]
    return [legacy_host.VictimSelectorHost(host).select_victim(c) for c in contexts]


def _check_valid(name: str, paths: _Paths, settings: dict[str, Any], probes: list[Any]) -> Check:
    choices = {}
    for path, build in paths.all(settings).items():
        try:
            host = build()
        except Exception as error:
            return Check(name, False, f"{path} failed to start: {_root(error)!r}")
        if isinstance(host, legacy_host.NoOpVictimSelector):
            return Check(name, False, f"{path} loaded the built-in selector, not the policy")
        if isinstance(host, typed_host.PreemptionPolicyController) and not host.stats.enabled:
            return Check(name, False, f"{path} has no policy enabled")
        choices[path] = _choices(host, probes)
    reference = choices["typed"]
    for path, victims in choices.items():
        if victims != reference:
            first = next(
                i for i, (a, b) in enumerate(zip(victims, reference, strict=True)) if a != b
            )
            return Check(
                name,
                False,
                f"{path} chose {victims[first]!r} at probe {first}, typed chose "
                f"{reference[first]!r}: the paths do not run the same configuration",
            )
    return Check(
        name, True, f"all three paths start and choose the same victims on {len(probes)} probes"
    )


def _check_invalid(name: str, paths: _Paths, settings: dict[str, Any]) -> Check:
    causes = {}
    for path, build in paths.all(settings).items():
        try:
            build()
        except Exception as error:
            root = _root(error)
            causes[path] = (type(root).__name__, str(root))
        else:
            return Check(name, False, f"{path} started with an invalid configuration")
    if len(set(causes.values())) != 1:
        shown = "; ".join(f"{p}: {t}: {m}" for p, (t, m) in causes.items())
        return Check(name, False, f"different root causes: {shown}")
    kind, message = next(iter(causes.values()))
    return Check(name, True, f"startup fails on all three paths with {kind}: {message}")


def _builtin_everywhere(
    legacy: Any, typed: typed_host.PreemptionPolicyController, probes: list[Any]
) -> str | None:
    """None when both hosts are the built-in rule on the probes, else what is wrong."""
    if not isinstance(legacy, legacy_host.NoOpVictimSelector):
        return f"the legacy host loaded {type(legacy).__qualname__}, not the built-in selector"
    stats = typed.export_stats()
    if stats["policy_name"] != "builtin" or stats["enabled"]:
        return f"the typed host runs {stats['policy_name']} (enabled {stats['enabled']})"
    builtin = [typed_host.builtin_victim_id(c) for c in probes]
    if _choices(legacy, probes) != builtin or _choices(typed, probes) != builtin:
        return "a host did not apply the built-in victim on the probes"
    if typed.export_stats()["calls"]:
        return "the typed host counted policy calls"
    return None


def _check_disable(name: str, paths: _Paths, settings: dict[str, Any], probes: list[Any]) -> Check:
    targets = paths.targets
    ac = {
        **settings,
        legacy_host.VICTIM_SELECTOR_PLUGIN_CONFIG_KEY: targets.legacy_plugin,
        legacy_host.VICTIM_SELECTOR_COMPONENT_KEY: targets.component,
        legacy_host.VICTIM_SELECTOR_DISABLED_KEY: True,
    }
    try:
        legacy = legacy_host.get_victim_selector(
            _config(ac), entry_points=targets.entry_points, bundles=[targets.bundle_id]
        )
    except Exception as error:
        return Check(name, False, f"the disabled legacy host failed to start: {_root(error)!r}")
    problem = _builtin_everywhere(legacy, paths.typed(None), probes)
    if problem:
        return Check(name, False, problem)
    return Check(
        name,
        True,
        "victim_selector_plugin_disabled gives the built-in selector; the typed host "
        "without --preemption-policy is the built-in policy",
    )


def _check_removed_plugin(name: str, paths: _Paths, settings: dict[str, Any]) -> Check:
    # The reference: what the host loads while the manifest is admitted.
    try:
        reference = type(paths.legacy_bundle(settings))
        selector = paths.legacy_plugin(settings)
    except Exception as error:
        return Check(name, False, f"the legacy host failed to start: {_root(error)!r}")
    if isinstance(selector, legacy_host.NoOpVictimSelector) or type(selector) is not reference:
        return Check(
            name,
            False,
            f"loaded {type(selector).__qualname__}, expected {reference.__qualname__} (what the "
            "admitted bundle's component loads)",
        )
    return Check(
        name,
        True,
        f"with no bundle admitted, victim_selector_plugin still loads "
        f"{type(selector).__qualname__}, as the bundle's component did",
    )


def _check_removed_builtin(
    name: str, paths: _Paths, settings: dict[str, Any], probes: list[Any]
) -> Check:
    try:
        legacy = legacy_host.get_victim_selector(
            _config(settings), entry_points=paths.targets.without_plugin(), bundles=[]
        )
    except Exception as error:
        return Check(name, False, f"the legacy host failed to start: {_root(error)!r}")
    problem = _builtin_everywhere(legacy, paths.typed(None), probes)
    if problem:
        return Check(name, False, problem)
    return Check(name, True, "with the manifest and the plugin gone, both hosts are built-in")


def _check_removed_component(name: str, paths: _Paths, settings: dict[str, Any]) -> Check:
    ac = {**settings, legacy_host.VICTIM_SELECTOR_COMPONENT_KEY: paths.targets.component}
    try:
        selector = legacy_host.get_victim_selector(
            _config(ac), entry_points=paths.targets.entry_points, bundles=[]
        )
    except legacy_host.VictimSelectorMaterializationError as error:
        return Check(name, True, f"startup fails closed: {error}".split(" (admitted")[0])
    except Exception as error:
        return Check(name, False, f"startup failed with another error: {error!r}")
    return Check(
        name,
        False,
        f"started with {type(selector).__qualname__} although the configured "
        "component's bundle is not admitted",
    )


def run_conformance(
    strategies: Sequence[str] = ("bidkv",),
    policy_config: Mapping[str, Any] | None = None,
    *,
    targets: ConformanceTargets | None = None,
    invalid_configs: Mapping[str, Mapping[str, Any]] | None = None,
    workload: Sequence[EngineRequest] | None = None,
    engine_config: EngineConfig | None = None,
    fail_at: int = 3,
) -> ConformanceReport:
    """Check that both hosts fail, disable and roll back the policy as the reference says.

    Parameters
    ----------
    strategies
        Production strategy names (``bidkv``, ``pe``, ``largest-first``, ...); ``all`` stands
        for every canonical one.
    policy_config
        Extra settings applied to every strategy (as ``--policy-config``).
    targets
        What the hosts load; the shipped policy by default. Tests point it at broken policies.
    invalid_configs
        Name -> settings that must fail startup; :data:`INVALID_CONFIGS` by default.
    workload, engine_config
        The embedded-engine run of the rollback checks and of the probe contexts; a small
        built-in pressure workload by default.
    fail_at
        The policy call that fails in the rollback checks (1-based).

    Returns
    -------
    ConformanceReport
        Named checks with pass/fail and detail; ``exit_code`` is 0 or 1.

    Raises
    ------
    tracekit.errors.ConfigError
        An unknown or non-production strategy, or an invalid ``policy_config`` (exit status 2).
    """
    # "all": every canonical production strategy (the built-in rule has no policy to check).
    names = [n for s in strategies for n in (PRODUCTION_STRATEGIES if s.strip() == "all" else (s,))]
    with captured_logs():
        return _run(
            list(dict.fromkeys(names)),
            policy_config,
            targets or ConformanceTargets(),
            INVALID_CONFIGS if invalid_configs is None else invalid_configs,
            workload,
            engine_config,
            fail_at,
        )


def _run(
    strategies: list[str],
    policy_config: Mapping[str, Any] | None,
    targets: ConformanceTargets,
    invalid: Mapping[str, Mapping[str, Any]],
    workload: Sequence[EngineRequest] | None,
    engine_config: EngineConfig | None,
    fail_at: int,
) -> ConformanceReport:
    paths = _Paths(targets)
    workload = list(default_workload() if workload is None else workload)
    engine_config = engine_config or default_engine_config()
    probes = probe_contexts(workload, engine_config)
    report = ConformanceReport(strategies, dict(policy_config or {}))
    for name in strategies:
        spec = resolve_strategy(name, policy_config)
        if spec.kind != "production":
            raise ConfigError(
                f"--strategy {name}: conformance checks the production policy; use one of its "
                "strategies (bidkv, pe, static-random, largest-first, ...)"
            )
        settings = dict(spec.settings)
        prefix = f"{spec.name}/"
        checks = report.checks
        checks.append(_check_valid(prefix + "startup/valid", paths, settings, probes))
        for case, overrides in invalid.items():
            checks.append(
                _check_invalid(f"{prefix}startup/{case}", paths, {**settings, **overrides})
            )
        checks.append(_check_disable(prefix + "rollback/disable-switch", paths, settings, probes))
        checks.append(
            _check_removed_plugin(
                prefix + "rollback/manifest-removed-legacy-plugin", paths, settings
            )
        )
        checks.append(
            _check_removed_builtin(
                prefix + "rollback/manifest-removed-builtin", paths, settings, probes
            )
        )
        checks.append(
            _check_removed_component(
                prefix + "rollback/manifest-removed-component-fails-closed", paths, settings
            )
        )
        run = {"workload": workload, "engine_config": engine_config, "fail_at": fail_at}
        for mode, label in (
            ("invalid", "typed-invalid-selection"),
            ("exception", "typed-exception"),
        ):
            checks.append(
                check_typed_rollback(
                    f"{prefix}rollback/{label}", targets.typed_policy, settings, mode, **run
                )
            )
        checks.append(
            check_legacy_no_isolation(
                prefix + "rollback/legacy-no-isolation",
                settings,
                paths.legacy_plugin,
                **run,
            )
        )
    return report
