"""Configuration of the BidKV preemption policy: settings, parsing and validation.

Every setting is read from a ``BIDKV_UTILITY_*`` environment variable and may be overridden by the
key of the same name in vLLM's ``additional_config`` (docs/policy.md, "Settings"). A
:class:`BidkvSelectorConfig` is validated when it is constructed, whichever way it is built, so an
engine that is given a bad setting fails at startup instead of at its first preemption.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from bidkv.adapters.vllm_hust.strategies import STRATEGY_TABLE

__all__ = [
    "BidkvSelectorConfig",
    "ENV_VARS",
    "LIVENESS_MODES",
    "MAX_INT_SETTING",
    "MAX_SNAPSHOT_HISTORY",
    "STRATEGIES",
    "STRATEGY_ALIASES",
    "canonical_strategy",
    "closest_setting",
    "parse_bool",
    "parse_settings",
]

# Canonical strategy names and the aliases that map onto them, from the strategy table.
STRATEGIES: tuple[str, ...] = tuple(row.name for row in STRATEGY_TABLE)
STRATEGY_ALIASES: dict[str, str] = {
    alias: row.name for row in STRATEGY_TABLE for alias in row.aliases
}
# Every name ``utility_strategy`` accepts, sorted for error messages and docs.
KNOWN_STRATEGY_NAMES: tuple[str, ...] = tuple(sorted((*STRATEGIES, *STRATEGY_ALIASES)))

LIVENESS_MODES: tuple[str, ...] = ("abstain", "barrier")
#: The largest ``utility_snapshot_history_size`` (a 32-bit signed maximum, any platform).
MAX_SNAPSHOT_HISTORY = 2**31 - 1
#: The bound of every other integer setting (a signed 64-bit maximum: the replay reads recorded
#: configurations into 64-bit columns); ``utility_seed`` may go down to its negative.
MAX_INT_SETTING = 2**63 - 1

_TRUE_WORDS = frozenset({"1", "true", "yes"})
_FALSE_WORDS = frozenset({"0", "false", "no"})

# setting name -> environment variable.
ENV_VARS: dict[str, str] = {
    "enable_utility_victim_selection": "BIDKV_UTILITY_ENABLE",
    "utility_strategy": "BIDKV_UTILITY_STRATEGY",
    "utility_kill_switch": "BIDKV_UTILITY_KILL_SWITCH",
    "utility_completion_weight": "BIDKV_UTILITY_COMPLETION_WEIGHT",
    "utility_preempt_weight": "BIDKV_UTILITY_PREEMPT_WEIGHT",
    "utility_kv_gate": "BIDKV_UTILITY_KV_GATE",
    "utility_cooldown_s": "BIDKV_UTILITY_COOLDOWN_S",
    "utility_min_running": "BIDKV_UTILITY_MIN_RUNNING",
    "utility_liveness_preemptions": "BIDKV_UTILITY_LIVENESS_PREEMPTIONS",
    "utility_cascade_gain_ratio": "BIDKV_UTILITY_CASCADE_GAIN_RATIO",
    "utility_snapshot_enabled": "BIDKV_UTILITY_SNAPSHOT_ENABLED",
    "utility_snapshot_top_k": "BIDKV_UTILITY_SNAPSHOT_TOP_K",
    "utility_snapshot_history_size": "BIDKV_UTILITY_SNAPSHOT_HISTORY_SIZE",
    "utility_epsilon": "BIDKV_UTILITY_EPSILON",
    "utility_default_max_tokens": "BIDKV_UTILITY_DEFAULT_MAX_TOKENS",
    "utility_seed": "BIDKV_UTILITY_SEED",
    "utility_liveness_mode": "BIDKV_UTILITY_LIVENESS_MODE",
    "utility_slo_s": "BIDKV_UTILITY_SLO_S",
}


def parse_bool(value: object, name: str) -> bool:
    """Read a boolean setting strictly.

    Parameters
    ----------
    value
        A real ``bool``, the integers ``0``/``1``, or one of the words ``1, 0, true, false, yes,
        no`` in any case (surrounding blanks ignored).
    name
        The setting's name, used in the error message.

    Returns
    -------
    bool
        The parsed value.

    Raises
    ------
    ValueError
        For anything else. The original coerced with ``bool()`` (so ``"false"`` was true) and
        ``bool(int(...))`` for the environment (so ``"true"`` failed); both are fixed here.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise ValueError(f"{name} must be a boolean (1/0/true/false/yes/no), got {value!r}")


