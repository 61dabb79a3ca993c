"""The default ``tracekit qualify`` on the shipped sample against its 60 s target.

The default job: capacity search, four rate cells and one concurrency cell, every strategy and
the A/A control, ten repeats (552 recorded runs), the legacy-versus-typed diff, the open-mode
replay and the report: the README's ``tracekit qualify`` command as written (``--out`` in a
temporary folder, ``--jobs`` added), the command the test suite runs on a slice
(``tests/test_readme.py``). Each run must exit 0 (GO) or 1 (NO-GO), as its headline says, and
print the path of its report, which must exist (this script exits 1 otherwise). Three
measurements:

- ``run`` (default): the command in a subprocess with ``--jobs N``, ``--repeat`` times: its wall
  time against the 60 s target, the CPU time of the job and its workers (user + system, which
  other load on the shared machine inflates little), the stage times it prints on stderr, and the
  load average before and after (the machine has 2 cores shared by other work);
- ``--stages``: the same job in this process, with the CPU time of every stage split into this
  process's (serial) and the workers' (parallel): ``serial + workers / jobs`` is the wall time an
  idle machine with ``jobs`` cores would need, a figure the machine's load does not change;
- ``--precision``: the precision target behind the default number of repeats (docs/qualify.md,
  "Repeats"): the knee cell with every strategy at several numbers of windows, and the
  Bonferroni-corrected half-width of each strategy's goodput change in the default job's family
  (374 judged comparisons) against the goodput margin (the target: a null change is shown
  equivalent, a change of two margins is decided).

``--profile`` profiles one closed-loop run of the 1.0x cell in this process.

Usage: ``python benchmarks/qualify_load.py [--repeat 1] [--jobs 2] [--stages] [--precision]
[--check]``; ``--check`` exits 1 when the target is missed.
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


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def readme_command(out: Path) -> list[str]:
    """The README's main command (its ``bin/tracekit qualify`` line), writing to ``out``."""
    readme = (ROOT / "README.md").read_text("utf-8")
    (line,) = [line for line in readme.splitlines() if "bin/tracekit qualify" in line]
    words = shlex.split(line.split("bin/tracekit ", 1)[1])
    words[words.index("--out") + 1] = str(out)
    return words


def run_once(jobs: int, out: Path) -> dict[str, float]:
    """One qualify job in a subprocess; returns wall, cpu and the stage times it printed."""
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


def stages(jobs: int) -> float:
    """The job in this process, CPU time per stage: serial (this process) and workers."""
    from tracekit.engine.config import make_engine_config
    from tracekit.qualify import QualifyPlan, run_qualify
    from tracekit.qualify.loads import plan_loads
    from tracekit.strategies import parse_strategy_list, resolve_strategy
    from tracekit.workloads import load_workload

    rows: list[tuple[str, float, float, float]] = []
    last = [time.perf_counter(), _self_cpu(), _children_cpu()]

    def mark(name: str) -> None:
        now, me, workers = time.perf_counter(), _self_cpu(), _children_cpu()
        rows.append((name, now - last[0], me - last[1], workers - last[2]))
        last[:] = [now, me, workers]

    workload = load_workload(SAMPLE)
    config = make_engine_config()
    loads = plan_loads(workload, config)
    mark("capacity search")
    plan = QualifyPlan(
        workload, config, tuple(parse_strategy_list("all")), resolve_strategy("bidkv"),
        loads=loads,
    )  # fmt: skip
    seen: set[str] = set()

    def stage(name: str, done: int, total: int) -> None:
        if name not in seen:
            seen.add(name)
            mark(f"(before {name})")
        elif done >= total and f"{name} end" not in seen:
            seen.add(f"{name} end")
            mark(name)

    with tempfile.TemporaryDirectory() as folder:
        run_qualify(plan, Path(folder) / "results", stage=stage, jobs=jobs)
        mark("(rename)")
    # The workers' CPU is counted when the pool's processes exit, at the stage after the runs.
    serial = sum(r[2] for r in rows)
    workers = sum(r[3] for r in rows)
    print(f"{'stage':32} {'wall s':>8} {'serial CPU s':>13} {'workers CPU s':>14}")
    for name, wall, me, kids in rows:
        print(f"{name:32} {wall:8.2f} {me:13.2f} {kids:14.2f}")
    print(f"total CPU {serial + workers:.1f} s: serial {serial:.1f} s, workers {workers:.1f} s")
    idle = serial + workers / jobs
    print(
        f"wall on an idle {jobs}-core machine (serial + workers / {jobs}): about {idle:.1f} s, "
        f"{idle / TARGET_S:.2f} x the {TARGET_S:.0f} s target"
    )
    return idle


