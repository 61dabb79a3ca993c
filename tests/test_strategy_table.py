"""The strategy table: one row per strategy, read by the policy, the replay and the diff.

Checked here: the table's names are the names every reader accepts; every row has a columnar
form on the replay's fast path (or is declared to have none); each columnar form equals the row's
victim function, and the columnar built-in rule equals the one Python rule, on random decisions
full of ties; the rule is written once in the source; docs/policy.md lists every row.
"""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from replay_helpers import cand, ctx, write_trace

from bidkv.adapters.vllm_hust.builtin import builtin_victim
from bidkv.adapters.vllm_hust.config import (
    KNOWN_STRATEGY_NAMES,
    STRATEGIES,
    STRATEGY_ALIASES,
    canonical_strategy,
)
from bidkv.adapters.vllm_hust.scoring import scan_top
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from bidkv.adapters.vllm_hust.strategies import STRATEGY_TABLE, StrategyInputs, strategy_row
from tracekit.diff.policy_views import policy_views
from tracekit.engine.scheduler import VllmScheduler
from tracekit.hosts.preemption_policy import PreemptionContext, builtin_victim_id
from tracekit.hosts.victim_selector import NoOpVictimSelector, SchedulingPolicy
from tracekit.replay.contexts import build_contexts, iter_run_chunks
from tracekit.replay.fast import FAST_RULES, NO_FAST_FORM, ORDERED_PASSES
from tracekit.replay.rules import ChunkRules
from tracekit.strategies import (
    ALL_STRATEGIES,
    BUILTIN_ORDER,
    PRODUCTION_STRATEGIES,
    DecisionRules,
    OrderKey,
    VictimOrder,
)
from tracekit.trace import open_trace

ROOT = Path(__file__).resolve().parents[1]
NAMES = [row.name for row in STRATEGY_TABLE]
ORDERED = [row.name for row in STRATEGY_TABLE if row.order is not None]


def test_the_table_is_the_list_of_names_everywhere() -> None:
    aliases = [a for row in STRATEGY_TABLE for a in row.aliases]
    assert len(set(NAMES + aliases)) == len(NAMES) + len(aliases)
    assert list(STRATEGIES) == NAMES == list(PRODUCTION_STRATEGIES)
    assert ("builtin", *NAMES) == ALL_STRATEGIES
    assert {a: row.name for row in STRATEGY_TABLE for a in row.aliases} == STRATEGY_ALIASES
    assert sorted(KNOWN_STRATEGY_NAMES) == sorted(NAMES + aliases)
    for row in STRATEGY_TABLE:
        for name in (row.name, *row.aliases):
            assert canonical_strategy(name) == row.name
            assert strategy_row(name) is row
            config = BidkvSelectorConfig(
                enable_utility_victim_selection=True, utility_strategy=name
            )
            assert BidkvPreemptionPolicy(config).strategy == row.name
    assert strategy_row("builtin") is None


def test_every_row_has_a_fast_form_or_is_declared_to_have_none() -> None:
    forms = [set(ORDERED), set(ORDERED_PASSES), set(NO_FAST_FORM)]
    assert set.union(*forms) == set(NAMES)
    assert sum(len(f) for f in forms) == len(NAMES)  # each row in exactly one
    assert ("builtin", *(n for n in NAMES if n not in NO_FAST_FORM)) == FAST_RULES
    # The stateless rows are exactly those with a victim function and no state to carry.
    assert {r.name for r in STRATEGY_TABLE if r.victim is None} <= set(ORDERED_PASSES)


def test_only_the_rows_that_need_the_requester_get_it(caplog: pytest.LogCaptureFixture) -> None:
    # lcf skips the requester; a row that does not need it is never shown one.
    seen: list[object] = []
    row = strategy_row("largest-first")
    assert row is not None and not row.needs_requester
    lcf = strategy_row("lcf")
    assert lcf is not None and lcf.needs_requester
    assert [r.name for r in STRATEGY_TABLE if r.needs_requester] == ["bidkv", "lcf", "mcf"]
    # An order that skips the requester is one whose function is shown it.
    assert all(r.needs_requester for r in STRATEGY_TABLE if r.order and r.order.skip_requester)

    def spy(candidates: Any, inputs: StrategyInputs) -> tuple[Any, tuple[Any, ...]]:
        seen.append(inputs.requester)
        return candidates[0], (0,)

    for name, expected in (("largest-first", None), ("lcf", "b")):
        policy = BidkvPreemptionPolicy(
            BidkvSelectorConfig(enable_utility_victim_selection=True, utility_strategy=name)
        )
        policy._row = type(policy._row)(name, spy, needs_requester=policy._row.needs_requester)
        policy.select_victim(ctx([cand("a", 1), cand("b", 2)], "b"))
        assert seen[-1] == expected


