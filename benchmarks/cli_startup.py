"""Time ``tracekit --help`` against the floor ``python -c "import click"``, side by side.

Each sample is one fresh subprocess of this interpreter: ``python -m tracekit --help`` (what the
``tracekit`` console script runs) or ``python -c "import click"`` (the interpreter and click, the
least any click command line costs). The two alternate, so both see the same load; each figure
is the best of ``--repeat`` runs, wall time (``time.perf_counter``) and CPU time (user plus
system of the child, from ``resource.getrusage(RUSAGE_CHILDREN)``). Wall time on a shared
machine is noisy; the CPU times and their ratio are the figures to compare.

``--command`` times another command line instead of ``--help`` (``--command "record --help"``).

Usage: ``python benchmarks/cli_startup.py [--repeat 10] [--command "--help"] [--json]``
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

FLOOR_LABEL = 'python -c "import click"'


@dataclass(frozen=True, slots=True)
class Sample:
    """One subprocess run: wall and CPU seconds."""

    wall_s: float
    cpu_s: float


def run_once(argv: list[str]) -> Sample:
    """Run ``argv`` once with its output discarded; fail loudly if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, cpu)


def best(samples: list[Sample]) -> Sample:
    """The fastest wall time and the fastest CPU time (each minimum on its own)."""
    return Sample(min(s.wall_s for s in samples), min(s.cpu_s for s in samples))


def main() -> int:
    """Print the best wall and CPU time of the command and of the floor, and their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of each (default 10)")
    parser.add_argument(
        "--command", default="--help", help='tracekit arguments to time (default "--help")'
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    tracekit = [sys.executable, "-m", "tracekit", *shlex.split(args.command)]
    floor = [sys.executable, "-c", "import click"]
    run_once(tracekit)  # warm the file cache (and compile .pyc files) before timing
    runs: dict[str, list[Sample]] = {"tracekit": [], "floor": []}
    for _ in range(args.repeat):
        runs["tracekit"].append(run_once(tracekit))
        runs["floor"].append(run_once(floor))
    cmd, base = best(runs["tracekit"]), best(runs["floor"])

    figures = {
        "command": f"tracekit {args.command}",
        "repeat": args.repeat,
        "tracekit_wall_s": round(cmd.wall_s, 4),
        "tracekit_cpu_s": round(cmd.cpu_s, 4),
        "floor_wall_s": round(base.wall_s, 4),
        "floor_cpu_s": round(base.cpu_s, 4),
        "wall_ratio": round(cmd.wall_s / base.wall_s, 2),
        "cpu_ratio": round(cmd.cpu_s / base.cpu_s, 2) if base.cpu_s else None,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"best of {args.repeat} runs each, alternating")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8}")
    print(f"{figures['command']:28} {cmd.wall_s:8.3f} {cmd.cpu_s:8.3f}")
    print(f"{FLOOR_LABEL:28} {base.wall_s:8.3f} {base.cpu_s:8.3f}")
    print(f"{'ratio':28} {figures['wall_ratio']:8.2f} {figures['cpu_ratio'] or 0:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
