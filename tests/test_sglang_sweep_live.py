"""Random SGLang configurations on windows of the shipped traces: SGLang 0.5.23 against the engine.

The committed fixtures pin chosen scenarios; this test draws others (seeded): windows of the
Azure conversation sample and of the Mooncake sample (whose prompts share ``hash_ids``
prefixes), sometimes with every request sent with ``ignore_eos``, and the multi-turn
conversation example on pools too small to keep every conversation, under random values of
every setting the engine models (pool, running cap, chunking, prefill budget, context, radix
cache, loop, priority options, step length). Each runs on SGLang's own objects and the engine
must match it step by step. This draw: 32 runs, 1,428 requests, 47,131 steps and 113,039
radix-hit tokens; 25 runs with the radix cache, 17 in the overlap loop, 11 with priority
scheduling, 5 with ``ignore_eos``. What it catches: the recorder's old arrival rule, which put an
arrival a float's noise past a step's start one step early (``tracekit/sglang/driver.py``,
``_first_step``), makes 4 runs diverge; the engine evicting the most recently used leaves
instead of the least, 8. Skipped without SGLang's environment, as ``test_sglang_live.py`` is.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from sglang_helpers import ROOT, draw_trace_window, needs_sglang

from tracekit.sglang.compare import compare_bundle
from tracekit.sglang.protocol import SglangConfig
from tracekit.sglang.record import record_sglang
from tracekit.workloads import Workload, apply_ignore_eos, load_workload

pytestmark = needs_sglang()

CONVERSATIONS = ROOT / "examples" / "workloads" / "conversations-synthetic.csv"
#: The draw: its seed, its trace windows and its multi-turn runs.
SEED = 20261206
COUNT = 24
TURNS = 8


def draw_scenarios(
    seed: int, count: int, turns: int = 0
) -> list[tuple[str, Workload, SglangConfig]]:
    """Scenarios drawn with ``random.Random(seed)``: (name, workload, configuration).

    ``count`` trace windows, then ``turns`` runs of the multi-turn conversation example with the
    radix cache on a pool too small to keep every conversation: later turns hit their earlier
    prompts unless the least recently used leaves went first. The context is at most half the
    pool (all of a pool too small for the longest turn) and outputs stay under the other half,
    so that every request SGLang accepts fits the pool alone: SGLang's loop never ends on a
    request it can never admit.
    """
    rng = random.Random(seed)
    scenarios = []
    for i in range(count):
        kv_tokens = rng.choice([3000, 6000, 12000, 40000, 120000])
        name, workload, _ = draw_trace_window(rng, i)
        if rng.random() < 0.25:
            workload = apply_ignore_eos(workload)
            name += "-ignore-eos"
        priority = rng.random() < 0.4
        config = SglangConfig(
            kv_tokens=kv_tokens,
            max_running_requests=rng.choice([2, 4, 8, 16, 32, 64]),
            chunked_prefill_size=rng.choice([0, 128, 512, 2048, 8192]),
            max_prefill_tokens=rng.choice([1024, 4096, 16384]),
            max_context_len=min(rng.choice([2048, 4096, 8192, 32768]), kv_tokens // 2),
            radix_cache=rng.random() < 0.6,
            overlap_schedule=rng.random() < 0.6,
            **_priority_options(rng, priority),
            step_s=rng.choice([0.02, 0.05, 0.1]),
            max_steps=300_000,
        )
        scenarios.append((name, workload, config))
    for i in range(turns):
        kv_tokens = rng.choice([2500, 4000, 8000])
        priority = rng.random() < 0.4
        config = SglangConfig(
            kv_tokens=kv_tokens,
            max_running_requests=rng.choice([4, 8, 16, 32]),
            chunked_prefill_size=rng.choice([0, 128, 512, 2048]),
            max_prefill_tokens=rng.choice([512, 1024, 4096]),
            max_context_len=kv_tokens // 2 if kv_tokens > 5000 else kv_tokens,
            radix_cache=True,
            overlap_schedule=rng.random() < 0.6,
            **_priority_options(rng, priority),
            step_s=rng.choice([0.02, 0.05]),
            max_steps=300_000,
        )
        workload = load_workload(
            CONVERSATIONS,
            rate_scale=rng.choice([2.0, 5.0, 10.0]),
            priority_seed=rng.randint(0, 9),
        )
        scenarios.append((f"{count + i:02d}-conversations", workload, config))
    return scenarios


def _priority_options(rng: random.Random, enabled: bool) -> dict[str, Any]:
    """SGLang's priority options at random (the retraction policy ``priority`` only if enabled)."""
    return {
        "enable_priority_scheduling": enabled,
        "retraction_policy": "priority" if enabled and rng.random() < 0.5 else "length",
        "schedule_low_priority_values_first": rng.random() < 0.5,
        "disable_priority_preemption": rng.random() < 0.5,
        "priority_scheduling_preemption_threshold": rng.choice([0, 1, 10]),
    }


def test_random_configurations_match_sglang_step_by_step(tmp_path: Path) -> None:
    scenarios = draw_scenarios(SEED, COUNT, TURNS)
    names = [name for name, _, _ in scenarios]
    bundles = record_sglang(
        [workload for _, workload, _ in scenarios],
        [tmp_path / name for name in names],
        config=[config for _, _, config in scenarios],
    )
    differ = []
    total_steps = 0
    for name, bundle, (_, _, config) in zip(names, bundles, scenarios, strict=True):
        num_steps, mismatch = compare_bundle(bundle)
        total_steps += num_steps
        if mismatch is not None:
            differ.append(f"{name} ({config}):\n{mismatch.render()}")
    assert not differ, "\n".join(differ)
    # (The draw is not empty runs: windows of the traces, tens of thousands of steps in all.)
    assert total_steps > 20_000
