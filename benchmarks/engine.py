"""Benchmark the embedded engine and the recorder on the whole Azure conversation trace.

Loads the shipped ``traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv`` (19,366 requests,
one hour) with the workload loader, then, side by side in one process:

1. runs the engine alone with a counting observer (the simulation cost), and
2. records the same run to a trace bundle (``tracekit record sim``: engine + Parquet writer),

and prints simulated steps per second, requests per second, wall time, peak memory and the
recorder's overhead as a ratio. The target: the whole hour recorded in under 60 s (docs/engine.md,
"Performance").

``--prefix-caching`` / ``--no-prefix-caching`` and ``--async-scheduling`` /
``--no-async-scheduling`` set the vLLM mode's engine options (default: ``EngineConfig``'s, which
are vLLM's: both on), so the recording time can be compared with each off. Times are wall and
CPU (``time.process_time``) seconds.

Usage: ``python benchmarks/engine.py [WORKLOAD] [--clock steps|cost-model] [--policy fcfs|priority]
[--mode vllm|sglang] [--strategy builtin|bidkv|...] [--[no-]prefix-caching]
[--[no-]async-scheduling] [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import tempfile
import time
from pathlib import Path

from tracekit.engine import DecisionRecord, EngineConfig, RequestRecord, StepRecord, run_engine
from tracekit.engine.request import engine_requests
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


class CountingObserver:
    """Counts what a trace writer would receive."""

    def __init__(self) -> None:
        self.steps = self.decisions = self.requests = self.tokens = 0

    def on_step(self, record: StepRecord) -> None:
        self.steps += 1
        self.tokens += record.num_prefill_tokens + record.num_decode_tokens

    def on_decision(self, record: DecisionRecord) -> None:
        self.decisions += 1

    def on_request(self, record: RequestRecord) -> None:
        self.requests += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", type=Path, default=DEFAULT_WORKLOAD)
    parser.add_argument("--clock", default="cost-model", choices=["steps", "cost-model"])
    parser.add_argument("--policy", default="fcfs", choices=["fcfs", "priority"])
    parser.add_argument("--mode", default="vllm", choices=["vllm", "sglang"])
    parser.add_argument("--strategy", default="builtin")
    parser.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--profile", action="store_true", help="print the top cProfile entries")
    args = parser.parse_args()
    options = {
        name: value
        for name, value in (
            ("enable_prefix_caching", args.prefix_caching),
            ("async_scheduling", args.async_scheduling),
        )
        if value is not None
    }

    workload = load_workload(args.workload)
    requests = engine_requests(workload)
    config = EngineConfig(
        mode=args.mode, clock=args.clock, scheduling_policy=args.policy, **options
    )
    strategy = resolve_strategy(args.strategy)

    observer = CountingObserver()
    profiler = cProfile.Profile() if args.profile else None
    start, start_cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    result = run_engine(requests, config, strategy.make_host("typed"), observer, collect=False)
    if profiler is not None:
        profiler.disable()
    engine_wall = time.perf_counter() - start
    engine_cpu = time.process_time() - start_cpu

    with tempfile.TemporaryDirectory() as tmp:
        start, start_cpu = time.perf_counter(), time.process_time()
        record_sim(SimRun(workload, config, strategy, "typed"), Path(tmp) / "bundle")
        record_wall = time.perf_counter() - start
        record_cpu = time.process_time() - start_cpu
        size_mib = sum(p.stat().st_size for p in (Path(tmp) / "bundle").iterdir()) / 2**20
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"workload         {args.workload.name}: {len(requests)} requests")
    print(
        f"config           mode={config.mode} clock={config.clock}"
        f" policy={config.scheduling_policy} blocks={config.num_blocks}x{config.block_size}"
        f" seqs={config.max_num_seqs} budget={config.max_num_batched_tokens}"
        f" strategy={strategy.name} prefix_caching={config.enable_prefix_caching}"
        f" async={config.async_scheduling}"
    )
    print(
        f"simulated        {result.num_steps} steps, {result.end_s:.1f} s engine time,"
        f" {observer.tokens} tokens, {result.num_preemptions} preemptions,"
        f" {observer.decisions} decisions"
    )
    print(
        f"engine only      {engine_wall:.2f} s wall ({engine_cpu:.2f} s CPU),"
        f" {result.num_steps / engine_wall:,.0f} steps/s, {len(requests) / engine_wall:,.0f}"
        " requests/s"
    )
    print(
        f"record (bundle)  {record_wall:.2f} s wall ({record_cpu:.2f} s CPU),"
        f" {result.num_steps / record_wall:,.0f} steps/s, bundle {size_mib:.1f} MiB"
    )
    print(f"ratio            record / engine-only time = {record_wall / engine_wall:.2f}")
    print(f"peak RSS         {peak_mib:.0f} MiB")
    verdict = "met" if record_wall < 60 else "NOT met"
    print(f"target           whole trace recorded in < 60 s: {verdict}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
