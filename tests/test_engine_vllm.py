"""Hand-worked vLLM v1 scenarios: every expected step below is derived on paper from the rules.

Common arithmetic: ``num_blocks=11`` -> block 0 is vLLM's null block, 10 usable blocks of 16
tokens. Steps last 1 s (step k starts at k s), so a request arriving at 1.0 is first seen by
step 1. A request's first output token is sampled by the step that completes its prefill; a
decode step schedules 1 token and needs a new block when it writes token 16k+1.
"""

from __future__ import annotations

import random

import pytest
from engine_helpers import (
    by_id,
    make_engine,
    make_requests,
    run_checked,
    scheduled,
    victims,
)

from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, RequestStatus, run_engine


def test_fcfs_preempts_the_tail() -> None:
    # A, B, C: 48-token prompts (3 blocks each), 20 outputs each.
    result = run_checked(
        make_engine(),
        make_requests(("A", 0, 48, 20), ("B", 0, 48, 20), ("C", 0, 48, 20)),
    )
    steps = scheduled(result)
    # Step 0: all admitted, 3 blocks each: free 10 - 9 = 1. Each samples its first token.
    assert steps[0] == {"A": 48, "B": 48, "C": 48}
    # Step 1: A writes token 49 -> 4th block (free 0). B needs a 4th block too: FCFS preempts
    # the tail C (frees 3), B allocates (free 2). No admission in a step that preempted.
    assert steps[1] == {"A": 1, "B": 1}
    assert victims(result) == [(1, "B", "C")]
    decision = result.decisions[0]
    assert [c.request_id for c in decision.candidates] == ["A", "B", "C"]
    assert decision.builtin_victim_id == "C" and decision.outcome == "builtin"
    assert decision.kv_cache_usage == 1.0  # 0 of 10 blocks free when B failed
    # Step 2: C (prompt 48 + 1 output = 49 tokens, 4 blocks) does not fit in 2 free blocks.
    assert steps[2] == {"A": 1, "B": 1}
    # A and B: output k+1 after step k -> 20 outputs at step 19; they free 5 blocks each.
    assert steps[19] == {"A": 1, "B": 1}
    # Step 20: C recomputes prompt + its 1 output (49 tokens) and samples its 2nd token.
    assert steps[20] == {"C": 49}
    # C's 20th token: 2 + (k - 20) = 20 at step 38.
    assert result.num_steps == 39 and max(steps) == 38
    records = by_id(result)
    assert records["C"].num_preemptions == 1 and records["C"].recomputed_tokens == 48
    assert records["C"].first_token_s == 1.0  # end of step 0, kept across the preemption
    assert records["A"].finish_s == 20.0 and records["C"].finish_s == 39.0
    assert {r.status for r in result.requests} == {RequestStatus.FINISHED_LENGTH_CAPPED}


def _priority_workload() -> list[EngineRequest]:
    # A (priority 2, least important) arrives alone; B and C (priority 0) arrive at 1.0.
    return make_requests(("A", 0, 48, 20, 2), ("B", 1, 48, 20, 0), ("C", 1, 48, 20, 0))


def test_priority_preempts_an_already_scheduled_request_and_refunds_it() -> None:
    result = run_checked(make_engine(scheduling_policy="priority"), _priority_workload())
    steps = scheduled(result)
    # Step 0: A alone, 3 blocks (free 7).
    assert steps[0] == {"A": 48}
    # Step 1: A writes token 49 -> 4th block (free 6); B and C admitted, 3 blocks each (free 0).
    assert steps[1] == {"A": 1, "B": 48, "C": 48}
    # Step 2: A is scheduled (no new block). B needs a 4th block with none free: the victim is
    # max(priority, arrival) = A, which sits before the cursor and was already scheduled: its
    # token is refunded and the cursor moves back. A frees 4 blocks; B and C each take one.
    assert steps[2] == {"B": 1, "C": 1}
    assert victims(result) == [(2, "B", "A")]
    assert result.decisions[0].builtin_victim_id == "A"
    a = by_id(result)["A"]
    assert a.num_preemptions == 1 and a.recomputed_tokens == 49


