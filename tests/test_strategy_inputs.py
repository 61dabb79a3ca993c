"""Bad ``--strategy`` and ``--policy-config`` inputs give one-line errors (docs/guarantees.md,
"Bad input: one line, no traceback").

- ``module:Object`` that is not a policy (``os:system``) is refused where it is resolved, so
  ``record sim``, ``qualify``, ``sweep`` and ``replay`` all say so in one line;
- JSON nested too deeply for the parser (``RecursionError``) is a one-line error;
- ``utility_snapshot_history_size`` of 1e22 names the setting and its valid range;
- a ``--policy-config`` whose ``utility_strategy`` or ``enable_utility_victim_selection``
  contradicts ``--strategy`` is refused, not silently overridden;
- a misspelt strategy gets a "did you mean".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import ConfigError
from tracekit.strategies import parse_policy_config, parse_strategy_list, resolve_strategy
from tracekit.sweep.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# A plain function, a module, a class without select_victim/pick_victim, a constant.
@pytest.mark.parametrize("spec", ["os:system", "os:path", "collections:OrderedDict", "math:pi"])
def test_an_object_that_is_not_a_policy_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_strategy(spec)
    message = one_line(info)
    assert spec in message and "select_victim" in message


def test_a_real_user_policy_still_resolves() -> None:
    spec = resolve_strategy("bidkv.adapters.vllm_hust.selector:BidkvPreemptionPolicy")
    assert spec.kind == "user"


def test_record_sim_refuses_os_system_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--limit", "5", "--strategy", "os:system",
         "--out", str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "os:system" in errors[0]
    assert not (tmp_path / "r").exists()


def test_qualify_refuses_os_system_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["qualify", "--workload", str(SAMPLE), "--limit", "5", "--candidate", "os:system",
         "--out", str(tmp_path / "q")],
    )  # fmt: skip
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "os:system" in result.output and "Traceback" not in result.output


def test_a_sweep_matrix_refuses_os_system(tmp_path: Path) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        'name = "m"\nstrategies = ["builtin", "os:system"]\n'
        f'[[workloads]]\npath = "{SAMPLE}"\nlimit = 10\n'
        '[[engines]]\nlabel = "e"\nnum_blocks = 300\nmax_model_len = 4608\n'
    )
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    assert "os:system" in one_line(info)


def test_deeply_nested_policy_config_is_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy_config("[" * 100_000 + "]" * 100_000)
    message = one_line(info)
    assert message.startswith("--policy-config") and "nested" in message


def test_deeply_nested_policy_config_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"a": ' * 50_000 + "1" + "}" * 50_000)
    with pytest.raises(ConfigError) as info:
        parse_policy_config(f"@{path}")
    assert str(path) in one_line(info)


@pytest.mark.parametrize("value", [10**22, 2**63, 2**31])
def test_a_huge_history_size_names_the_setting_and_its_range(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_strategy("bidkv", {"utility_snapshot_history_size": value})
    message = one_line(info)
    assert "utility_snapshot_history_size" in message and "between 1 and 2147483647" in message


def test_a_float_history_size_is_refused_not_truncated() -> None:
    # 1e22 used to be int()-ed into range checks; a float is no integer setting's value.
    with pytest.raises(ConfigError) as info:
        resolve_strategy("bidkv", {"utility_snapshot_history_size": 1e22})
    assert "utility_snapshot_history_size must be an integer, got 1e+22" in one_line(info)


@pytest.mark.parametrize(
    ("strategy", "config"),
    [
        ("lcf", {"utility_strategy": "bidkv"}),
        ("bidkv", {"utility_strategy": "static-random"}),
        ("pe", {"enable_utility_victim_selection": False}),
        ("bidkv", {"enable_utility_victim_selection": False, "utility_kv_gate": 0.5}),
    ],
)
def test_a_policy_config_contradicting_the_strategy_is_refused(
    strategy: str, config: dict[str, object]
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_strategy(strategy, config)
    message = one_line(info)
    assert "--policy-config" in message and f"--strategy {strategy}" in message


def test_all_with_a_named_strategy_in_the_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="contradicts"):
        parse_strategy_list("all", {"utility_strategy": "bidkv"})


@pytest.mark.parametrize(
    ("strategy", "config"),
    [
        ("lcf", {"utility_strategy": "least-computed-first"}),
        ("bidkv", {"utility_strategy": "BidKV", "enable_utility_victim_selection": True}),
        ("pe", {"enable_utility_victim_selection": True}),
    ],
)
def test_a_policy_config_agreeing_with_the_strategy_is_accepted(
    strategy: str, config: dict[str, object]
) -> None:
    spec = resolve_strategy(strategy, config)
    assert spec.settings["utility_strategy"] == spec.name


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("bidkvv", "bidkv"),
        ("largest_first", "largest-first"),
        ("lfc", "lcf"),
        ("buitlin", "builtin"),
    ],
)
def test_a_typo_gets_did_you_mean(typo: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_strategy(typo)
    assert f"did you mean {suggestion!r}" in one_line(info)


def test_no_suggestion_for_something_unrelated() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_strategy("zzzzzzzz")
    assert "did you mean" not in one_line(info)


class BrokenPolicy:
    """Has the method, but its constructor fails."""

    def __init__(self) -> None:
        raise RuntimeError("no model here")

    def select_victim(self, context: object) -> str | None:
        return None


class BadFactory:
    """A factory that builds something that is not a policy."""

    @classmethod
    def from_vllm_config(cls, vllm_config: object) -> object:
        return 42


@pytest.mark.parametrize(
    ("name", "reason"),
    [("BrokenPolicy", "RuntimeError: no model here"), ("BadFactory", "TypeError")],
)
def test_a_policy_that_cannot_be_built_is_one_line_for_the_engine_hosts(
    name: str, reason: str
) -> None:
    spec = resolve_strategy(f"test_strategy_inputs:{name}")
    with pytest.raises(ConfigError) as info:
        spec.make_host("typed")
    message = one_line(info)
    assert message.startswith(f"--strategy test_strategy_inputs:{name}: cannot build the policy")
    assert reason in message


class TypedOnly:
    """A typed-contract policy with no ``pick_victim``: the legacy host cannot run it."""

    def select_victim(self, context: object) -> str | None:
        return None


def test_the_legacy_host_needs_pick_victim() -> None:
    spec = resolve_strategy("test_strategy_inputs:TypedOnly")
    assert type(spec.make_host("typed")).__name__ == "TypedHost"
    with pytest.raises(ConfigError) as info:
        spec.make_host("legacy")
    assert one_line(info) == (
        "--strategy test_strategy_inputs:TypedOnly: the legacy host needs a pick_victim method; "
        "use --host typed"
    )
    # The production policy has both faces.
    assert type(resolve_strategy("bidkv").make_host("legacy")).__name__ == "LegacyHost"


def test_a_typo_in_a_sweep_matrix_gets_did_you_mean(tmp_path: Path) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        'name = "m"\nstrategies = ["builtin", "lfc"]\n'
        f'[[workloads]]\npath = "{SAMPLE}"\nlimit = 10\n'
        '[[engines]]\nlabel = "e"\nnum_blocks = 300\nmax_model_len = 4608\n'
    )
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    assert "did you mean 'lcf'" in one_line(info)


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"utility_snapshot_history_size": 1e22}, "utility_snapshot_history_size"),
        ({"utility_snapshot_history_size": 10**22}, "utility_snapshot_history_size"),
        ({"utility_preempt_wieght": 2.0}, "utility_preempt_wieght"),
        ({"utility_strategy": "mcf"}, "--strategy builtin"),
    ],
)
def test_builtin_does_not_ignore_a_bad_policy_config(config: dict[str, object], names: str) -> None:
    """``--strategy builtin`` once ignored its --policy-config, even an impossible one."""
    with pytest.raises(ConfigError) as info:
        resolve_strategy("builtin", config)
    message = one_line(info)
    assert "--policy-config" in message and names in message


def test_builtin_accepts_a_valid_policy_config() -> None:
    assert resolve_strategy("builtin", {"utility_preempt_weight": 2.0}).kind == "builtin"