def precision(counts: list[int], jobs: int) -> None:
    """The goodput half-width at the knee for several numbers of windows (docs/qualify.md)."""
    from tracekit.analysis.stats import t_critical
    from tracekit.engine.config import make_engine_config
    from tracekit.qualify import QualifyPlan, compute_qualification, run_qualify
    from tracekit.qualify.endpoints import DEFAULT_ENDPOINTS, VerdictRule
    from tracekit.qualify.loads import plan_loads
    from tracekit.strategies import parse_strategy_list, resolve_strategy
    from tracekit.workloads import load_workload

    workload = load_workload(SAMPLE)
    config = make_engine_config()
    knee = plan_loads(workload, config, fractions=(1.0,), concurrency=None)
    # The default job's family on the shipped sample: the judged pairs (the 29 strategy-load
    # pairs not identical to built-in and the 5 A/A loads) x 11 endpoints (docs/report.md).
    family = 34 * len(DEFAULT_ENDPOINTS)
    rule = VerdictRule()
    margin = next(e.margin for e in DEFAULT_ENDPOINTS if e.name == "goodput")
    print(f"goodput at the knee, corrected over m = {family}: half-width vs the margin, "
          f"{margin:g}%")  # fmt: skip
    for n in counts:
        plan = QualifyPlan(
            workload, config, tuple(parse_strategy_list("all")), resolve_strategy("bidkv"),
            loads=knee, repeats=n,
        )  # fmt: skip
        with tempfile.TemporaryDirectory() as folder:
            results = run_qualify(plan, Path(folder) / "results", jobs=jobs)
            entries = compute_qualification(results)["effectiveness"]["cells"]
        halves = []
        for entry in entries:
            stats = entry["endpoints"]["goodput"]
            if stats["sd"] and entry["label"] != "identical to built-in":
                halves.append(t_critical(rule.confidence(family), n - 1) * stats["sd"] / n**0.5)
        print(
            f"{n:3} windows: t = {t_critical(rule.confidence(family), n - 1):.2f}; half-width "
            f"median {statistics.median(halves):.2f}%, max {max(halves):.2f}% over "
            f"{len(halves)} strategies that differ from the built-in rule"
        )


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
    knee = find_capacity(workload, config).knee
    print(f"capacity search: {time.perf_counter() - start:.2f} s")
    assert knee is not None
    cell = workload_at_rate(workload, LoadSpec(), knee.rate)
    repeat = plan_repeats(cell, 10, "windows", 0)[0]
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
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--precision", action="store_true")
    parser.add_argument("--windows", default="5,8,10,15,20")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the job misses the 60 s target: the median wall time, or with "
        "--stages the idle-machine estimate (which other load on the machine does not inflate)",
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    measured: float | None = None
    if args.profile:
        profile()
    elif args.stages:
        measured = stages(args.jobs)
    elif args.precision:
        precision([int(n) for n in args.windows.split(",")], args.jobs)
    else:
        rows = []
        with tempfile.TemporaryDirectory() as folder:
            for index in range(args.repeat):
                figures = run_once(args.jobs, Path(folder) / "results")
                rows.append(figures)
                shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
                print(f"repetition {index}: {shown}")
        wall = statistics.median(r["wall_s"] for r in rows)
        cpu = statistics.median(r["cpu_s"] for r in rows)
        print(f"median wall {wall:.1f} s: {wall / TARGET_S:.2f} x the {TARGET_S:.0f} s target")
        print(f"median CPU {cpu:.1f} s (job and workers)")
        measured = wall
    print(f"load average after: {os.getloadavg()}")
    if args.check and measured is not None and measured > TARGET_S:
        sys.exit(f"over the {TARGET_S:.0f} s target: {measured:.1f} s")


if __name__ == "__main__":
    main()
