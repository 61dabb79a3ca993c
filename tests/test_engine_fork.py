"""The forkable engine run (tracekit.engine.engine.EngineRun, forked by tracekit.engine.fork).

Two independent facts are checked: ``EngineRun`` stepped to the end gives exactly
``run_engine``'s records (the loop it repeats), and a fork taken at any step continues with
records equal to the original's from that step on, on preempting workloads with prefix caching
on and off, in both engine modes. A fork given another host diverges and leaves the original
untouched.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from engine_helpers import make_engine, random_content, record_values

from tracekit.engine import BuiltinHost, EngineRequest, run_engine
from tracekit.engine.engine import EngineRun
from tracekit.engine.hosts import VictimChoice
from tracekit.hosts.preemption_policy import PreemptionContext


def _plain(
    n: int,
    seed: int,
    gap: float = 0.4,
    prompt: tuple[int, int] = (20, 300),
    output: tuple[int, int] = (5, 120),
) -> list[EngineRequest]:
    rng = random.Random(seed)
    return [
        EngineRequest(
            f"p{i}", round(i * gap, 3), rng.randrange(*prompt), rng.randrange(*output), 400
        )
        for i in range(n)
    ]


CASES = {
    "vllm": (dict(), _plain(40, 1)),
    "vllm-prefix": (dict(enable_prefix_caching=True), random_content(3, 40)),
    "vllm-priority": (dict(scheduling_policy="priority"), random_content(5, 40)),
    # SGLang retracts only when decoding outgrows the pool: long outputs, short prompts. Its
    # normal loop, and its default overlap loop with the radix cache (page size 1).
    "sglang": (
        dict(mode="sglang", overlap_schedule=False, radix_cache=False),
        _plain(60, 2, 0.1, (20, 120), (200, 400)),
    ),
    "sglang-overlap-radix": (
        dict(mode="sglang", num_blocks=641, block_size=1),
        _plain(60, 2, 0.1, (20, 120), (200, 400)),
    ),
    # vLLM's async scheduling: a step in flight while the next is scheduled.
    "vllm-async": (dict(async_scheduling=True), _plain(40, 1)),
    "vllm-async-prefix": (
        dict(async_scheduling=True, enable_prefix_caching=True),
        random_content(3, 40),
    ),
    # A backlog longer than max_num_seqs: forks share the untouched tail of the waiting queue.
    "vllm-backlog": (dict(max_num_seqs=4), _plain(60, 4, gap=0.05)),
    "vllm-prefix-backlog": (
        dict(max_num_seqs=4, enable_prefix_caching=True),
        [dataclasses.replace(r, arrival_s=r.arrival_s / 10) for r in random_content(6, 60)],
    ),
}


def _records(result):
    """Every record as plain tuples (the trace's content: steps, decisions, requests)."""
    return (
        record_values(result.steps),
        record_values(result.decisions),
        record_values(result.requests),
    )


def _tail(result, step: int, decision: int, finished: set[str]):
    """The records of ``result`` from step index ``step`` on (what a fork there produces)."""
    steps, decisions, requests = _records(result)
    return (
        [s for s in steps if s[0] >= step],
        decisions[decision:],
        [r for r in requests if r[0] not in finished],
    )


def _advance(run, target: int, full):
    """Step ``run`` up to step ``target``: the records of ``full`` a fork made there produces."""
    while run.prepare() and run.next_step < target:
        run.step()
    finished = {r.request_id for r in run.result.requests}
    return _tail(full, target, run.num_decisions, finished)


@pytest.mark.parametrize("case", sorted(CASES))
def test_engine_run_equals_run_engine(case: str) -> None:
    overrides, requests = CASES[case]
    config = make_engine(**{"num_blocks": 41, "max_num_batched_tokens": 512, **overrides})
    expected = run_engine(requests, config, BuiltinHost())
    assert expected.num_decisions > 0, "the workload must preempt"
    got = EngineRun(requests, config, BuiltinHost()).run_to_end()
    assert _records(got) == _records(expected)
    assert (got.num_steps, got.num_decisions, got.num_preemptions, got.end_s) == (
        expected.num_steps,
        expected.num_decisions,
        expected.num_preemptions,
        expected.end_s,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_fork_continues_identically(case: str) -> None:
    overrides, requests = CASES[case]
    config = make_engine(**{"num_blocks": 41, "max_num_batched_tokens": 512, **overrides})
    full = run_engine(requests, config, BuiltinHost())
    decision_steps = sorted({d.step for d in full.decisions})
    assert len(decision_steps) >= 3
    shared_tails = []
    # Fork just before a preempting step, in the middle of the run, and at the very start.
    for target in (decision_steps[0], decision_steps[len(decision_steps) // 2], 0):
        run = EngineRun(requests, config, BuiltinHost())
        want = _advance(run, target, full)
        shared_tails.append(run._unstarted_tail_length())
        fork = run.fork()
        fork_result = fork.run_to_end()
        original = run.run_to_end()
        assert _records(fork_result) == want, (case, target)
        # The original, after the fork ran to the end, is still the full run.
        assert _records(original) == _records(full)
        assert fork_result.num_steps == full.num_steps
    if case.endswith("backlog"):
        assert max(shared_tails) > 0, "the backlog case must exercise the shared tail"


class _Scripted:
    """Chooses the last candidate that is not the built-in victim at the first decision."""

    def __init__(self) -> None:
        self.calls = 0

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        self.calls += 1
        if self.calls == 1:
            other = [c.request_id for c in context.candidates]
            other = [i for i in other if i != context.builtin_victim_id]
            if other:
                return VictimChoice(other[0], "selected")
        return VictimChoice(context.builtin_victim_id, "builtin")


def test_fork_with_another_host_diverges_without_touching_the_original() -> None:
    overrides, requests = CASES["vllm-prefix"]
    config = make_engine(**{"num_blocks": 41, "max_num_batched_tokens": 512, **overrides})
    full = run_engine(requests, config, BuiltinHost())
    first = full.decisions[0]
    run = EngineRun(requests, config, BuiltinHost())
    while run.prepare() and run.next_step < first.step:
        run.step()
    host = _Scripted()
    other = run.fork(host).run_to_end()
    assert host.calls >= 1
    assert other.decisions[0].victim_id != first.victim_id
    assert _records(run.run_to_end()) == _records(full)


@pytest.mark.parametrize("objective", ["recomputed", "e2e", "slo"])
def test_shared_backlog_scores_as_a_full_copy(objective: str, monkeypatch) -> None:
    """Oracle scores from forks that share the backlog equal those from full copies."""
    from tracekit.oracle import OracleSettings, evaluate_at

    overrides, requests = CASES["vllm-backlog"]
    config = make_engine(**{"num_blocks": 41, "max_num_batched_tokens": 512, **overrides})
    full = run_engine(requests, config, BuiltinHost())
    settings = OracleSettings(objective=objective, horizon=40, ttft_s=5.0, tpot_s=1.5)
    got = []
    for share in (True, False):
        if not share:
            monkeypatch.setattr(EngineRun, "_unstarted_tail_length", lambda self: 0)
        scores = []
        for decision in full.decisions[:6]:
            run = EngineRun(requests, config, BuiltinHost(), collect=False)
            while run.prepare() and run.next_step < decision.step:
                run.step()
            prior = [d.victim_id for d in full.decisions if d.step == decision.step][
                : decision.seq - run.num_decisions
            ]
            if share:
                assert run.fork().unmade_arrivals(), "the case must share a backlog"
            ids = [c.request_id for c in decision.candidates]
            scores.append(evaluate_at(run, prior, ids, decision.builtin_victim_id, settings))
        got.append(scores)
    assert got[0] == got[1]


@pytest.mark.parametrize("strategy", ["lcf", "bidkv", "static-random"])
def test_fork_copies_a_stateful_policy_host(strategy: str) -> None:
    """fork() without a host deep-copies the run's host: the policy continues from its state."""
    from tracekit.strategies import resolve_strategy

    overrides, requests = CASES["vllm-prefix"]
    config = make_engine(**{"num_blocks": 41, "max_num_batched_tokens": 512, **overrides})
    run = EngineRun(requests, config, resolve_strategy(strategy).make_host("typed"))
    for _ in range(30):
        run.step()
    finished, decided = len(run.result.requests), len(run.result.decisions)
    fork = run.fork().run_to_end()
    original = run.run_to_end()
    assert len(original.decisions) > decided, "the tail must make decisions"
    assert _records(fork)[1:] == (
        record_values(original.decisions[decided:]),
        record_values(original.requests[finished:]),
    )


def _cancelling(requests: list[EngineRequest]) -> list[EngineRequest]:
    """Every third request cancelled by its client 3 s after it was sent."""
    return [
        dataclasses.replace(r, cancel_after_s=3.0) if i % 3 == 0 else r
        for i, r in enumerate(requests)
    ]


CLIENT_CASES = {
    "max-concurrency": (dict(max_concurrency=6), False),
    "ttft-timeout": (dict(max_concurrency=8, ttft_timeout_s=4.0), False),
    "closed-loop": (dict(concurrency=5, think_time_s=0.5), False),
    "recorded-cancels": (dict(), True),
    "async-cancels": (dict(max_concurrency=6, ttft_timeout_s=4.0), True),
}


@pytest.mark.parametrize("case", sorted(CLIENT_CASES))
def test_fork_continues_identically_with_a_client_model(case: str) -> None:
    """The client feed (send times, concurrency slots, pending cancels) is part of a fork."""
    from tracekit.workloads.client import ClientModel

    limits, cancels = CLIENT_CASES[case]
    client = ClientModel(**limits) if limits else None  # (None: recorded cancels still apply)
    base = _plain(40, 1, gap=0.1)
    requests = _cancelling(base) if cancels else base
    overrides = dict(async_scheduling=True) if case.startswith("async") else {}
    config = make_engine(**{"num_blocks": 41, "max_num_batched_tokens": 512, **overrides})
    full = run_engine(requests, config, BuiltinHost(), client=client)
    plain = run_engine(base, config, BuiltinHost())
    assert _records(full) != _records(plain), "the case must use the client model"
    totals = (full.num_aborted, full.client_queue_total_s, full.client_queue_max_s)
    for target in (0, full.num_steps // 3, 2 * full.num_steps // 3):
        run = EngineRun(requests, config, BuiltinHost(), client=client)
        want = _advance(run, target, full)
        fork = run.fork().run_to_end()
        assert _records(fork) == want, target
        assert (fork.num_aborted, fork.client_queue_total_s, fork.client_queue_max_s) == totals
        original = run.run_to_end()
        assert _records(original) == _records(full)
        assert (original.num_aborted, original.client_queue_total_s) == totals[:2]


class _LinearModel:
    """A measured step-time model stand-in: time grows with prefill tokens and decode context."""

    name = "linear"

    def step_time_s(self, shape) -> float:
        return 0.01 + 0.001 * shape.num_prefill_tokens + 0.0001 * shape.num_decode_context_tokens


@pytest.mark.parametrize("case", ["vllm", "vllm-backlog", "vllm-async"])
def test_fork_continues_identically_with_a_step_time_model(case: str, monkeypatch) -> None:
    """A measured latency model's clock (it holds the request states) is part of a fork."""
    import tracekit.engine.engine as engine_module
    from tracekit.engine.clock import StepModelClock, make_clock

    model = _LinearModel()
    monkeypatch.setattr(
        engine_module, "make_clock", lambda cfg, states: make_clock(cfg, states, model=model)
    )
    overrides, requests = CASES[case]
    # (The model replaces the cost model's step times; the steps clock would ignore it.)
    config = make_engine(41, max_num_batched_tokens=512, clock="cost-model", **overrides)
    full = run_engine(requests, config, BuiltinHost())
    assert full.num_decisions > 0
    for target in (0, full.num_steps // 3, 2 * full.num_steps // 3):
        run = EngineRun(requests, config, BuiltinHost())
        assert isinstance(run.clock, StepModelClock)
        want = _advance(run, target, full)
        fork = run.fork().run_to_end()
        assert _records(fork) == want, target
        assert _records(run.run_to_end()) == _records(full)
