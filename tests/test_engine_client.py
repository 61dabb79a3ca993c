"""Client models in the engine: concurrency caps, closed loops and aborts.

The rules are docs/workloads.md, "Concurrency and aborts: ClientModel".

Every scenario runs on the steps clock with 1-second steps (``engine_helpers.make_engine``). A
10-token prompt is prefilled in one step and samples its first token at the end of it, then one
token a step: a request sent (visible) at step ``s`` with ``n`` output tokens, never waiting,
produces its first token at ``s + 1`` and finishes at ``s + n``. The expected times below are
worked by hand from that rule.
"""

from __future__ import annotations

import pytest
from engine_helpers import make_engine, make_requests

from tracekit.engine import BuiltinHost, EngineRequest, RequestStatus, run_engine
from tracekit.workloads.client import ClientModel, closed_loop_arrivals, dispatch_times


def _by_id(result):
    return {r.request_id: r for r in result.requests}


def test_max_concurrency_one_sends_each_request_when_the_last_finishes() -> None:
    # All due at 0; outputs 3, 2, 4 -> a: 0..3; b sent 3, done 5; c sent 5, done 9.
    requests = make_requests(("a", 0.0, 10, 3), ("b", 0.0, 10, 2), ("c", 0.0, 10, 4))
    client = ClientModel(max_concurrency=1)
    result = run_engine(
        requests, make_engine(), BuiltinHost(), check_consistency=True, client=client
    )
    got = _by_id(result)
    assert [(got[i].arrival_s, got[i].finish_s) for i in "abc"] == [(0, 3), (3, 5), (5, 9)]
    assert [got[i].client_queue_s for i in "abc"] == [0.0, 3.0, 5.0]
    assert result.client_queue_total_s == 8.0 and result.client_queue_max_s == 5.0
    # The pure rule of tracekit.workloads.client agrees on the same finishes.
    assert list(dispatch_times([0.0] * 3, [3.0, 5.0, 9.0], max_concurrency=1)) == [0, 3, 5]


def test_max_concurrency_two_keeps_late_arrivals_at_their_own_time() -> None:
    # a, b at 0 (outputs 2, 5); c due at 1 waits for a (done 2); d due at 6 finds a free slot
    # (b done 5, c sent 2 done 4) and is sent at 6.
    requests = make_requests(
        ("a", 0.0, 10, 2), ("b", 0.0, 10, 5), ("c", 1.0, 10, 2), ("d", 6.0, 10, 1)
    )
    result = run_engine(
        requests, make_engine(), BuiltinHost(), client=ClientModel(max_concurrency=2)
    )
    got = _by_id(result)
    assert [got[i].arrival_s for i in "abcd"] == [0, 0, 2, 6]
    assert [got[i].client_queue_s for i in "abcd"] == [0, 0, 1, 0]
    assert [got[i].finish_s for i in "abcd"] == [2, 5, 4, 7]


def test_closed_loop_sends_a_users_next_request_after_its_think_time() -> None:
    # Two users, think 1 s; outputs 3, 2, 4, 1 (arrival_s ignored).
    # a, b at 0: b done 2, a done 3. c at 2+1 = 3, done 7; d at 3+1 = 4, done 5.
    requests = make_requests(
        ("a", 50.0, 10, 3), ("b", 0.0, 10, 2), ("c", 9.0, 10, 4), ("d", 1.0, 10, 1)
    )
    client = ClientModel(concurrency=2, think_time_s=1.0)
    # Closed loop sends in input order, so a is first although its recorded arrival is last.
    result = run_engine(
        requests, make_engine(), BuiltinHost(), check_consistency=True, client=client
    )
    got = _by_id(result)
    assert [(got[i].arrival_s, got[i].finish_s) for i in "abcd"] == [
        (0, 3),
        (0, 2),
        (3, 7),
        (4, 5),
    ]
    assert all(r.client_queue_s == 0 for r in result.requests)
    finishes = sorted(r.finish_s for r in result.requests)
    expected = closed_loop_arrivals(4, finishes, concurrency=2, think_time_s=1.0)
    assert list(expected) == [0, 0, 3, 4]


def test_ttft_timeout_aborts_queued_requests_and_frees_their_slot() -> None:
    # One running slot: a runs 0..5; b and c wait with no token; the 2.5 s timeout cancels
    # them, the engine sees it at the step starting at 3. a's first token came at 1: kept.
    requests = make_requests(("a", 0.0, 10, 5), ("b", 0.0, 10, 2), ("c", 0.0, 10, 2))
    config = make_engine(max_num_seqs=1)
    result = run_engine(
        requests, config, BuiltinHost(), check_consistency=True,
        client=ClientModel(ttft_timeout_s=2.5),
    )  # fmt: skip
    got = _by_id(result)
    assert got["a"].status.startswith("finished") and got["a"].finish_s == 5
    for rid in "bc":
        assert got[rid].status == RequestStatus.ABORTED
        assert got[rid].finish_s == 2.5 and got[rid].num_output_tokens == 0
        assert got[rid].first_token_s is None
    assert result.num_aborted == 2
    # Nothing ran after a: the last step is a's fifth (steps 0..4).
    assert result.num_steps == 5


