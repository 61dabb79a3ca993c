"""``tracekit diff`` through the click command: exit codes 0, 1 and 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import SMALL
from click.testing import CliRunner

from tracekit.cli import cli


def record(out: Path, strategy: str, host: str) -> Path:
    result = CliRunner().invoke(
        cli, ["record", "sim", *SMALL, "--strategy", strategy, "--host", host, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("diff")
    return {
        name: (
            record(root / name / "legacy", name, "legacy"),
            record(root / name / "typed", name, "typed"),
        )
        for name in ("largest-first", "bidkv")
    }


def test_equivalent_exits_0(pairs) -> None:
    legacy, typed = pairs["largest-first"]
    result = CliRunner().invoke(cli, ["diff", str(legacy), str(typed), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["verdict"] == "equivalent"


def test_contract_differences_exit_1_unless_allowed(pairs) -> None:
    legacy, typed = pairs["bidkv"]
    strict = CliRunner().invoke(cli, ["diff", str(legacy), str(typed)])
    assert strict.exit_code == 1
    assert "equivalent-modulo-contract" in strict.output
    allowed = CliRunner().invoke(
        cli, ["diff", str(legacy), str(typed), "--allow-contract-differences"]
    )
    assert allowed.exit_code == 0


def test_incomparable_inputs_exit_2(pairs) -> None:
    legacy, _ = pairs["largest-first"]
    _, typed = pairs["bidkv"]
    result = CliRunner().invoke(cli, ["diff", str(legacy), str(typed)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0


def test_missing_arguments_exit_2() -> None:
    result = CliRunner().invoke(cli, ["diff"])
    assert result.exit_code == 2
    assert "needs LEGACY and TYPED" in result.output


def test_conformance_passes_for_the_real_policy() -> None:
    result = CliRunner().invoke(cli, ["diff", "--conformance", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["passed"] is True
