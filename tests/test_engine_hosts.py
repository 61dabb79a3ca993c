"""Victim hosts in the engine: typed policies, broken policies, legacy selectors.

Most tests reuse the FCFS scenario of ``test_fcfs_preempts_the_tail`` (``num_blocks=11``: 10
usable blocks; A, B, C with 48-token prompts take 3 blocks each, free 1). At step 1, A takes the
last block for token 49 and B's allocation fails: the built-in victim is the tail C.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from engine_helpers import make_engine, make_requests, run_checked, scheduled, victims

from tracekit.engine import (
    BuiltinHost,
    ContractHost,
    EngineRequest,
    LegacyHost,
    LegacySchedulingPolicy,
    TypedHost,
)
from tracekit.hosts.preemption_policy import PreemptionCandidate, PreemptionContext


def _scenario() -> list[EngineRequest]:
    return make_requests(("A", 0, 48, 20), ("B", 0, 48, 20), ("C", 0, 48, 20))


class SelectFirst:
    """Always the head of the running queue; explains itself through ``last_decision``."""

    def __init__(self) -> None:
        self.last_decision: dict[str, str] | None = None
        self.contexts: list[PreemptionContext] = []

    def select_victim(self, context: PreemptionContext) -> str | None:
        self.contexts.append(context)
        self.last_decision = {"decision_reason": "head-first"}
        return context.candidates[0].request_id


class SelectRequester:
    def select_victim(self, context: PreemptionContext) -> str | None:
        return context.requesting_request_id


class Abstain:
    def last_decision(self) -> dict[str, str]:
        return {"decision_reason": "no material benefit"}

    def select_victim(self, context: PreemptionContext) -> str | None:
        return None


class Raises:
    calls = 0

    def select_victim(self, context: PreemptionContext) -> str | None:
        Raises.calls += 1
        raise ZeroDivisionError("policy bug")


class Invalid:
    def select_victim(self, context: PreemptionContext) -> str | None:
        return "not-a-candidate"


def test_typed_policy_can_choose_another_victim_than_the_builtin() -> None:
    policy = SelectFirst()
    result = run_checked(make_engine(), _scenario(), TypedHost(policy))
    # Step 1: the policy takes A, which sits before the cursor and already holds its token for
    # this step: the token is refunded, A frees 4 blocks, then B and C each take one.
    assert scheduled(result)[1] == {"B": 1, "C": 1}
    decision = result.decisions[0]
    assert (decision.requesting_request_id, decision.builtin_victim_id) == ("B", "C")
    assert (decision.victim_id, decision.outcome, decision.raw_result) == ("A", "selected", "A")
    assert decision.decision_reason == "head-first"
    assert decision.counters is not None
    assert decision.counters["calls"] == 1 and decision.counters["selections"] == 1
    # The policy saw the host's context: running order, requester, built-in, engine time.
    context = policy.contexts[0]
    assert [c.request_id for c in context.candidates] == ["A", "B", "C"]
    assert context.candidates[1] == PreemptionCandidate("B", 0, 0.0, 48, 1, 48, 0, 20)
    assert (context.scheduling_policy, context.now, context.kv_cache_usage) == ("fcfs", 1.0, 1.0)
    assert context.builtin_victim_id == "C"


def test_policy_selecting_the_requester_stops_the_scan() -> None:
    result = run_checked(make_engine(), _scenario(), TypedHost(SelectRequester()))
    # B preempts itself at step 1; as in vLLM 0.32 the scan stops, so C waits for step 2.
    assert victims(result)[0] == (1, "B", "B")
    assert scheduled(result)[1] == {"A": 1}


def test_abstention_applies_the_builtin_victim() -> None:
    result = run_checked(make_engine(), _scenario(), TypedHost(Abstain()))
    decision = result.decisions[0]
    assert (decision.victim_id, decision.outcome, decision.raw_result) == ("C", "abstained", None)
    assert decision.decision_reason == "no material benefit"
    assert decision.counters is not None and decision.counters["abstentions"] == 1
    # Same schedule as the built-in run.
    assert scheduled(result) == scheduled(run_checked(make_engine(), _scenario()))


def _pressure_workload(seed: int) -> list[EngineRequest]:
    rng = random.Random(seed)
    return [
        EngineRequest(
            f"r{i}",
            rng.uniform(0, 20),
            rng.randint(10, 120),
            rng.randint(5, 60),
            60,
            rng.randint(0, 2),
        )
        for i in range(30)
    ]


@pytest.mark.parametrize(
    ("policy", "outcome", "raw", "invalid"),
    [(Raises(), "exception", None, 0), (Invalid(), "invalid", "not-a-candidate", 1)],
)
def test_broken_policies_are_disabled_and_the_engine_stays_consistent(
    policy: Any, outcome: str, raw: object, invalid: int
) -> None:
    config = make_engine(num_blocks=14, max_num_seqs=6, max_num_batched_tokens=64)
    host = TypedHost(policy)
    # run_checked re-checks block accounting and queue membership after every step.
    result = run_checked(config, _pressure_workload(3), host)
    first, *rest = result.decisions
    assert (first.outcome, first.raw_result, first.victim_id) == (
        outcome,
        raw,
        first.builtin_victim_id,
    )
    assert rest and {d.outcome for d in rest} == {"disabled"}
    assert all(d.victim_id == d.builtin_victim_id for d in result.decisions)
    stats = host.controller.export_stats()
    assert (stats["calls"], stats["failures"], stats["invalid_selections"]) == (1, 1, invalid)
    assert stats["enabled"] is False
    assert len(result.requests) == 30
    # The disabled policy leaves exactly the built-in engine behind.
    builtin = run_checked(config, _pressure_workload(3))
    assert [s.num_scheduled_tokens for s in result.steps] == [
        s.num_scheduled_tokens for s in builtin.steps
    ]


def test_builtin_host_and_typed_host_without_policy_agree() -> None:
    config = make_engine(num_blocks=14, max_num_seqs=6, max_num_batched_tokens=64)
    builtin = run_checked(config, _pressure_workload(5), BuiltinHost())
    typed = run_checked(config, _pressure_workload(5), TypedHost(None))
    assert builtin.steps == typed.steps
    assert {d.outcome for d in builtin.decisions} == {"builtin"}
    assert [d.victim_id for d in builtin.decisions] == [d.victim_id for d in typed.decisions]


class HeadSelector:
    """A legacy selector: returns the head of ``running``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pick_victim(
        self, running: Any, policy: Any, *, kv_utilization: Any = None, now_s: Any = None
    ) -> Any:
        self.calls.append((list(running), policy, kv_utilization, now_s))
        return running[0]


