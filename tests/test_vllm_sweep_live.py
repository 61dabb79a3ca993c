"""Random vLLM configurations on windows of the shipped traces: the real scheduler, the engine.

The committed fixtures pin chosen scenarios; this test draws others (seeded): a window of the
Azure conversation sample or of the Mooncake sample (whose prompts share ``hash_ids`` prefixes)
under random values of the settings the engine models (blocks and block size, running cap,
token budget, context, long-prefill threshold, FCFS or priority, prefix caching, async
scheduling, step length). Each runs on the real vLLM scheduler of every environment the live
tests use, with the built-in victim rule, and the embedded engine must match it step by step
(``compare_fidelity``). The draw below holds 16 runs: 54,194 steps, 142 preemptions and
170,432 prefix-cache hit tokens, 14 runs with prefix caching, 10 with async scheduling, 7 with
priority scheduling. Wider draws with other seeds (212 runs on 0.32.0 and 0.33.0, 512,787
steps, 2,162 preemptions, 697,744 prefix-cache hit tokens) matched too.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from sglang_helpers import draw_trace_window
from vllm_helpers import environments, vllm_version

from tracekit.engine.config import EngineConfig
from tracekit.real_engine.fidelity import compare_fidelity
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.vllm.record import record_vllm

pytestmark = pytest.mark.vllm

#: The draw: its seed and size.
SEED = 20261206
COUNT = 16


def draw_runs(seed: int, count: int, release: str) -> dict[str, SimRun]:
    """``count`` runs drawn with ``random.Random(seed)`` for vLLM ``release`` (``"0.32"``), by name.

    The context never exceeds the usable KV cache, as vLLM requires.
    """
    rng = random.Random(seed)
    runs = {}
    for i in range(count):
        block_size = rng.choice([16, 16, 32])
        name, workload, azure = draw_trace_window(rng, i)
        # Azure's short prompts on small caches, Mooncake's long ones on larger caches.
        num_blocks = rng.choice([64, 128, 256, 512] if azure else [800, 1500, 4000])
        config = EngineConfig(
            mode="vllm",
            num_blocks=num_blocks,
            block_size=block_size,
            max_num_seqs=rng.choice([4, 8, 16, 64]),
            max_num_batched_tokens=rng.choice([256, 512, 2048, 8192]),
            max_model_len=min(rng.choice([2048, 4096, 16384]), (num_blocks - 1) * block_size),
            long_prefill_token_threshold=rng.choice([0, 0, 128, 512]),
            scheduling_policy=rng.choice(["fcfs", "priority"]),
            enable_prefix_caching=rng.random() < 0.6,
            async_scheduling=rng.random() < 0.6,
            clock="steps",
            step_s=rng.choice([0.02, 0.05, 0.1]),
            vllm_version=release,  # type: ignore[arg-type]
        )
        runs[name] = SimRun(workload, config, resolve_strategy("builtin"), "builtin")
    return runs


@pytest.mark.parametrize("venv", environments(), ids=lambda p: Path(p).name)
def test_random_configurations_match_vllm_step_by_step(venv: str, tmp_path: Path) -> None:
    release = ".".join(vllm_version(venv).split(".")[:2])
    runs = draw_runs(SEED, COUNT, release)
    names = list(runs)
    live = record_vllm([runs[n] for n in names], [tmp_path / n for n in names], venv=venv)
    differ = []
    steps = preemptions = 0
    for name, bundle in zip(names, live, strict=True):
        sim = record_sim(runs[name], tmp_path / f"{name}-sim", record_scheduled=True)
        report = compare_fidelity(sim, bundle)
        if not report.matched:
            differ.append(f"{name} ({runs[name].engine_config}):\n{report.render()}")
        steps += pl.read_parquet(bundle / "steps.parquet").height
        preemptions += pl.read_parquet(bundle / "decisions.parquet").height
    assert not differ, "\n".join(differ)
    # (Not empty runs: windows of the traces with preemptions among them.)
    assert steps > 20_000
    assert preemptions > 50
