"""A slice of the bad-input suite (``benchmarks/bad_inputs.py``): every case a clear error.

The full suite (3,275 command lines over every command, 72 stops, 284 report injections,
20,000 random ``--policy-config`` documents and 180,000 controller contexts) runs as
``python benchmarks/bad_inputs.py``. The fast tier runs about one command line in 20 of each
family, chosen by a hash of its name (about 190 cases, about 40 s under load, fixtures
included), and the 20,000 policy documents (a few seconds: the settings parser alone). The e2e
tier runs a slice of the stops and of the report injections, which need seconds each. A case is
a clear error when the command refuses it with its documented exit code and an ``Error:`` line
naming the option or file, with no traceback and nothing left behind.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bad_input_policy
import bad_input_report
import bad_input_stops
import bad_inputs

SLICE = bad_inputs.select(bad_inputs.all_cases(), None, 20)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bad_inputs.build_fixtures(tmp_path_factory.mktemp("bad-inputs") / "fixtures")


def test_the_suite_is_at_least_the_audits_size_in_every_category() -> None:
    # The audit: 1,784 bad inputs over every command, 67 injection forms in the report,
    # 58 interruption checks, 20,000 random policy settings, 172,000 fuzzed policy inputs.
    cases = bad_inputs.all_cases()
    assert len(cases) >= 1784
    commands = {case.command.split()[0] for case in cases}
    from tracekit.cli import cli

    assert commands >= set(cli.commands)  # every command gets bad input
    assert len(bad_input_report.FORMS) >= 67
    assert len(bad_input_report.injection_cases()) >= 67 * 4
    stops = bad_input_stops.stop_cases()
    assert len(stops) >= 58
    assert {s.signal for s in stops} == {"SIGINT", "SIGTERM", "SIGKILL"}
    assert len({s.command.name for s in stops}) >= 8
    assert sum(1 for c in cases if c.family == "combination") >= 50


def test_a_slice_of_bad_inputs_gets_clear_errors(fixtures: Path, tmp_path: Path) -> None:
    outcomes = bad_inputs.run_suite(SLICE, fixtures, tmp_path)
    failing = [
        f"{o.category} {o.case.command}: {o.case.name} (exit {o.exit_code}) {o.damage}: {o.detail}"
        for o in outcomes
        if o.category != "clear" or o.damage
    ]
    assert failing == []
    assert len(outcomes) > 100
    assert "combination" in {o.case.family for o in outcomes}


def test_20000_random_policy_configs_are_refused_or_taken_as_documented() -> None:
    result = bad_input_policy.run_policy_documents(20_000)
    assert sum(result.counts.values()) == 20_000
    failing = {k: v for k, v in result.counts.items() if k not in ("clear", "valid")}
    assert failing == {}, result.examples
    assert result.damage == 0
    # Both answers occur: the generator is not all broken or all valid.
    assert result.counts["valid"] > 500 and result.counts["clear"] > 10_000


@pytest.mark.e2e
def test_a_slice_of_the_stops_leaves_nothing_and_reruns_identically(
    fixtures: Path, tmp_path: Path
) -> None:
    outcomes = bad_inputs.stop_outcomes(fixtures, tmp_path, every=6)
    # A command that finished before its stop came is a timing miss (the benchmark counts it
    # as silent); a few may happen on an idle machine, whatever else must be clear.
    missed = [o for o in outcomes if o.category == "silent" and "finished before" in o.detail]
    failing = [
        f"{o.category} {o.case.command} {o.case.name} (exit {o.exit_code}) {o.damage}: {o.detail}"
        for o in outcomes
        if (o.category != "clear" and o not in missed) or o.damage
    ]
    assert failing == []
    assert len(outcomes) >= 8 and len(missed) <= len(outcomes) // 4


@pytest.mark.e2e
def test_a_slice_of_the_report_injections_shows_text_and_runs_nothing(
    fixtures: Path, tmp_path: Path
) -> None:
    outcomes = bad_inputs.injection_outcomes(fixtures, tmp_path, every=10)
    failing = [
        f"{o.category} {o.case.name} (exit {o.exit_code}) {o.damage}: {o.detail}"
        for o in outcomes
        if o.category != "clear" or o.damage
    ]
    assert failing == []
    assert len(outcomes) >= 20
