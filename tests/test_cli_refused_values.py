"""Option values that used to be accepted silently are refused with an error naming the fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit.conformance
from tracekit.analysis.serving import SloTargets
from tracekit.cli import cli
from tracekit.errors import ConfigError


@pytest.mark.parametrize("window", ["abc", "5", "10:5", "-1:5", "nan:5", "0:inf", "a:b"])
def test_a_bad_window_is_refused(window: str, azure_sample: Path, tmp_path: Path) -> None:
    args = ["record", "sim", "--workload", str(azure_sample), "--window", window,
            "--out", str(tmp_path / "out")]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--window'" in result.output
    # click's usage error keeps its three lines; its last line names the fix.
    assert "pass e.g. --window 0:600" in result.output.splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_good_windows_are_parsed(azure_sample: Path, tmp_path: Path) -> None:
    from tracekit.cli.options import _parse_window

    assert _parse_window(None, None, "0:600") == (0.0, 600.0)  # type: ignore[arg-type]
    assert _parse_window(None, None, "60:") == (60.0, None)  # type: ignore[arg-type]
    assert _parse_window(None, None, ":5") == (0.0, 5.0)  # type: ignore[arg-type]


SLO_CASES = [
    ["qualify", "--workload", "{w}", "--slo-ttft-s", "{v}", "--out", "{o}"],
    ["qualify", "--workload", "{w}", "--slo-tpot-s", "{v}", "--out", "{o}"],
    ["experiment", "run", "--slo-ttft-ms", "{v}", "--out", "{o}"],
    ["experiment", "run", "--slo-tpot-ms", "{v}", "--out", "{o}"],
]


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
@pytest.mark.parametrize("case", range(len(SLO_CASES)))
def test_a_bad_slo_target_is_one_line(
    case: int, value: str, azure_sample: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = [a.format(w=azure_sample, v=value, o=out) for a in SLO_CASES[case]]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith("Error: --slo-")
    assert "finite number > 0" in result.output
    assert not out.exists()


@pytest.mark.parametrize("ttft, tpot", [(math.nan, 0.1), (-1.0, 0.1), (2.0, math.nan), (2.0, 0)])
def test_slo_targets_are_checked_in_the_library(ttft: float, tpot: float) -> None:
    with pytest.raises(ConfigError, match="finite number > 0"):
        SloTargets(ttft, tpot)


def test_conformance_strategy_all_is_one_name(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def fake(names, policy_config):  # type: ignore[no-untyped-def]
        seen.append(names)
        raise ConfigError("stop here")

    # The command imports the checks when it runs: patched where they live.
    monkeypatch.setattr(tracekit.conformance, "run_conformance", fake)
    for value, expected in [("all", ("all",)), ("bidkv, pe", ("bidkv", "pe"))]:
        result = CliRunner().invoke(cli, ["diff", "--conformance", "--strategy", value])
        assert result.exit_code == 2 and "stop here" in result.output
        assert seen[-1] == expected
