"""A slice of the bad-input suite (``benchmarks/bad_inputs.py``): every case a clear error.

The full suite (3,000 cases over every command) runs as ``python benchmarks/bad_inputs.py``;
this runs about one case in 20 of each family, chosen by a hash of its name (interrupts, which
need seconds each, aside; 184 cases), on the same fixtures: about 40 s under load, fixtures
included. A case is a clear error when the command refuses it with its documented exit
code and an ``Error:`` line naming the option or file, with no traceback and nothing left
behind.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bad_inputs

SLICE = [
    case
    for case in bad_inputs.select(bad_inputs.all_cases(), None, 20)
    if case.family != "interrupt"
]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bad_inputs.build_fixtures(tmp_path_factory.mktemp("bad-inputs") / "fixtures")


def test_the_suite_is_at_least_the_audits_size() -> None:
    cases = bad_inputs.all_cases()
    assert len(cases) >= 1784
    commands = {case.command.split()[0] for case in cases}
    from tracekit.cli import cli

    assert commands >= set(cli.commands)  # every command gets bad input


def test_a_slice_of_bad_inputs_gets_clear_errors(fixtures: Path, tmp_path: Path) -> None:
    outcomes = bad_inputs.run_suite(SLICE, fixtures, tmp_path)
    failing = [
        f"{o.category} {o.case.command}: {o.case.name} (exit {o.exit_code}) {o.damage}: {o.detail}"
        for o in outcomes
        if o.category != "clear" or o.damage
    ]
    assert failing == []
    assert len(outcomes) > 100
