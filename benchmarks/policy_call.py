"""Time one ``select_victim`` call: our BidkvPreemptionPolicy against the original 0.2.1 wheel.

Both packages are named ``bidkv``, so each runs in its own subprocess of this script:

- the original: ``pip install --no-deps --target <tempdir> vllm-hust-bidkv==0.2.1`` (never a
  project dependency), then a worker with ``PYTHONPATH=<tempdir>`` (the worker checks that it
  imported version 0.2.1 from there);
- ours: a worker with the project's own ``bidkv``.

Each worker generates the same context sequences from the seed (same code, same
``random.Random``; the parent compares a SHA-256 of every context to prove it), times every
``select_victim`` call on them, and dumps its decisions and final ``export_metrics()`` as JSON.
The parent checks that decisions and metrics are identical and prints the time per call at each
size and the ratio ours / original.

The contexts imitate a running queue under pressure: ``size`` running requests in admission
order, one request retiring and one arriving every four calls (so ids recur across calls and
liveness offsets matter), outputs growing by one token per call, occasional host preemptions
(``num_preemptions`` grows), a random requester and a scheduling policy that is PRIORITY one
call in four. Configuration: the defaults plus ``enable_utility_victim_selection=True``
(otherwise both return the built-in victim). The ``vllm`` logger is set to ERROR in both workers
so that the figures measure decisions, not log formatting (``--log-level`` changes it).

Usage: ``python benchmarks/policy_call.py [--contexts 10000] [--sizes 8,32,256] [--repeat 3]
[--seed 0] [--original-dir DIR] [--profile]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ORIGINAL = "vllm-hust-bidkv==0.2.1"
CHUNK = 500  # contexts generated (untimed) per batch, to bound memory at 256 candidates


@dataclass(frozen=True, slots=True)
class Candidate:
    """Same fields and order as the host's ``PreemptionCandidate``."""

    request_id: str
    priority: int
    arrival_time: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    num_preemptions: int
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Context:
    """Same fields as the host's ``PreemptionContext``."""

    candidates: tuple[Candidate, ...]
    scheduling_policy: str
    requesting_request_id: str
    kv_cache_usage: float
    now: float
    builtin_victim_id: str | None = None


class ContextStream:
    """Deterministic context sequence for one size (decisions do not feed back)."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.rng = random.Random(f"{seed}:{size}")
        self.next_id = 0
        self.step = 0
        self.running: list[dict[str, Any]] = []
        for _ in range(size):
            self._admit()

    def _admit(self) -> None:
        rng = self.rng
        prompt = rng.randint(16, 4096)
        self.running.append(
            {
                "id": f"req-{self.next_id}",
                "priority": rng.randint(0, 3),
                "arrival": self.next_id * 0.25,
                "prompt": prompt,
                "out": rng.randint(0, 64),
                "max": rng.choice([128, 256, 512, 1024, 2048]),
                "preempted": 0,
            }
        )
        self.next_id += 1

    def next(self) -> Context:
        rng = self.rng
        self.step += 1
        if self.step % 4 == 0:  # one finishes, one arrives
            self.running.pop(rng.randrange(len(self.running)))
            self._admit()
        cands = []
        for r in self.running:
            r["out"] = min(r["out"] + 1, r["max"])
            if rng.random() < 0.01:  # the host preempted it at some point (any cause)
                r["preempted"] += 1
            cands.append(
                Candidate(
                    r["id"],
                    r["priority"],
                    r["arrival"],
                    r["prompt"],
                    r["out"],
                    r["prompt"] + r["out"],
                    r["preempted"],
                    r["max"],
                )
            )
        policy = "priority" if rng.random() < 0.25 else "fcfs"
        requester = cands[rng.randrange(len(cands))].request_id
        return Context(tuple(cands), policy, requester, rng.uniform(0.85, 1.0), self.step * 0.05)


def digest(hasher: Any, ctx: Context) -> None:
    """Feed a context's decision-relevant fields to ``hasher``."""
    hasher.update(
        repr(
            (
                ctx.scheduling_policy,
                ctx.requesting_request_id,
                ctx.kv_cache_usage,
                ctx.now,
                [
                    (
                        c.request_id,
                        c.priority,
                        c.arrival_time,
                        c.num_output_tokens,
                        c.num_computed_tokens,
                        c.num_preemptions,
                        c.max_tokens,
                    )
                    for c in ctx.candidates
                ],
            )
        ).encode()
    )