def _shown(value: object) -> str:
    # A value in an error message, bounded: a huge integer by its size, a long text cut short.
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of {int(math.log10(abs(value))) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:45]}... ({len(text)} characters)"


def _got(value: float) -> str:
    """``, got inf`` and why, for an infinite value; "" otherwise (the original's message).

    JSON and ``float()`` read a number beyond the largest double (1e400) as infinity, so the
    user sees what their number became.
    """
    if not math.isinf(value):
        return ""
    return f", got {value} (a number beyond 1.8e308, such as 1e400, is read as infinity)"


def _parse_int(value: object, name: str) -> int:
    # int() truncates floats as the original did; text must be an integer literal.
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name} must be an integer, got {_shown(value)}") from exc


def _parse_float(value: object, name: str) -> float:
    try:
        result = float(value)  # type: ignore[arg-type]
    except OverflowError as exc:  # an integer beyond the largest double
        raise ValueError(f"{name} must be a finite number, got {_shown(value)}") from exc
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {_shown(value)}") from exc
    if math.isnan(result):
        # NaN passes every ``<``/``>`` check and would silently poison the ranking.
        raise ValueError(f"{name} must be a number, got {value!r}")
    return result


def _parse_str(value: object, name: str) -> str:
    return str(value).strip().lower()


# setting name -> parser(value, name). Strings are normalised (stripped, lower-cased).
_PARSERS: dict[str, Callable[[object, str], Any]] = {
    "enable_utility_victim_selection": parse_bool,
    "utility_strategy": _parse_str,
    "utility_kill_switch": parse_bool,
    "utility_completion_weight": _parse_float,
    "utility_preempt_weight": _parse_float,
    "utility_kv_gate": _parse_float,
    "utility_cooldown_s": _parse_float,
    "utility_min_running": _parse_int,
    "utility_liveness_preemptions": _parse_int,
    "utility_cascade_gain_ratio": _parse_float,
    "utility_snapshot_enabled": parse_bool,
    "utility_snapshot_top_k": _parse_int,
    "utility_snapshot_history_size": _parse_int,
    "utility_epsilon": _parse_float,
    "utility_default_max_tokens": _parse_int,
    "utility_seed": _parse_int,
    "utility_liveness_mode": _parse_str,
    "utility_slo_s": _parse_float,
}


# parser -> the JSON type its value must have in parse_settings (a float takes an int too).
_KIND_OF_PARSER: dict[Callable[[object, str], Any], type] = {
    parse_bool: bool, _parse_int: int, _parse_float: float, _parse_str: str
}  # fmt: skip
# setting name -> that type.
_KINDS: dict[str, type] = {name: _KIND_OF_PARSER[parser] for name, parser in _PARSERS.items()}
_KIND_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def parse_settings(values: Mapping[str, object]) -> dict[str, Any]:
    """Check typed settings (a JSON or TOML object) without coercing them.

    The strict counterpart of ``additional_config``'s parsing, for settings a user writes as a
    typed object (tracekit's ``--policy-config``, docs/policy.md, "Parsing and precedence"):
    a boolean setting takes only ``true``/``false``, an integer setting only an integer (not
    ``1.5``, not ``"7"``, not ``true``), a number setting an integer or a float, a text setting
    only a string. Ranges are checked afterwards, by :meth:`BidkvSelectorConfig.validate`.

    Parameters
    ----------
    values
        Setting name -> value.

    Returns
    -------
    dict
        The same settings, number settings as floats.

    Raises
    ------
    ValueError
        One line naming the setting: an unknown name (with the closest known one), a value of
        the wrong type, or an integer too large for a number setting.
    """
    unknown = sorted(set(values) - set(_PARSERS), key=str)
    if unknown:
        described = []
        for name in unknown:
            close = closest_setting(str(name))
            described.append(f"{name} (did you mean {close}?)" if close else str(name))
        raise ValueError(f"unknown setting(s) {', '.join(described)}")
    parsed: dict[str, Any] = {}
    for name, value in values.items():
        kind = _KINDS[name]
        if kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise ValueError(f"{name} must be {_KIND_WORDS[kind]}, got {_shown(value)}")
        parsed[name] = _parse_float(value, name) if kind is float else value
    return parsed


