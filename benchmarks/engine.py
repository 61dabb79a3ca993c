"""Benchmark the embedded engine on the whole Azure LLM inference conversation trace.

Reads ``AzureLLMInferenceTrace_conv.csv`` (TIMESTAMP, ContextTokens, GeneratedTokens) with the
standard library, runs every request through the engine with the default configuration and the
cost-model clock, streams every record to a counting observer, and prints simulated steps per
second, requests per second, wall time and peak memory.

Usage: ``python benchmarks/engine.py [CSV] [--clock steps|cost-model] [--policy fcfs|priority]
[--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import pstats
import resource
import time
from datetime import datetime
from pathlib import Path

from tracekit.engine import (
    BuiltinHost,
    DecisionRecord,
    EngineConfig,
    EngineRequest,
    RequestRecord,
    StepRecord,
    run_engine,
)

DEFAULT_CSV = Path("/work/shared/data/azure-llm-2023/AzureLLMInferenceTrace_conv.csv")


def read_azure(path: Path) -> list[EngineRequest]:
    """Requests of an Azure trace CSV; arrival = timestamp - first timestamp."""
    requests = []
    first = None
    with path.open(newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle)):
            stamp = row["TIMESTAMP"].strip()
            # Seven fractional digits; datetime.fromisoformat takes at most six.
            head, _, frac = stamp.partition(".")
            ts = datetime.fromisoformat(f"{head}.{frac[:6]}" if frac else head)
            if first is None:
                first = ts
            output = int(row["GeneratedTokens"])
            requests.append(
                EngineRequest(
                    request_id=f"azure-{i:05d}",
                    arrival_s=(ts - first).total_seconds(),
                    prompt_tokens=int(row["ContextTokens"]),
                    output_tokens=output,
                    max_tokens=output,
                )
            )
    return requests


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
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--clock", default="cost-model", choices=["steps", "cost-model"])
    parser.add_argument("--policy", default="fcfs", choices=["fcfs", "priority"])
    parser.add_argument("--mode", default="vllm", choices=["vllm", "sglang"])
    parser.add_argument("--profile", action="store_true", help="print the top cProfile entries")
    args = parser.parse_args()

    requests = read_azure(args.csv)
    config = EngineConfig(mode=args.mode, clock=args.clock, scheduling_policy=args.policy)
    observer = CountingObserver()
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = run_engine(requests, config, BuiltinHost(), observer, collect=False)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"trace            {args.csv.name}: {len(requests)} requests")
    print(f"config           mode={config.mode} clock={config.clock}"
          f" policy={config.scheduling_policy} blocks={config.num_blocks}x{config.block_size}"
          f" seqs={config.max_num_seqs}"
          f" budget={config.max_num_batched_tokens}")
    print(f"simulated        {result.num_steps} steps, {result.end_s:.1f} s engine time,"
          f" {observer.tokens} tokens, {result.num_preemptions} preemptions,"
          f" {observer.requests} requests recorded")
    print(f"wall time        {wall:.2f} s")
    print(f"steps/s          {result.num_steps / wall:,.0f}")
    print(f"requests/s       {len(requests) / wall:,.0f}")
    print(f"peak RSS         {peak_mib:.0f} MiB")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
