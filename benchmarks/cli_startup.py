"""Time ``tracekit --help`` against the floor ``python -c "import click"``, side by side.

Each sample is one fresh subprocess of this interpreter: ``python -m tracekit --help`` (what the
``tracekit`` console script runs) or ``python -c "import click"`` (the interpreter and click, the
least any click command line costs). The two alternate, so both see the same load; each figure
is the best of ``--repeat`` runs, wall time (``time.perf_counter``) and CPU time (user plus
system of the child, from ``resource.getrusage(RUSAGE_CHILDREN)``). Wall time on a shared
machine is noisy; the CPU times and their ratio are the figures to compare.

``--command`` times another command line instead of ``--help`` (``--command "record --help"``).
``--baseline DIR`` times the same command line from another checkout too (the code before a
change: ``git worktree add DIR COMMIT``, or ``git archive COMMIT | tar -x -C DIR``), in the same
rotation, so that before and after are measured side by side under the same load: the
checkout's ``tracekit`` is imported first (``PYTHONPATH=DIR``, run from ``DIR``).

Usage: ``python benchmarks/cli_startup.py [--repeat 10] [--command "--help"] [--baseline DIR]
[--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FLOOR_LABEL = 'python -c "import click"'


@dataclass(frozen=True, slots=True)
class Sample:
    """One subprocess run: wall and CPU seconds."""

    wall_s: float
    cpu_s: float


def run_once(argv: list[str], checkout: Path | None = None) -> Sample:
    """Run ``argv`` once with its output discarded; fail loudly if it fails.

    With ``checkout``, run it from that folder with the folder first on ``PYTHONPATH``.
    """
    env = None
    if checkout is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=checkout, env=env)
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
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="another checkout (the code before a change) to time side by side",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.baseline is not None and not (args.baseline / "tracekit" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: not a checkout (no tracekit/__init__.py)")
    baseline = None if args.baseline is None else args.baseline.resolve()

    tracekit = [sys.executable, "-m", "tracekit", *shlex.split(args.command)]
    floor = [sys.executable, "-c", "import click"]
    run_once(tracekit)  # warm the file cache (and compile .pyc files) before timing
    if baseline is not None:
        run_once(tracekit, baseline)
    runs: dict[str, list[Sample]] = {"tracekit": [], "floor": [], "baseline": []}
    for _ in range(args.repeat):
        runs["tracekit"].append(run_once(tracekit))
        runs["floor"].append(run_once(floor))
        if baseline is not None:
            runs["baseline"].append(run_once(tracekit, baseline))
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
    old = best(runs["baseline"]) if baseline is not None else None
    if old is not None:
        figures |= {
            "baseline": str(baseline),
            "baseline_wall_s": round(old.wall_s, 4),
            "baseline_cpu_s": round(old.cpu_s, 4),
            "baseline_cpu_ratio": round(old.cpu_s / base.cpu_s, 2) if base.cpu_s else None,
        }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"best of {args.repeat} runs each, alternating")
    width = max(28, len(figures["command"]) + 11)
    print(f"{'':{width}} {'wall s':>8} {'CPU s':>8}")
    print(f"{figures['command']:{width}} {cmd.wall_s:8.3f} {cmd.cpu_s:8.3f}")
    if old is not None:
        label = f"{figures['command']} (baseline)"
        print(f"{label:{width}} {old.wall_s:8.3f} {old.cpu_s:8.3f}")
    print(f"{FLOOR_LABEL:{width}} {base.wall_s:8.3f} {base.cpu_s:8.3f}")
    print(f"{'ratio':{width}} {figures['wall_ratio']:8.2f} {figures['cpu_ratio'] or 0:8.2f}")
    if old is not None:
        ratio = figures["baseline_cpu_ratio"] or 0
        print(f"{'ratio (baseline)':{width}} {old.wall_s / base.wall_s:8.2f} {ratio:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