def test_recorded_cancel_aborts_a_running_request_and_frees_its_kv() -> None:
    # a (10 outputs) is cancelled 3.5 s after sending; the engine aborts it at the step
    # starting at 4, after 4 tokens (ends of steps 0..3). b, held back by max_num_seqs=1,
    # then runs steps 4 and 5 and finishes at 6. A 5-block pool (4 usable, 64 tokens) fits
    # one request's 10 + 10 tokens in 2 blocks; the per-step check verifies the free.
    requests = [
        EngineRequest("a", 0.0, 10, 10, 10, cancel_after_s=3.5),
        EngineRequest("b", 0.0, 10, 2, 2),
    ]
    config = make_engine(5, max_num_seqs=1)
    result = run_engine(requests, config, BuiltinHost(), check_consistency=True)
    got = _by_id(result)
    assert got["a"].status == "aborted"
    assert (got["a"].finish_s, got["a"].num_output_tokens) == (3.5, 4)
    assert (got["b"].first_scheduled_s, got["b"].finish_s) == (4, 6)
    assert result.num_aborted == 1
    # The step at 4 ran b alone, and a's blocks were back in the pool.
    step4 = next(s for s in result.steps if s.time_s == 4)
    assert list(step4.num_scheduled_tokens) == ["b"]
    assert step4.kv_blocks_used == 1


def test_a_cancel_after_the_finish_changes_nothing() -> None:
    requests = [EngineRequest("a", 0.0, 10, 2, 2, cancel_after_s=2.0)]
    result = run_engine(requests, make_engine(), BuiltinHost())
    # Finished at the end of step 1 (t = 2), no later than the cancel: not aborted.
    assert result.requests[0].status.startswith("finished")
    assert result.num_aborted == 0


@pytest.mark.parametrize("overlap", [False, True])
def test_sglang_mode_aborts_waiting_requests_too(overlap: bool) -> None:
    requests = make_requests(("a", 0.0, 10, 5), ("b", 0.0, 10, 2))
    config = make_engine(max_num_seqs=1, mode="sglang", radix_cache=False, overlap_schedule=overlap)
    result = run_engine(
        requests, config, BuiltinHost(), check_consistency=True,
        client=ClientModel(ttft_timeout_s=1.5),
    )  # fmt: skip
    got = _by_id(result)
    assert got["b"].status == "aborted" and got["b"].finish_s == 1.5
    assert got["a"].status.startswith("finished")


def test_rejections_are_counted_with_the_longest_prompt() -> None:
    # max_model_len 160: prompts of 160 and 200 tokens are refused on arrival.
    requests = make_requests(("a", 0.0, 160, 2), ("b", 0.0, 10, 2), ("c", 1.0, 200, 2))
    result = run_engine(requests, make_engine(), BuiltinHost())
    assert result.num_rejected == 2
    assert result.max_rejected_prompt_tokens == 200


def test_a_rejection_frees_its_client_slot_at_once() -> None:
    # max_concurrency 1: a is rejected at 0, so b is sent at 0 too.
    requests = make_requests(("a", 0.0, 500, 2), ("b", 0.0, 10, 2))
    result = run_engine(
        requests, make_engine(), BuiltinHost(), client=ClientModel(max_concurrency=1)
    )
    got = _by_id(result)
    assert got["a"].status == "rejected"
    assert (got["b"].arrival_s, got["b"].finish_s) == (0, 2)


def test_client_runs_are_deterministic() -> None:
    specs = [(f"r{i}", 0.3 * i, 10 + 7 * i, 1 + i % 5) for i in range(30)]
    client = ClientModel(max_concurrency=3, ttft_timeout_s=4.0)

    def run():
        result = run_engine(make_requests(*specs), make_engine(max_num_seqs=2), None, client=client)
        return [(r.request_id, r.arrival_s, r.finish_s, r.status) for r in result.requests]

    assert run() == run()


class _Watching(BuiltinHost):
    """The built-in rule, remembering the max_tokens every decision's candidates showed."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def choose_victim(self, context):  # type: ignore[no-untyped-def]
        self.seen.update(c.max_tokens for c in context.candidates)
        return super().choose_victim(context)


def test_requests_stop_at_their_real_length_while_policies_see_max_tokens() -> None:
    # 4 usable blocks of 16 tokens (64): two requests of 20 + 30 tokens need 4 blocks each at
    # the end, so one is preempted. Each was sent with max_tokens 200 but produces 30 tokens.
    requests = [
        EngineRequest("a", 0.0, 20, 30, 200),
        EngineRequest("b", 0.0, 20, 30, 200),
    ]
    host = _Watching()
    result = run_engine(requests, make_engine(5), host, check_consistency=True)
    assert result.num_preemptions >= 1
    assert host.seen == {200}
    for record in result.requests:
        assert (record.num_output_tokens, record.status) == (30, RequestStatus.FINISHED_STOPPED)
        assert record.max_tokens == 200