# -- the columnar forms against the Python rules --------------------------------------------


def random_decisions(seed: int, count: int) -> list[PreemptionContext]:
    """Decisions with few distinct values, so that every tie rule is exercised."""
    rng = random.Random(seed)
    decisions = []
    for _ in range(count):
        n = rng.randint(1, 8)
        ids = [f"r{rng.randint(0, 9)}" for _ in range(n)] if rng.random() < 0.2 else None
        cands = [
            cand(
                ids[i] if ids else f"r{i}",
                rng.randint(0, 3),
                arrival=float(rng.randint(0, 2)),
                priority=rng.randint(0, 2),
                prompt=rng.randint(0, 3),
                output=rng.randint(0, 3),
                preemptions=rng.randint(0, 2),
                max_tokens=rng.choice([0, 2, 4]),
            )
            for i in range(n)
        ]
        requester = rng.choice([c.request_id for c in cands] + ["", "elsewhere"])
        policy = rng.choice(["fcfs", "priority"])
        decisions.append(ctx(cands, requester, now=float(rng.randint(0, 3)), policy=policy))
    return decisions


@pytest.fixture(scope="module")
def chunk_and_contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[Any]]:
    trace = write_trace(tmp_path_factory.mktemp("table") / "t", random_decisions(11, 600))
    (chunk,) = iter_run_chunks(open_trace(trace).bundles[0], 1000)
    return chunk, build_contexts(chunk)


def columnar_ids(rules: ChunkRules, rows: pl.Series) -> list[str]:
    return rules.chunk.candidates["request_id"].gather(rules.canonical(rows)).to_list()


def test_the_columnar_builtin_rule_is_the_python_rule(chunk_and_contexts) -> None:
    chunk, contexts = chunk_and_contexts
    rules = ChunkRules(chunk)
    expected = [builtin_victim(c.candidates, c.scheduling_policy).request_id for c in contexts]
    assert any(c.scheduling_policy == "priority" for c in contexts)
    assert columnar_ids(rules, rules.rows(BUILTIN_ORDER)) == expected
    # Every Python call site computes the same rule.
    assert [builtin_victim_id(c) for c in contexts] == expected
    selector = NoOpVictimSelector()
    assert [
        selector.pick_victim(list(c.candidates), SchedulingPolicy(c.scheduling_policy)).request_id
        for c in contexts
    ] == expected


@pytest.mark.parametrize("name", ORDERED)
@pytest.mark.parametrize("slo_s", [120.0, 1.5])
def test_each_columnar_form_is_its_rows_victim_function(
    chunk_and_contexts, name: str, slo_s: float
) -> None:
    chunk, contexts = chunk_and_contexts
    row = strategy_row(name)
    assert row is not None and row.victim is not None
    rules = ChunkRules(chunk)
    config = BidkvSelectorConfig(utility_slo_s=slo_s)
    expected = []
    for c in contexts:
        requester = c.requesting_request_id if row.needs_requester else None
        inputs = StrategyInputs(c.scheduling_policy, requester, c.now, random.Random(0), slo_s)
        expected.append(row.victim(c.candidates, inputs)[0].request_id)
    assert row.order is not None
    assert columnar_ids(rules, rules.rows(row.order, config.utility_slo_s)) == expected


def test_a_new_order_needs_no_replay_code(chunk_and_contexts) -> None:
    # A rule no row has (fewest preemptions, then the latest deadline, first on ties, never the
    # requester) compiles as it is declared: the replay holds no strategy's rule by name.
    chunk, contexts = chunk_and_contexts
    order = VictimOrder(
        (
            OrderKey("num_preemptions", False),
            OrderKey(("+", "arrival_time", "slo_s"), True),
            OrderKey("priority", False, priority_only=True),
        ),
        skip_requester=True,
    )
    expected = []
    for c in contexts:
        eligible = [x for x in c.candidates if x.request_id != c.requesting_request_id]
        priority = c.scheduling_policy == "priority"
        keys = [
            (-x.num_preemptions, x.arrival_time + 2.5, -x.priority if priority else 0)
            for x in eligible
        ]
        expected.append(
            eligible[keys.index(max(keys))].request_id if eligible else c.candidates[-1].request_id
        )
    assert columnar_ids(ChunkRules(chunk), ChunkRules(chunk).rows(order, 2.5)) == expected


