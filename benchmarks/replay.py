"""Benchmark open-mode replay: the fast path against the reference controller loop.

1. Records (once; cached) a dataset of runs of the shipped full Azure conversation trace
   (``traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv``, 19,366 requests) on the embedded
   engine under heavy KV pressure (one-token blocks, admission on the prompt alone, so decodes
   keep running out of KV), with ``tracekit.recording.sim.record_sim``, until it holds at least
   ``--decisions`` decisions. The runs differ in strategy and scheduling policy, so the
   contexts cover FCFS and PRIORITY, abstentions and preemption histories of every kind.
2. Replays every strategy (``--strategy all``) on the whole dataset on the fast path, with one
   process and with ``--workers`` processes.
3. Replays the first ``--plain-limit`` decisions on both paths side by side, checks that the
   two ``replay_decisions.parquet`` files are byte-identical (and the summaries equal), and
   prints decision-evaluations per second of each path and their ratio.
4. Memory: concatenates the dataset into one bundle of ``--memory-decisions`` decisions
   (cached) and replays it on the fast path in a child process, reporting its peak RSS.

Targets: at least 1,000,000 decision-evaluations (decisions x strategies) per second on the fast
path; peak memory under 2 GB for a ten-million-decision trace.

"cpu" is the CPU time of the process (every thread: the evaluation, the read-ahead and writer
threads, polars' pool) and of its worker processes. The machine is shared, so the load average
is printed beside the figures, and the fast whole-dataset replay is the best of ``--repeat``
runs.

Usage: ``python benchmarks/replay.py [--decisions 1000000] [--plain-limit 250000] [--repeat 3]
[--workers 2] [--memory-decisions 10000000] [--cache DIR] [--skip-memory] [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import multiprocessing
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bidkv._version import __version__
from tracekit import safe_output
from tracekit.engine.config import make_engine_config
from tracekit.recording.sim import SimRun, record_sim
from tracekit.replay import replay_open
from tracekit.strategies import parse_strategy_list, resolve_strategy
from tracekit.trace import open_trace
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
# (name, recorded strategy, engine settings, priority seed): recorded until enough decisions.
RUNS: list[tuple[str, str, dict[str, Any], int | None]] = [
    ("fcfs-builtin-5000", "builtin", {"num_blocks": 5000}, None),
    ("fcfs-bidkv-5000", "bidkv", {"num_blocks": 5000}, None),
    ("priority-largest-first-5000", "largest-first", {"num_blocks": 5000}, 1),
    ("fcfs-static-random-5000", "static-random", {"num_blocks": 5000}, None),
    ("priority-builtin-4500", "builtin", {"num_blocks": 4500}, 2),
    ("fcfs-slack-aware-5500", "slack-aware", {"num_blocks": 5500}, None),
    ("priority-bidkv-4500", "bidkv", {"num_blocks": 4500}, 3),
    ("fcfs-sglang-default-4000", "sglang-default", {"num_blocks": 4000}, None),
    ("fcfs-builtin-4000", "builtin", {"num_blocks": 4000}, None),
    ("priority-static-random-5500", "static-random", {"num_blocks": 5500}, 4),
    ("fcfs-largest-first-4500", "largest-first", {"num_blocks": 4500}, None),
    ("priority-pe-5000", "pe", {"num_blocks": 5000}, 5),
]
PRESSURE = {"block_size": 1, "max_num_seqs": 64, "full_sequence_must_fit": False}
RATE_SCALE = 4.0


def default_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tracekit" / "replay-bench"


def _record(args: tuple[str, str, dict[str, Any], int | None, str]) -> tuple[str, int, float]:
    name, strategy, settings, priority_seed, out = args
    started = time.perf_counter()
    workload = load_workload(WORKLOAD, rate_scale=RATE_SCALE, priority_seed=priority_seed)
    policy = "priority" if priority_seed is not None else "fcfs"
    blocks = settings["num_blocks"]
    config = make_engine_config(
        **PRESSURE, **settings, max_model_len=blocks - 200, scheduling_policy=policy
    )
    record_sim(SimRun(workload, config, resolve_strategy(strategy), "typed"), Path(out))
    decisions = pq.ParquetFile(Path(out) / "decisions.parquet").metadata.num_rows
    return name, decisions, time.perf_counter() - started


def recorded_dataset(cache: Path, target: int, workers: int) -> Path:
    """The cached dataset with at least ``target`` decisions (recorded as needed)."""
    key = hashlib.sha256(
        json.dumps([__version__, PRESSURE, RATE_SCALE, WORKLOAD.stat().st_size]).encode()
    ).hexdigest()[:12]
    root = cache / f"dataset-{key}"
    root.mkdir(parents=True, exist_ok=True)

    def count() -> int:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in root.glob("*/decisions.parquet"))

    pending = [r for r in RUNS if not (root / r[0] / "manifest.json").exists()]
    context = multiprocessing.get_context("spawn")
    while count() < target and pending:
        batch, pending = pending[:workers], pending[workers:]
        print(f"recording {', '.join(r[0] for r in batch)} ...", flush=True)
        tasks = [(*r, str(root / r[0])) for r in batch]
        with context.Pool(len(tasks)) as pool:
            for name, decisions, wall in pool.imap(_record, tasks):
                print(f"  {name}: {decisions:,} decisions in {wall:.0f} s", flush=True)
    if count() < target:
        raise SystemExit(f"only {count():,} decisions recorded; add runs to RUNS")
    # Every run recorded so far is used: a larger --decisions once makes later datasets larger.
    return root


def concatenated_bundle(source: Path, cache: Path, decisions: int) -> Path:
    """One bundle of ``decisions`` decisions: the dataset's runs repeated back to back."""
    out = cache / f"{source.name}-concat-{decisions}"
    if (out / "manifest.json").exists():
        return out
    print(f"writing a {decisions:,}-decision bundle ...", flush=True)
    with safe_output.made_once(out, done="manifest.json") as partial:
        bundles = open_trace(source).bundles
        run_id = f"concat-{decisions}"
        writers: dict[str, pq.ParquetWriter] = {}
        rows = {"decisions": 0, "candidates": 0}
        offset = 0
        index = 0
        while offset < decisions:
            bundle = bundles[index % len(bundles)]
            index += 1
            take = min(
                decisions - offset,
                pq.ParquetFile(bundle.path / "decisions.parquet").metadata.num_rows,
            )
            for table in ("decisions", "candidates"):
                file = pq.ParquetFile(bundle.path / f"{table}.parquet")
                for batch in file.iter_batches(batch_size=65_536):
                    part = pa.Table.from_batches([batch])
                    seq = part.column("seq")
                    keep = pc.less(seq, take)
                    part = part.filter(keep)
                    if part.num_rows == 0:
                        break
                    part = part.set_column(
                        part.schema.get_field_index("seq"),
                        "seq",
                        pc.add(part.column("seq"), offset),
                    )
                    part = part.set_column(
                        part.schema.get_field_index("run_id"),
                        "run_id",
                        pa.array([run_id] * part.num_rows, pa.string()),
                    )
                    if table not in writers:
                        writers[table] = pq.ParquetWriter(
                            partial / f"{table}.parquet", part.schema, compression="zstd"
                        )
                    writers[table].write_table(part, row_group_size=65_536)
                    rows[table] += part.num_rows
            offset += take
        for writer in writers.values():
            writer.close()
        manifest = dict(bundles[0].manifest)
        manifest["run_id"] = run_id
        manifest["notes"] = f"{len(bundles)} benchmark runs repeated to {decisions:,} decisions"
        manifest["tables"] = {t: {"rows": n, "files": [f"{t}.parquet"]} for t, n in rows.items()}
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    return out


