"""Live: with async scheduling on, the embedded engine matches the real ``AsyncScheduler``.

The driver runs vLLM's own ``AsyncScheduler`` one step ahead, as ``EngineCore.
step_with_batch_queue`` does; the engine runs its model of it. Steps, scheduled-token maps,
decisions, request outcomes and per-step prefix-cache hits must be equal, message for message,
under FCFS and PRIORITY, with prefix caching off and on, for every installed vLLM
(``$BIDKV_VLLM_VENV`` and ``$BIDKV_VLLM_VENV_EXTRA``, as ``tests/test_vllm_live.py``). The async
fixtures themselves are re-recorded live by ``tests/test_vllm_live.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from vllm_helpers import environments, shared_driver_streams, vllm_version

from tracekit.vllm.cache_hits import engine_stream, first_mismatch

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("venv", environments(), ids=lambda p: Path(p).name)
def test_engine_matches_the_real_async_scheduler(venv: str) -> None:
    version = vllm_version(venv)
    release = ".".join(version.split(".")[:2])
    if release not in ("0.32", "0.33"):
        pytest.skip(f"vLLM {version} is not a release the engine reproduces")
    # engine_helpers.async_scenarios, in one driver process with tests/test_vllm_prefix_live.py's.
    runs, real = shared_driver_streams(venv, "async", release)
    decisions = hits = 0
    for scenario in runs:
        expected = engine_stream(scenario)
        mismatch = first_mismatch(expected, real[scenario.index])
        assert mismatch is None, (scenario.index, mismatch)
        decisions += sum(1 for m in expected if m["kind"] == "decision")
        hits += sum(sum(m["hits"].values()) for m in expected if m["kind"] == "cache")
        # The comparison is of async runs: the same run synchronously schedules differently.
        sync = engine_stream(
            dataclasses.replace(
                scenario, config=dataclasses.replace(scenario.config, async_scheduling=False)
            )
        )
        assert first_mismatch(expected, sync) is not None, scenario.index
    # The workloads preempt and hit the cache (what the comparison is about).
    assert decisions > 50 and hits > 0
