"""Sweep throughput: runs per minute with 1 and 2 local workers, and Ray's overhead per run.

Every configuration sweeps the same matrix (default: the 45-run
``examples/sweeps/bidkv-paper-matrix.toml``) into a fresh temporary folder, side by side in one
process, ``--repeat`` times in alternation; the figures are medians.

- ``serial``: ``--jobs 1`` (every run in this process, no worker process);
- ``processes x1`` / ``processes x2``: a ``spawn`` process pool of 1 / 2 workers;
- ``ray x2``: a private local Ray instance with 2 CPUs, 2 runs in flight (``ray.init`` is timed
  apart and not counted; its workers stay up between sweeps, as on a cluster).

Two throughputs per configuration: *wall* counts everything a user waits for (worker start-up,
the runs, ``cells.parquet`` and ``sweep.json``); *steady* counts the runs between the first and
the last result, so it leaves out start-up. Ray's overhead per run = its steady time per run
minus that of ``processes x2`` (and the same on wall time). Every configuration must write
byte-identical bundles and ``cells.parquet`` (``SOURCE_DATE_EPOCH`` pins ``created_at``); the
script checks it. The machine has 2 cores: other load skews the 2-worker figures, so the script
prints the load average before and after.

``--qualify`` times ``tracekit qualify`` instead (the shipped Azure sample by default), with
``--jobs 1`` and ``--jobs 2`` in alternation, into the same results folder (``diff/`` and
``replay/`` name bundle paths), and checks that both write byte-identical results.

Usage: ``python benchmarks/sweep.py [--matrix FILE] [--repeat 1] [--no-ray]``
or ``python benchmarks/sweep.py --qualify [--workload FILE] [--repeat 1]``
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracekit.sweep import execute_plan, load_matrix, plan_sweep
from tracekit.sweep.executors import ProcessExecutor, RayExecutor, SerialExecutor, import_ray
from tracekit.sweep.progress import ProgressSnapshot

ROOT = Path(__file__).resolve().parents[1]


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "sweep.json"
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--matrix", type=Path, default=ROOT / "examples/sweeps/bidkv-paper-matrix.toml"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-ray", action="store_true", help="Skip the Ray measurement.")
    parser.add_argument(
        "--qualify", action="store_true", help="Time tracekit qualify --jobs 1 and --jobs 2."
    )
    parser.add_argument(
        "--workload", type=Path, default=ROOT / "traces/azure-llm-2023/azure_conv_sample.csv"
    )
    args = parser.parse_args()
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    if args.qualify:
        return bench_qualify(args.workload, args.repeat)
    plan = plan_sweep(load_matrix(args.matrix))
    runs = len(plan.runs)
    print(f"matrix {args.matrix} ({runs} runs); cores: {os.cpu_count()}")
    print(f"load average before: {os.getloadavg()}")

    executors = {
        "serial": lambda: SerialExecutor(),
        "processes x1": lambda: ProcessExecutor(1),
        "processes x2": lambda: ProcessExecutor(2),
    }
    ray = None
    if not args.no_ray:
        try:
            ray = import_ray()
        except Exception as exc:  # ConfigError: not installed
            print(f"ray: skipped ({exc})")
    if ray is not None:
        start = time.perf_counter()
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        print(f"ray.init (local, 2 CPUs): {time.perf_counter() - start:.1f} s (not counted)")
        executors["ray x2"] = lambda: RayExecutor("auto", 2)

    wall: dict[str, list[float]] = {name: [] for name in executors}
    steady: dict[str, list[float]] = {name: [] for name in executors}
    first: dict[str, list[float]] = {name: [] for name in executors}
    reference: dict[str, bytes] | None = None
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as scratch:
        for attempt in range(args.repeat):
            for name, make in executors.items():
                out = Path(scratch) / f"{name.replace(' ', '-')}-{attempt}"
                finished: list[float] = []
                start = time.perf_counter()

                def progress(snapshot: ProgressSnapshot, finished: list[float] = finished) -> None:
                    if snapshot.event == "finished":
                        finished.append(time.perf_counter())

                result = execute_plan(plan, out, make(), progress=progress)
                wall[name].append(time.perf_counter() - start)
                first[name].append(finished[0] - start)
                steady[name].append((finished[-1] - finished[0]) / (len(finished) - 1))
                if result.exit_code != 0:
                    print(f"{name}: {result.render()}", file=sys.stderr)
                    return 1
                written = files(out)
                if reference is None:
                    reference = written
                elif written != reference:
                    print(f"{name}: results differ from the first configuration", file=sys.stderr)
                    return 1
    if ray is not None:
        ray.shutdown()

    def med(values: dict[str, list[float]]) -> dict[str, float]:
        return {name: statistics.median(v) for name, v in values.items()}

    wall_s, steady_s, first_s = med(wall), med(steady), med(first)
    print(f"(medians of {args.repeat})")
    header = ("executor", "wall s", "runs/min", "1st result s", "steady runs/min")
    print(f"{header[0]:14} {header[1]:>7} {header[2]:>9} {header[3]:>13} {header[4]:>16}")
    for name in executors:
        print(
            f"{name:14} {wall_s[name]:7.2f} {runs * 60 / wall_s[name]:9.1f} "
            f"{first_s[name]:13.2f} {60 / steady_s[name]:16.1f}"
        )
    print(
        f"2 workers / 1 worker (processes): {wall_s['processes x1'] / wall_s['processes x2']:.2f}x "
        f"wall, {steady_s['processes x1'] / steady_s['processes x2']:.2f}x steady; "
        f"2 workers / serial: {wall_s['serial'] / wall_s['processes x2']:.2f}x wall"
    )
    if "ray x2" in wall_s:
        per_run = (steady_s["ray x2"] - steady_s["processes x2"]) * 1000
        per_run_wall = (wall_s["ray x2"] - wall_s["processes x2"]) / runs * 1000
        print(
            f"ray overhead per run against processes x2: {per_run:+.0f} ms steady, "
            f"{per_run_wall:+.0f} ms on wall time (start-up included)"
        )
    print("results: byte-identical across every executor")
    print(f"load average after: {os.getloadavg()}")
    return 0


def bench_qualify(workload: Path, repeat: int) -> int:
    """Wall time of ``tracekit qualify`` with 1 and 2 jobs, and a byte-for-byte comparison."""
    print(f"qualify {workload}; cores: {os.cpu_count()}")
    print(f"load average before: {os.getloadavg()}")
    wall: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="qualify-bench-") as scratch:
        out = Path(scratch) / "results"
        reference: dict[str, bytes] | None = None
        for _ in range(repeat):
            for jobs in wall:
                shutil.rmtree(out, ignore_errors=True)
                command = [sys.executable, "-m", "tracekit", "qualify", "--workload",
                           str(workload), "--jobs", str(jobs), "--out", str(out)]  # fmt: skip
                start = time.perf_counter()
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                wall[jobs].append(time.perf_counter() - start)
                written = files(out)
                if reference is None:
                    reference = written
                elif written != reference:
                    print(f"--jobs {jobs}: results differ", file=sys.stderr)
                    return 1
    one, two = statistics.median(wall[1]), statistics.median(wall[2])
    print(f"(medians of {repeat}; each includes the command's start-up)")
    print(f"--jobs 1: {one:.2f} s   --jobs 2: {two:.2f} s   serial / 2 jobs: {one / two:.2f}x")
    print("results: byte-identical")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
