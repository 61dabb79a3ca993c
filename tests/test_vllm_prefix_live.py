"""Live: with prefix caching on, the embedded engine matches the real scheduler message for message.

Steps, scheduled-token maps, decisions, request outcomes and the per-step prefix-cache hits
(the driver's ``cache`` messages) of the prefix-caching fixtures and of a random
content workload, under FCFS and PRIORITY, for every installed vLLM (``$BIDKV_VLLM_VENV`` and
``$BIDKV_VLLM_VENV_EXTRA``, as ``tests/test_vllm_live.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_helpers import environments, shared_driver_streams, vllm_version

from tracekit.vllm.cache_hits import engine_stream, first_mismatch

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("venv", environments(), ids=lambda p: Path(p).name)
def test_engine_matches_the_real_scheduler_with_prefix_caching(venv: str) -> None:
    version = vllm_version(venv)
    release = ".".join(version.split(".")[:2])
    if release not in ("0.32", "0.33"):
        pytest.skip(f"vLLM {version} is not a release the engine reproduces")
    # The scenarios (engine_helpers.prefix_scenarios), and the first two with prefix caching off
    # (content ignored, ids repeated): one driver process with tests/test_vllm_async_live.py's.
    runs, real = shared_driver_streams(venv, "prefix", release)
    off, real_off = shared_driver_streams(venv, "prefix-off", release)
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
        assert first_mismatch(engine_stream(scenario), real_off[scenario.index]) is None
