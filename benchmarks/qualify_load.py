"""The README's main job (``tracekit qualify``, full size) against its 60 s target.

Runs the README's ``tracekit qualify`` command as written (the shipped Azure sample with the
default load plan: capacity search, four rate cells and one concurrency cell, every strategy,
three repeats; ``--out`` in a temporary folder, ``--jobs`` added) from the project root in a
subprocess, ``--repeat`` times. The test suite runs the same command on a slice
(``tests/test_readme.py``); this is where it runs at full size. Each run must exit 0 (GO) or 1
(NO-GO), as its headline says, and print the path of its report, which must exist (this
script exits 1 otherwise). Prints per repetition and as medians:

- wall time, and its ratio to the 60 s target (issue 14, "Performance");
- CPU time of the job and its worker processes (user + system), which other load on the shared
  machine does not inflate, and ``cpu / jobs`` as the wall time an idle machine would need for
  the parallel part;
- the stage times the job prints on stderr (capacity search, runs, replay, report);
- the load average before and after (the machine has 2 cores shared by other work).

``--profile`` instead profiles one closed-loop run of the 1.0x cell in this process and prints
the functions with the largest cumulative time.

Usage: ``python benchmarks/qualify_load.py [--repeat 1] [--jobs 2] [--profile]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The --profile run's workload: the README's (tracekit/data links to it).
SAMPLE = ROOT / "tracekit" / "data" / "azure_conv_sample.csv"
TARGET_S = 60.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def readme_command(out: Path) -> list[str]:
    """The README's main command (its ``bin/tracekit qualify`` line), writing to ``out``."""
    readme = (ROOT / "README.md").read_text("utf-8")
    (line,) = [line for line in readme.splitlines() if "bin/tracekit qualify" in line]
    words = shlex.split(line.split("bin/tracekit ", 1)[1])
    words[words.index("--out") + 1] = str(out)
    return words


def run_once(jobs: int, out: Path) -> dict[str, float]:
    """One qualify job; returns wall, cpu and the stage times it printed."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "tracekit", *readme_command(out), "--jobs", str(jobs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SOURCE_DATE_EPOCH": "0"}
    cpu0 = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report = out / "report.html"
    printed = done.stdout.strip().endswith(str(report))
    # Exit 0 for GO, 1 for NO-GO (a finding, qualification.json's headline): a report either way.
    verdict = out / "qualification.json"
    expected = (
        int(json.loads(verdict.read_text("utf-8"))["headline"]["decision"] == "no-go")
        if verdict.is_file()
        else 0
    )
    if done.returncode != expected or not printed or not report.is_file():
        sys.exit(
            f"the README's job failed (exit {done.returncode}, report {report}): "
            f"{done.stderr[-2000:]}"
        )
    figures = {"wall_s": wall, "cpu_s": _children_cpu() - cpu0}
    for name, seconds in re.findall(r"^(.+?): done \d+/\d+ in ([\d.]+) s$", done.stderr, re.M):
        figures[name.strip()] = float(seconds)
    return figures


def profile() -> None:
    """Profile one run of the 1.0x cell (repeat 0, the candidate)."""
    import cProfile
    import pstats

    from tracekit.capacity import find_capacity, workload_at_rate
    from tracekit.engine.config import make_engine_config
    from tracekit.recording.sim import SimRun, record_sim
    from tracekit.strategies import resolve_strategy
    from tracekit.workloads import load_workload
    from tracekit.workloads.load_spec import LoadSpec
    from tracekit.workloads.repeats import plan_repeats

    workload = load_workload(SAMPLE)
    config = make_engine_config()
    start = time.perf_counter()
    knee = find_capacity(workload, config, tolerance=0.05).knee
    print(f"capacity search: {time.perf_counter() - start:.2f} s")
    assert knee is not None
    cell = workload_at_rate(workload, LoadSpec(), knee.rate)
    repeat = plan_repeats(cell, 3, "windows", 0)[0]
    run = SimRun(repeat.workload, config, resolve_strategy("bidkv", {}), "typed", 0)
    with tempfile.TemporaryDirectory() as folder:
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(record_sim, run, Path(folder) / "bundle")
        print(f"one run (1.0x, repeat 0, bidkv): {time.perf_counter() - start:.2f} s")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.profile:
        profile()
        return
    print(f"load average before: {os.getloadavg()}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.repeat):
            figures = run_once(args.jobs, Path(folder) / "results")
            rows.append(figures)
            shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
            print(f"repetition {index}: {shown}")
    print(f"load average after: {os.getloadavg()}")
    wall = statistics.median(r["wall_s"] for r in rows)
    cpu = statistics.median(r["cpu_s"] for r in rows)
    print(f"median wall {wall:.1f} s: {wall / TARGET_S:.2f} x the {TARGET_S:.0f} s target")
    print(
        f"median CPU {cpu:.1f} s; CPU / {args.jobs} jobs = {cpu / args.jobs:.1f} s "
        f"({cpu / args.jobs / TARGET_S:.2f} x the target on an idle machine, serial parts aside)"
    )


if __name__ == "__main__":
    main()