def test_same_workload_under_fcfs_preempts_the_tail_instead() -> None:
    result = run_checked(make_engine(), _priority_workload())
    # Step 2: B fails, FCFS takes the tail C; A keeps its token.
    assert scheduled(result)[2] == {"A": 1, "B": 1}
    assert victims(result) == [(2, "B", "C")]


def test_request_preempts_itself_and_blocks_the_waiting_scan() -> None:
    # A: prompt 60 (4 blocks, room up to token 64); B: prompt 96 (6 blocks, full at 96);
    # D: prompt 16 arrives at 1.0.
    result = run_checked(
        make_engine(),
        make_requests(("A", 0, 60, 5), ("B", 0, 96, 10), ("D", 1, 16, 3)),
    )
    steps = scheduled(result)
    # Step 0: A 4 blocks + B 6 blocks = all 10.
    assert steps[0] == {"A": 60, "B": 96}
    # Step 1: A writes token 61 (no new block). B writes token 97 -> needs a 7th block, none
    # free: the FCFS victim is the tail, B itself. B is preempted and the running scan stops.
    # D would fit in the 6 freed blocks but nothing is admitted in a step that preempted.
    assert steps[1] == {"A": 1}
    assert victims(result) == [(1, "B", "B")]
    # Steps 2-4: the waiting queue is [B, D] (B back at the front). B needs 97 tokens = 7
    # blocks > 6 free, and the scan stops at this first misfit: D waits although it fits.
    assert steps[2] == steps[3] == steps[4] == {"A": 1}
    # A finishes at step 4 (5 outputs). Step 5: B (7 blocks) then D (1 block) are admitted.
    assert steps[5] == {"B": 97, "D": 16}
    records = by_id(result)
    assert records["B"].num_preemptions == 1 and records["B"].recomputed_tokens == 96
    assert records["D"].first_scheduled_s == 5.0
    # B: output 2 after step 5, 10 at step 13.
    assert result.num_steps == 14


def test_multi_victim_cascade_for_a_chunked_prefill() -> None:
    # Budget 64 tokens, long-prefill cap 48. A: prompt 150 (10 blocks in full); B and C:
    # prompt 8 (1 block), arriving at 1.0.
    config = make_engine(max_num_batched_tokens=64, long_prefill_token_threshold=48)
    result = run_checked(config, make_requests(("A", 0, 150, 5), ("B", 1, 8, 20), ("C", 1, 8, 20)))
    steps = scheduled(result)
    # Step 0: A alone, so the long-prefill cap is off: 64 tokens, 4 blocks (free 6). The full
    # prompt (10 blocks) fits, so full_sequence_must_fit admits it.
    assert steps[0] == {"A": 64}
    # Step 1: three requests, cap 48: A 48 tokens -> 112, 7 blocks (free 3); budget left 16:
    # B 8 tokens (1 block, free 2), C 8 tokens (1 block, free 1).
    assert steps[1] == {"A": 48, "B": 8, "C": 8}
    # Step 2: A's last 38 prompt tokens -> 150, 10 blocks: needs 3 with 1 free. Victim 1 = C
    # (free 2, still short), victim 2 = B (free 3): a cascade of two decisions.
    assert steps[2] == {"A": 38}
    assert victims(result) == [(2, "A", "C"), (2, "A", "B")]
    assert [c.request_id for c in result.decisions[1].candidates] == ["A", "B"]
    assert [d.seq for d in result.decisions] == [0, 1]
    # Step 3: no block free; B (front of the queue: prepended last) does not fit.
    assert steps[3] == {"A": 1}
    # A: 5 outputs at step 6. Step 7: B and C recompute 8 prompt + 1 output tokens.
    assert steps[7] == {"B": 9, "C": 9}
    records = by_id(result)
    assert records["A"].first_token_s == 3.0 and records["A"].finish_s == 7.0
    assert records["B"].recomputed_tokens == records["C"].recomputed_tokens == 8
    assert result.num_steps == 26  # B, C: output 2 + (k - 7) = 20 at step 25


