"""Exit codes are the same in every command: 2 means bad input, 1 a check that ran and failed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

MISSING = "{tmp}/no-such-input"

COMMANDS = {
    "validate": ["validate", MISSING],
    "inspect": ["inspect", MISSING],
    "query": ["query", MISSING, "SELECT 1"],
    "diff": ["diff", MISSING, MISSING],
    "fidelity": ["fidelity", MISSING, MISSING],
    "outputs": ["outputs", MISSING, MISSING],
    "replay open": ["replay", MISSING, "--strategy", "bidkv", "--out", "{tmp}/out"],
    "replay closed": [
        "replay", MISSING, "--strategy", "bidkv", "--mode", "closed", "--out", "{tmp}/out",
    ],
    "record sim": ["record", "sim", "--workload", MISSING, "--out", "{tmp}/out"],
    "record import": ["record", "import", MISSING, "--out", "{tmp}/out"],
    "record vllm": ["record", "vllm", "--workload", MISSING, "--out", "{tmp}/out"],
    "record sglang": ["record", "sglang", "--workload", MISSING, "--out", "{tmp}/out"],
    "qualify": ["qualify", "--workload", MISSING, "--out", "{tmp}/out"],
    "report": ["report", MISSING],
    "capacity": ["capacity", "--workload", MISSING],
    "sweep": ["sweep", MISSING, "--out", "{tmp}/out"],
    "sweep --dry-run": ["sweep", MISSING, "--out", "{tmp}/out", "--dry-run"],
    "manifest validate": ["manifest", "validate", MISSING],
    "manifest render": ["manifest", "render", MISSING],
    "experiment traces": ["experiment", "traces", "--pool", MISSING, "--out", "{tmp}/out"],
    "experiment traces verify": ["experiment", "traces", "--mode", "verify", "--out", MISSING],
    "oracle": ["oracle", MISSING, "--out", "{tmp}/out"],
    "calibrate": ["calibrate", MISSING, "--out", "{tmp}/out"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_missing_input_path_exits_2_with_one_line(name: str, tmp_path: Path) -> None:
    args = [arg.format(tmp=tmp_path) for arg in COMMANDS[name]]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith("Error: ")
    assert "no-such-input" in result.output
    assert not (tmp_path / "out").exists()


def test_every_command_is_covered() -> None:
    def leaves(group, prefix=""):  # type: ignore[no-untyped-def]
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from leaves(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}"

    covered = {" ".join(args[:2]) if args[0] in {"record", "manifest", "experiment"} else args[0]
               for args in COMMANDS.values()}  # fmt: skip
    # experiment run and latency tables read no input path; their bad input is checked below
    # (and a missing AISimulate package in tests/test_latency_aisimulate.py).
    assert set(leaves(cli)) - {"experiment run", "latency tables"} <= covered


def test_latency_tables_of_an_unknown_kind_exits_2() -> None:
    result = CliRunner().invoke(cli, ["latency", "tables", "aisim"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "'aisim' is not one of 'aiconfigurator', 'aisimulate'" in result.output


def test_experiment_run_with_a_bad_strategy_exits_2(tmp_path: Path) -> None:
    args = ["experiment", "run", "--strategies", "nope", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1


def test_an_invalid_manifest_is_a_failed_check(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("{}", "utf-8")
    result = CliRunner().invoke(cli, ["manifest", "validate", str(path)])
    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00binary", b"[" * 100_000 + b"]" * 100_000],
    ids=["not-json", "not-utf8", "too-deep"],
)
def test_an_unreadable_manifest_is_bad_input(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(content)
    result = CliRunner().invoke(cli, ["manifest", "validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "fix:" in lines[0]