def worker(args: argparse.Namespace) -> None:
    """Time one implementation; print its results as JSON on stdout."""
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(logging.NullHandler())
    vllm_logger.propagate = False
    vllm_logger.setLevel(args.log_level)

    import bidkv
    from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig

    if args.worker == "original":
        assert bidkv.__version__ == "0.2.1", bidkv.__version__
    where = str(Path(bidkv.__file__).resolve().parent)
    results: dict[str, Any] = {"bidkv_version": bidkv.__version__, "bidkv_path": where, "sizes": {}}
    for size in args.sizes:
        seconds = []
        for rep in range(args.repeat):
            policy = BidkvPreemptionPolicy(
                BidkvSelectorConfig(enable_utility_victim_selection=True)
            )
            select = policy.select_victim
            stream = ContextStream(size, args.seed)
            decisions: list[str | None] = []
            hasher = hashlib.sha256()
            elapsed = 0
            remaining = args.contexts
            while remaining:
                chunk = [stream.next() for _ in range(min(CHUNK, remaining))]
                remaining -= len(chunk)
                out: list[str | None] = []
                append = out.append
                start = time.perf_counter_ns()
                for ctx in chunk:
                    append(select(ctx))
                elapsed += time.perf_counter_ns() - start
                decisions.extend(out)
                if rep == 0:
                    for ctx in chunk:
                        digest(hasher, ctx)
            seconds.append(elapsed / 1e9)
            if rep == 0:
                entry = {
                    "decisions": decisions,
                    "metrics": policy.export_metrics(),
                    "inputs_sha256": hasher.hexdigest(),
                }
        entry["seconds"] = seconds
        results["sizes"][str(size)] = entry
    json.dump(results, sys.stdout)


def profile(args: argparse.Namespace) -> None:
    """Profile our policy on the largest size (run with the project's ``bidkv``)."""
    import cProfile
    import pstats

    from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig

    logging.getLogger("vllm").setLevel(args.log_level)
    size = max(args.sizes)
    stream = ContextStream(size, args.seed)
    contexts = [stream.next() for _ in range(min(args.contexts, 2000))]
    policy = BidkvPreemptionPolicy(BidkvSelectorConfig(enable_utility_victim_selection=True))
    profiler = cProfile.Profile()
    profiler.enable()
    for ctx in contexts:
        policy.select_victim(ctx)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def run_worker(name: str, args: argparse.Namespace, pythonpath: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    command = [
        sys.executable,
        __file__,
        "--worker",
        name,
        "--contexts",
        str(args.contexts),
        "--sizes",
        ",".join(map(str, args.sizes)),
        "--repeat",
        str(args.repeat),
        "--seed",
        str(args.seed),
        "--log-level",
        args.log_level,
    ]
    # Run from a neutral directory so that neither worker picks up a stray ``bidkv`` from cwd.
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, check=False, cwd=tempfile.gettempdir()
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} worker failed:\n{done.stderr}")
    return json.loads(done.stdout)


def install_original(target: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(target),
            ORIGINAL,
        ],
        check=True,
    )


def compare(args: argparse.Namespace, original_dir: Path) -> int:
    original = run_worker("original", args, str(original_dir))
    ours = run_worker("ours", args, None)
    print(f"original: {ORIGINAL}, bidkv {original['bidkv_version']} from {original['bidkv_path']}")
    print(f"ours: bidkv {ours['bidkv_version']} from {ours['bidkv_path']}")
    print(
        f"{args.contexts} contexts per size, best of {args.repeat}, seed {args.seed}, "
        f"vllm logger at {args.log_level}\n"
    )
    header = (
        f"{'candidates':>10}  {'original us/call':>16}  {'ours us/call':>12}  "
        f"{'ratio':>6}  {'same decisions':>14}  {'same metrics':>12}  abstentions"
    )
    print(header)
    failures = 0
    ratios = {}
    for size in args.sizes:
        o, n = original["sizes"][str(size)], ours["sizes"][str(size)]
        if o["inputs_sha256"] != n["inputs_sha256"]:
            raise SystemExit(f"workers saw different contexts at size {size}")
        t_o = min(o["seconds"]) / args.contexts * 1e6
        t_n = min(n["seconds"]) / args.contexts * 1e6
        ratios[size] = t_n / t_o
        same_decisions = o["decisions"] == n["decisions"]
        same_metrics = o["metrics"] == n["metrics"]
        failures += (not same_decisions) + (not same_metrics)
        print(
            f"{size:>10}  {t_o:>16.2f}  {t_n:>12.2f}  {ratios[size]:>6.3f}  "
            f"{same_decisions!s:>14}  {same_metrics!s:>12}  "
            f"{n['metrics']['policy_abstentions']}"
        )
    checked = [s for s in (32, 256) if s in ratios]
    if checked:
        met = all(ratios[s] <= 0.25 for s in checked)
        print(f"\ntarget ours <= 1/4 of the original at {checked}: {'met' if met else 'NOT met'}")
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=10_000)
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[8, 32, 256]
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-level", default="ERROR")
    parser.add_argument(
        "--original-dir", type=Path, help="an existing --target install of the original (skips pip)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile our policy at the largest size and exit"
    )
    parser.add_argument("--worker", choices=["original", "ours"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.profile:
        profile(args)
        return
    if args.original_dir:
        raise SystemExit(compare(args, args.original_dir))
    with tempfile.TemporaryDirectory(prefix="bidkv-original-") as tmp:
        install_original(Path(tmp))
        raise SystemExit(compare(args, Path(tmp)))


if __name__ == "__main__":
    main()
