"""``BidkvSelectorConfig``: settings, environment and ``additional_config`` parsing, validation.

Facts from docs/policy.md, "Settings" (names, defaults, precedence, validation messages) plus our
deliberate fixes (docs/policy.md, "Deliberate differences from the original"): strict booleans,
an unknown strategy fails, every instance (``from_env``
included) is validated, and the three new settings.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from bidkv.adapters.vllm_hust.config import ENV_VARS, KNOWN_STRATEGY_NAMES, parse_bool
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from tracekit.hosts.preemption_policy import PreemptionPolicyController

DEFAULTS = {
    "enable_utility_victim_selection": False,
    "utility_strategy": "bidkv",
    "utility_kill_switch": False,
    "utility_completion_weight": 0.5,
    "utility_preempt_weight": 0.3,
    "utility_kv_gate": 0.0,
    "utility_cooldown_s": 0.0,
    "utility_min_running": 1,
    "utility_liveness_preemptions": 2,
    "utility_cascade_gain_ratio": 1.25,
    "utility_snapshot_enabled": False,
    "utility_snapshot_top_k": 3,
    "utility_snapshot_history_size": 32,
    "utility_epsilon": 1e-6,
    "utility_default_max_tokens": 1024,
    "utility_seed": 0,
    "utility_liveness_mode": "abstain",
    "utility_slo_s": 120.0,
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite must not depend on BIDKV_UTILITY_* variables of the shell that runs it.
    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)


# -- defaults and names -------------------------------------------------------------------


def test_defaults_are_the_reference_values_plus_ours() -> None:
    assert BidkvSelectorConfig().to_additional_config() == DEFAULTS


def test_to_additional_config_returns_all_eighteen_keys_in_field_order() -> None:
    assert list(BidkvSelectorConfig().to_additional_config()) == list(DEFAULTS)


def test_env_var_names() -> None:
    assert ENV_VARS["enable_utility_victim_selection"] == "BIDKV_UTILITY_ENABLE"
    assert ENV_VARS["utility_seed"] == "BIDKV_UTILITY_SEED"
    assert ENV_VARS["utility_liveness_mode"] == "BIDKV_UTILITY_LIVENESS_MODE"
    assert ENV_VARS["utility_slo_s"] == "BIDKV_UTILITY_SLO_S"
    for name, var in ENV_VARS.items():
        if name != "enable_utility_victim_selection":
            assert var == "BIDKV_" + name.upper()


def test_the_same_settings_from_either_source_are_one_key() -> None:
    # A config is normalised at construction, so the strings of additional_config and the typed
    # values of direct construction give equal, equally hashed configs (runs and caches key on it).
    parsed = BidkvSelectorConfig.from_additional_config(
        {"enable_utility_victim_selection": "true", "utility_kv_gate": "0.5"}
    )
    typed = BidkvSelectorConfig(enable_utility_victim_selection=True, utility_kv_gate=0.5)
    cache = {parsed: "run"}
    assert cache[typed] == "run"
    assert BidkvSelectorConfig(enable_utility_victim_selection=True) not in cache


# -- environment --------------------------------------------------------------------------


def test_from_env_reads_every_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "BIDKV_UTILITY_ENABLE": "1",
        "BIDKV_UTILITY_STRATEGY": "largest-first",
        "BIDKV_UTILITY_KILL_SWITCH": "0",
        "BIDKV_UTILITY_COMPLETION_WEIGHT": "0.75",
        "BIDKV_UTILITY_PREEMPT_WEIGHT": "5.0",
        "BIDKV_UTILITY_KV_GATE": "0.8",
        "BIDKV_UTILITY_COOLDOWN_S": "2.5",
        "BIDKV_UTILITY_MIN_RUNNING": "3",
        "BIDKV_UTILITY_LIVENESS_PREEMPTIONS": "0",
        "BIDKV_UTILITY_CASCADE_GAIN_RATIO": "1.5",
        "BIDKV_UTILITY_SNAPSHOT_ENABLED": "1",
        "BIDKV_UTILITY_SNAPSHOT_TOP_K": "5",
        "BIDKV_UTILITY_SNAPSHOT_HISTORY_SIZE": "7",
        "BIDKV_UTILITY_EPSILON": "1e-3",
        "BIDKV_UTILITY_DEFAULT_MAX_TOKENS": "256",
        "BIDKV_UTILITY_SEED": "-42",
        "BIDKV_UTILITY_LIVENESS_MODE": "barrier",
        "BIDKV_UTILITY_SLO_S": "30",
    }
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    assert BidkvSelectorConfig.from_env().to_additional_config() == {
        "enable_utility_victim_selection": True,
        "utility_strategy": "largest-first",
        "utility_kill_switch": False,
        "utility_completion_weight": 0.75,
        "utility_preempt_weight": 5.0,
        "utility_kv_gate": 0.8,
        "utility_cooldown_s": 2.5,
        "utility_min_running": 3,
        "utility_liveness_preemptions": 0,
        "utility_cascade_gain_ratio": 1.5,
        "utility_snapshot_enabled": True,
        "utility_snapshot_top_k": 5,
        "utility_snapshot_history_size": 7,
        "utility_epsilon": 1e-3,
        "utility_default_max_tokens": 256,
        "utility_seed": -42,
        "utility_liveness_mode": "barrier",
        "utility_slo_s": 30.0,
    }


def test_from_env_accepts_an_explicit_mapping() -> None:
    cfg = BidkvSelectorConfig.from_env({"BIDKV_UTILITY_ENABLE": "yes"})
    assert cfg.enable_utility_victim_selection is True


def test_from_env_validates_unlike_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    # The original's from_env skipped validate(); ours fails at startup like every other path.
    monkeypatch.setenv("BIDKV_UTILITY_COMPLETION_WEIGHT", "-1")
    with pytest.raises(ValueError, match=r"^utility_completion_weight must be non-negative$"):
        BidkvSelectorConfig.from_env()


def test_unparsable_env_value_names_variable_and_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIDKV_UTILITY_MIN_RUNNING", "two")
    with pytest.raises(
        ValueError,
        match=r"^BIDKV_UTILITY_MIN_RUNNING \(utility_min_running\) must be an integer, got 'two'$",
    ):
        BidkvSelectorConfig.from_env()
    monkeypatch.setenv("BIDKV_UTILITY_MIN_RUNNING", "2")
    monkeypatch.setenv("BIDKV_UTILITY_KV_GATE", "high")
    with pytest.raises(ValueError, match=r"^BIDKV_UTILITY_KV_GATE \(utility_kv_gate\) must be a"):
        BidkvSelectorConfig.from_env()


def test_policy_without_config_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIDKV_UTILITY_ENABLE", "true")
    monkeypatch.setenv("BIDKV_UTILITY_STRATEGY", "preempt-evict")
    policy = BidkvPreemptionPolicy()
    assert policy.config.enable_utility_victim_selection is True
    assert policy.strategy == "pe"


# -- additional_config and precedence -----------------------------------------------------


def test_additional_config_overrides_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIDKV_UTILITY_ENABLE", "1")
    monkeypatch.setenv("BIDKV_UTILITY_PREEMPT_WEIGHT", "5.0")
    monkeypatch.setenv("BIDKV_UTILITY_MIN_RUNNING", "4")
    cfg = BidkvSelectorConfig.from_additional_config(
        {"utility_preempt_weight": 0.1, "unrelated_engine_key": "ignored"}
    )
    assert cfg.enable_utility_victim_selection is True  # from the environment
    assert cfg.utility_preempt_weight == 0.1  # additional_config wins
    assert cfg.utility_min_running == 4  # from the environment


def test_none_additional_config_means_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIDKV_UTILITY_SEED", "9")
    assert BidkvSelectorConfig.from_additional_config(None).utility_seed == 9
    assert BidkvSelectorConfig.from_additional_config({}).utility_seed == 9


def test_env_value_overridden_by_additional_config_is_not_range_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reference precedence: only the merged configuration must be valid.
    monkeypatch.setenv("BIDKV_UTILITY_COMPLETION_WEIGHT", "-1")
    cfg = BidkvSelectorConfig.from_additional_config({"utility_completion_weight": 0.5})
    assert cfg.utility_completion_weight == 0.5


def test_from_vllm_config_uses_additional_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIDKV_UTILITY_KV_GATE", "0.9")
    vllm_config = SimpleNamespace(additional_config={"enable_utility_victim_selection": True})
    cfg = BidkvSelectorConfig.from_vllm_config(vllm_config)
    assert cfg.enable_utility_victim_selection is True
    assert cfg.utility_kv_gate == 0.9
    # No attribute, None and an empty mapping all mean "environment only".
    for empty in (object(), SimpleNamespace(additional_config=None), None):
        assert BidkvSelectorConfig.from_vllm_config(empty).utility_kv_gate == 0.9


def test_policy_from_vllm_config_and_round_trip() -> None:
    cfg = BidkvSelectorConfig(
        enable_utility_victim_selection=True, utility_strategy="slack-aware", utility_slo_s=9.5
    )
    vllm_config = SimpleNamespace(additional_config=cfg.to_additional_config())
    policy = BidkvPreemptionPolicy.from_vllm_config(vllm_config)
    assert type(policy) is BidkvPreemptionPolicy
    assert policy.config == cfg
    assert policy.strategy == "slack-aware"


def test_additional_config_numbers_are_coerced_like_the_original() -> None:
    cfg = BidkvSelectorConfig.from_additional_config(
        {"utility_min_running": 2.9, "utility_kv_gate": "0.5", "utility_snapshot_top_k": "4"}
    )
    assert cfg.utility_min_running == 2  # int() truncates
    assert cfg.utility_kv_gate == 0.5
    assert cfg.utility_snapshot_top_k == 4


# -- validation messages (one per rule) -----------------------------------------------------


# What an infinite value's message adds (it says what the number was read as).
INF = r", got inf \(a number beyond 1\.8e308, such as 1e400, is read as infinity\)"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("utility_completion_weight", -0.1, "utility_completion_weight must be non-negative"),
        ("utility_preempt_weight", -1, "utility_preempt_weight must be non-negative"),
        ("utility_kv_gate", -0.01, r"utility_kv_gate must be in \[0, 1\]"),
        ("utility_kv_gate", 1.01, r"utility_kv_gate must be in \[0, 1\]"),
        ("utility_cooldown_s", -1.0, "utility_cooldown_s must be non-negative"),
        ("utility_min_running", 0, "utility_min_running must be positive"),
        ("utility_liveness_preemptions", -1, "utility_liveness_preemptions must be non-negative"),
        ("utility_cascade_gain_ratio", 0.99, "utility_cascade_gain_ratio must be at least 1"),
        ("utility_snapshot_top_k", 0, "utility_snapshot_top_k must be positive"),
        ("utility_snapshot_history_size", 0, "utility_snapshot_history_size must be positive"),
        ("utility_epsilon", 0.0, "utility_epsilon must be positive"),
        ("utility_default_max_tokens", 0, "utility_default_max_tokens must be positive"),
        ("utility_slo_s", 0.0, "utility_slo_s must be positive"),
        (
            "utility_liveness_mode",
            "sometimes",
            "utility_liveness_mode must be one of abstain, barrier; got 'sometimes'",
        ),
        (
            "utility_completion_weight",
            math.inf,
            r"utility_completion_weight must be finite" + INF,
        ),
        (
            "utility_preempt_weight",
            math.inf,
            r"utility_preempt_weight must be finite" + INF,
        ),
        (
            "utility_epsilon",
            math.inf,
            r"utility_epsilon must be finite" + INF,
        ),
        ("utility_kv_gate", math.nan, "utility_kv_gate must be a number, got nan"),
        ("utility_min_running", "x", "utility_min_running must be an integer, got 'x'"),
    ],
)
def test_validation_messages(key: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        BidkvSelectorConfig(**{key: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^{message}$"):
        BidkvSelectorConfig.from_additional_config({key: value})


def test_boundary_values_are_accepted() -> None:
    cfg = BidkvSelectorConfig(
        utility_completion_weight=0.0,
        utility_preempt_weight=0.0,
        utility_kv_gate=1.0,
        utility_cooldown_s=0.0,
        utility_min_running=1,
        utility_liveness_preemptions=0,
        utility_cascade_gain_ratio=1.0,
        utility_snapshot_top_k=1,
        utility_snapshot_history_size=1,
        utility_epsilon=1e-300,
        utility_default_max_tokens=1,
        utility_slo_s=1e-9,
    )
    cfg.validate()
    assert cfg.utility_kv_gate == 1.0


def test_validate_is_public_and_idempotent() -> None:
    # Construction normalises raw values (strings, ints) into typed ones; normalising and
    # validating the result again must change nothing.
    raw = BidkvSelectorConfig(
        enable_utility_victim_selection="yes",  # type: ignore[arg-type]
        utility_strategy=" BidKV ",
        utility_min_running="3",  # type: ignore[arg-type]
        utility_kv_gate="0.5",  # type: ignore[arg-type]
    )
    assert raw.validate() is None
    assert raw.validate() is None
    assert (raw.enable_utility_victim_selection, raw.utility_strategy) == (True, "bidkv")
    assert (raw.utility_min_running, raw.utility_kv_gate) == (3, 0.5)
    again = BidkvSelectorConfig(**raw.to_additional_config())
    assert again == raw
    assert again.to_additional_config() == raw.to_additional_config()
    assert BidkvSelectorConfig.from_additional_config(again.to_additional_config()) == raw


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("utility_kv_gate", 1.5, r"utility_kv_gate must be in \[0, 1\]"),
        ("utility_min_running", 0, "utility_min_running must be positive"),
        ("utility_strategy", "nope", "utility_strategy must be one of"),
        ("utility_epsilon", math.inf, "utility_epsilon must be finite"),
    ],
)
def test_validate_rejects_a_config_made_invalid_after_construction(
    name: str, value: object, message: str
) -> None:
    cfg = BidkvSelectorConfig()
    object.__setattr__(cfg, name, value)  # bypass the frozen dataclass, as a host patch could
    with pytest.raises(ValueError, match=message):
        cfg.validate()
    with pytest.raises(ValueError, match=message):
        BidkvSelectorConfig(**{name: value})  # type: ignore[arg-type]


def test_configuration_error_fails_host_startup() -> None:
    # The error propagates out of the controller's construction (docs/contracts.md, "Loading").
    vllm_config = SimpleNamespace(additional_config={"utility_completion_weight": -1})
    with pytest.raises(ValueError, match="utility_completion_weight must be non-negative"):
        PreemptionPolicyController(BidkvPreemptionPolicy, vllm_config)
    with pytest.raises(ValueError, match="utility_strategy must be one of"):
        PreemptionPolicyController(
            "bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy",
            SimpleNamespace(additional_config={"utility_strategy": "nope"}),
        )


# -- deliberate fix 1: booleans -----------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("0", False),
        ("true", True),
        ("FALSE", False),
        ("Yes", True),
        ("nO", False),
        (" true ", True),
        (True, True),
        (False, False),
        (1, True),
        (0, False),
    ],
)
def test_booleans_accept_words_in_any_case(raw: object, expected: bool) -> None:
    assert parse_bool(raw, "x") is expected
    assert BidkvSelectorConfig(utility_kill_switch=raw).utility_kill_switch is expected  # type: ignore[arg-type]
    cfg = BidkvSelectorConfig.from_additional_config({"utility_snapshot_enabled": raw})
    assert cfg.utility_snapshot_enabled is expected


@pytest.mark.parametrize("raw", ["true", "True", "YES", "no", "1", "0"])
def test_env_booleans_accept_words(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    # The original's bool(int(...)) raised on "true" and so failed the engine's startup.
    monkeypatch.setenv("BIDKV_UTILITY_ENABLE", raw)
    expected = raw.lower() in {"true", "yes", "1"}
    assert BidkvSelectorConfig.from_env().enable_utility_victim_selection is expected


def test_string_false_in_additional_config_is_false() -> None:
    # The original's bool("false") was True
    # (docs/policy.md, "Deliberate differences from the original").
    cfg = BidkvSelectorConfig.from_additional_config({"enable_utility_victim_selection": "false"})
    assert cfg.enable_utility_victim_selection is False


@pytest.mark.parametrize("raw", ["2", "on", "", "maybe", 2, -1, 1.0, 0.0, None, [1]])
def test_booleans_reject_anything_else(raw: object) -> None:
    with pytest.raises(
        ValueError,
        match=r"^utility_kill_switch must be a boolean \(1/0/true/false/yes/no\), got ",
    ):
        BidkvSelectorConfig.from_additional_config({"utility_kill_switch": raw})


@pytest.mark.parametrize("raw", ["2", "on", ""])
def test_env_booleans_reject_anything_else(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    # "2" was True in the original (bool(int("2"))); it is an error now.
    monkeypatch.setenv("BIDKV_UTILITY_SNAPSHOT_ENABLED", raw)
    with pytest.raises(
        ValueError,
        match=r"^BIDKV_UTILITY_SNAPSHOT_ENABLED \(utility_snapshot_enabled\) must be a boolean",
    ):
        BidkvSelectorConfig.from_env()


# -- deliberate fix 2: unknown strategy -----------------------------------------------------


def test_unknown_strategy_is_an_error_listing_known_names() -> None:
    expected = (
        "utility_strategy must be one of bidkv, fewest-output, largest-first, lcf, "
        "least-computed-first, mcf, most-computed-first, pe, pe-sjf, preempt-evict, "
        "preempt-evict-sjf, sglang-default, slack-aware, static-random; got 'pe_sjf'"
    )
    with pytest.raises(ValueError) as info:
        BidkvSelectorConfig(utility_strategy="pe_sjf")
    assert str(info.value) == expected
    with pytest.raises(ValueError, match=r"^utility_strategy must be one of"):
        BidkvPreemptionPolicy.from_vllm_config(
            SimpleNamespace(additional_config={"utility_strategy": "random"})
        )


def test_unknown_strategy_fails_even_when_switched_off() -> None:
    # A typo must not hide until someone turns the policy on.
    with pytest.raises(ValueError, match="utility_strategy"):
        BidkvSelectorConfig(enable_utility_victim_selection=False, utility_strategy="bidkv2")


def test_known_strategy_names_and_aliases() -> None:
    assert KNOWN_STRATEGY_NAMES == (
        "bidkv",
        "fewest-output",
        "largest-first",
        "lcf",
        "least-computed-first",
        "mcf",
        "most-computed-first",
        "pe",
        "pe-sjf",
        "preempt-evict",
        "preempt-evict-sjf",
        "sglang-default",
        "slack-aware",
        "static-random",
    )
    for name in KNOWN_STRATEGY_NAMES:
        cfg = BidkvSelectorConfig(utility_strategy=name)
        assert cfg.utility_strategy == name
    assert BidkvSelectorConfig(utility_strategy="preempt-evict").resolved_strategy == "pe"
    assert BidkvSelectorConfig(utility_strategy="preempt-evict-sjf").resolved_strategy == "pe-sjf"
    # Names are normalised: surrounding blanks and case do not matter.
    assert BidkvSelectorConfig(utility_strategy=" BidKV ").utility_strategy == "bidkv"


def test_liveness_mode_is_normalised() -> None:
    assert BidkvSelectorConfig(utility_liveness_mode="Barrier").utility_liveness_mode == "barrier"


def test_utility_enabled_needs_switch_on_and_kill_switch_off() -> None:
    assert not BidkvSelectorConfig().utility_enabled
    assert BidkvSelectorConfig(enable_utility_victim_selection=True).utility_enabled
    assert not BidkvSelectorConfig(
        enable_utility_victim_selection=True, utility_kill_switch=True
    ).utility_enabled
