"""SGLang mode: retraction order, the policy's place in it, and end-to-end consistency.

The hand-worked runs state SGLang's loop: the normal one (``--disable-overlap-schedule``) unless
a test works the overlap loop, and the radix cache off unless a test is about it (its tree is
modelled at page size 1, and these runs use 16-token blocks).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from engine_helpers import make_engine, make_requests, run_checked

from tracekit.engine import BuiltinHost, EngineRequest, TypedHost
from tracekit.engine.request import RequestStatus, SchedulerRequest
from tracekit.engine.sglang import (
    INIT_NEW_TOKEN_RATIO,
    RETRACT_DECODE_STEPS,
    SglangScheduler,
    retraction_order,
)
from tracekit.hosts.preemption_policy import PreemptionContext


def _running(scheduler: SglangScheduler, request_id: str, prompt: int, outputs: int) -> None:
    """Install a decoding request: prompt + outputs tokens, KV for all but the last one."""
    state = SchedulerRequest(EngineRequest(request_id, 0.0, prompt, 100, 100), 0)
    state.num_output_tokens = outputs
    state.num_computed_tokens = prompt + outputs - 1
    state.num_blocks = -(-state.num_computed_tokens // 16)
    state.status = RequestStatus.RUNNING
    scheduler.block_pool.allocate(state.num_blocks)
    scheduler.requests[request_id] = state
    scheduler.max_new[request_id] = 100  # what add_request would set (max_tokens 100)
    scheduler.running.append(state)


def _sglang(**overrides: object):
    """``make_engine`` in SGLang mode: the normal loop and no radix cache unless overridden."""
    return make_engine(
        **{"mode": "sglang", "overlap_schedule": False, "radix_cache": False, **overrides}
    )


def _crowded(host: object) -> tuple[SglangScheduler, list]:
    decisions: list = []
    scheduler = SglangScheduler(_sglang(), host, decisions.append)  # type: ignore[arg-type]
    # Each request's KV ends exactly on a block boundary, so every next decode needs a block.
    _running(scheduler, "R1", 28, 5)  # 32 computed, 2 blocks
    _running(scheduler, "R2", 44, 5)  # 48 computed, 3 blocks
    _running(scheduler, "R3", 12, 5)  # 16 computed, 1 block
    _running(scheduler, "R4", 30, 3)  # 32 computed, 2 blocks
    _running(scheduler, "R5", 14, 3)  # 16 computed, 1 block
    return scheduler, decisions


def test_retraction_order_fewest_outputs_then_longest_prompt_first() -> None:
    scheduler, _ = _crowded(BuiltinHost())
    order = retraction_order(scheduler.running)
    # Sorted by (outputs, -prompt) descending; the victim is popped from the end.
    assert [r.request_id for r in order] == ["R3", "R1", "R2", "R5", "R4"]


def test_decode_retracts_in_sglang_order_until_the_step_fits() -> None:
    scheduler, decisions = _crowded(BuiltinHost())
    # 9 of 10 blocks held, 5 needed for the next decode. Retract R4 (3 outputs, prompt 30):
    # free 3 < 4 needed. Retract R5 (3 outputs, prompt 14): free 4 >= 3 needed. Stop.
    out = scheduler.schedule(0, 0.0)
    assert [(d.requesting_request_id, d.victim_id) for d in decisions] == [("", "R4"), ("", "R5")]
    assert [d.builtin_victim_id for d in decisions] == ["R4", "R5"]
    assert [c.request_id for c in decisions[0].candidates] == ["R1", "R2", "R3", "R4", "R5"]
    assert out.num_scheduled_tokens == {"R1": 1, "R2": 1, "R3": 1}
    assert out.num_decode_tokens == 3
    # Retracted requests free their KV and join the back of the waiting queue for a re-prefill.
    assert [r.request_id for r in scheduler.waiting] == ["R4", "R5"]
    assert scheduler.requests["R4"].recomputed_tokens == 32
    # new_token_ratio = (sum(outputs) + 20 * kept) / (sum(max_new) + 1) over the kept requests.
    assert scheduler.new_token_ratio == (15 + RETRACT_DECODE_STEPS * 3) / 301
    scheduler.check_consistency()


def test_policy_chooses_each_retraction_victim() -> None:
    class LongestPromptFirst:
        def select_victim(self, context: PreemptionContext) -> str | None:
            return max(context.candidates, key=lambda c: c.num_prompt_tokens).request_id

    scheduler, decisions = _crowded(TypedHost(LongestPromptFirst()))
    scheduler.schedule(0, 0.0)
    # R2 (3 blocks): free 4 >= 4 needed by R1, R3, R4, R5 -> one retraction suffices.
    assert [(d.victim_id, d.builtin_victim_id, d.outcome) for d in decisions] == [
        ("R2", "R4", "selected")
    ]
    scheduler.check_consistency()


def test_retraction_keeps_at_least_one_request() -> None:
    scheduler = SglangScheduler(_sglang(), BuiltinHost())
    _running(scheduler, "solo", 150, 11)  # 160 computed: all 10 blocks
    with pytest.raises(RuntimeError):
        # Nothing can be retracted and no block is free: the engine refuses to overcommit.
        scheduler.schedule(0, 0.0)


def test_prefill_first_then_decode() -> None:
    result = run_checked(_sglang(), make_requests(("A", 0, 20, 3), ("B", 1, 20, 3)))
    # Step 0 prefills A; step 1 prefills B (A waits: no mixed batches); then both decode.
    assert [s.num_scheduled_tokens for s in result.steps] == [
        {"A": 20},
        {"B": 20},
        {"A": 1, "B": 1},
        {"A": 1, "B": 1},
    ]


def _workload(seed: int) -> list[EngineRequest]:
    # Short prompts and long outputs: SGLang admits conservatively (whole max_new for new
    # requests), so only a long decode-heavy run lets new_token_ratio decay far enough to
    # under-reserve and retract.
    rng = random.Random(seed)
    return [
        EngineRequest(f"r{i}", rng.uniform(0, 10), rng.randint(5, 60), rng.randint(100, 300), 300)
        for i in range(60)
    ]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("radix", [False, True])
def test_sglang_runs_are_consistent_and_deterministic(overlap: bool, radix: bool) -> None:
    # 464 tokens either way (the radix cache needs page size 1).
    pages = {"num_blocks": 465, "block_size": 1} if radix else {"num_blocks": 30}
    config = _sglang(
        max_num_seqs=16,
        max_num_batched_tokens=64,
        max_model_len=400,
        overlap_schedule=overlap,
        radix_cache=radix,
        **pages,
    )
    first = run_checked(config, _workload(1))
    second = run_checked(config, _workload(1))
    assert first.steps == second.steps and first.decisions == second.decisions
    assert len(first.requests) == 60
    assert first.decisions, "the workload is meant to force retractions"
    assert all(r.num_output_tokens == r.output_tokens for r in first.requests)
    assert INIT_NEW_TOKEN_RATIO == 0.7


def test_new_requests_reserve_their_whole_max_new() -> None:
    """PrefillAdder.add_one_req: a candidate needs prompt + max_new + 1 < what is left.

    300 tokens, three requests of 10 prompt tokens and max_new 100 at time 0. Step 0: a needs
    111 < 300 and reserves 10 + 1 + 100 (189 left); b needs 111 < 189 (78 left); c needs
    111 >= 78: refused. Step 1: the running a and b reserve only (100 - 1) * 0.7 each, so
    300 - 20 - 138.6 = 141.4 > 111 admits c. (Reserving max_new * ratio for the candidate too, as
    the engine once did, admits all three at step 0; real SGLang admits a and b, then c.)
    """
    config = _sglang(num_blocks=301, block_size=1, max_num_batched_tokens=256, max_model_len=300)
    result = run_checked(
        config, make_requests(("a", 0, 10, 100), ("b", 0, 10, 100), ("c", 0, 10, 100))
    )
    assert [s.num_scheduled_tokens for s in result.steps[:3]] == [
        {"a": 10, "b": 10},
        {"c": 10},
        {"a": 1, "b": 1, "c": 1},
    ]


def test_radix_hits_stop_one_token_short_of_the_input() -> None:
    """Req.init_next_round_input matches at most input - 1 tokens (_compute_max_prefix_len)."""
    from tracekit.sglang.compare import engine_steps
    from tracekit.sglang.protocol import SglangConfig

    config = SglangConfig(
        kv_tokens=4000,
        max_context_len=2000,
        chunked_prefill_size=0,
        overlap_schedule=False,
        step_s=1.0,
    )
    rows = [
        ("x", 0.0, 600, 4, 4, 0, [7, 8]),  # fills the tree with blocks 7 and 8 (88 tokens of it)
        ("y", 10.0, 600, 4, 4, 0, [7, 8]),  # the same 600 tokens: 599 cached, 1 computed
        ("z", 20.0, 512, 4, 4, 0, [7]),  # block 7 alone: 511 cached
        ("w", 30.0, 600, 4, 4, 0, [9]),  # another block: nothing cached
    ]
    prefills = {
        r[0]: (r[1], r[2])
        for s in engine_steps(config, rows)
        if s.mode == "prefill"
        for r in s.reqs
    }
    assert prefills == {"x": (600, 0), "y": (1, 599), "z": (1, 511), "w": (600, 0)}
    off = engine_steps(dataclasses.replace(config, radix_cache=False), rows)
    assert all(r[2] == 0 for s in off if s.mode == "prefill" for r in s.reqs)


def test_radix_match_length_is_the_longest_common_prefix() -> None:
    """The tree's match, split inside a node at any position, against a token-by-token count."""
    from array import array

    from tracekit.engine.sglang import RadixTree

    rng = random.Random(3)
    for _ in range(200):
        tree = RadixTree()
        stored = [array("q", [rng.randint(0, 2) for _ in range(rng.randint(1, 60))])]
        tree.insert(stored[0], len(stored[0]))
        probe = array("q", stored[0])
        cut = rng.randint(0, len(probe))
        probe[cut:] = array("q", [7] * rng.randint(0, 30))  # 7 is never stored: a mismatch
        n = rng.randint(0, len(probe))
        expected = 0
        while expected < min(n, len(stored[0])) and probe[expected] == stored[0][expected]:
            expected += 1
        assert tree.peek(probe, n)[0] == expected
        assert tree.match(probe, n)[0] == expected
        assert tree.match(probe, n)[0] == expected  # (the split node now ends there)


