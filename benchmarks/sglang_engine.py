"""The same workload through SGLang 0.5.23's real scheduling objects and the engine's SGLang mode.

Runs one workload (default: the first 300 requests of the shipped Azure conversation sample at
twice their rate, on the configuration of the ``azure`` SGLang fixture: a 4,000-token pool, 32
running requests, 512-token chunks, steps clock) through

1. SGLang's real objects in their own environment (``scripts/install-sglang-cpu.sh``), driven by
   ``tracekit.sglang.driver`` (``record_sglang``), and
2. the embedded engine in SGLang mode (``run_engine``, ``BuiltinHost``, the mirrored
   configuration of ``tracekit.sglang.compare.engine_config``),

checks that the engine's decisions are identical step by step (batch kind, scheduled requests and
tokens, radix hits, victims, ``new_token_ratio``, waiting queue; ``tracekit.sglang.compare``),
and prints steps per second of each and their ratio, by wall time and by CPU time. SGLang's speed
counts only the driver's loop over the real objects (``get_next_batch_to_run`` and the result
processing: the ``loop_s`` and ``loop_cpu_s`` the driver reports, the latter the CPU time of its
thread), not its import or set-up, best of ``--repeat`` runs in one driver process; the engine's
is the best of ``--repeat`` runs with no observer (``time.thread_time`` for CPU). On a shared
machine the CPU-time ratio is the one to read: wall time also counts the waits for a core.
Target: at least 20 times faster with identical decisions (exit 1 if they differ).

Usage: ``python benchmarks/sglang_engine.py [WORKLOAD] [--limit N] [--rate-scale X]
[--radix-cache] [--retraction-policy length|priority] [--sglang-venv DIR] [--repeat N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from tracekit.engine import BuiltinHost, run_engine
from tracekit.sglang.compare import compare_bundle, engine_config, engine_requests
from tracekit.sglang.fixtures import FIXTURES
from tracekit.sglang.record import read_sglang_scenario, record_sglang
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def main(argv: list[str] | None = None) -> int:
    """Run both, check identity, print the speed ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--rate-scale", type=float, default=2.0)
    parser.add_argument("--radix-cache", action="store_true")
    parser.add_argument("--retraction-policy", choices=["length", "priority"], default="length")
    parser.add_argument("--sglang-venv", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    workload = load_workload(
        args.workload, limit=args.limit, rate_scale=args.rate_scale, priority_seed=1
    )
    config = dataclasses.replace(
        FIXTURES["azure-noradix-length"].config,
        radix_cache=args.radix_cache,
        retraction_policy=args.retraction_policy,
    )
    with tempfile.TemporaryDirectory() as tmp:
        # The same run --repeat times in one driver process (one import): the best loop counts,
        # as the engine's best run does.
        bundles = [Path(tmp) / f"sglang-{i}" for i in range(args.repeat)]
        t0 = time.perf_counter()
        record_sglang(
            [workload] * args.repeat,
            bundles,
            config=config,
            venv=args.sglang_venv,
            run_ids=[f"bench-{i}" for i in range(args.repeat)],
        )
        wall = time.perf_counter() - t0
        recorders = [
            json.loads((b / "manifest.json").read_text("utf-8"))["sglang"]["recorder"]
            for b in bundles
        ]
        recorder = min(recorders, key=lambda r: r["loop_s"])
        sglang_cpu = min(r["loop_cpu_s"] for r in recorders)
        bundle = bundles[0]
        num_steps, mismatch = compare_bundle(bundle)
        scenario_config, rows = read_sglang_scenario(bundle)

    requests = engine_requests(rows)
    mirrored = engine_config(scenario_config)
    best = best_cpu = float("inf")
    engine_steps = 0
    for _ in range(args.repeat):
        t, t_cpu = time.perf_counter(), time.thread_time()
        result = run_engine(requests, mirrored, BuiltinHost(), collect=False)
        best = min(best, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.thread_time() - t_cpu)
        engine_steps = result.num_steps

    sglang_rate = num_steps / recorder["loop_s"]
    engine_rate = engine_steps / best
    print(f"workload: {args.workload.name}, {len(requests)} requests, {config}")
    sglang_cpu_rate = num_steps / sglang_cpu
    engine_cpu_rate = engine_steps / best_cpu
    print(
        f"sglang:  {num_steps} steps, best loop of {args.repeat} {recorder['loop_s']:.2f} s "
        f"({sglang_rate:,.0f} steps/s), CPU {sglang_cpu:.2f} s ({sglang_cpu_rate:,.0f} steps/s); "
        f"import {recorder['import_s']:.1f} s, whole recording of {args.repeat} runs {wall:.1f} s"
    )
    print(
        f"engine:  {engine_steps} steps, best of {args.repeat} {best:.3f} s "
        f"({engine_rate:,.0f} steps/s), CPU {best_cpu:.3f} s ({engine_cpu_rate:,.0f} steps/s)"
    )
    print(
        f"speed ratio engine / sglang: {engine_cpu_rate / sglang_cpu_rate:.1f}x by CPU time, "
        f"{engine_rate / sglang_rate:.1f}x by wall time (target >= 20x)"
    )
    if mismatch is not None:
        print("decisions DIFFER:\n" + mismatch.render())
        return 1
    print(f"decisions: identical over {num_steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
