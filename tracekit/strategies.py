"""Naming strategies on the command line and turning them into fresh policies and hosts.

A strategy spec is ``builtin`` (the engine's own victim rule), a name the production policy
knows (``bidkv``, ``pe``, ``static-random``, ... and their aliases) with optional settings, or
``module:Object`` for any user policy that implements the typed contract (or, for the legacy
host, ``pick_victim``).

The production policy's settings are resolved once, from ``--policy-config`` alone: tracekit
deliberately ignores ``BIDKV_UTILITY_*`` environment variables, so that a recorded run's manifest
holds its complete configuration and re-running it gives the same result on any machine.

This is the only tracekit module that imports ``bidkv`` (besides the hosts, which import vLLM's
built-in victim rule): the rest of tracekit reaches the policy, its strategy table
(:data:`STRATEGY_TABLE`, whose rows' orders the replay compiles to polars and whose names key
the diff's classes), its settings, and its decision rule (``decide``, ``utility``, used by the
replay fast path) through the public names here.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

from bidkv.adapters.vllm_hust.config import (
    KNOWN_STRATEGY_NAMES,
    BidkvSelectorConfig,
    canonical_strategy,
    parse_settings,
)
from bidkv.adapters.vllm_hust.decision import DecisionRules, DecisionState, Step, decide
from bidkv.adapters.vllm_hust.scoring import utility
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvVictimSelector
from bidkv.adapters.vllm_hust.strategies import (
    BUILTIN_ORDER,
    STRATEGY_TABLE,
    OrderKey,
    Strategy,
    StrategyInputs,
    Term,
    VictimOrder,
    strategy_row,
)
from bidkv.legacy.baselines.base import BaselineCandidate as LegacyRequest
from bidkv.legacy.baselines.base import CompressionAction
from bidkv.legacy.baselines.registry import create_default_registry as legacy_strategy_registry
from bidkv.legacy.baselines.static_random import StaticRandomStrategy
from bidkv.manifests import manifest_names
from tracekit.engine.hosts import BuiltinHost, LegacyHost, TypedHost, VictimHost
from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import resolve_qualname

__all__ = [
    "ALL_STRATEGIES",
    "BUILTIN_ORDER",
    "KNOWN_STRATEGY_NAMES",
    "POLICY_CLASS",
    # The original experiments' legacy select_victims strategies (tracekit.experiment.hooks).
    "CompressionAction",
    "LegacyRequest",
    "StaticRandomStrategy",
    "legacy_strategy_registry",
    "POLICY_SETTINGS",
    "PRODUCTION_STRATEGIES",
    "STRATEGY_TABLE",
    "BidkvSelectorConfig",
    "DecisionRules",
    "DecisionState",
    "HostPath",
    "OrderKey",
    "Step",
    "Strategy",
    "StrategyInputs",
    "StrategySpec",
    "Term",
    "VictimOrder",
    "canonical_strategy",
    "changed_settings",
    "decide",
    "decision_rules",
    "did_you_mean",
    "parse_policy_config",
    "parse_strategy_list",
    "policy_manifests",
    "resolve_strategy",
    "strategy_row",
    "utility",
]

HostPath = Literal["typed", "legacy", "builtin"]

#: The production policy's class path, as a typed host's ``--preemption-policy`` names it.
POLICY_CLASS = f"{BidkvPreemptionPolicy.__module__}.{BidkvPreemptionPolicy.__qualname__}"


def policy_manifests() -> list[tuple[str, Traversable]]:
    """The policy's bundled extension manifests, ``(file name, file)``, sorted by name."""
    folder = resources.files("bidkv.manifests")
    return [(name, folder / name) for name in manifest_names()]


# Settings the strategy name itself decides; reports leave them out of "what was changed".
NAMED_SETTINGS = ("enable_utility_victim_selection", "utility_strategy")
_DEFAULT_SETTINGS = BidkvSelectorConfig().to_additional_config()