def _tree_state(tree) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Every node of a radix tree, depth first: tokens, times, lock, children's first tokens."""
    state, stack = [], [tree.root]
    while stack:
        node = stack.pop()
        state.append((tuple(node.key), node.access, node.created, node.lock, sorted(node.children)))
        stack.extend(node.children[k] for k in sorted(node.children))
    return [*state, (tree.clock, tree.evictable, tree.protected, len(tree.leaves))]


def test_radix_insert_from_a_node_on_the_path_is_the_insert_from_the_root() -> None:
    """A checkpoint walks from the request's locked node: the same tree as a walk from the root.

    The nodes above it must be stamped as entering them would (an eviction later reads those
    times), and the rest compared, split and added as usual.
    """
    from array import array

    from tracekit.engine.sglang import RadixTree

    rng = random.Random(5)
    for _ in range(300):
        trees = (RadixTree(), RadixTree())
        keys = [
            array("q", [rng.randint(0, 1) for _ in range(rng.randint(2, 40))]) for _ in range(4)
        ]
        lengths = [rng.randint(1, len(key)) for key in keys]
        for tree in trees:
            for key, length in zip(keys, lengths, strict=True):
                tree.insert(key, length)
        key = array("q", rng.choice(keys))
        key.extend(array("q", [rng.randint(0, 1) for _ in range(rng.randint(0, 20))]))
        held = rng.randint(0, len(key))
        node = trees[0].match(key, held)[1]
        trees[1].match(key, held)
        assert _tree_state(trees[0]) == _tree_state(trees[1])
        n = rng.randint(0, len(key))  # (below the held node too: then it walks from the root)
        from_node, from_root = trees[0].insert(key, n, node), trees[1].insert(key, n)
        assert from_node[0] == from_root[0]
        assert _tree_state(trees[0]) == _tree_state(trees[1])


