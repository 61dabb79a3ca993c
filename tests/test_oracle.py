"""The hindsight oracle: candidate scores, regret and the greedy oracle on a hand-worked case,
and ``tracekit oracle`` on the shipped real-vLLM recording of the Azure sample.

The hand-worked case (10 usable blocks of 16 tokens, steps clock, all three arrive at 0 with a
target of 3 output tokens):

- step 0 admits a (17-token prompt, 2 blocks), b (70, 5 blocks) and c (48, 3 blocks): the pool
  is full; each samples its first token.
- step 1: a (18 tokens, 2 blocks) and b (71, 5 blocks) fit; c (49 tokens) needs a 4th block and
  none is free: the one decision. Candidates a, b, c with 17, 70 and 48 computed tokens.
- Whatever is preempted, the other two finish at step 2 and free enough for the victim to come
  back without another preemption, so the recomputed tokens are the victim's computed tokens:
  a 17, b 70, c 48. The built-in victim (FCFS: the tail) is c; LCF picks a (the best, regret
  0), MCF picks b (regret 70 - 17 = 53), the built-in rule's regret is 48 - 17 = 31.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from engine_helpers import make_engine, make_requests

from tracekit.cli import cli
from tracekit.engine import BuiltinHost, run_engine
from tracekit.engine.engine import EngineRun
from tracekit.oracle import OracleSettings, evaluate_at, run_greedy_oracle, run_objective
from tracekit.oracle.job import oracle_frames, strategy_picks
from tracekit.strategies import parse_strategy_list

SAMPLE = Path(__file__).resolve().parents[1] / "traces/vllm-fixtures/vllm-0.32.0/azure-fcfs"


def _case():
    config = make_engine(11)
    requests = make_requests(("a", 0, 17, 3), ("b", 0, 70, 3), ("c", 0, 48, 3))
    return config, requests


def test_hand_worked_case_has_the_expected_single_decision() -> None:
    config, requests = _case()
    result = run_engine(requests, config, BuiltinHost())
    assert [(d.step, d.requesting_request_id, d.victim_id) for d in result.decisions] == [
        (1, "c", "c")
    ]
    assert [c.num_computed_tokens for c in result.decisions[0].candidates] == [17, 70, 48]
    assert sum(r.recomputed_tokens for r in result.requests) == 48


def test_candidate_scores_and_regret_on_the_hand_worked_case() -> None:
    config, requests = _case()
    reference = run_engine(requests, config, BuiltinHost())
    run = EngineRun(requests, config, BuiltinHost(), collect=False)
    while run.prepare() and run.next_step < 1:
        run.step()
    scores = evaluate_at(run, [], ["a", "b", "c"], "c", OracleSettings())
    assert {s.victim_id: s.score for s in scores} == {"a": 17.0, "b": 70.0, "c": 48.0}
    assert len({s.window_steps for s in scores}) == 1  # one window for every candidate

    candidates = pl.DataFrame(
        {
            "seq": [0, 0, 0],
            "candidate_index": [0, 1, 2],
            "victim_id": [s.victim_id for s in scores],
            "score": [s.score for s in scores],
            "window_steps": [s.window_steps for s in scores],
        }
    )
    specs = parse_strategy_list("builtin,lcf,mcf")
    picks = strategy_picks(reference.decisions, config, specs)
    assert picks == {"builtin": ["c"], "lcf": ["a"], "mcf": ["b"]}
    closed = pl.DataFrame({"strategy": ["builtin", "oracle-greedy"], "objective": [48.0, 17.0]})
    frames = oracle_frames(candidates, reference.decisions, picks, closed)
    regret = dict(frames["regret"].select("strategy", "regret").iter_rows())
    assert regret == {"builtin": 31.0, "lcf": 0.0, "mcf": 53.0}
    decision = frames["decisions"].row(0, named=True)
    assert (decision["best_victim_id"], decision["builtin_regret"]) == ("a", 31.0)
    shares = dict(frames["closed"].select("strategy", "share_of_headroom").iter_rows())
    assert shares == {"builtin": 0.0, "oracle-greedy": 1.0}


def test_greedy_oracle_beats_the_builtin_rule_on_the_hand_worked_case() -> None:
    config, requests = _case()
    settings = OracleSettings()
    builtin = run_objective(run_engine(requests, config, BuiltinHost()).requests, settings)
    greedy = run_greedy_oracle(requests, config, settings)
    assert greedy.result.decisions[0].victim_id == "a"
    assert run_objective(greedy.result.requests, settings) == 17.0 < builtin == 48.0


def test_objective_of_a_whole_run_matches_hand_sums() -> None:
    config, requests = _case()
    records = run_engine(requests, config, BuiltinHost()).requests
    e2e = sum(r.finish_s - r.arrival_s for r in records)
    assert run_objective(records, OracleSettings(objective="e2e")) == pytest.approx(e2e)
    # 1-second steps: every TPOT is 1 s, over any target below it.
    assert run_objective(records, OracleSettings(objective="slo", tpot_s=0.5)) == 3.0
    assert run_objective(records, OracleSettings(objective="slo", ttft_s=100, tpot_s=5)) == 0.0


def test_oracle_cli_on_the_shipped_sample(tmp_path: Path) -> None:
    out = tmp_path / "oracle"
    result = CliRunner().invoke(
        cli,
        ["oracle", str(SAMPLE), "--out", str(out), "--strategy", "lcf,mcf", "--json"],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert sorted(p.name for p in out.iterdir()) == [
        ".tracekit-oracle",  # the marker by which --overwrite knows the folder is oracle's
        "candidates.parquet",
        "closed.parquet",
        "decisions.parquet",
        "oracle.json",
        "regret.parquet",
    ]
    closed = {row["strategy"]: row for row in summary["closed"]}
    # Independent fact: the real vLLM 0.32 recording of this workload recomputed 5246 tokens,
    # which the built-in closed loop must reproduce.
    recorded = pl.read_parquet(SAMPLE / "requests.parquet")["recomputed_tokens"].sum()
    assert closed["builtin"]["recomputed_tokens"] == recorded == 5246
    assert closed["oracle-greedy"]["objective"] <= closed["builtin"]["objective"]
    regret = pl.read_parquet(out / "regret.parquet")
    assert regret["regret"].min() >= 0
    assert set(regret["strategy"]) == {"builtin", "lcf", "mcf"}
    assert summary["num_decisions"] == pl.read_parquet(out / "decisions.parquet").height > 0


def test_oracle_cli_refuses_an_existing_out(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    result = CliRunner().invoke(cli, ["oracle", str(SAMPLE), "--out", str(out)])
    assert result.exit_code == 2
    assert "already exists" in result.output
    assert list(out.iterdir()) == []
