"""Benchmark the engine fork and ``tracekit oracle`` (docs/oracle.md, "Work and cost").

Records a KV-pressured run of the shipped Azure conversation trace (first 7,000 requests at 5x
the recorded rate, 2,300 blocks, 32 sequences: about 1,000 victim decisions with about 29
candidates each), then:

1. **fork cost**: the mean wall time of ``EngineRun.fork()`` at the run's middle decision,
   printed next to the mean engine step and as a ratio (forks per step);
2. **oracle**: ``run_oracle`` on the first 1,000 decisions with ``--jobs`` workers through the
   sweep executor (greedy closed loop off unless ``--greedy``), printed as wall time, rollouts
   per second, and the time 1,000 decisions x 32 candidates would take at that rate against the
   target of 5 minutes (a ratio below 1 meets it).

Usage: ``python benchmarks/oracle.py [--jobs 2] [--decisions 1000] [--horizon 256] [--greedy]``
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from tracekit.engine import BuiltinHost, EngineConfig
from tracekit.engine.engine import EngineRun
from tracekit.engine.request import engine_requests
from tracekit.oracle.job import run_oracle
from tracekit.oracle.rollout import OracleSettings
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import parse_strategy_list, resolve_strategy
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
TARGET_S = 300.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--decisions", type=int, default=1000)
    parser.add_argument("--horizon", type=int, default=OracleSettings().horizon)
    parser.add_argument("--requests", type=int, default=7000)
    parser.add_argument("--greedy", action="store_true", help="Also run the greedy closed loop.")
    args = parser.parse_args()

    workload = load_workload(WORKLOAD, limit=args.requests, rate_scale=5.0)
    # Synchronous scheduling, prefix caching off: the set-up the figures in docs/oracle.md
    # were measured with (the engine's defaults turned both on later).
    config = EngineConfig(
        num_blocks=2300, max_num_seqs=32, enable_prefix_caching=False, async_scheduling=False
    )
    requests = engine_requests(workload)

    # 1. The step and the fork.
    start = time.perf_counter()
    reference = EngineRun(requests, config, BuiltinHost()).run_to_end()
    step_s = (time.perf_counter() - start) / reference.num_steps
    middle = reference.decisions[len(reference.decisions) // 2]
    run = EngineRun(requests, config, BuiltinHost(), collect=False)
    while run.prepare() and run.next_step < middle.step:
        run.step()
    live = len(run.live_requests())
    timings = []
    for _ in range(50):
        t = time.perf_counter()
        run.fork(BuiltinHost(), collect=False)
        timings.append(time.perf_counter() - t)
    fork_s = statistics.mean(timings)
    print(
        f"reference run: {reference.num_steps} steps, {reference.num_decisions} decisions, "
        f"mean step {step_s * 1e6:.1f} us"
    )
    print(
        f"fork at decision {middle.seq} ({live} live requests, {len(middle.candidates)} "
        f"candidates): {fork_s * 1e3:.2f} ms = {fork_s / step_s:.1f} steps"
    )

    # 2. The oracle through the sweep executor.
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle"
        record_sim(SimRun(workload, config, resolve_strategy("builtin"), "typed", 0), bundle)
        settings = OracleSettings(horizon=args.horizon)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = time.process_time()
        start = time.perf_counter()
        result = run_oracle(
            bundle,
            Path(tmp) / "oracle",
            parse_strategy_list("builtin,lcf,mcf,static-random"),
            settings,
            jobs=args.jobs,
            limit=args.decisions,
            greedy=args.greedy,
        )
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) + (
            time.process_time() - own
        )
    decisions = result.summary["num_decisions"]
    candidates = result.summary["num_candidates"]
    per_rollout = elapsed / candidates
    projected = per_rollout * 1000 * 32
    windows = result.decisions["window_steps"]
    print(
        f"oracle: {decisions} decisions, {candidates} candidate rollouts "
        f"({candidates / decisions:.1f} per decision), mean window {windows.mean():.0f} steps, "
        f"jobs {args.jobs}{', greedy closed loop' if args.greedy else ''}: {elapsed:.1f} s wall, "
        f"{cpu:.1f} s CPU (driver and workers), {candidates / elapsed:.0f} rollouts/s"
    )
    print(
        f"CPU per rollout {1e3 * cpu / candidates:.2f} ms; 1000 x 32 on 2 idle cores: "
        f"{cpu / candidates * 32000 / 2:.0f} s"
    )
    print(
        f"projected 1000 decisions x 32 candidates: {projected:.0f} s; "
        f"ratio to the {TARGET_S:.0f} s target: {projected / TARGET_S:.2f}"
    )
    if args.greedy:
        print(f"headroom: {result.summary['headroom']}")


if __name__ == "__main__":
    main()