#: The production policy's canonical strategy names: the strategy table's rows, in its order.
PRODUCTION_STRATEGIES: tuple[str, ...] = tuple(row.name for row in STRATEGY_TABLE)
#: What ``--strategy all`` means: the built-in rule and every canonical production strategy.
ALL_STRATEGIES: tuple[str, ...] = ("builtin", *PRODUCTION_STRATEGIES)
#: The production policy's setting names (``--policy-config`` keys), in declaration order.
POLICY_SETTINGS: tuple[str, ...] = tuple(BidkvSelectorConfig.__dataclass_fields__)
# The settings DecisionRules.from_config reads.
_RULE_SETTINGS = frozenset(
    {
        "utility_min_running",
        "utility_kv_gate",
        "utility_cooldown_s",
        "utility_liveness_preemptions",
        "utility_liveness_mode",
        "utility_cascade_gain_ratio",
        "utility_completion_weight",
        "utility_preempt_weight",
        "utility_epsilon",
        "utility_default_max_tokens",
    }
)


@dataclass(frozen=True, slots=True)
class StrategySpec:
    """A resolved strategy: how to build a fresh policy for each run.

    Attributes
    ----------
    name
        ``builtin``, a canonical production strategy name, or ``module:Object``.
    kind
        ``builtin``, ``production`` (``BidkvPreemptionPolicy``) or ``user``.
    settings
        The production policy's full configuration (``to_additional_config()``); empty otherwise.
    """

    name: str
    kind: Literal["builtin", "production", "user"]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A short, file-name-safe label."""
        return self.name.replace(":", "-").replace(".", "-")

    def policy_config(self) -> BidkvSelectorConfig | None:
        """The production policy's configuration; ``None`` for builtin and user policies."""
        return BidkvSelectorConfig(**self.settings) if self.kind == "production" else None

    @property
    def rule(self) -> str | None:
        """The rule in force; ``None`` for a user policy.

        ``builtin``, or the production strategy with aliases resolved (``pe`` when its switch
        is off or its kill switch on).
        """
        config = self.policy_config()
        if config is None:
            return "builtin" if self.kind == "builtin" else None
        return config.resolved_strategy if config.utility_enabled else "pe"

    def decision_rules(self) -> DecisionRules:
        """The settings of the ``bidkv`` decision rule (:func:`decide`) of this strategy."""
        return decision_rules(self.settings)

    @staticmethod
    def new_decision_state() -> DecisionState:
        """The state a fresh production policy starts with (its bounded liveness table)."""
        return DecisionState(BidkvPreemptionPolicy.state_table_limit)

    def make_policy(self, host_path: HostPath = "typed") -> Any:
        """A fresh policy object (``None`` for builtin): stateful strategies start clean."""
        if self.kind == "builtin":
            return None
        if self.kind == "production":
            config = BidkvSelectorConfig(**self.settings)
            if host_path == "legacy":
                return BidkvVictimSelector(config)
            return BidkvPreemptionPolicy(config)
        implementation = resolve_qualname(self.name)
        factory = getattr(implementation, "from_vllm_config", None)
        if callable(factory):
            return factory(None)
        return implementation() if isinstance(implementation, type) else implementation

    def make_host(self, host_path: HostPath) -> VictimHost:
        """The engine host for one run on ``host_path``, around a fresh policy."""
        if self.kind == "builtin" or host_path == "builtin":
            return BuiltinHost()
        if self.kind == "user":
            return self._make_user_host(host_path)
        return self._host_around(self.make_policy(host_path), host_path)

    def _host_around(self, policy: Any, host_path: HostPath) -> VictimHost:
        """The typed or legacy host around ``policy`` (legacy needs ``pick_victim``)."""
        if host_path == "legacy":
            if not callable(getattr(policy, "pick_victim", None)):
                raise ConfigError(
                    f"--strategy {self.name}: the legacy host needs a pick_victim method; "
                    "use --host typed"
                )
            return LegacyHost(policy)
        return TypedHost(policy)

    def _make_user_host(self, host_path: HostPath) -> VictimHost:
        # A user policy's constructor or factory may raise anything: one line, naming it.
        try:
            return self._host_around(self.make_policy(host_path), host_path)
        except ConfigError:
            raise
        except Exception as exc:
            detail = " ".join(str(exc).split())[:200]
            raise ConfigError(
                f"--strategy {self.name}: cannot build the policy ({type(exc).__name__}: "
                f"{detail}); it must implement select_victim(context) and build without "
                "arguments or from_vllm_config(None)"
            ) from None


