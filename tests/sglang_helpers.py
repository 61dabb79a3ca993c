"""SGLang's environment for the live tests, and the trace windows the random sweeps draw."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tracekit.real_engine.fixtures import AZURE_SAMPLE, MOONCAKE_SAMPLE
from tracekit.sglang.record import SglangUnavailableError, find_sglang_python
from tracekit.workloads import Workload, load_workload

ROOT = Path(__file__).resolve().parents[1]


def needs_sglang() -> pytest.MarkDecorator:
    """The mark of a test that runs SGLang: skipped without its environment.

    Where CI requires it (``BIDKV_REQUIRE_SGLANG=1``) a missing environment is an error at
    collection instead.
    """
    try:
        find_sglang_python()
        reason = None
    except SglangUnavailableError as error:
        reason = f"no SGLang environment ({error}); run scripts/install-sglang-cpu.sh"
    if reason is not None and os.environ.get("BIDKV_REQUIRE_SGLANG") == "1":
        raise RuntimeError(f"BIDKV_REQUIRE_SGLANG=1 but {reason}")
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def draw_trace_window(rng: random.Random, index: int) -> tuple[str, Workload, bool]:
    """A random window of the shipped Azure or Mooncake sample: ``(name, workload, azure)``.

    Azure: 5 to 15 s from its first 200 s, at 1, 2 or 4 times its rate. Mooncake (prompts that
    share ``hash_ids`` prefixes): 10 or 20 s from its first 1,000 s. Priorities from a drawn
    seed. The random sweeps of both engines draw their windows here.
    """
    if rng.random() < 0.5:
        start = round(rng.uniform(0, 200), 3)
        workload = load_workload(
            ROOT / AZURE_SAMPLE,
            window=(start, start + rng.choice([5, 10, 15])),
            rate_scale=rng.choice([1.0, 2.0, 4.0]),
            priority_seed=rng.randint(0, 9),
        )
        return f"{index:02d}-azure-{start}", workload, True
    start = round(rng.uniform(0, 1000), 3)
    workload = load_workload(
        ROOT / MOONCAKE_SAMPLE,
        window=(start, start + rng.choice([10, 20])),
        priority_seed=rng.randint(0, 9),
    )
    return f"{index:02d}-mooncake-{start}", workload, False