def test_legacy_host_passes_candidates_and_applies_the_returned_object() -> None:
    selector = HeadSelector()
    result = run_checked(make_engine(), _scenario(), LegacyHost(selector))
    assert victims(result)[0] == (1, "B", "A")
    running, policy, kv_utilization, now_s = selector.calls[0]
    assert all(isinstance(c, PreemptionCandidate) for c in running)
    assert policy is LegacySchedulingPolicy.FCFS and policy.value == "fcfs"
    assert (kv_utilization, now_s) == (1.0, 1.0)
    assert result.decisions[0].counters == {
        "policy_name": f"{__name__}.HeadSelector",
        "calls": 1,
    }


def test_legacy_host_has_no_failure_isolation() -> None:
    class Wrong:
        def pick_victim(self, running: Any, policy: Any, **kwargs: Any) -> Any:
            return running[0].request_id  # an id, not the request object

    with pytest.raises(RuntimeError, match="not one of the running requests"):
        run_checked(make_engine(), _scenario(), LegacyHost(Wrong()))


def test_contract_host_wraps_any_select_victim_host() -> None:
    class Host:
        def select_victim(self, context: PreemptionContext) -> str:
            return context.candidates[0].request_id

        def export_stats(self) -> dict[str, Any]:
            return {"policy_name": "head", "calls": 1}

    result = run_checked(make_engine(), _scenario(), ContractHost(Host()))
    assert victims(result)[0] == (1, "B", "A")
    assert result.decisions[0].counters == {"policy_name": "head", "calls": 1}