def decision_rules(settings: Mapping[str, Any]) -> DecisionRules:
    """The ``bidkv`` decision rule's settings from production-policy settings.

    Only the settings the rule reads are taken (a recording's configuration may carry other
    keys, such as an imported run's strategy name); missing or null ones take the policy's
    defaults. An invalid value raises ``ValueError``.
    """
    read = {k: v for k, v in settings.items() if k in _RULE_SETTINGS and v is not None}
    return DecisionRules.from_config(BidkvSelectorConfig(**read))


def parse_policy_config(text: str | None) -> dict[str, Any]:
    """``--policy-config`` as a dictionary: inline JSON, or ``@path`` to a JSON file.

    ``None`` (the option not given) is no configuration; an empty value is refused, as are a
    JSON value other than an object and a key given twice. The values are checked later, without
    coercion (:func:`resolve_strategy`).
    """
    if text is None:
        return {}
    source = "--policy-config"
    if not text.strip():
        raise ConfigError(
            f"{source} {text!r} is empty; pass a JSON object such as "
            '{"utility_preempt_weight": 5.0}, @FILE, or leave the option out'
        )
    if text.startswith("@"):
        path = Path(text[1:])
        if not text[1:]:
            raise ConfigError(f"{source} '@' names no file; pass @PATH to a JSON file")
        source = str(path)
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(f"{path}: cannot read the policy configuration ({reason})") from None
    try:
        value = json.loads(text, object_pairs_hook=_refuse_repeated_keys)
    except RecursionError:
        raise ConfigError(
            f"{source}: JSON nested too deeply to read; pass a flat object of settings such as "
            '{"utility_preempt_weight": 5.0}'
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
            'pass an object such as {"utility_preempt_weight": 5.0}'
        ) from None
    except ValueError as exc:  # an integer literal past Python's digit limit, a repeated key
        raise ConfigError(f"{source}: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{source}: must be a JSON object of settings, got {type(value).__name__}"
        )
    return value


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of repeated keys silently; a configuration must say one thing.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"{key} is given twice; keep one value")
        result[key] = value
    return result


def resolve_strategy(
    spec: str, policy_config: Mapping[str, Any] | None = None, *, seed: int = 0
) -> StrategySpec:
    """Resolve one ``--strategy`` value; bad names and settings raise ``ConfigError``.

    The production policy is enabled, set to the named strategy, and seeded with ``seed`` unless
    ``policy_config`` sets ``utility_seed`` itself.
    """
    spec = spec.strip()
    settings = dict(policy_config or {})
    if spec == "builtin":
        _check_builtin_settings(settings)
        return StrategySpec("builtin", "builtin")
    if ":" in spec:
        try:
            implementation = resolve_qualname(spec)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(
                f"--strategy {spec}: cannot load it ({type(exc).__name__}: {exc}); "
                "give module:Object importable from this environment"
            ) from None
        _check_policy_object(spec, implementation)
        return StrategySpec(spec, "user")
    try:
        name = canonical_strategy(spec)
    except ValueError:
        raise ConfigError(
            f"--strategy {spec!r} is unknown{did_you_mean(spec)}; use builtin, all, "
            f"module:Object or one of {', '.join(KNOWN_STRATEGY_NAMES)}"
        ) from None
    _check_setting_types(settings)
    _check_named_settings(spec, name, settings)
    settings.setdefault("utility_seed", seed)
    settings["enable_utility_victim_selection"] = True
    settings["utility_strategy"] = name
    return StrategySpec(name, "production", _selector_config(settings).to_additional_config())


