"""The hindsight oracle of victim choice (``tracekit oracle``; docs/oracle.md).

:mod:`tracekit.oracle.rollout` forks the engine at a decision and scores every candidate;
:mod:`tracekit.oracle.job` runs that over a recorded trace, with each strategy's regret, the
greedy oracle in closed loop and the headroom, through the sweep executor.
"""

from tracekit.oracle.rollout import (
    OBJECTIVES,
    CandidateScore,
    GreedyOracleHost,
    OracleSettings,
    ScriptedHost,
    evaluate_at,
    run_greedy_oracle,
    run_objective,
)

__all__ = [
    "OBJECTIVES",
    "CandidateScore",
    "GreedyOracleHost",
    "OracleSettings",
    "ScriptedHost",
    "evaluate_at",
    "run_greedy_oracle",
    "run_objective",
]
