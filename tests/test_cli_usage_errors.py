"""click's three-line usage errors stay, and their last line says what to pass instead."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

CASES = {
    "a word for an integer": (
        ["record", "sim", "--workload", "w.csv", "--limit", "abc", "--out", "o"],
        "'abc' is not a valid integer; pass --limit with a whole number >= 1 and <= 1099511627776",
    ),
    "a word for a number": (
        ["qualify", "--workload", "w.csv", "--slo-ttft-s", "abc", "--out", "o"],
        "'abc' is not a valid float; pass --slo-ttft-s with a number, e.g. 0.5",
    ),
    "an unknown choice": (
        ["record", "sim", "--workload", "w.csv", "--engine-mode", "bogus", "--out", "o"],
        "'bogus' is not one of 'vllm', 'sglang'; pass --engine-mode with one of: vllm, sglang",
    ),
    "a near miss of a choice": (
        ["record", "sim", "--workload", "w.csv", "--engine-mode", "sglng", "--out", "o"],
        "(did you mean 'sglang'?); pass --engine-mode with one of: vllm, sglang",
    ),
    "a number that is not finite": (
        ["record", "sim", "--workload", "w.csv", "--watermark", "nan", "--out", "o"],
        "'nan' is not a finite number; pass --watermark with a number >= 0.0 and < 1.0",
    ),
    "a value out of range": (
        ["replay", "t", "--strategy", "bidkv", "--out", "o", "--jobs", "0"],
        "0 is not in the range 1<=x<=4096; pass --jobs with a whole number >= 1 and <= 4096",
    ),
    "a missing option": (
        ["record", "sim", "--workload", "w.csv"],
        "Missing option '--out'. Pass --out PATH.",
    ),
    "a missing argument": (["replay", "--strategy", "bidkv", "--out", "o"], "Pass TRACE."),
    "a callback's message": (
        ["manifest", "render", "m.json", "--env", "NOEQUALS"],
        "expected KEY=VALUE, got 'NOEQUALS'; pass --env KEY=VALUE",
    ),
    "a callback's message that names the fix already": (
        ["record", "sim", "--workload", "w.csv", "--window", "5", "--out", "o"],
        "got '5'; pass e.g. --window 0:600, or --window 60: for everything after 60 s",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_last_line_names_the_fix(name: str) -> None:
    args, ending = CASES[name]
    result = CliRunner().invoke(cli, args, prog_name="tracekit")
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("Usage: tracekit ")
    assert lines[1].startswith("Try 'tracekit ")
    assert lines[-1].startswith("Error: ")
    assert lines[-1].endswith(ending)
    assert "pass" in lines[-1].lower()