def _steps(config, *specs) -> list[dict]:
    return [s.num_scheduled_tokens for s in run_checked(config, make_requests(*specs)).steps]


def test_overlap_decodes_once_more_a_request_that_ends_at_its_end_of_sequence() -> None:
    """event_loop_overlap: step k's result is processed after step k + 1 was scheduled.

    A (20 prompt tokens, target 2, max_tokens 5) ends at its end of sequence: the result of its
    step-1 decode (its 2nd token) comes back once step 2 already decoded it again, so SGLang
    runs one decode the normal loop does not. B (target 2 = max_tokens 2) ends by length:
    ``_reqs_finishing_inflight`` keeps it out of that decode, as the normal loop does.
    """
    overlap = _sglang(overlap_schedule=True)
    assert _steps(_sglang(), ("A", 0, 20, 2, 0, 5)) == [{"A": 20}, {"A": 1}]
    assert _steps(overlap, ("A", 0, 20, 2, 0, 5)) == [{"A": 20}, {"A": 1}, {"A": 1}]
    assert _steps(overlap, ("B", 0, 20, 2, 0, 2)) == [{"B": 20}, {"B": 1}]


def test_overlap_admits_next_to_a_prefill_whose_first_token_is_not_back() -> None:
    """A request prefilled at step 0 decodes at step 2 although its token came back at step 1."""
    config = _sglang(overlap_schedule=True)
    result = run_checked(config, make_requests(("A", 0, 20, 3), ("B", 1, 20, 3)))
    assert [s.num_scheduled_tokens for s in result.steps] == [
        {"A": 20},
        {"B": 20},
        {"A": 1, "B": 1},
        {"A": 1, "B": 1},
    ]
    # The outputs of a step are applied after the next step: A's first token at the end of
    # step 0 (1 s), its last with step 3's (4 s) although step 4 never runs.
    first = {r.request_id: (r.first_token_s, r.finish_s) for r in result.requests}
    assert first == {"A": (1.0, 4.0), "B": (2.0, 4.0)}


