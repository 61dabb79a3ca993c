"""The engine's SGLang mode against recordings of SGLang 0.5.23's real scheduling objects.

Each bundle under ``tests/data/sglang-0.5.23/`` was recorded by ``record_sglang`` (remake them
with ``python -m tracekit.sglang.fixtures``): Azure conversation slices, a Mooncake slice with
``hash_ids``, a shared-prefix table and a decode-heavy synthetic workload, each with the radix
cache on and off and with the ``length`` and ``priority`` retraction policies, and the
priority and ``ignore_eos`` scenarios; all in both of SGLang's loops (normal and overlap). The
engine re-runs each scenario and must agree on every step: batch kind, scheduled requests and
tokens in batch order, radix-cache hit tokens, retraction victims in order, requests preempted
at admission, ``new_token_ratio`` and the waiting queue in order.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

import tracekit.engine.sglang as engine_sglang
from tracekit.engine.sglang import SglangScheduler
from tracekit.sglang.compare import compare_bundle, engine_steps, first_mismatch
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.sglang.protocol import unordered_requeue
from tracekit.sglang.record import read_sglang_scenario, read_sglang_steps

ROOT = Path(__file__).resolve().parents[1]


def _bundle(name: str) -> Path:
    return ROOT / FIXTURES_DIR / name


@functools.cache
def _recorded(name: str) -> tuple:
    """A fixture's step records, read once per test session."""
    return tuple(read_sglang_steps(_bundle(name)))


