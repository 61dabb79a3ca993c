"""The fast path equals the reference path (every decision through the controller), exactly.

Checked on recorded runs of the embedded engine (FCFS and PRIORITY, vLLM and SGLang modes) for
every production strategy and many ``bidkv`` configurations, on hand-built ties, and on the
order-dependent state of the stateful strategies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from replay_helpers import cand, column, ctx, read_rows, write_trace

from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy
from tracekit.engine.config import make_engine_config
from tracekit.errors import TraceSchemaError
from tracekit.hosts.preemption_policy import PreemptionPolicyController
from tracekit.recording.sim import SimRun, record_sim
from tracekit.replay import replay_open
from tracekit.replay.contexts import build_contexts, iter_run_chunks
from tracekit.strategies import ALL_STRATEGIES, StrategySpec, parse_strategy_list, resolve_strategy
from tracekit.trace import open_trace
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four recorded runs under heavy KV pressure (a few thousand decisions in all)."""
    root = tmp_path_factory.mktemp("fast") / "data"
    # Seeded priorities make PRIORITY scheduling (and the sglang-default key) non-trivial.
    workload = load_workload(SAMPLE, limit=150, priority_seed=7, rate_scale=4.0)
    # One-token blocks and admission on the prompt alone: decodes keep running out of KV.
    # Designed without prefix caching (which would hit the recomputed prefixes and relieve the
    # pressure) and with synchronous scheduling: said explicitly since the defaults are vLLM's.
    pressure = {
        "block_size": 1,
        "max_model_len": 4400,
        "full_sequence_must_fit": False,
        "enable_prefix_caching": False,
        "async_scheduling": False,
    }
    runs = [
        ("fcfs-bidkv", "bidkv", {"scheduling_policy": "fcfs"}),
        ("priority-builtin", "builtin", {"scheduling_policy": "priority"}),
        ("priority-random", "static-random", {"scheduling_policy": "priority", "num_blocks": 4600}),
        ("sglang-largest", "largest-first", {"mode": "sglang"}),
    ]
    for name, strategy, settings in runs:
        config = make_engine_config(**{"num_blocks": 5000, **pressure, **settings})
        record_sim(SimRun(workload, config, resolve_strategy(strategy), "typed"), root / name)
    return root


def both_paths(trace: Path, specs: list[StrategySpec], tmp_path: Path, **kw: Any) -> pl.DataFrame:
    """Replay on both paths; assert identical tables and summaries; return the rows."""
    fast = replay_open(trace, specs, tmp_path / "fast", chunk_rows=97, **kw)
    plain = replay_open(trace, specs, tmp_path / "plain", fast=False, chunk_rows=97, **kw)
    assert plain.fast_path == ()
    rows = read_rows(tmp_path / "fast")
    assert_frame_equal(rows, read_rows(tmp_path / "plain"), check_exact=True)
    assert_frame_equal(fast.summary, plain.summary, check_exact=True)
    assert_frame_equal(fast.agreement, plain.agreement, check_exact=True)
    return rows


def test_every_built_in_strategy_matches_the_controller(dataset: Path, tmp_path: Path) -> None:
    specs = parse_strategy_list("all")
    rows = both_paths(dataset, specs, tmp_path)
    result = json.loads((tmp_path / "fast" / "replay.json").read_text())
    assert all(run["fast_path"] == list(ALL_STRATEGIES) for run in result["runs"])
    assert rows.height == result["decisions"] * len(specs) > 2000 * 8
    # The trace is varied enough to exercise every branch the fast path reproduces.
    reasons = set(column(rows, "bidkv", "decision_reason"))
    assert {"strategy", "cascade_abstain", "liveness_abstain"} <= reasons


BIDKV_CONFIGS: list[dict[str, Any]] = [
    {"utility_kv_gate": 0.9},
    {"utility_kv_gate": 1.0},
    {"utility_cooldown_s": 0.05},
    {"utility_cooldown_s": 1.0, "utility_kv_gate": 0.5},
    {"utility_min_running": 4},
    {"utility_liveness_preemptions": 0},
    {"utility_liveness_preemptions": 1},
    {"utility_liveness_preemptions": 2},
    {"utility_cascade_gain_ratio": 1.0},
    {"utility_cascade_gain_ratio": 4.0},
    {"utility_completion_weight": 0.0, "utility_preempt_weight": 5.0},
    {"utility_default_max_tokens": 1, "utility_epsilon": 0.5},
    {"utility_snapshot_enabled": True, "utility_snapshot_top_k": 5},
    {"utility_kill_switch": True},
    {"utility_seed": 123},
]


def test_bidkv_configurations_match_the_controller(dataset: Path, tmp_path: Path) -> None:
    specs = [resolve_strategy("bidkv", c) for c in BIDKV_CONFIGS]
    specs += [resolve_strategy("static-random", {"utility_seed": 123})]
    specs += [resolve_strategy("slack-aware", {"utility_slo_s": 0.5})]
    labels = [f"s{i}" for i in range(len(specs))]
    rows = both_paths(dataset, specs, tmp_path, labels=labels)
    reasons = rows.group_by("strategy").agg(pl.col("decision_reason").unique())
    seen = {r: set(v) for r, v in reasons.iter_rows()}
    assert "gate_fallback" in seen["s0"] and "gate_fallback" in seen["s2"]
    assert seen["s13"] == {"disabled"}  # kill switch: behaves as pe
    assert "liveness_abstain" not in seen["s5"]


