"""Live: with prefix caching on, the embedded engine matches the real scheduler message for message.

Steps, scheduled-token maps, decisions, request outcomes and the per-step prefix-cache hits
(the driver's ``cache`` messages) of the prefix-caching fixtures and of a random
content workload, under FCFS and PRIORITY, for every installed vLLM (``$BIDKV_VLLM_VENV`` and
``$BIDKV_VLLM_VENV_EXTRA``, as ``tests/test_vllm_live.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from engine_helpers import random_content
from vllm_helpers import environments, vllm_version

from tracekit.engine import EngineConfig
from tracekit.engine.request import engine_requests
from tracekit.vllm.cache_hits import driver_streams, engine_stream, first_mismatch
from tracekit.vllm.fixtures import FIXTURES, PREFIX_CACHING_FIXTURES
from tracekit.vllm.protocol import Scenario

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]


def scenarios(release: str) -> list[Scenario]:
    out = []
    for name in PREFIX_CACHING_FIXTURES:
        fixture = FIXTURES[name]
        requests = tuple(engine_requests(fixture.load_workload(ROOT)))
        out.append(Scenario(len(out), fixture.engine_config(release), requests))
    for seed, (policy, num_blocks) in enumerate(
        [("fcfs", 120), ("priority", 120), ("fcfs", 400), ("priority", 90)]
    ):
        config = EngineConfig(
            num_blocks=num_blocks,
            max_num_seqs=16,
            max_model_len=1400,
            max_num_batched_tokens=512,
            scheduling_policy=policy,  # type: ignore[arg-type]
            vllm_version=release,  # type: ignore[arg-type]
            clock="steps",
            step_s=0.05,
            enable_prefix_caching=True,
            async_scheduling=False,  # synchronous; tests/test_vllm_async_live.py covers async
        )
        out.append(Scenario(len(out), config, tuple(random_content(seed, 100))))
    return out


@pytest.mark.parametrize("venv", environments(), ids=lambda p: Path(p).name)
def test_engine_matches_the_real_scheduler_with_prefix_caching(venv: str) -> None:
    version = vllm_version(venv)
    release = ".".join(version.split(".")[:2])
    if release not in ("0.32", "0.33"):
        pytest.skip(f"vLLM {version} is not a release the engine reproduces")
    runs = scenarios(release)
    # The same scenarios with prefix caching off (content ignored, ids repeated), in the same
    # driver process (importing vLLM takes about 10 s).
    off = [
        dataclasses.replace(
            s,
            index=len(runs) + i,
            config=dataclasses.replace(s.config, enable_prefix_caching=False),
        )
        for i, s in enumerate(runs[:2])
    ]
    real = driver_streams([*runs, *off], venv=venv)
    total_hits = 0
    for scenario in runs:
        expected = engine_stream(scenario)
        mismatch = first_mismatch(expected, real[scenario.index])
        assert mismatch is None, (scenario.index, mismatch)
        hits = sum(sum(m["hits"].values()) for m in expected if m["kind"] == "cache")
        total_hits += hits
    assert total_hits > 0
    # With prefix caching off they still match.
    for scenario in off:
        assert first_mismatch(engine_stream(scenario), real[scenario.index]) is None