def test_the_diffs_policy_view_is_the_python_rule(chunk_and_contexts) -> None:
    chunk, contexts = chunk_and_contexts
    fields = ["request_id", "priority", "arrival_time", "num_computed_tokens"]
    fields += ["num_output_tokens", "max_tokens", "num_preemptions"]
    candidates = chunk.candidates.select(
        "seq", "position", *(pl.col(f).alias(f"{f}_typed") for f in fields)
    ).lazy()
    decisions = chunk.decisions.select(
        "seq",
        pl.col("scheduling_policy").alias("scheduling_policy_typed"),
        pl.col("requesting_request_id").alias("requesting_request_id_typed"),
    )
    views = policy_views(candidates, decisions, {}).sort("seq")
    rules = DecisionRules()
    assert views["default_id"].to_list() == [
        builtin_victim(c.candidates, c.scheduling_policy).request_id for c in contexts
    ]
    tops = [
        scan_top(
            c.candidates,
            rules.completion_weight,
            rules.preempt_weight,
            rules.epsilon,
            rules.default_max_tokens,
            c.requesting_request_id,
        )
        for c in contexts
    ]
    assert views["top_id"].to_list() == [t[2] for t in tops]
    assert views["requester_r"].to_list() == [t[8] if t[7] else None for t in tops]


def test_the_engine_uses_the_one_rule() -> None:
    # The embedded engine's requests name the arrival arrival_s; the rule is the same.
    class Request:
        def __init__(self, rid: str, priority: int, arrival: float) -> None:
            self.request_id, self.priority, self.arrival_s = rid, priority, arrival

    class Engine:
        _builtin_victim = VllmScheduler._builtin_victim

        def __init__(self, running: list[Request], policy: str) -> None:
            self.running, self.policy = running, policy

    running = [Request("a", 1, 5.0), Request("b", 2, 1.0), Request("c", 2, 1.0), Request("d", 0, 9)]
    assert Engine(running, "priority")._builtin_victim().request_id == "b"
    assert Engine(running, "fcfs")._builtin_victim().request_id == "d"


# -- one copy of the rule, and the docs ------------------------------------------------------


def _priority_max_calls(path: Path) -> list[int]:
    """Lines of ``max(..., key=...)`` calls whose key reads both a priority and an arrival."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "max":
            for keyword in node.keywords:
                names = {n.attr for n in ast.walk(keyword.value) if isinstance(n, ast.Attribute)}
                names |= {
                    n.value
                    for n in ast.walk(keyword.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
                if "priority" in names and names & {"arrival_time", "arrival_s"}:
                    lines.append(node.lineno)
    return lines


def test_the_builtin_rule_is_written_once() -> None:
    builtin = ROOT / "bidkv" / "adapters" / "vllm_hust" / "builtin.py"
    found = {
        str(path.relative_to(ROOT)): lines
        for folder in ("bidkv/adapters", "tracekit")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != builtin and (lines := _priority_max_calls(path))
    }
    # The original experiments' scheduler hooks reproduce the original BidKV's own code.
    assert {k: v for k, v in found.items() if not k.startswith("tracekit/experiment/")} == {}
    assert _priority_max_calls(builtin) == []  # the rule reads PRIORITY_KEY, an attrgetter
    source = builtin.read_text("utf-8")
    assert 'attrgetter("priority", "arrival_time")' in source


def test_the_detector_finds_a_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text("v = max(running, key=lambda r: (r.priority, r.arrival_time))\n")
    assert _priority_max_calls(copy) == [1]


def test_docs_list_every_row_with_its_aliases() -> None:
    text = (ROOT / "docs" / "policy.md").read_text("utf-8")
    section = text.split("## Strategies", 1)[1].split("\n\n**", 1)[0]
    listed: dict[str, list[str]] = {}
    for line in section.splitlines():
        match = re.match(r"\| `([a-z-]+)`( \(alias(?:es)? (.*?)\))? \|", line)
        if match:
            listed[match[1]] = re.findall(r"`([a-z-]+)`", match[3] or "")
    assert listed == {row.name: list(row.aliases) for row in STRATEGY_TABLE}