#: Names people write for a setting whose spelling is far from its own (difflib's closest
#: spelling of ``utility_enabled`` is ``utility_seed``): checked before the spelling.
_SETTING_ALIASES: dict[str, str] = {
    **dict.fromkeys(
        ("enabled", "enable", "utility_enabled", "utility_enable", "utility_on", "enable_utility",
         "utility_victim_selection", "victim_selection", "enable_victim_selection"),
        "enable_utility_victim_selection",
    ),
    **dict.fromkeys(("disabled", "utility_disabled", "kill_switch", "disable"),
                    "utility_kill_switch"),
    **dict.fromkeys(("strategy", "policy", "utility_policy"), "utility_strategy"),
    **dict.fromkeys(("eps", "utility_eps"), "utility_epsilon"),
    **dict.fromkeys(("slo", "utility_slo", "slo_seconds"), "utility_slo_s"),
}  # fmt: skip


def closest_setting(name: str) -> str | None:
    """The setting an unknown name most likely means, or None.

    A known alias first (``utility_enabled`` -> ``enable_utility_victim_selection``), then the
    name with the ``utility_`` prefix, then the closest spelling (difflib's ratio >= 0.6).
    """
    word = name.strip().lower().replace("-", "_")
    if word in _PARSERS:
        return word
    if word in _SETTING_ALIASES:
        return _SETTING_ALIASES[word]
    if f"utility_{word}" in _PARSERS:
        return f"utility_{word}"
    close = difflib.get_close_matches(word, list(_PARSERS), n=1, cutoff=0.6)
    return close[0] if close else None


def canonical_strategy(name: str) -> str:
    """Map a strategy name or alias to its canonical name.

    Parameters
    ----------
    name
        A value accepted by ``utility_strategy``.

    Returns
    -------
    str
        One of :data:`STRATEGIES`.

    Raises
    ------
    ValueError
        If the name is unknown; the message lists every known name.
    """
    canonical = STRATEGY_ALIASES.get(name, name)
    if canonical not in STRATEGIES:
        raise ValueError(
            f"utility_strategy must be one of {', '.join(KNOWN_STRATEGY_NAMES)}; got {name!r}"
        )
    return canonical


def _env_values(environ: Mapping[str, str] | None) -> dict[str, Any]:
    # Parse (without range checks) every BIDKV_UTILITY_* variable that is set.
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, var in ENV_VARS.items():
        raw = env.get(var)
        if raw is not None:
            values[name] = _PARSERS[name](raw, f"{var} ({name})")
    return values


# The integer settings bounded by MAX_INT_SETTING, with their smallest values (the seed's is the
# negative bound; the others' lower bounds are checked first, with the original's messages).
_INT_LOWER_BOUNDS = {
    "utility_min_running": 1,
    "utility_liveness_preemptions": 0,
    "utility_snapshot_top_k": 1,
    "utility_default_max_tokens": 1,
    "utility_seed": -MAX_INT_SETTING - 1,
}