def test_chunked_prefill_samples_only_when_the_prompt_is_complete() -> None:
    result = run_checked(make_engine(max_num_batched_tokens=32), make_requests(("A", 0, 80, 3)))
    # 80 = 32 + 32 + 16: the first token comes with the third chunk (end of step 2 = 3.0 s).
    assert [s.num_scheduled_tokens["A"] for s in result.steps] == [32, 32, 16, 1, 1]
    assert [s.num_prefill_tokens for s in result.steps] == [32, 32, 16, 0, 0]
    assert [s.num_decode_tokens for s in result.steps] == [0, 0, 0, 1, 1]
    # Token 81 (the first decode) opens block 6.
    assert [s.kv_blocks_used for s in result.steps] == [2, 4, 5, 6, 6]
    record = result.requests[0]
    assert (record.first_token_s, record.finish_s, record.num_output_tokens) == (3.0, 5.0, 3)


@pytest.mark.parametrize(("watermark", "admitted_at_0"), [(0.0, {"A", "B"}), (0.1, {"A"})])
def test_watermark_applies_to_admission_once_something_runs(
    watermark: float, admitted_at_0: set[str]
) -> None:
    # watermark 0.1 -> int(0.1 * 11) = 1 block kept free. A: prompt 60, 4 blocks, admitted into
    # an empty engine (no watermark); B: prompt 90, 6 blocks, 6 + 1 > 6 free with the watermark.
    # Neither crosses a block boundary in its 2 outputs (tokens 61-62 and 91-92).
    result = run_checked(
        make_engine(watermark=watermark), make_requests(("A", 0, 60, 2), ("B", 0, 90, 2))
    )
    assert set(scheduled(result)[0]) == admitted_at_0
    assert not result.decisions


def test_watermark_never_blocks_an_empty_engine() -> None:
    # 159 tokens need all 10 blocks; nothing runs, so the watermark does not apply.
    result = run_checked(make_engine(watermark=0.1), make_requests(("A", 0, 159, 1)))
    assert scheduled(result)[0] == {"A": 159}


def test_waiting_scan_stops_at_the_first_request_that_does_not_fit() -> None:
    # A: 8 blocks; BIG: 3 blocks (does not fit in 2); small: 1 block (would fit).
    result = run_checked(
        make_engine(), make_requests(("A", 0, 128, 3), ("BIG", 0, 48, 1), ("small", 0, 16, 1))
    )
    assert scheduled(result)[0] == {"A": 128}
    assert scheduled(result)[3] == {"BIG": 48, "small": 16}


def test_max_num_seqs_and_token_budget_bound_admission() -> None:
    result = run_checked(
        make_engine(max_num_seqs=2, max_num_batched_tokens=20),
        make_requests(("A", 0, 8, 2), ("B", 0, 8, 2), ("C", 0, 8, 2)),
    )
    # Two sequences at most; then C as soon as a slot frees (A and B finish at step 1).
    assert scheduled(result)[0] == {"A": 8, "B": 8}
    assert scheduled(result)[2] == {"C": 8}


@pytest.mark.parametrize(("version", "expected"), [("0.32", {"A": 1}), ("0.33", {"A": 1, "Y": 1})])
def test_priority_self_preemption_stops_the_scan_only_in_0_32(
    version: str, expected: dict[str, int]
) -> None:
    # A (prio 0) prompt 50: 4 blocks. B (prio 5) prompt 60: 4 blocks; step k writes token
    # 60 + k, so it needs a 5th block at step 5 (token 65). Y (prio 0) arrives at 1.0, prompt
    # 20: 2 blocks, the last two free.
    result = run_checked(
        make_engine(scheduling_policy="priority", vllm_version=version),
        make_requests(("A", 0, 50, 30, 0), ("B", 0, 60, 30, 5), ("Y", 1, 20, 30, 0)),
    )
    # Step 5: A fine, B fails with nothing free and is itself the lowest priority: it
    # preempts itself. 0.32 stops the scan; 0.33 goes on and schedules Y (no new block).
    assert victims(result)[0] == (5, "B", "B")
    assert scheduled(result)[5] == expected


def test_prompts_that_cannot_fit_max_model_len_are_rejected() -> None:
    result = run_checked(make_engine(), make_requests(("long", 0, 160, 1), ("ok", 0, 10, 1)))
    records = by_id(result)
    assert records["long"].status == RequestStatus.REJECTED
    assert records["long"].first_scheduled_s is None
    assert records["ok"].status == RequestStatus.FINISHED_LENGTH_CAPPED


