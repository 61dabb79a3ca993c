"""``--policy-config`` values are checked, never coerced (docs/policy.md, "Settings").

Each case failed before: ``1.5`` for an integer became 1, ``"yes"`` became true, ``"7"`` became
7, ``''`` counted as no configuration, a huge number raised a bare ``OverflowError`` (or, past
Python's digit limit, a ``ValueError`` traceback) that named no setting, and an unknown key got
no suggestion. Every setting has a documented range; the boundaries below are the documented
ones, and a setting added without a range here fails the completeness test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from tracekit.cli import cli
from tracekit.errors import ConfigError
from tracekit.strategies import POLICY_SETTINGS, parse_policy_config, resolve_strategy

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
INT64 = 2**63 - 1
HUGE_COOLDOWN = '{"utility_cooldown_s": 1' + "0" * 400 + "}"


def refused(config: dict[str, object], strategy: str = "bidkv") -> str:
    with pytest.raises(ConfigError) as info:
        resolve_strategy(strategy, config)
    message = str(info.value)
    assert "\n" not in message
    assert "Traceback" not in message and "OverflowError" not in message
    return message


# -- no coercion -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("utility_min_running", 1.5, "utility_min_running must be an integer, got 1.5"),
        ("utility_min_running", 2.0, "utility_min_running must be an integer, got 2.0"),
        ("utility_liveness_preemptions", "7", "must be an integer, got '7'"),
        ("utility_seed", True, "utility_seed must be an integer, got True"),
        ("utility_snapshot_enabled", "yes", "utility_snapshot_enabled must be true or false"),
        ("utility_kill_switch", 1, "utility_kill_switch must be true or false, got 1"),
        ("enable_utility_victim_selection", "no", "must be true or false, got 'no'"),
        ("utility_kv_gate", "0.5", "utility_kv_gate must be a number, got '0.5'"),
        ("utility_epsilon", False, "utility_epsilon must be a number, got False"),
        ("utility_cooldown_s", None, "utility_cooldown_s must be a number, got None"),
        ("utility_liveness_mode", 1, "utility_liveness_mode must be a string, got 1"),
        ("utility_strategy", ["bidkv"], "utility_strategy must be a string"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(setting: str, value: object, expected: str) -> None:
    message = refused({setting: value})
    assert expected in message and message.startswith("--policy-config: ")
    # builtin checks the configuration the same way.
    assert expected in refused({setting: value}, "builtin")


def test_an_int_for_a_number_is_a_number() -> None:
    spec = resolve_strategy("bidkv", {"utility_cooldown_s": 2, "utility_kv_gate": 1})
    assert spec.settings["utility_cooldown_s"] == 2.0
    assert isinstance(spec.settings["utility_kv_gate"], float)


def test_an_empty_policy_config_is_not_no_config() -> None:
    assert parse_policy_config(None) == {}
    for text in ("", "   "):
        with pytest.raises(ConfigError, match="is empty"):
            parse_policy_config(text)
    with pytest.raises(ConfigError, match="names no file"):
        parse_policy_config("@")


def test_a_repeated_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="utility_kv_gate is given twice"):
        parse_policy_config('{"utility_kv_gate": 0.5, "utility_kv_gate": 0.9}')


# -- ranges ------------------------------------------------------------------------------------

# setting -> (values inside the documented range, values outside it); docs/policy.md, "Settings".
RANGES: dict[str, tuple[list[object], list[object]]] = {
    "enable_utility_victim_selection": ([True], []),
    "utility_strategy": (["bidkv", "least-computed-first"], ["nope"]),
    "utility_kill_switch": ([True, False], []),
    "utility_completion_weight": ([0.0, 1e300], [-1e-9, math.inf]),
    "utility_preempt_weight": ([0, 1e300], [-1, math.inf]),
    "utility_kv_gate": ([0, 1.0], [-0.01, 1.000001]),
    "utility_cooldown_s": ([0, 1e300], [-1.0, math.inf]),
    "utility_min_running": ([1, INT64], [0, INT64 + 1]),
    "utility_liveness_preemptions": ([0, INT64], [-1, INT64 + 1]),
    "utility_cascade_gain_ratio": ([1, 1e300], [0.999, math.inf]),
    "utility_snapshot_enabled": ([True, False], []),
    "utility_snapshot_top_k": ([1, INT64], [0, INT64 + 1]),
    "utility_snapshot_history_size": ([1, 2**31 - 1], [0, 2**31]),
    "utility_epsilon": ([1e-300, 1e300], [0.0, math.inf]),
    "utility_default_max_tokens": ([1, INT64], [0, INT64 + 1]),
    "utility_seed": ([-INT64 - 1, 0, INT64], [-INT64 - 2, INT64 + 1]),
    "utility_liveness_mode": (["abstain", "barrier"], ["lazy"]),
    "utility_slo_s": ([1e-9, 1e300], [0.0, math.inf]),
}


def test_every_setting_has_a_range_here() -> None:
    assert set(RANGES) == set(POLICY_SETTINGS)


@pytest.mark.parametrize("setting", sorted(RANGES))
def test_each_setting_takes_its_range_and_refuses_what_is_outside(setting: str) -> None:
    inside, outside = RANGES[setting]
    for value in inside:
        config = (
            {"utility_strategy": "bidkv"} if setting == "enable_utility_victim_selection" else {}
        )
        BidkvSelectorConfig.from_settings({**config, setting: value})
    for value in outside:
        assert setting in refused({setting: value})


@pytest.mark.parametrize(
    "setting",
    [
        "utility_kv_gate",
        "utility_completion_weight",
        "utility_preempt_weight",
        "utility_cooldown_s",
        "utility_slo_s",
        "utility_epsilon",
        "utility_cascade_gain_ratio",
        "utility_min_running",
        "utility_default_max_tokens",
        "utility_seed",
    ],
)
def test_a_huge_number_names_the_setting_in_one_line(setting: str) -> None:
    # 10**400 used to raise "OverflowError: int too large to convert to float" for the number
    # settings, naming none; through JSON, 1e400 is infinity.
    message = refused({setting: 10**400})
    assert setting in message and "401 digits" in message
    text = json.dumps({setting: 1}).replace("1}", "1" + "0" * 400 + "}")
    assert setting in refused(parse_policy_config(text))


def test_an_infinity_says_what_the_number_became() -> None:
    # 1e400 reads as infinity; "must be in [0, 1]" alone did not say so.
    message = refused(parse_policy_config('{"utility_kv_gate": 1e400}'))
    assert "utility_kv_gate must be in [0, 1], got inf" in message and "1e400" in message
    assert "got inf" in refused(parse_policy_config('{"utility_epsilon": 1e999}'))


def test_a_huge_history_size_is_shown_by_its_size() -> None:
    # It printed all 401 digits.
    message = refused({"utility_snapshot_history_size": 10**400})
    assert "got an integer of 401 digits" in message and len(message) < 200


def test_digits_past_the_json_limit_are_one_line() -> None:
    # Python refuses to read integer literals of more than 4,300 digits (a ValueError that is
    # not a JSONDecodeError, and escaped as a traceback).
    with pytest.raises(ConfigError) as info:
        parse_policy_config('{"utility_seed": ' + "9" * 5000 + "}")
    assert "\n" not in str(info.value) and "--policy-config" in str(info.value)


def test_the_engine_paths_bound_the_same_ranges() -> None:
    # additional_config and the environment keep their documented parsing, and their ranges.
    with pytest.raises(ValueError, match="utility_cooldown_s must be a finite number"):
        BidkvSelectorConfig.from_additional_config({"utility_cooldown_s": 10**400}, environ={})
    with pytest.raises(ValueError, match="utility_min_running must be between 1 and"):
        BidkvSelectorConfig.from_env({"BIDKV_UTILITY_MIN_RUNNING": str(2**64)})
    with pytest.raises(ValueError, match="utility_slo_s must be finite"):
        BidkvSelectorConfig(utility_slo_s=math.inf)


# -- unknown keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("utility_kv_gat", "utility_kv_gate"),
        ("kv_gate", "utility_kv_gate"),
        ("utility_preempt_wieght", "utility_preempt_weight"),
        ("enable_utility", "enable_utility_victim_selection"),
        # difflib's closest spelling was utility_seed; known aliases come first.
        ("utility_enabled", "enable_utility_victim_selection"),
        ("enabled", "enable_utility_victim_selection"),
        ("seed", "utility_seed"),
        ("kill_switch", "utility_kill_switch"),
    ],
)
def test_an_unknown_key_gets_did_you_mean(key: str, suggestion: str) -> None:
    message = refused({key: 1})
    assert f"unknown setting(s) {key} (did you mean {suggestion}?)" in message


def test_an_unrelated_key_gets_no_suggestion() -> None:
    message = refused({"colour": 1})
    assert "unknown setting(s) colour;" in message and "did you mean" not in message


# -- through the command line ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"utility_min_running": 1.5}', "utility_min_running must be an integer, got 1.5"),
        ('{"utility_snapshot_enabled": "yes"}', "utility_snapshot_enabled must be true or false"),
        ('{"utility_liveness_preemptions": "7"}', "must be an integer, got '7'"),
        ("", "is empty"),
        (HUGE_COOLDOWN, "utility_cooldown_s must be a finite number"),
        ('{"utility_cooldown_s": 1e400}', "utility_cooldown_s must be finite"),
        ('{"utility_kv_gat": 0.5}', "did you mean utility_kv_gate?"),
    ],
)
def test_record_sim_refuses_in_one_line_and_writes_nothing(
    tmp_path: Path, config: str, message: str
) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--limit", "5", "--strategy", "bidkv",
         "--policy-config", config, "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.strip().count("\n") == 0
    assert not out.exists()