@pytest.mark.parametrize(("low_first", "order"), [(False, ["hi", "lo"]), (True, ["lo", "hi"])])
def test_priority_scheduling_direction(low_first: bool, order: list[str]) -> None:
    """--enable-priority-scheduling sorts the queue by priority; SGLang's default puts larger
    values first, --schedule-low-priority-values-first smaller ones. One running slot."""
    config = _sglang(
        max_num_seqs=1,
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=low_first,
        disable_priority_preemption=True,
    )
    steps = _steps(config, ("lo", 0, 20, 2, 0), ("hi", 0, 20, 2, 5))
    # One request at a time: its prefill and its one decode, then the other's.
    assert [next(iter(s)) for s in steps] == [order[0], order[0], order[1], order[1]]


@pytest.mark.parametrize(("priority", "preempts"), [(21, True), (20, False), (5, False)])
def test_priority_preemption_needs_a_difference_above_the_threshold(
    priority: int, preempts: bool
) -> None:
    """PrefillAdder.preempt_to_schedule: with the one slot taken by r (priority 10), an arrival
    preempts it only when its priority exceeds r's by more than the threshold (10)."""
    config = _sglang(max_num_seqs=1, enable_priority_scheduling=True)
    result = run_checked(config, make_requests(("r", 0, 20, 6, 10), ("x", 2, 20, 2, priority)))
    steps = [s.num_scheduled_tokens for s in result.steps]
    assert steps[2] == ({"x": 20} if preempts else {"r": 1})
    r = next(q for q in result.requests if q.request_id == "r")
    assert r.num_preemptions == int(preempts)
    assert sum(s.num_preemptions for s in result.steps) == int(preempts)
    assert not result.decisions  # SGLang's own rule, not a victim decision of the host


@pytest.mark.parametrize(("ignore_eos", "step_1"), [(False, {"b": 10}), (True, {"a": 1})])
def test_a_running_ignore_eos_request_reserves_its_whole_output(
    ignore_eos: bool, step_1: dict[str, int]
) -> None:
    """PrefillAdder._get_running_request_total_token_offset: ratio 1 for ignore_eos.

    200 tokens; a (10 prompt tokens, 100 max) runs, b (10, 100) arrives at step 1. a holds 10
    tokens: 190 free. a reserves 99 * 0.7 = 69.3 of its remaining output (b needs 10 + 100 + 1
    = 111 < 120.7: admitted), or all 99 with ignore_eos (111 >= 91: refused, a decodes).
    """
    config = _sglang(num_blocks=201, block_size=1, max_model_len=200)
    a = EngineRequest("a", 0.0, 10, 100, 100, ignore_eos=ignore_eos)
    b = EngineRequest("b", 1.0, 10, 100, 100)
    result = run_checked(config, [a, b])
    assert result.steps[1].num_scheduled_tokens == step_1


def test_ignore_eos_insert_keeps_sglangs_index_quirk() -> None:
    """add_one_req_ignore_eos's insert: before the first entry with as many tokens left or
    more; with none, SGLang's loop leaves its index at the last entry and inserts before it."""
    from tracekit.engine.sglang import _add_state

    states = [(10.0, 1), (20.0, 2)]
    _add_state(states, _state("x", 15, 30), 15, 0.7, True)
    assert [left for left, _ in states] == [10.0, 15.0, 20.0]
    _add_state(states, _state("y", 99, 30), 99, 0.7, True)
    assert [left for left, _ in states] == [10.0, 15.0, 99.0, 20.0]


def _state(rid: str, max_tokens: int, prompt: int) -> SchedulerRequest:
    request = EngineRequest(rid, 0.0, prompt, max_tokens, max_tokens, ignore_eos=True)
    return SchedulerRequest(request, 0)
