"""The same workload through SGLang 0.5.23's real scheduling objects and the engine's SGLang mode.

Runs one workload (default: the first 300 requests of the shipped Azure conversation sample at
twice their rate, on the configuration of the ``azure`` SGLang fixtures: a 4,000-token pool, 32
running requests, 512-token chunks, steps clock), in each of four settings side by side (the
radix cache on and off, SGLang's overlap loop and its normal loop), through

1. SGLang's real objects in their own environment (``scripts/install-sglang-cpu.sh``), driven by
   ``tracekit.sglang.driver`` (``record_sglang``): every setting ``--repeat`` times, all in one
   driver process, and
2. the embedded engine in SGLang mode (``run_engine``, ``BuiltinHost``, the configuration
   ``SglangConfig.engine_config`` gives), ``--repeat`` times per setting, the settings taken in
   turn so that a change of machine load reaches all of them alike,

checks that the engine's decisions are identical step by step (batch kind, scheduled requests and
tokens, radix hits, victims, preemptions, ``new_token_ratio``, waiting queue;
``tracekit.sglang.compare``), and prints steps per second of each and their ratio, by CPU time
and by wall time, with the machine's load average. SGLang's speed counts only the driver's loop
over the real objects (``get_next_batch_to_run`` and the result processing: the ``loop_s`` and
``loop_cpu_s`` the driver reports, the latter the CPU time of its thread), not its import or
set-up, best of ``--repeat``; the engine's is its best of ``--repeat`` runs with no observer
(``time.thread_time`` for CPU). On a shared machine the CPU-time ratio is the one to read: wall
time also counts the waits for a core. Target: at least 25 times faster by CPU time in every
setting, with identical decisions (exit 1 if any differ or a ratio is below it).

Usage: ``python benchmarks/sglang_engine.py [WORKLOAD] [--limit N] [--rate-scale X]
[--retraction-policy length|priority] [--sglang-venv DIR] [--repeat N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from tracekit.engine import BuiltinHost, run_engine
from tracekit.sglang.compare import compare_bundle, engine_requests
from tracekit.sglang.fixtures import FIXTURES
from tracekit.sglang.record import read_sglang_scenario, record_sglang
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
TARGET = 25.0
#: (name, radix cache, overlap loop)
SETTINGS = [
    ("radix, overlap", True, True),
    ("radix, normal", True, False),
    ("no radix, overlap", False, True),
    ("no radix, normal", False, False),
]


def main(argv: list[str] | None = None) -> int:
    """Run both in every setting, check identity, print the speed ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--rate-scale", type=float, default=2.0)
    parser.add_argument("--retraction-policy", choices=["length", "priority"], default="length")
    parser.add_argument("--sglang-venv", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    workload = load_workload(
        args.workload, limit=args.limit, rate_scale=args.rate_scale, priority_seed=1
    )
    base = dataclasses.replace(
        FIXTURES["azure-noradix-length"].config,
        retraction_policy=args.retraction_policy,
        enable_priority_scheduling=args.retraction_policy == "priority",
    )
    configs = {
        name: dataclasses.replace(base, radix_cache=radix, overlap_schedule=overlap)
        for name, radix, overlap in SETTINGS
    }
    load_before = os.getloadavg()
    sglang: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Every setting --repeat times in one driver process (one import): the best loop counts.
        runs = [(name, i) for name in configs for i in range(args.repeat)]
        bundles = [
            Path(tmp) / f"{name.replace(', ', '-').replace(' ', '')}-{i}" for name, i in runs
        ]
        t0 = time.perf_counter()
        record_sglang(
            [workload] * len(runs),
            bundles,
            config=[configs[name] for name, _ in runs],
            venv=args.sglang_venv,
            run_ids=[f"bench-{b.name}" for b in bundles],
        )
        wall = time.perf_counter() - t0
        for name in configs:
            mine = [b for (n, _), b in zip(runs, bundles, strict=True) if n == name]
            recorders = [
                json.loads((b / "manifest.json").read_text("utf-8"))["sglang"]["recorder"]
                for b in mine
            ]
            num_steps, mismatch = compare_bundle(mine[0])
            scenario_config, rows = read_sglang_scenario(mine[0])
            sglang[name] = {
                "steps": num_steps,
                "loop_s": min(r["loop_s"] for r in recorders),
                "cpu_s": min(r["loop_cpu_s"] for r in recorders),
                "import_s": recorders[0]["import_s"],
                "mismatch": mismatch,
                "config": scenario_config,
                "rows": rows,
            }

    engine = {name: {"wall": float("inf"), "cpu": float("inf"), "steps": 0} for name in configs}
    for _ in range(args.repeat):
        for name in configs:
            requests = engine_requests(sglang[name]["rows"])
            mirrored = sglang[name]["config"].engine_config()
            t, t_cpu = time.perf_counter(), time.thread_time()
            result = run_engine(requests, mirrored, BuiltinHost(), collect=False)
            best = engine[name]
            best["wall"] = min(best["wall"], time.perf_counter() - t)
            best["cpu"] = min(best["cpu"], time.thread_time() - t_cpu)
            best["steps"] = result.num_steps
    load_after = os.getloadavg()

    print(
        f"workload: {args.workload.name}, {len(sglang[SETTINGS[0][0]]['rows'])} requests, "
        f"{base.kv_tokens}-token pool, {base.max_running_requests} running, "
        f"retraction {args.retraction_policy}; best of {args.repeat}"
    )
    print(
        f"load average (1, 5, 15 min): before {', '.join(f'{x:.1f}' for x in load_before)}; "
        f"after {', '.join(f'{x:.1f}' for x in load_after)} "
        f"({os.cpu_count()} CPUs); SGLang import {sglang[SETTINGS[0][0]]['import_s']:.1f} s, "
        f"whole recording {wall:.1f} s"
    )
    header = (
        f"{'setting':18s} {'steps':>6s}  {'SGLang CPU':>10s} {'engine CPU':>10s} "
        f"{'ratio CPU':>9s}  {'SGLang wall':>11s} {'engine wall':>11s} {'ratio wall':>10s}"
    )
    print(header)
    failed = False
    for name in configs:
        s, e = sglang[name], engine[name]
        ratio_cpu = (e["steps"] / e["cpu"]) / (s["steps"] / s["cpu_s"])
        ratio_wall = (e["steps"] / e["wall"]) / (s["steps"] / s["loop_s"])
        print(
            f"{name:18s} {s['steps']:6d}  {s['cpu_s']:9.2f}s {e['cpu']:9.3f}s "
            f"{ratio_cpu:8.1f}x  {s['loop_s']:10.2f}s {e['wall']:10.3f}s {ratio_wall:9.1f}x"
        )
        if s["mismatch"] is not None:
            print("  decisions DIFFER:\n" + s["mismatch"].render())
            failed = True
        elif e["steps"] != s["steps"]:
            print(f"  the engine ran {e['steps']} steps, SGLang {s['steps']}")
            failed = True
        if ratio_cpu < TARGET:
            failed = True
    verdict = "FAILED" if failed else "met"
    print(
        f"decisions identical step by step in every setting; target >= {TARGET:g}x by CPU time: "
        f"{verdict}"
        if not any(s["mismatch"] for s in sglang.values())
        else "decisions DIFFER"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
