"""Open-mode replay of user policies: broken ones are disabled and counted like the controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from replay_helpers import HAND, cand, column, ctx, read_rows, write_trace

from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import PreemptionContext, PreemptionPolicyController
from tracekit.replay import replay_open
from tracekit.replay.contexts import build_contexts, iter_run_chunks
from tracekit.strategies import resolve_strategy
from tracekit.trace import open_trace

# -- user policies, loaded by name as module:Object -----------------------------------------


class Counting:
    """Counts its calls; the tail otherwise (a valid selection)."""

    def __init__(self) -> None:
        self.calls = 0

    def select_victim(self, context: PreemptionContext) -> Any:
        self.calls += 1
        return self.choose(context)

    def choose(self, context: PreemptionContext) -> Any:
        return context.candidates[-1].request_id


class RaisesOnSecondCall(Counting):
    def choose(self, context: PreemptionContext) -> Any:
        if self.calls == 2:
            raise ValueError("boom")
        return context.candidates[0].request_id


class ReturnsJunkString(Counting):
    def choose(self, context: PreemptionContext) -> Any:
        return "not-a-candidate" if self.calls == 2 else context.candidates[0].request_id


class ReturnsCandidateObject(Counting):
    def choose(self, context: PreemptionContext) -> Any:
        return context.candidates[0]


class ReturnsPlainObject(Counting):
    def choose(self, context: PreemptionContext) -> Any:
        return object()


class ReturnsNumber(Counting):
    def choose(self, context: PreemptionContext) -> Any:
        return 7


class NoneSometimes(Counting):
    """Abstains on every other call: never a failure."""

    def choose(self, context: PreemptionContext) -> Any:
        return None if self.calls % 2 == 0 else context.candidates[0].request_id


class ExplainsItself(Counting):
    """Reports its own reason, as the production policy does through last_decision_reason()."""

    def last_decision_reason(self) -> str:
        return "my-own-reason"


class CannotBeBuilt:
    def __init__(self) -> None:
        raise RuntimeError("no GPU here")

    def select_victim(self, context: PreemptionContext) -> Any:
        return None


class NotAPolicy:
    pass


def spec(name: str):
    return resolve_strategy(f"{__name__}:{name}")


# Five decisions: HAND, then two more.
FIVE = [
    *HAND,
    (ctx([cand("p", 10), cand("q", 20)], "p"), "q"),
    (ctx([cand("r", 5), cand("s", 6), cand("t", 7)], "t"), "t"),
]


@pytest.fixture
def five(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "trace", FIVE)


def controller_reference(trace: Path, name: str) -> tuple[list[str], dict[str, Any]]:
    """Victims and counters of one fresh controller over the trace's contexts, in order."""
    controller = PreemptionPolicyController(spec(name).make_policy(), check_thread=False)
    victims = []
    for chunk in iter_run_chunks(open_trace(trace).bundles[0], 100):
        victims += [controller.select_victim(c) for c in build_contexts(chunk)]
    return victims, controller.export_stats()