@dataclass(frozen=True)
class BidkvSelectorConfig:
    """Immutable, validated settings of :class:`BidkvPreemptionPolicy`.

    The first fifteen fields are the original's (docs/policy.md, "Settings"); ``utility_seed``,
    ``utility_liveness_mode`` and ``utility_slo_s`` are ours. Values are normalised and checked
    in ``__post_init__``: booleans are parsed strictly (:func:`parse_bool`), numbers with
    ``int()``/``float()``, strings are stripped and lower-cased, then :meth:`validate` runs.

    Parameters
    ----------
    enable_utility_victim_selection
        Main switch; when off the policy always returns the built-in victim (strategy ``pe``).
    utility_strategy
        Victim strategy, one of :data:`STRATEGIES` or an alias in :data:`STRATEGY_ALIASES`.
    utility_kill_switch
        Emergency off switch; wins over ``enable_utility_victim_selection``.
    utility_completion_weight
        ``w_c`` in ``delta = 1 + w_c * completion + w_p * preemptions``; non-negative, finite.
    utility_preempt_weight
        ``w_p``; non-negative, finite.
    utility_kv_gate
        Utility picks only when KV usage is at least this fraction; ``0`` disables; in [0, 1].
    utility_cooldown_s
        Minimum seconds between two utility picks; ``0`` disables; non-negative.
    utility_min_running
        Utility picks only with at least this many candidates; positive.
    utility_liveness_preemptions
        Liveness bound ``L`` (preemptions of the utility winner before one abstention); ``0``
        disables; non-negative.
    utility_cascade_gain_ratio
        ``rho``: abstain when ``requester_tokens * rho >= top_tokens``; at least 1.
    utility_snapshot_enabled
        Keep per-decision snapshots of the ranking (slower: the full ranking is sorted).
    utility_snapshot_top_k
        Candidates kept per snapshot; positive.
    utility_snapshot_history_size
        Snapshots and recent victim ids kept; positive.
    utility_epsilon
        ``epsilon`` in ``U = r / (delta + epsilon)``; positive, finite.
    utility_default_max_tokens
        ``max_tokens`` used when a candidate has none (or a non-positive one); positive.
    utility_seed
        Seed of the ``static-random`` strategy's own generator.
    utility_liveness_mode
        ``"abstain"`` (V4, the shipped 0.2.1 behaviour) or ``"barrier"`` (V3, the README's
        behaviour, docs/policy.md, "Barrier mode (V3)").
    utility_slo_s
        Latency objective of the ``slack-aware`` strategy in seconds; positive.
    """

    enable_utility_victim_selection: bool = False
    utility_strategy: str = "bidkv"
    utility_kill_switch: bool = False
    utility_completion_weight: float = 0.5
    utility_preempt_weight: float = 0.3
    utility_kv_gate: float = 0.0
    utility_cooldown_s: float = 0.0
    utility_min_running: int = 1
    utility_liveness_preemptions: int = 2
    utility_cascade_gain_ratio: float = 1.25
    utility_snapshot_enabled: bool = False
    utility_snapshot_top_k: int = 3
    utility_snapshot_history_size: int = 32
    utility_epsilon: float = 1e-6
    utility_default_max_tokens: int = 1024
    utility_seed: int = 0
    utility_liveness_mode: str = "abstain"
    utility_slo_s: float = 120.0

    def __post_init__(self) -> None:
        # Frozen: normalise through object.__setattr__ so every instance holds typed values.
        for name, parser in _PARSERS.items():
            object.__setattr__(self, name, parser(getattr(self, name), name))
        self.validate()

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BidkvSelectorConfig:
        """Build the configuration from ``BIDKV_UTILITY_*`` environment variables.

        Unset variables take the field defaults. Unlike the original, the result is validated
        (as every instance is), so a bad environment fails at startup.

        Parameters
        ----------
        environ
            The environment to read; ``os.environ`` when omitted.

        Returns
        -------
        BidkvSelectorConfig
            The validated configuration.

        Raises
        ------
        ValueError
            If a variable cannot be parsed or a value is out of range; the message names the
            variable and the setting.
        """
        return cls(**_env_values(environ))

    @classmethod
    def from_settings(cls, values: Mapping[str, object]) -> BidkvSelectorConfig:
        """Build the configuration from typed settings alone, checked by :func:`parse_settings`.

        Nothing is coerced and the environment is not read: unset settings take their defaults.

        Parameters
        ----------
        values
            Setting name -> value, for example a parsed JSON object.

        Returns
        -------
        BidkvSelectorConfig
            The validated configuration.

        Raises
        ------
        ValueError
            For an unknown setting, a value of the wrong type, or a value out of its range.
        """
        return cls(**parse_settings(values))

    @classmethod
    def from_additional_config(
        cls,
        additional_config: Mapping[str, Any] | None,
        environ: Mapping[str, str] | None = None,
    ) -> BidkvSelectorConfig:
        """Build the configuration from vLLM's ``additional_config`` over the environment.

        The environment supplies the defaults; every setting key present in
        ``additional_config`` overrides it. Other keys are ignored, because ``additional_config``
        is shared with the rest of the engine.

        Parameters
        ----------
        additional_config
            ``vllm_config.additional_config``; ``None`` means the environment alone.
        environ
            The environment to read; ``os.environ`` when omitted.

        Returns
        -------
        BidkvSelectorConfig
            The validated configuration.

        Raises
        ------
        ValueError
            If a value cannot be parsed or is out of range.
        """
        # As in the original, an environment value that additional_config overrides is parsed but
        # not range-checked: only the merged result must be valid.
        values = _env_values(environ)
        for name in ENV_VARS:
            if additional_config is not None and name in additional_config:
                values[name] = additional_config[name]
        return cls(**values)

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> BidkvSelectorConfig:
        """Build the configuration from a vLLM config object.

        Parameters
        ----------
        vllm_config
            Any object; its ``additional_config`` attribute (if present and not empty) overrides
            the environment.

        Returns
        -------
        BidkvSelectorConfig
            The validated configuration.
        """
        return cls.from_additional_config(getattr(vllm_config, "additional_config", None) or {})

    # -- checks and export --------------------------------------------------------------------

    def validate(self) -> None:
        """Check every setting's range.

        Raises
        ------
        ValueError
            With the original's message for its fifteen settings (for example
            ``"utility_completion_weight must be non-negative"``), and for ours: an unknown
            strategy (listing the known names), an unknown liveness mode, a non-positive SLO,
            and infinite weights or epsilon.
        """
        canonical_strategy(self.utility_strategy)
        if self.utility_completion_weight < 0:
            raise ValueError("utility_completion_weight must be non-negative")
        if self.utility_preempt_weight < 0:
            raise ValueError("utility_preempt_weight must be non-negative")
        if self.utility_kv_gate < 0 or self.utility_kv_gate > 1:
            raise ValueError(f"utility_kv_gate must be in [0, 1]{_got(self.utility_kv_gate)}")
        if self.utility_cooldown_s < 0:
            raise ValueError("utility_cooldown_s must be non-negative")
        if self.utility_min_running <= 0:
            raise ValueError("utility_min_running must be positive")
        if self.utility_liveness_preemptions < 0:
            raise ValueError("utility_liveness_preemptions must be non-negative")
        if self.utility_cascade_gain_ratio < 1:
            raise ValueError("utility_cascade_gain_ratio must be at least 1")
        if self.utility_snapshot_top_k <= 0:
            raise ValueError("utility_snapshot_top_k must be positive")
        if self.utility_snapshot_history_size <= 0:
            raise ValueError("utility_snapshot_history_size must be positive")
        if self.utility_snapshot_history_size > MAX_SNAPSHOT_HISTORY:
            # The history is a bounded deque, whose length must fit a C ssize_t.
            raise ValueError(
                f"utility_snapshot_history_size must be between 1 and {MAX_SNAPSHOT_HISTORY}, "
                f"got {_shown(self.utility_snapshot_history_size)}"
            )
        if self.utility_epsilon <= 0:
            raise ValueError("utility_epsilon must be positive")
        if self.utility_default_max_tokens <= 0:
            raise ValueError("utility_default_max_tokens must be positive")
        # An infinite weight or epsilon turns utilities into NaN (inf * 0), which no ranking
        # orders; an infinite time or ratio is no setting anyone means.
        for name in (
            "utility_completion_weight",
            "utility_preempt_weight",
            "utility_epsilon",
            "utility_cooldown_s",
            "utility_cascade_gain_ratio",
            "utility_slo_s",
        ):
            if math.isinf(getattr(self, name)):
                raise ValueError(f"{name} must be finite{_got(getattr(self, name))}")
        for name, low in _INT_LOWER_BOUNDS.items():
            value = getattr(self, name)
            if value > MAX_INT_SETTING or value < low:
                raise ValueError(
                    f"{name} must be between {low} and {MAX_INT_SETTING}, got {_shown(value)}"
                )
        if self.utility_liveness_mode not in LIVENESS_MODES:
            raise ValueError(
                f"utility_liveness_mode must be one of {', '.join(LIVENESS_MODES)}; "
                f"got {self.utility_liveness_mode!r}"
            )
        if self.utility_slo_s <= 0:
            raise ValueError("utility_slo_s must be positive")

    def to_additional_config(self) -> dict[str, Any]:
        """Return every setting as an ``additional_config`` mapping.

        Returns
        -------
        dict
            All eighteen keys; feeding it to :meth:`from_additional_config` gives an equal
            configuration whatever the environment.
        """
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def resolved_strategy(self) -> str:
        """The strategy name with aliases resolved (``preempt-evict`` -> ``pe``)."""
        return canonical_strategy(self.utility_strategy)

    @property
    def utility_enabled(self) -> bool:
        """Whether the configured strategy is in force (switch on and kill switch off)."""
        return self.enable_utility_victim_selection and not self.utility_kill_switch