def _cpu_s() -> float:
    # This process (all its threads) and its finished children (worker processes).
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replay(trace: Path, out: Path, **options: Any) -> dict[str, Any]:
    specs = parse_strategy_list("all")
    cpu = _cpu_s()
    result = replay_open(trace, specs, out, overwrite=True, **options)
    return {
        "result": result,
        "wall": result.elapsed_s,
        "cpu": _cpu_s() - cpu,
        "rate": result.evaluations / result.elapsed_s,
    }


def line(label: str, run: dict[str, Any]) -> str:
    result = run["result"]
    return (
        f"{label:<28} {result.decisions:>11,} x {len(result.summary)} = "
        f"{result.evaluations:>12,} evals  {run['wall']:7.2f} s wall  "
        f"{run['cpu']:7.2f} s cpu  {run['rate']:>12,.0f} evals/s  "
        f"{result.evaluations / run['cpu']:>12,.0f} evals/cpu-s"
    )


def child_replay(trace: str, out: str) -> None:
    run = replay(Path(trace), Path(out))
    print(
        json.dumps(
            {
                "rate": run["rate"],
                "wall": run["wall"],
                "decisions": run["result"].decisions,
                "peak_mib": _peak_mib(),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1_000_000)
    parser.add_argument("--plain-limit", type=int, default=250_000, help="0: the whole dataset")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="fast whole-dataset replays")
    parser.add_argument("--memory-decisions", type=int, default=10_000_000)
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--profile", action="store_true", help="profile the fast replay")
    parser.add_argument("--child-replay", nargs=2, metavar=("TRACE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_replay:
        child_replay(*args.child_replay)
        return

    dataset = recorded_dataset(args.cache, args.decisions, args.workers)
    runs = open_trace(dataset).bundles
    total = sum(pq.ParquetFile(b.path / "decisions.parquet").metadata.num_rows for b in runs)
    candidates = sum(pq.ParquetFile(b.path / "candidates.parquet").metadata.num_rows for b in runs)
    print(
        f"dataset          {dataset} ({len(runs)} runs, {total:,} decisions, "
        f"{candidates / total:.2f} candidates per decision)"
    )
    print(f"load average     {' '.join(f'{x:.1f}' for x in os.getloadavg())} at start (2 cores)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Warm up imports and caches so that the first timed replay is not penalised.
        replay(dataset, work / "warm", limit=20_000)

        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        # The machine is shared: the best of a few runs is the figure least disturbed by others.
        fast = min(
            (replay(dataset, work / "fast") for _ in range(args.repeat)), key=lambda r: r["wall"]
        )
        if profiler is not None:
            profiler.disable()
        parallel = replay(dataset, work / "parallel", workers=args.workers)
        same_parallel = (work / "fast" / "replay_decisions.parquet").read_bytes() == (
            work / "parallel" / "replay_decisions.parquet"
        ).read_bytes()

        limit = args.plain_limit or None
        fast_prefix = replay(dataset, work / "fast-prefix", limit=limit)
        plain_prefix = replay(dataset, work / "plain-prefix", limit=limit, fast=False)
        identical = (work / "fast-prefix" / "replay_decisions.parquet").read_bytes() == (
            work / "plain-prefix" / "replay_decisions.parquet"
        ).read_bytes()
        same_summary = fast_prefix["result"].summary.equals(plain_prefix["result"].summary)
        rows = fast_prefix["result"].evaluations

        print(line("fast, whole dataset", fast))
        print(line(f"fast, {args.workers} workers", parallel))
        print(line("fast, prefix", fast_prefix))
        print(line("reference (controller), prefix", plain_prefix))
        print(
            f"ratio            fast / reference evals/s on the same prefix = "
            f"{fast_prefix['rate'] / plain_prefix['rate']:.1f}x"
        )
        print(
            f"equality         fast and reference replay_decisions.parquet byte-identical on "
            f"{rows:,} rows: {identical}; summaries equal: {same_summary}; "
            f"{args.workers} workers byte-identical to one: {same_parallel}"
        )
        print(f"peak RSS         {_peak_mib():.0f} MiB (this process)")
        print(f"load average     {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
        best = max(fast["rate"], parallel["rate"])
        print(
            f"target           >= 1,000,000 evals/s: {'met' if best >= 1e6 else 'NOT met'} "
            f"({best:,.0f})"
        )
        print()
        print(fast["result"].text)
        if not (identical and same_summary and same_parallel):
            raise SystemExit("the fast path and the reference path differ")

        if not args.skip_memory:
            big = concatenated_bundle(dataset, args.cache, args.memory_decisions)
            child = subprocess.run(
                [sys.executable, __file__, "--child-replay", str(big), str(work / "big")],
                check=True,
                capture_output=True,
                text=True,
            )
            stats = json.loads(child.stdout.strip().splitlines()[-1])
            peak = stats["peak_mib"]
            print(
                f"memory           {stats['decisions']:,} decisions in one bundle: "
                f"{stats['wall']:.1f} s, {stats['rate']:,.0f} evals/s, peak RSS {peak:.0f} MiB "
                f"(target < 2048 MiB: {'met' if peak < 2048 else 'NOT met'})"
            )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