@pytest.mark.parametrize(
    ("name", "outcomes", "raw_type", "raw", "message"),
    [
        (
            "RaisesOnSecondCall",
            ["selected", "exception", "disabled", "disabled", "disabled"],
            "none",
            None,
            "raised an exception: ValueError: boom",
        ),
        (
            "ReturnsJunkString",
            ["selected", "invalid", "disabled", "disabled", "disabled"],
            "str",
            "not-a-candidate",
            "returned unknown request ID 'not-a-candidate'",
        ),
        (
            "ReturnsCandidateObject",
            ["invalid", "disabled", "disabled", "disabled", "disabled"],
            "other",
            repr(cand("a", 100)),
            "returned unknown request ID PreemptionCandidate(request_id='a'",
        ),
        (
            "ReturnsPlainObject",
            ["invalid", "disabled", "disabled", "disabled", "disabled"],
            "other",
            "<object object>",
            "returned unknown request ID <object object>",
        ),
        (
            "ReturnsNumber",
            ["invalid", "disabled", "disabled", "disabled", "disabled"],
            "other",
            "7",
            "returned unknown request ID 7",
        ),
    ],
)
def test_a_broken_policy_is_disabled_and_counted_as_the_controller_does(
    five: Path,
    tmp_path: Path,
    name: str,
    outcomes: list[str],
    raw_type: str,
    raw: str | None,
    message: str,
) -> None:
    result = replay_open(five, [spec(name)], tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    assert rows["outcome"].to_list() == outcomes
    failed = outcomes.index("invalid" if "invalid" in outcomes else "exception")
    assert rows["raw_result_type"][failed] == raw_type
    assert rows["raw_result"][failed] == raw
    assert rows["decision_reason"][failed] is None
    # After a failure the built-in victim is applied, and the policy is never called again.
    builtin = [c.candidates[-1].request_id for c, _ in FIVE]
    assert rows["applied_victim_id"].to_list()[failed:] == builtin[failed:]
    assert rows["raw_result_type"].to_list()[failed + 1 :] == ["not-called"] * (4 - failed)

    victims, stats = controller_reference(five, name)
    assert rows["applied_victim_id"].to_list() == victims
    (row,) = result.summary.iter_rows(named=True)
    for key in ("calls", "selections", "abstentions", "failures", "invalid_selections"):
        assert row[key] == stats[key], key
    assert row["disabled_decisions"] == 4 - failed
    (failure,) = result.failures
    assert (failure.run_id, failure.seq, failure.outcome) == ("run-a", failed, outcomes[failed])
    assert failure.strategy == f"{__name__}:{name}"
    assert failure.message.startswith(message)
    assert result.reference_path == (f"{__name__}:{name}",)


def test_abstaining_sometimes_is_not_a_failure(five: Path, tmp_path: Path) -> None:
    result = replay_open(five, [spec("NoneSometimes")], tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    assert rows["outcome"].to_list() == ["selected", "abstained"] * 2 + ["selected"]
    assert rows["raw_result_type"].to_list() == ["str", "none"] * 2 + ["str"]
    victims, stats = controller_reference(five, "NoneSometimes")
    assert rows["applied_victim_id"].to_list() == victims
    (row,) = result.summary.iter_rows(named=True)
    assert (row["calls"], row["selections"], row["abstentions"], row["failures"]) == (5, 3, 2, 0)
    assert row["abstentions_other"] == 2
    assert stats["abstentions"] == 2
    assert result.failures == ()


def test_a_policy_is_fresh_in_every_run_of_a_dataset(tmp_path: Path) -> None:
    write_trace(tmp_path / "data" / "a", FIVE, run_id="run-a")
    write_trace(tmp_path / "data" / "b", FIVE, run_id="run-b")
    result = replay_open(tmp_path / "data", [spec("RaisesOnSecondCall")], tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    per_run = rows.group_by("run_id", maintain_order=True).agg("outcome")["outcome"].to_list()
    expected = ["selected", "exception", "disabled", "disabled", "disabled"]
    assert per_run == [expected, expected]
    assert [(f.run_id, f.seq) for f in result.failures] == [("run-a", 1), ("run-b", 1)]
    (row,) = result.summary.iter_rows(named=True)
    assert (row["calls"], row["failures"], row["disabled_decisions"]) == (4, 2, 6)


def test_a_broken_policy_beside_good_ones_changes_only_itself(five: Path, tmp_path: Path) -> None:
    specs = [resolve_strategy("pe"), spec("ReturnsJunkString"), resolve_strategy("bidkv")]
    result = replay_open(five, specs, tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    alone = replay_open(five, [resolve_strategy("bidkv")], tmp_path / "alone")
    assert column(rows, "bidkv", "applied_victim_id") == column(
        read_rows(tmp_path / "alone"), "bidkv", "applied_victim_id"
    )
    assert result.fast_path == ("pe", "bidkv") and alone.fast_path == ("bidkv",)
    assert result.summary.filter(pl.col("strategy") == "pe")["failures"].item() == 0


def test_a_policy_reason_is_recorded_as_the_recorders_read_it(five: Path, tmp_path: Path) -> None:
    replay_open(five, [spec("ExplainsItself"), resolve_strategy("bidkv")], tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    assert column(rows, f"{__name__}:ExplainsItself", "decision_reason") == ["my-own-reason"] * 5
    assert set(column(rows, "bidkv", "decision_reason")) <= {"strategy", "cascade_abstain"}


@pytest.mark.parametrize(
    ("name", "message"),
    # A class without select_victim is refused as soon as it is resolved (tracekit.strategies).
    [("CannotBeBuilt", "RuntimeError: no GPU here"), ("NotAPolicy", "not a preemption policy")],
)
def test_a_policy_that_cannot_be_built_is_a_config_error(
    five: Path, tmp_path: Path, name: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        replay_open(five, [spec(name)], tmp_path / "out")
    assert not (tmp_path / "out").exists()
