"""``lcf``, ``mcf`` and ``fewest-output`` (docs/policy.md, "Strategies").

Each expected victim is worked out by hand from the rule as the sources state it, not from the
policy's code:

- ``lcf`` is vLLM PR #53723 (``--preemption-victim lcf``): ``min(running,
  key=num_computed_tokens)`` with the request being scheduled excluded, the queue walked in
  reverse (equal counts go to the last-admitted request), the FCFS tail when nothing else is
  eligible, and no part for the scheduling policy (the victim axis is separate from PRIORITY).
- ``mcf`` is the same rule with the largest count (the RFC's most-computed-first ablation).
- ``fewest-output`` is SGLang's retraction order: sort by ``(len(output_ids),
  -len(origin_input_ids))`` in reverse with a stable sort and pop from the end.
"""

from __future__ import annotations

import logging

import pytest

from bidkv.adapters.vllm_hust.config import canonical_strategy
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from tracekit.hosts.preemption_policy import PreemptionCandidate, PreemptionContext


def cand(
    rid: str, computed: int = 0, *, out: int = 0, prompt: int = 0, priority: int = 0,
    arrival: float = 0.0,
) -> PreemptionCandidate:  # fmt: skip
    return PreemptionCandidate(rid, priority, arrival, prompt, out, computed, 0, 1024)


def pick(strategy: str, cands: list[PreemptionCandidate], requester: str = "",
         policy: str = "fcfs") -> str | None:  # fmt: skip
    config = BidkvSelectorConfig(enable_utility_victim_selection=True, utility_strategy=strategy)
    context = PreemptionContext(tuple(cands), policy, requester, 0.95, 1.0)  # type: ignore[arg-type]
    return BidkvPreemptionPolicy(config).select_victim(context)


def test_names_and_aliases() -> None:
    assert canonical_strategy("lcf") == "lcf"
    assert canonical_strategy("least-computed-first") == "lcf"
    assert canonical_strategy("most-computed-first") == "mcf"
    assert canonical_strategy("fewest-output") == "sglang-default"


# (candidates as (id, computed tokens), requester, lcf victim, mcf victim)
CASES = [
    # Distinct counts: the least and the most.
    ([("a", 300), ("b", 40), ("c", 900), ("d", 120)], "", "b", "c"),
    # Ties: the last-admitted (last in host order) of the equal counts.
    ([("a", 40), ("b", 40), ("c", 900), ("d", 900), ("e", 500)], "", "b", "d"),
    # The requester is not eligible even though it has the fewest tokens.
    ([("a", 300), ("b", 10), ("c", 200)], "b", "c", "a"),
    # A tie that includes the requester: the other request of that count, never the requester.
    ([("a", 50), ("b", 50), ("c", 700)], "b", "a", "c"),
    # Only the requester is running: the FCFS tail, i.e. the requester preempts itself.
    ([("r", 80)], "r", "r", "r"),
    # A requester that is not a candidate excludes nothing.
    ([("a", 5), ("b", 5)], "zz", "b", "b"),
]


@pytest.mark.parametrize(("cands", "requester", "lcf", "mcf"), CASES)
def test_hand_worked_victims(
    cands: list[tuple[str, int]], requester: str, lcf: str, mcf: str
) -> None:
    built = [cand(rid, tokens) for rid, tokens in cands]
    assert pick("lcf", built, requester) == lcf
    assert pick("mcf", built, requester) == mcf


def test_priority_plays_no_part() -> None:
    # Under PRIORITY the built-in rule would take "a" (largest (priority, arrival)); the PR's
    # victim axis is separate from the admission policy, so LCF still takes the least computed.
    cands = [
        cand("a", 900, priority=5, arrival=3.0),
        cand("b", 30, priority=0, arrival=1.0),
        cand("c", 30, priority=0, arrival=2.0),
        cand("d", 400, priority=1, arrival=0.5),
    ]
    assert pick("pe", cands, "d", policy="priority") == "a"
    assert pick("lcf", cands, "d", policy="priority") == "c"
    assert pick("lcf", cands, "d", policy="fcfs") == "c"
    assert pick("mcf", cands, "a", policy="priority") == "d"


def test_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="vllm"):
        pick("lcf", [cand("a", 3), cand("b", 9)], "a")
    assert any(
        r.getMessage().startswith("[BidKV] LCF | victim=b | tokens=9") for r in caplog.records
    )


FEWEST = [
    # Fewest outputs first.
    ([("a", 5, 100), ("b", 2, 10), ("c", 9, 999)], "fcfs", "b"),
    # Equal outputs: the longest prompt.
    ([("a", 2, 100), ("b", 2, 300), ("c", 2, 200), ("d", 7, 900)], "fcfs", "b"),
    # Equal on both keys: the stable reverse sort keeps host order, so pop() takes the last.
    ([("a", 2, 100), ("b", 2, 100), ("c", 4, 100)], "fcfs", "b"),
]


@pytest.mark.parametrize(("cands", "policy", "victim"), FEWEST)
def test_fewest_output_hand_worked(
    cands: list[tuple[str, int, int]], policy: str, victim: str
) -> None:
    built = [cand(rid, 0, out=out, prompt=prompt) for rid, out, prompt in cands]
    assert pick("fewest-output", built, policy=policy) == victim
    # The same as SGLang's own sort-and-pop, written out here.
    ordered = sorted(cands, key=lambda c: (c[1], -c[2]), reverse=True)
    assert ordered[-1][0] == victim


def test_fewest_output_under_priority_prefixes_the_priority() -> None:
    # SGLang's --retraction-policy priority: the least important (larger vLLM value) goes first,
    # then the length order within it.
    cands = [cand("a", out=0, prompt=50, priority=0), cand("b", out=30, prompt=5, priority=3),
             cand("c", out=10, prompt=5, priority=3)]  # fmt: skip
    assert pick("fewest-output", cands, policy="priority") == "c"
    assert pick("fewest-output", cands, policy="fcfs") == "a"