def did_you_mean(spec: str) -> str:
    """``" (did you mean 'x'?)"`` for the closest strategy name, or ``""``."""
    names = ("builtin", "all", *KNOWN_STRATEGY_NAMES)
    close = difflib.get_close_matches(spec.lower(), names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_policy_object(spec: str, implementation: Any) -> None:
    """Refuse a ``module:Object`` that cannot be a policy (a function, a module, a constant).

    A factory (``from_vllm_config``) is accepted as it is; a class or an object must have
    ``select_victim`` (the typed contract) or ``pick_victim`` (the legacy host). Nothing is
    built here: constructors run when a run starts.
    """
    if callable(getattr(implementation, "from_vllm_config", None)):
        return
    if any(callable(getattr(implementation, m, None)) for m in ("select_victim", "pick_victim")):
        return
    what = "a class" if isinstance(implementation, type) else type(implementation).__name__
    raise ConfigError(
        f"--strategy {spec}: resolves to {what} that is not a preemption policy; give "
        "module:Object for a class or object with select_victim(context) (pick_victim for "
        "--host legacy) or a from_vllm_config factory"
    )


def _check_builtin_settings(settings: Mapping[str, Any]) -> None:
    """The engine's own rule uses no setting, but a typo or an impossible value is still refused.

    ``--strategy builtin --policy-config ...`` used to ignore the configuration silently, even
    ``utility_snapshot_history_size`` of 1e22 or a ``utility_strategy`` naming another strategy.
    """
    if not settings:
        return
    _check_setting_types(settings)
    named = settings.get("utility_strategy")
    if named is not None:
        raise ConfigError(
            f"--policy-config sets utility_strategy={named!r}, which contradicts --strategy "
            f"builtin (the engine's own rule); remove it, or pass --strategy {named}"
        )
    _selector_config(settings)


def _check_setting_types(settings: Mapping[str, Any]) -> None:
    """Refuse an unknown ``--policy-config`` key ("did you mean") and a value of the wrong type.

    Nothing is coerced (docs/policy.md, "Parsing and precedence"): ``1.5`` or ``"7"`` for an
    integer, ``"yes"`` or ``1`` for a boolean are refused, naming the setting.
    """
    try:
        parse_settings(settings)
    except ValueError as exc:
        raise ConfigError(f'--policy-config: {exc}; see docs/policy.md, "Settings"') from None


def _selector_config(settings: Mapping[str, Any]) -> BidkvSelectorConfig:
    """The production policy's configuration from ``settings``; an impossible value refused."""
    try:
        return BidkvSelectorConfig.from_settings(settings)
    except ValueError as exc:
        raise ConfigError(f"--policy-config: {exc}") from None


def _check_named_settings(spec: str, name: str, settings: Mapping[str, Any]) -> None:
    """Refuse settings that the strategy name decides when they say something else."""
    named = settings.get("utility_strategy")
    if named is not None:
        try:
            agrees = canonical_strategy(named.strip().lower()) == name
        except ValueError:
            agrees = False
        if not agrees:
            raise ConfigError(
                f"--policy-config sets utility_strategy={named!r}, which contradicts "
                f"--strategy {spec}; remove it from the configuration (the strategy name sets it)"
            )
    enabled = settings.get("enable_utility_victim_selection")
    if enabled is False:  # a boolean: the types were checked first
        raise ConfigError(
            f"--policy-config sets enable_utility_victim_selection={enabled!r}, which "
            f"contradicts --strategy {spec} (naming a strategy turns the policy on); remove "
            "it, or use --strategy builtin (or utility_kill_switch) for the engine's own rule"
        )


def parse_strategy_list(
    text: str, policy_config: Mapping[str, Any] | None = None, *, seed: int = 0
) -> list[StrategySpec]:
    """``--strategy a,b,c`` or ``all`` as resolved specs, in the order given, without repeats."""
    names = list(ALL_STRATEGIES) if text.strip() == "all" else text.split(",")
    specs: list[StrategySpec] = []
    for name in names:
        if not name.strip():
            raise ConfigError(f"--strategy {text!r} has an empty name; separate names by commas")
        resolved = resolve_strategy(name, policy_config, seed=seed)
        if all(s.name != resolved.name for s in specs):
            specs.append(resolved)
    return specs


def changed_settings(
    settings: Mapping[str, Any], *, ignore: Sequence[str] = NAMED_SETTINGS
) -> dict[str, Any]:
    """The production-policy settings that differ from the defaults, sorted by name."""
    return {
        key: settings[key]
        for key in sorted(settings)
        if key not in ignore and settings[key] != _DEFAULT_SETTINGS.get(key, object())
    }