def test_target_output_stops_before_max_tokens() -> None:
    result = run_checked(make_engine(), make_requests(("a", 0, 10, 3, 0, 50)))
    record = result.requests[0]
    assert record.status == RequestStatus.FINISHED_STOPPED
    assert record.num_output_tokens == 3


def test_max_model_len_caps_generation() -> None:
    # 150-token prompt, max_model_len 152: tokens 151 and 152, then length capped.
    result = run_checked(make_engine(max_model_len=152), make_requests(("a", 0, 150, 50)))
    assert result.requests[0].num_output_tokens == 2
    assert result.requests[0].status == RequestStatus.FINISHED_LENGTH_CAPPED


def test_idle_engine_jumps_to_the_next_arrival() -> None:
    # Steps clock, 1 s steps: a request at 7.5 s is first seen by step 8.
    result = run_checked(make_engine(), make_requests(("a", 0, 10, 1), ("b", 7.5, 10, 1)))
    assert [s.step for s in result.steps] == [0, 8]
    assert [s.time_s for s in result.steps] == [0.0, 8.0]
    cost = run_checked(
        make_engine(clock="cost-model"), make_requests(("a", 0, 10, 1), ("b", 7.5, 10, 1))
    )
    # The cost-model clock numbers executed steps and jumps its time to the arrival.
    assert [s.step for s in cost.steps] == [0, 1]
    assert cost.steps[1].time_s == 7.5


def _random_workload(seed: int) -> list[EngineRequest]:
    rng = random.Random(seed)
    return [
        EngineRequest(
            f"r{i}",
            rng.uniform(0, 30),
            rng.randint(1, 150),
            rng.randint(1, 60),
            rng.randint(1, 80),
            rng.randint(0, 3),
        )
        for i in range(40)
    ]


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_invariants_hold_on_random_workloads(policy: str) -> None:
    for seed in range(5):
        config = make_engine(
            num_blocks=14,
            max_num_seqs=6,
            max_num_batched_tokens=48,
            scheduling_policy=policy,
            watermark=0.1,
            long_prefill_token_threshold=16,
        )
        result = run_checked(config, _random_workload(seed))
        assert len(result.requests) == 40
        assert result.num_preemptions == len(result.decisions) > 0
        for step in result.steps:
            total = sum(step.num_scheduled_tokens.values())
            assert total == step.num_prefill_tokens + step.num_decode_tokens <= 48
            assert step.num_running <= 6 and step.kv_blocks_used <= step.kv_blocks_total
        for record in result.requests:
            assert record.num_output_tokens == min(record.output_tokens, record.max_tokens)


def test_same_inputs_give_identical_records() -> None:
    config = EngineConfig(
        num_blocks=20,
        max_model_len=300,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        clock="cost-model",
    )
    first = run_engine(_random_workload(7), config, BuiltinHost())
    second = run_engine(_random_workload(7), config, BuiltinHost())
    assert first.decisions and first.steps == second.steps
    assert first.decisions == second.decisions and first.requests == second.requests


def test_observer_receives_records_in_engine_order() -> None:
    events: list[tuple[str, object]] = []

    class Observer:
        def on_step(self, record: object) -> None:
            events.append(("step", record.step))  # type: ignore[attr-defined]

        def on_decision(self, record: object) -> None:
            events.append(("decision", record.step))  # type: ignore[attr-defined]

        def on_request(self, record: object) -> None:
            events.append(("request", record.request_id))  # type: ignore[attr-defined]

    result = run_engine(
        make_requests(("A", 0, 48, 20), ("B", 0, 48, 20), ("C", 0, 48, 20)),
        make_engine(),
        BuiltinHost(),
        Observer(),
        collect=False,
    )
    assert not result.steps and result.num_steps == 39 and result.num_decisions == 1
    # The decision of step 1 comes before step 1's record.
    assert events[1:3] == [("decision", 1), ("step", 1)]
    assert events[-2:] == [("step", 38), ("request", "C")]
