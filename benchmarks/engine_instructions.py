"""The embedded engine's cost in instructions: a figure the machine's load does not move.

On a shared machine the same engine run takes from 1x to 1.8x its time within minutes, so a
change of a few percent cannot be seen in seconds. This counts the instructions of one run
instead (``valgrind --tool=callgrind``, which counts them exactly): the program is run once
with ``--runs N`` engine runs and once with none, and the difference over ``N`` is one run's
instructions, the start-up (imports, reading the workload) left out. Counted on this tree and,
with ``--against REV``, on that git revision (checked out into a temporary worktree), both
printed with their ratio.

The workloads are those of ``benchmarks/sglang_engine.py`` (``--case``, in SGLang mode, a
setting of the radix cache and the loop), or ``azure-vllm``: the first 300 requests of the
shipped Azure sample at twice their rate, in vLLM mode with its defaults on 300 blocks.

Usage: ``python benchmarks/engine_instructions.py [--case sessions] [--radix/--no-radix]
[--normal] [--runs 2] [--against d9a7d9b]``. Needs ``valgrind`` (Debian package ``valgrind``);
a run of the sessions case takes about 25 s under it.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AZURE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"

#: Run in the tree being counted: load the pickled requests and configuration, run N times.
_RUNNER = """
import pickle, sys
sys.path.insert(0, sys.argv[1])
from tracekit.engine import BuiltinHost, run_engine
requests, config = pickle.load(open(sys.argv[2], "rb"))
for _ in range(int(sys.argv[3])):
    run_engine(requests, config, BuiltinHost(), collect=False)
"""


def _workload(case: str, radix: bool, overlap: bool) -> tuple[list, object]:
    """The requests and engine configuration of ``case`` (built from this tree)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    if case == "azure-vllm":
        from tracekit.engine import EngineConfig
        from tracekit.engine.request import engine_requests
        from tracekit.workloads import load_workload

        workload = load_workload(AZURE, limit=300, rate_scale=2.0)
        return engine_requests(workload), EngineConfig(num_blocks=300, max_model_len=4608)
    import sglang_engine  # (the benchmark's cases, from beside this file)

    from tracekit.sglang.compare import engine_requests as sglang_requests
    from tracekit.sglang.record import request_rows

    build, config, _ = sglang_engine.CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        workload = build(argparse.Namespace(limit=300), Path(tmp))
    requests = sglang_requests(request_rows(workload))
    mirrored = dataclasses.replace(config, radix_cache=radix, overlap_schedule=overlap)
    return requests, mirrored.engine_config()


def count(tree: Path, pickled: Path, runs: int) -> int:
    """Instructions of one engine run in ``tree`` (the difference of ``runs`` runs and none)."""

    def total(n: int) -> int:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             sys.executable, "-c", _RUNNER, str(tree), str(pickled), str(n)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        match = re.search(r"refs:\s*([\d,]+)", done.stderr)
        if match is None:
            raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
        return int(match.group(1).replace(",", ""))

    return (total(runs) - total(0)) // runs


def main(argv: list[str] | None = None) -> int:
    """Print one run's instructions on this tree (and on ``--against``), with their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="sessions", help="a sglang_engine case, or azure-vllm")
    parser.add_argument("--radix", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--normal", action="store_true", help="SGLang's normal loop")
    parser.add_argument("--runs", type=int, default=2, help="engine runs counted (default 2)")
    parser.add_argument("--against", default=None, help="a git revision to count beside")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    requests, config = _workload(args.case, args.radix, not args.normal)
    with tempfile.TemporaryDirectory() as tmp:
        pickled = Path(tmp) / "workload.pkl"
        pickled.write_bytes(pickle.dumps((requests, config)))
        trees = {"this tree": ROOT}
        if args.against:
            worktree = Path(tmp) / "against"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree),
                 args.against], check=True, capture_output=True,
            )  # fmt: skip
            trees = {args.against: worktree, **trees}
        try:
            counts = {name: count(tree, pickled, args.runs) for name, tree in trees.items()}
        finally:
            if args.against:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                    check=False, capture_output=True,
                )  # fmt: skip
    setting = f"{'radix' if args.radix else 'no radix'}, {'normal' if args.normal else 'overlap'}"
    print(f"{args.case} ({setting if args.case != 'azure-vllm' else 'vLLM defaults'}):")
    for name, value in counts.items():
        print(f"  {name:>12s}  {value / 1e6:8.1f} M instructions a run")
    if len(counts) == 2:
        before, after = counts.values()
        print(f"  ratio {before / after:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