def test_every_fixture_is_committed() -> None:
    assert sorted(p.name for p in (ROOT / FIXTURES_DIR).iterdir()) == sorted(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_engine_matches_sglang_step_by_step(name: str) -> None:
    total, mismatch = compare_bundle(_bundle(name))
    assert mismatch is None, mismatch.render()
    assert total > 100


def test_fixtures_cover_retractions_radix_hits_and_both_policies() -> None:
    """The fixtures exercise what they are for (facts of the recordings, not of the engine).

    Read from the bundles' tables (one decision per victim, each step's radix hits), which the
    recorder writes from the same step records: parsing every step file would cost seconds.
    """

    def victims_of(name: str) -> list[str]:
        decisions = pl.read_parquet(_bundle(name) / "decisions.parquet").sort("seq")
        return decisions["applied_victim_id"].to_list()

    victims = {n: len(victims_of(n)) for n in FIXTURES}
    assert sum(victims.values()) >= 25
    assert all(victims[n] > 0 for n in FIXTURES if n.startswith(("azure", "synthetic")))
    hits = {
        n: int(pl.read_parquet(_bundle(n) / "steps.parquet")["cache_hit_tokens"].sum() or 0)
        for n in FIXTURES
    }
    assert hits["mooncake-radix-length"] > 0 and hits["shared-prefix-radix-length"] > 10_000
    assert all(hits[n] == 0 for n in FIXTURES if "noradix" in n)
    # The tables say what the step records do.
    name = "shared-prefix-radix-length"
    assert victims[name] == sum(len(s.victims) for s in _recorded(name))
    assert hits[name] == sum(r.radix_hit_tokens for s in _recorded(name) for r in s.admissions)
    # The retraction policies choose differently on the same workload.
    assert victims_of("azure-late-noradix-length") != victims_of("azure-late-noradix-priority")


def test_a_changed_rule_is_caught() -> None:
    """The comparison fails when the engine departs from SGLang (here: vLLM's front re-queue)."""
    bundle = _bundle("synthetic-noradix-length")
    config, rows = read_sglang_scenario(bundle)
    recorded = read_sglang_steps(bundle)
    steps = engine_steps(config, rows)
    index = next(i for i, s in enumerate(recorded) if s.victims)
    moved = steps[index]
    # Put the victims at the front of the waiting queue instead of its tail.
    victims = list(moved.victims)
    rest = [w for w in moved.waiting if w not in victims]
    altered = type(moved)(
        moved.step, moved.mode, moved.reqs, moved.victims, moved.new_token_ratio, (*victims, *rest)
    )
    if altered.waiting == moved.waiting:
        pytest.skip("the victims were the whole waiting queue")
    mismatch = first_mismatch(recorded, [*steps[:index], altered, *steps[index + 1 :]])
    assert mismatch is not None and mismatch.field == "waiting" and mismatch.index == index


@pytest.mark.parametrize("name", ["shared-prefix-radix-length", "azure-late-radix-priority"])
def test_block_and_tree_accounting_hold_every_step(name: str) -> None:
    """Held blocks plus the radix tree's tokens equal the used pool after every step."""
    from tracekit.engine import BuiltinHost, run_engine
    from tracekit.sglang.compare import engine_config, engine_requests

    config, rows = read_sglang_scenario(_bundle(name))
    result = run_engine(
        engine_requests(rows),
        engine_config(config),
        BuiltinHost(),
        collect=False,
        check_consistency=True,
    )
    assert result.num_steps == len(_recorded(name))


# --- The rules of the overlap loop, ignore_eos and the priority options, each broken on purpose.
# The fixtures must catch each at the first step where the broken rule changes what the engine
# does: the first step where the broken engine's stream leaves the correct one (which matches
# SGLang at every step), no earlier than the step where the broken rule first gave another
# answer, and in the field that rule decides.


def _first_divergence(a: list, b: list) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _break_finishing_inflight(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """Overlap: decode the requests whose result in flight ends them (no exclusion)."""
    original = SglangScheduler._finishing_inflight

    def broken(self, running, in_flight):  # type: ignore[no-untyped-def]
        if original(self, running, in_flight):
            fired.append(in_flight.out.step + 1)
        return []

    monkeypatch.setattr(SglangScheduler, "_finishing_inflight", broken)


def _break_eos_overdecode(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """Overlap: also keep out of the decode a request its result ends at its end of sequence."""
    original = SglangScheduler._finishing_inflight

    def broken(self, running, in_flight):  # type: ignore[no-untyped-def]
        launched = in_flight.out.num_scheduled_tokens
        extra = [
            r
            for r in running
            if r.request_id in launched and r.num_output_tokens + 1 >= r.stop_output_tokens
        ]
        kept = original(self, running, in_flight)
        if [r for r in extra if r not in kept]:
            fired.append(in_flight.out.step + 1)
        return [r for r in running if r in kept or r in extra]

    monkeypatch.setattr(SglangScheduler, "_finishing_inflight", broken)


def _break_ignore_eos_offset(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """ignore_eos: running requests reserve new_token_ratio of their output, not all of it."""
    original = SglangScheduler._offset

    def broken(self, request, ratio):  # type: ignore[no-untyped-def]
        if request.ignore_eos and ratio != 1.0:
            fired.append(-1)  # (no step at hand: only that it fired)
        left = self.max_new[request.request_id] - request.num_output_tokens
        return min(left, engine_sglang.CLIP_MAX_NEW_TOKENS) * ratio

    def broken_total(running, max_new, ratio, ahead=0):  # type: ignore[no-untyped-def]
        return sum(
            [broken(SimpleNamespace(max_new=max_new), _ahead(r, ahead), ratio) for r in running]
        )

    monkeypatch.setattr(SglangScheduler, "_offset", broken)
    monkeypatch.setattr(engine_sglang, "_total_reserved", broken_total)
    del original


def _ahead(request, ahead: int):  # type: ignore[no-untyped-def]
    """A running request's view as it will be ``ahead`` decodes from now."""
    return SimpleNamespace(
        request_id=request.request_id,
        ignore_eos=request.ignore_eos,
        num_output_tokens=request.num_output_tokens + ahead,
    )


def _break_ignore_eos_drain(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """add_one_req_ignore_eos without its drain check (only the extend must fit now)."""
    original = engine_sglang._drains

    def broken(states, free_now):  # type: ignore[no-untyped-def]
        if not original(states, free_now):
            fired.append(-1)
        return True

    monkeypatch.setattr(engine_sglang, "_drains", broken)


def _break_priority_direction(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """Priority scheduling always sorts lower values first (SGLang's default is higher)."""
    original = engine_sglang.SglangWaitingQueue.sort_by_priority

    def broken(self, sign=1):  # type: ignore[no-untyped-def]
        before = list(self)
        original(self, sign)
        right = list(self)
        self[:] = before
        self.sorted_by = None  # (the queue as it was: not sorted)
        original(self, 1)
        if list(self) != right:
            fired.append(-1)

    monkeypatch.setattr(engine_sglang.SglangWaitingQueue, "sort_by_priority", broken)


def _break_victim_requeue_order(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """retract_decode's victims requeued in running-batch order (SGLang: in retraction order)."""
    original = SglangScheduler._retract

    def broken(self, step, now):  # type: ignore[no-untyped-def]
        before = [r.request_id for r in self.running]
        original(self, step, now)
        victims, _ = self.last_retractions[-1]
        if len(victims) > 1:
            tail = self.waiting[-len(victims) :]
            by_running = sorted(tail, key=lambda r: before.index(r.request_id))
            if by_running != tail:
                fired.append(step)
                self.waiting[-len(victims) :] = by_running

    monkeypatch.setattr(SglangScheduler, "_retract", broken)


def _break_preemption_threshold(monkeypatch: pytest.MonkeyPatch, fired: list[int]) -> None:
    """Preemption at admission when the difference reaches the threshold (SGLang: exceeds)."""
    original = SglangScheduler.__init__

    def broken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        fired.append(-1)
        self._threshold -= 1  # (priorities are integers: > threshold - 1 is >= threshold)

    monkeypatch.setattr(SglangScheduler, "__init__", broken)


BROKEN_RULES = {
    # rule: (fixture, break, fields where it shows, whether the fire step is known)
    "overlap keeps requests its result ends by length": (
        "azure-noradix-length-overlap",
        _break_finishing_inflight,
        {"scheduled"},
        True,
    ),
    "overlap drops requests its result ends at end of sequence": (
        "ignore-eos-mixed-noradix-overlap",
        _break_eos_overdecode,
        {"scheduled"},
        True,
    ),
    "ignore_eos running requests reserve new_token_ratio": (
        "ignore-eos-mixed-radix",
        _break_ignore_eos_offset,
        {"scheduled", "waiting", "mode"},
        False,
    ),
    "add_one_req_ignore_eos skips its drain check": (
        "ignore-eos-long-noradix",
        _break_ignore_eos_drain,
        {"scheduled", "waiting", "mode"},
        False,
    ),
    "priority scheduling sorts lower values first": (
        "priority-high-overlap",
        _break_priority_direction,
        {"scheduled", "waiting", "mode"},
        False,
    ),
    "retract_decode requeues its victims in running-batch order": (
        "retract-many-radix",
        _break_victim_requeue_order,
        {"waiting"},
        True,
    ),
    "priority preemption at a difference equal to its threshold": (
        "priority-preempt-threshold",
        _break_preemption_threshold,
        {"preempted", "scheduled", "waiting", "mode"},
        False,
    ),
}


@pytest.mark.parametrize("rule", sorted(BROKEN_RULES))
def test_a_broken_new_rule_is_caught_at_its_first_effect(
    rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, breaker, fields, fire_step_known = BROKEN_RULES[rule]
    bundle = _bundle(name)
    config, rows = read_sglang_scenario(bundle)
    recorded = read_sglang_steps(bundle)
    right = engine_steps(config, rows)
    assert first_mismatch(recorded, right) is None
    fired: list[int] = []
    breaker(monkeypatch, fired)
    broken = engine_steps(config, rows)
    assert fired, f"the broken rule never gave another answer on {name}"
    mismatch = first_mismatch(recorded, broken)
    assert mismatch is not None, f"{name} does not catch: {rule}"
    assert mismatch.index == _first_divergence(right, broken)
    assert mismatch.field in fields, mismatch.render()
    if fire_step_known:
        # The step the broken rule first acted on is the step the fixture shows.
        assert mismatch.step == fired[0], mismatch.render()


def test_new_fixtures_cover_overlap_ignore_eos_and_priority() -> None:
    """Facts of the recordings that make them test what they are for."""

    def stream(name: str) -> pl.DataFrame:
        # Every step's requests and tokens in batch order (the scheduled table, which the
        # recorder writes from the step records: cheaper to read than every step file).
        scheduled = pl.read_parquet(_bundle(name) / "scheduled.parquet")
        return scheduled.select("step", "request_id", "num_tokens")

    def differ(a: str, b: str) -> bool:
        return not stream(a).equals(stream(b))

    def count(name: str, what: str) -> int:
        return sum(len(getattr(s, what)) for s in _recorded(name))

    # The overlap loop schedules differently from the normal one on every base workload.
    for name in FIXTURES:
        if name.endswith("-overlap"):
            assert differ(name, name.removesuffix("-overlap")), name
    # Preemption at admission: one victim at a time (SGLang requeues a set), none when disabled.
    for name in ("priority-preempt", "priority-preempt-low", "priority-preempt-threshold"):
        steps = _recorded(name)
        assert sum(len(s.preempted) for s in steps) > 0
        assert all(len(s.preempted) <= 1 for s in steps)
    assert count("priority-preempt-disabled", "preempted") == 0
    # The direction of priority and the retraction policy change SGLang's choices.
    assert differ("priority-high", "priority-low-retract")
    assert count("priority-high-overlap", "victims") > 0
    high = [v for s in _recorded("priority-high-overlap") for v in s.victims]
    retract = [v for s in _recorded("priority-high-retract-overlap") for v in s.victims]
    assert high != retract
    # ignore_eos: every such request ran to its max_tokens, and the admissions differ.
    requests = pl.read_parquet(_bundle("ignore-eos-all-noradix") / "requests.parquet")
    assert (requests["output_tokens"] == requests["max_tokens"]).all()
    assert differ("ignore-eos-all-noradix", "ignore-eos-all-radix")


def test_the_scenario_workloads_are_their_generator_s_output() -> None:
    """The committed scenario tables are what scenario_requests makes, byte for byte."""
    from tracekit.sglang.fixtures import SCENARIO_KINDS, SCENARIO_WORKLOADS, scenario_csv

    assert {p.stem for p in (ROOT / SCENARIO_WORKLOADS).iterdir()} == set(SCENARIO_KINDS)
    for kind in SCENARIO_KINDS:
        path = ROOT / SCENARIO_WORKLOADS / f"{kind}.csv"
        assert path.read_text("utf-8") == scenario_csv(kind)


def test_fixtures_cover_many_at_once_and_both_radix_settings() -> None:
    """Two requests retracted, two or three preempted, at once; preemption at admission and long
    ignore_eos outputs with the radix cache on and off; SGLang's priority direction on a real
    workload."""
    for name in ("retract-many-radix", "retract-many-radix-overlap"):
        many = [r for s in _recorded(name) for r in s.retractions if len(r.victims) > 1]
        assert len(many) >= 5
        for step in _recorded(name):
            if len(step.victims) > 1:
                # A list: requeued in the order retracted, at the tail.
                assert step.waiting[-len(step.victims) :] == step.victims
    groups = {
        name: [s.preempted_ids for s in _recorded(name) if s.preempted]
        for name in FIXTURES
        if name.startswith("preempt-many")
    }
    assert len(groups) == 4
    for name, preempted in groups.items():
        assert sorted(len(g) for g in preempted) == [1, 2, 3], name
    # SGLang requeued a group out of running-batch order (the ids are in arrival order, which
    # is the running batch's) in at least one recording: the comparison must not rely on it.
    assert any(list(g) != sorted(g) for gs in groups.values() for g in gs)
    priorities = {r[0]: r[5] for r in read_sglang_scenario(_bundle("preempt-many-radix"))[1]}
    for preempted in groups["preempt-many-radix"]:
        assert len({priorities[r] for r in preempted}) == len(preempted)
    for name in ("priority-preempt", "priority-preempt-noradix"):
        assert sum(len(s.preempted) for s in _recorded(name)) >= 5, name
    for name in ("ignore-eos-long-noradix", "ignore-eos-long-radix"):
        requests = pl.read_parquet(_bundle(name) / "requests.parquet")
        assert (requests["output_tokens"] > engine_sglang.CLIP_MAX_NEW_TOKENS).all(), name
    for radix in ("radix", "noradix"):
        high = f"azure-late-{radix}-priority-high"
        assert FIXTURES[high].config.schedule_low_priority_values_first is False
        assert FIXTURES[high].config.disable_priority_preemption is False
        old = [s.waiting for s in _recorded(f"azure-late-{radix}-priority")]
        assert [s.waiting for s in _recorded(high)] != old
        assert sum(len(s.victims) for s in _recorded(high)) > 0


def test_a_preemption_group_is_compared_as_a_set_and_only_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SGLang requeues one arrival's preemptions in a set's order (object addresses: another
    order in every run); the engine in running-batch order. Ordered, the comparison fails on a
    recording where they differ; as a set it matches, and still catches another set, another
    order of the rest of the queue, or the group in another place of it."""
    import tracekit.sglang.compare as compare

    name = next(
        n
        for n in FIXTURES
        if n.startswith("preempt-many")
        and any(list(s.preempted_ids) != sorted(s.preempted_ids) for s in _recorded(n))
    )
    config, rows = read_sglang_scenario(_bundle(name))
    recorded = list(_recorded(name))
    steps = engine_steps(config, rows)
    assert first_mismatch(recorded, steps) is None
    with monkeypatch.context() as patch:
        patch.setattr(
            compare,
            "unordered_requeue",
            lambda waiting, preempted: (tuple(waiting), tuple(preempted)),
        )
        ordered = first_mismatch(recorded, steps)
    assert ordered is not None and ordered.field in ("preempted", "waiting")
    index = next(i for i, s in enumerate(steps) if len(s.preempted) > 1)
    other = (*steps[index].preempted[:-1], "someone-else")
    changed = dataclasses.replace(steps[index], preempted=other)
    mismatch = first_mismatch(recorded, [*steps[:index], changed, *steps[index + 1 :]])
    assert mismatch is not None and mismatch.field == "preempted"
    # Only the group's order is taken out: its places in the queue, and the order of the
    # rest, stay as they were.
    assert unordered_requeue(("a", "y", "b", "x"), ("y", "x")) == (("a", "x", "b", "y"), ("x", "y"))
    assert unordered_requeue(("b", "a", "y", "x"), ("y", "x"))[0] == ("b", "a", "x", "y")
    assert unordered_requeue(("y", "x", "a"), ("x", "y"))[0] != ("a", "x", "y")
    assert unordered_requeue(("b", "a"), ("a",)) == (("b", "a"), ("a",))