def test_barrier_mode_takes_the_reference_path(dataset: Path, tmp_path: Path) -> None:
    specs = [
        resolve_strategy("bidkv", {"utility_liveness_mode": "barrier"}),
        resolve_strategy("pe"),
    ]
    result = replay_open(dataset, specs, tmp_path / "out")
    assert result.reference_path == ("bidkv",) and result.fast_path == ("pe",)
    assert "liveness_fallback" in set(
        column(read_rows(tmp_path / "out"), "bidkv", "decision_reason")
    )


def test_bounded_liveness_offsets_forget_as_the_policy_does(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tops A, B, A, each preempted once: A's offset is remembered, unless the table holds one id.
    alternating = [
        ctx([cand(top, 500, preemptions=1), cand("small", 10, arrival=1.0)], "small")
        for top in ("A", "B", "A")
    ]
    trace = write_trace(tmp_path / "t", alternating)
    spec = [resolve_strategy("bidkv", {"utility_liveness_preemptions": 1})]
    replay_open(trace, spec, tmp_path / "unbounded")
    assert read_rows(tmp_path / "unbounded")["outcome"].to_list() == [
        "abstained",
        "abstained",
        "selected",
    ]
    monkeypatch.setattr(BidkvPreemptionPolicy, "state_table_limit", 1)
    rows = both_paths(trace, spec, tmp_path / "small")
    assert rows["outcome"].to_list() == ["abstained"] * 3
    both_paths(dataset, spec, tmp_path / "dataset")


def test_ties_and_repeated_ids_match_the_controller(tmp_path: Path) -> None:
    same = {"output": 4, "max_tokens": 8}
    decisions = [
        # Equal utility: earliest arrival wins, then the smallest id; equal tokens: the first.
        ctx([cand("b", 100, arrival=1.0, **same), cand("a", 100, arrival=1.0, **same),
             cand("c", 100, arrival=0.5, **same)], "b"),
        ctx([cand("b", 100, **same), cand("a", 100, **same), cand("c", 50)], "c"),
        # Exact ties on every key of sglang-default and slack-aware: the last in host order.
        ctx([cand("x", 10, arrival=2.0, prompt=5), cand("y", 10, arrival=2.0, prompt=5),
             cand("z", 10, arrival=2.0, prompt=5)], "x"),
        # PRIORITY default: the first with the largest (priority, arrival).
        ctx([cand("p", 10, priority=2, arrival=1.0), cand("q", 30, priority=2, arrival=1.0),
             cand("r", 20, priority=1, arrival=9.0)], "r", policy="priority"),
        # A repeated id (never written by recorders, but replayable): it stands for its first row.
        ctx([cand("d", 70), cand("e", 10), cand("d", 90, output=9)], "e"),
        ctx([cand("f", 0), cand("", 5)], ""),
        # lcf/mcf under PRIORITY: priority plays no part, the requester is skipped, ties last.
        ctx([cand("p", 10, priority=9), cand("q", 10, priority=0), cand("s", 5)], "s",
            policy="priority"),
    ]  # fmt: skip
    both_paths(write_trace(tmp_path / "t", decisions), parse_strategy_list("all"), tmp_path)
    rows = read_rows(tmp_path / "fast")
    assert column(rows, "bidkv", "applied_victim_id")[:2] == ["c", "a"]
    assert column(rows, "largest-first", "applied_victim_id")[1] == "b"
    assert column(rows, "sglang-default", "applied_victim_id")[2] == "z"
    assert column(rows, "slack-aware", "applied_victim_id")[2] == "z"
    assert column(rows, "pe", "applied_victim_id")[3] == "p"
    assert column(rows, "largest-first", "victim_tokens_freed")[4] == 70
    assert column(rows, "lcf", "applied_victim_id") == ["c", "a", "z", "p", "d", "f", "q"]
    assert column(rows, "mcf", "applied_victim_id") == ["c", "a", "z", "q", "d", "f", "q"]


def test_non_finite_times_are_refused_before_any_replay(tmp_path: Path) -> None:
    """A NaN arrival time used to send the run to the reference path and replay it; it is a
    damaged trace, refused in one line naming the file, the column and the first decision."""
    decisions = [ctx([cand("a", 10, arrival=float("nan")), cand("b", 20)], "a") for _ in range(3)]
    trace = write_trace(tmp_path / "t", decisions)
    with pytest.raises(TraceSchemaError) as error:
        replay_open(trace, parse_strategy_list("all"), tmp_path / "out")
    message = str(error.value)
    assert message.startswith(f"{trace / 'candidates.parquet'}: candidates.arrival_time is NaN")
    assert "3 row(s), the first at seq 0" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


# -- stateful strategies evolve in decision order ------------------------------------------

# The utility top "big" has been preempted 1, 2, then 2 times. With a liveness bound of 1,
# the policy abstains the first time a count is new (and remembers it), and picks "big" when
# the count was already seen.
ORDERED = [
    ctx([cand("big", 500, preemptions=p), cand("small", 100, arrival=1.0)], "small", now=t)
    for p, t in ((1, 1.0), (2, 2.0), (2, 3.0))
]
LIVENESS_1 = {"utility_liveness_preemptions": 1}


def controller_victims(trace: Path, settings: dict[str, Any]) -> list[str]:
    policy = resolve_strategy("bidkv", settings).make_policy()
    controller = PreemptionPolicyController(policy, check_thread=False)
    (chunk,) = iter_run_chunks(open_trace(trace).bundles[0], 100)
    return [controller.select_victim(c) for c in build_contexts(chunk)]


def test_stateful_decisions_depend_on_their_order(tmp_path: Path) -> None:
    spec = [resolve_strategy("bidkv", LIVENESS_1)]
    forward = write_trace(tmp_path / "forward", ORDERED)
    backward = write_trace(tmp_path / "backward", ORDERED[::-1])
    replay_open(forward, spec, tmp_path / "f")
    replay_open(backward, spec, tmp_path / "b")
    f = read_rows(tmp_path / "f")
    b = read_rows(tmp_path / "b")
    assert f["decision_reason"].to_list() == ["liveness_abstain", "liveness_abstain", "strategy"]
    assert b["decision_reason"].to_list() == ["liveness_abstain", "strategy", "strategy"]
    # Decision (p=1) abstains when it comes first and is a pick when it comes last.
    assert f["outcome"][0] == "abstained" and b["outcome"][2] == "selected"
    assert f["applied_victim_id"].to_list() == controller_victims(forward, LIVENESS_1)
    assert b["applied_victim_id"].to_list() == controller_victims(backward, LIVENESS_1)


def test_the_cooldown_runs_on_the_recorded_clock(tmp_path: Path) -> None:
    settings = {"utility_cooldown_s": 1.5, "utility_liveness_preemptions": 0}
    trace = write_trace(tmp_path / "t", ORDERED)
    rows = both_paths(trace, [resolve_strategy("bidkv", settings)], tmp_path)
    # Picked at t=1; t=2 is within the cooldown; t=3 is not.
    assert rows["decision_reason"].to_list() == ["strategy", "gate_fallback", "strategy"]
    assert rows["applied_victim_id"].to_list() == controller_victims(trace, settings)


def test_each_run_of_a_dataset_starts_with_a_fresh_policy(tmp_path: Path) -> None:
    write_trace(tmp_path / "data" / "a", ORDERED, run_id="run-a")
    write_trace(tmp_path / "data" / "b", ORDERED, run_id="run-b")
    specs = [resolve_strategy("bidkv", LIVENESS_1), resolve_strategy("static-random")]
    rows = both_paths(tmp_path / "data", specs, tmp_path)
    runs = rows.partition_by("run_id", maintain_order=True)
    # State carried over would make run-b's first decision a pick (offset already 1).
    assert_frame_equal(runs[0].drop("run_id"), runs[1].drop("run_id"), check_exact=True)


def test_the_column_utility_equals_the_policy_scan_bit_for_bit() -> None:
    # The fast path's vectorised utility (with the scan's coercions) against the policy's scan
    # of each candidate, on values that exercise every coercion: negative tokens and
    # preemptions, max_tokens 0 or negative (replaced by the default), completions above 1.
    from types import SimpleNamespace

    from bidkv.adapters.vllm_hust.scoring import scan_top
    from tracekit.replay.rules import utility_columns
    from tracekit.strategies import DecisionRules

    rows = [
        (220, 12, 128, 0),
        (-5, 4000, 0, -3),
        (100, 512, -1, 2),
        (7, 9, 3, 1),
        (2**40, 1, 10**9, 2**30),
        (0, 0, 1, 0),
        (123_457, 77, 1001, 13),
    ]
    frame = pl.DataFrame(
        rows,
        schema=["num_computed_tokens", "num_output_tokens", "max_tokens", "num_preemptions"],
        orient="row",
    )
    other = DecisionRules(
        completion_weight=0.37, preempt_weight=5.5, epsilon=0.125, default_max_tokens=333
    )
    for rules in (DecisionRules(), other):
        r, p, u = utility_columns(
            rules,
            pl.col("num_computed_tokens"),
            pl.col("num_output_tokens"),
            pl.col("max_tokens"),
            pl.col("num_preemptions"),
        )
        got = frame.select(r.alias("r"), p.alias("p"), u.alias("u")).rows()
        for (tokens, out, m, pre), (r_col, p_col, u_col) in zip(rows, got, strict=True):
            c = SimpleNamespace(
                request_id="x",
                num_computed_tokens=tokens,
                num_output_tokens=out,
                max_tokens=m,
                num_preemptions=pre,
                arrival_time=0.0,
            )
            scan = scan_top(
                [c],
                rules.completion_weight,
                rules.preempt_weight,
                rules.epsilon,
                rules.default_max_tokens,
                "",
            )
            assert (r_col, p_col, u_col) == (scan[4], scan[6], scan[3])
