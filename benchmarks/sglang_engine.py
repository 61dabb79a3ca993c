"""The same workloads through SGLang 0.5.23's real scheduling objects and the engine's SGLang mode.

Five cases, each in several settings (the radix cache on and off; SGLang's overlap loop, and for
``azure`` also its normal loop):

``azure``
    The first 300 requests of the shipped Azure conversation sample at twice their rate, on the
    configuration of the ``azure`` SGLang fixtures (a 4,000-token pool, 32 running requests,
    512-token chunks, steps clock), ``--retraction-policy length``. The conversation trace has
    no token content, so the radix cache hits only what a request computed itself before a
    retraction.
``sessions``
    A seeded synthetic multi-turn log (80 conversations of 2 to 6 turns; turn k's prompt is the
    conversation so far, :mod:`tracekit.workloads.sessions`), on a 40,000-token pool (an 8,000
    token context): later turns share their conversation's earlier prompt, so with the radix
    cache on about half the prompt tokens are radix hits.
``mooncake``
    The shipped Mooncake sample from 960 s to its end (251 requests; prompts of 32,768 tokens or
    more are rejected) on a 120,000-token pool with 32 running requests, 2,048-token chunks and
    an 8,192-token prefill budget (the ``mooncake-long`` fixtures' configuration): a real
    trace's long prompts, which hit the radix cache where they share ``hash_ids`` prefixes.
``ignore-eos``
    ``azure`` with every request sent with ``ignore_eos`` (it runs to its ``max_tokens``, and
    SGLang reserves its whole output: ``add_one_req_ignore_eos`` with the tree disabled).
``priority``
    ``azure`` (priorities 0..2, ``priority_seed=1``) with SGLang's priority scheduling as it
    runs by default once enabled: larger values first, preemption at admission,
    ``--retraction-policy priority``.

Each setting runs

1. on SGLang's real objects in their own environment (``scripts/install-sglang-cpu.sh``), driven
   by ``tracekit.sglang.driver``, all in one driver process: once recorded as a bundle (for the
   identity check), then ``--repeat`` times only timed (this process counts those runs'
   records without decoding them, so that it takes no CPU from the driver while SGLang's loop
   is timed), the settings taken in turn; and
2. on the embedded engine in SGLang mode (``run_engine``, ``BuiltinHost``, the configuration
   ``SglangConfig.engine_config`` gives), once untimed and then ``--engine-repeat`` times, the
   settings taken in turn so that a change of machine load reaches all of them alike,

checks that the engine's decisions are identical step by step (batch kind, scheduled requests and
tokens, radix hits, victims, preemptions, ``new_token_ratio``, waiting queue;
``tracekit.sglang.compare``, which runs the engine a step at a time), that the timed runs, which
take runs of calm decode steps in one go (``EngineRun``'s calm leaps), give the same step,
request and decision records as the step-by-step run, and prints each side's time and their
ratio, by CPU time and by wall time, with the machine's load average and the radix-hit tokens
of the run. SGLang's time
counts only the driver's loop over the real objects (``get_next_batch_to_run`` and the result
processing: the ``loop_s`` and ``loop_cpu_s`` the driver reports, the latter the CPU time of its
thread), not its import, set-up or arrivals, nor the recorder's own work inside the loop (the
step records, the retraction and preemption records, the admission order: timed and taken
out, ``recorder_cpu_s``, printed as "(recorder)"), best of ``--repeat``; the engine's is its
best run with no observer (``time.thread_time`` for CPU), arrivals included. On a shared
machine the CPU-time ratio is the one to read (wall time also counts the waits for a core), and
only against figures of the same run: load moves both sides, SGLang's loop more. Target: at
least 25 times faster by CPU time in every setting, with identical decisions (exit 1 if any
differ or a ratio is below it).

Usage: ``python benchmarks/sglang_engine.py [--cases azure,sessions,mooncake,ignore-eos,priority]
[--limit N] [--sglang-venv DIR] [--repeat N] [--engine-repeat N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from tracekit.engine import BuiltinHost, EngineResult, run_engine
from tracekit.real_engine.environment import SGLANG
from tracekit.real_engine.fixtures import AZURE_SAMPLE, MOONCAKE_SAMPLE
from tracekit.real_engine.process import record_runs, run_messages
from tracekit.sglang.compare import compare_bundle, engine_requests
from tracekit.sglang.fixtures import FIXTURES
from tracekit.sglang.protocol import PROTOCOL_VERSION, SglangConfig, scenario_message
from tracekit.sglang.record import (
    SglangDriverError,
    read_sglang_scenario,
    record_run,
    request_rows,
    run_driver,
)
from tracekit.workloads import Workload, apply_ignore_eos, load_workload

ROOT = Path(__file__).resolve().parents[1]
AZURE = ROOT / AZURE_SAMPLE
MOONCAKE = ROOT / MOONCAKE_SAMPLE
TARGET = 25.0
#: (name, radix cache, overlap loop)
ALL_SETTINGS = (
    ("radix, overlap", True, True),
    ("radix, normal", True, False),
    ("no radix, overlap", False, True),
    ("no radix, normal", False, False),
)
OVERLAP_SETTINGS = tuple(s for s in ALL_SETTINGS if s[2])
#: The seed of the sessions case's synthetic log.
SESSIONS_SEED = 7


def _azure(args: argparse.Namespace, tmp: Path) -> Workload:
    return load_workload(AZURE, limit=args.limit, rate_scale=2.0, priority_seed=1)


def _azure_config(**changes: object) -> SglangConfig:
    base = FIXTURES["azure-noradix-length"].config
    return dataclasses.replace(base, **{"retraction_policy": "length", **changes})  # type: ignore[arg-type]


def sessions_log(path: Path, seed: int = SESSIONS_SEED, sessions: int = 80) -> Path:
    """Write a synthetic multi-turn log: ``sessions`` conversations of 2 to 6 turns.

    A conversation starts uniformly in the first 60 s, each next turn 2 to 8 s after the last;
    a turn adds 20 to 400 prompt tokens and answers with 20 to 300 (``random.Random(seed)``).
    """
    rng = random.Random(seed)
    rows = []
    for s in range(sessions):
        time_s = rng.uniform(0, 60)
        for turn in range(1, rng.randint(2, 6) + 1):
            if turn > 1:
                time_s += rng.uniform(2, 8)
            new, output = rng.randint(20, 400), rng.randint(20, 300)
            rows.append((f"s{s:03d}", turn, round(time_s, 3), new, output))
    rows.sort(key=lambda r: (r[2], r[0], r[1]))
    lines = ["session_id,turn,arrival_s,new_prompt_tokens,output_tokens"]
    path.write_text("\n".join([*lines, *(",".join(map(str, r)) for r in rows)]) + "\n", "utf-8")
    return path


#: case -> (workload builder, configuration, settings)
CASES: dict[
    str,
    tuple[Callable[[argparse.Namespace, Path], Workload], SglangConfig, tuple[tuple, ...]],
] = {
    "azure": (_azure, _azure_config(), ALL_SETTINGS),
    "sessions": (
        lambda args, tmp: load_workload(sessions_log(tmp / "sessions.csv")),
        dataclasses.replace(
            _azure_config(), kv_tokens=40000, max_context_len=8000, max_running_requests=32
        ),
        OVERLAP_SETTINGS,
    ),
    "mooncake": (
        lambda args, tmp: load_workload(MOONCAKE, window=(960.0, None)),
        FIXTURES["mooncake-long-radix-overlap"].config,
        OVERLAP_SETTINGS,
    ),
    "ignore-eos": (
        lambda args, tmp: apply_ignore_eos(_azure(args, tmp)),
        _azure_config(),
        OVERLAP_SETTINGS,
    ),
    "priority": (
        _azure,
        _azure_config(
            enable_priority_scheduling=True,
            retraction_policy="priority",
            schedule_low_priority_values_first=False,
            disable_priority_preemption=False,
        ),
        OVERLAP_SETTINGS,
    ),
}


def _run_sglang(
    configs: dict[tuple[str, str], SglangConfig],
    workloads: dict[str, Workload],
    tmp: Path,
    args: argparse.Namespace,
) -> tuple[dict[tuple[str, str], list[dict]], dict[tuple[str, str], Path]]:
    """Every setting on SGLang's objects, in one driver process (one import).

    Each setting runs once recorded as a bundle (for the identity check) and then ``--repeat``
    times only timed: this process reads those runs' messages without decoding their records,
    so that it takes no CPU from the driver while SGLang's loop is timed (bundles are written
    while the driver runs). Returns the timed runs' timings and the bundles, by setting.
    """
    keys = list(configs)
    plan = [(key, True) for key in keys]
    plan += [(key, False) for _ in range(args.repeat) for key in keys]
    rows = {case: request_rows(w) for case, w in workloads.items()}
    scenarios = [scenario_message(i, configs[key], rows[key[0]]) for i, (key, _) in enumerate(plan)]
    recorded = len(keys)

    def parse(line: str) -> dict:
        # A timed run's step and request records are counted, not read.
        for kind in ("step", "request"):
            head = f'{{"kind":"{kind}","run":'
            if line.startswith(head):
                run = int(line[len(head) : line.index(",", len(head))])
                if run >= recorded:
                    return {"kind": kind, "run": run}
        message: dict = json.loads(line)
        return message

    messages = run_driver(scenarios, venv=args.sglang_venv, parse=parse)
    timings: dict[tuple[str, str], list[dict]] = {key: [] for key in keys}
    bundles: dict[tuple[str, str], Path] = {}

    def handle(index: int, hello: dict) -> Path:
        key, record = plan[index]
        if record:
            out = tmp / f"{key[0]}-{key[1].replace(', ', '-').replace(' ', '')}"
            bundles[key] = record_run(
                index, messages, hello, workloads[key[0]], configs[key], out,
                run_id=f"bench-{out.name}", requests=rows[key[0]],
            )  # fmt: skip
            return bundles[key]
        for message in run_messages(index, messages, SGLANG.driver, SglangDriverError):
            if message.get("kind") == "end":
                timings[key].append({**message["timing"], "import_s": hello.get("import_s")})
        return tmp

    record_runs(
        messages,
        len(plan),
        handle,
        driver=SGLANG.driver,
        error=SglangDriverError,
        protocol=PROTOCOL_VERSION,
    )
    return timings, bundles


def _same_records(a: EngineResult, b: EngineResult) -> bool:
    """Whether two engine runs produced the same step, request and decision records.

    Every field, those outside the records' equality too (radix hits, evictions, blocks).
    """
    return (a.num_steps, a.end_s) == (b.num_steps, b.end_s) and all(
        [dataclasses.astuple(x) for x in getattr(a, kind)]
        == [dataclasses.astuple(x) for x in getattr(b, kind)]
        for kind in ("steps", "requests", "decisions")
    )


def main(argv: list[str] | None = None) -> int:
    """Run both in every setting of every case, check identity, print the speed ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--limit", type=int, default=300, help="Azure requests (default 300)")
    parser.add_argument("--sglang-venv", default=None)
    parser.add_argument("--repeat", type=int, default=3, help="timed SGLang runs per setting")
    parser.add_argument(
        "--engine-repeat", type=int, default=10, help="timed engine runs per setting"
    )
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; expected some of {', '.join(CASES)}")

    load_before = os.getloadavg()
    workloads: dict[str, Workload] = {}
    configs: dict[tuple[str, str], SglangConfig] = {}
    sglang: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for case in cases:
            build, base, settings = CASES[case]
            workloads[case] = build(args, tmp)
            for name, radix, overlap in settings:
                configs[case, name] = dataclasses.replace(
                    base, radix_cache=radix, overlap_schedule=overlap
                )
        t0 = time.perf_counter()
        timings, bundles = _run_sglang(configs, workloads, tmp, args)
        wall = time.perf_counter() - t0
        for key, bundle in bundles.items():
            num_steps, mismatch = compare_bundle(bundle)
            scenario_config, rows = read_sglang_scenario(bundle)
            hits = pl.read_parquet(bundle / "steps.parquet")["cache_hit_tokens"].sum()
            prompt = pl.read_parquet(bundle / "requests.parquet")["prompt_tokens"].sum()
            best = min(timings[key], key=lambda r: r["loop_cpu_s"])
            sglang[key] = {
                "steps": num_steps,
                "loop_s": min(r["loop_s"] for r in timings[key]),
                "cpu_s": best["loop_cpu_s"],
                # The recorder's own work in the loop, taken out of cpu_s (of the same run).
                "recorder_cpu_s": best["recorder_cpu_s"],
                "import_s": best["import_s"],
                "mismatch": mismatch,
                "config": scenario_config,
                "rows": rows,
                "hits": int(hits or 0),
                "prompt": int(prompt),
            }

    engine = {key: {"wall": float("inf"), "cpu": float("inf"), "steps": 0} for key in configs}
    prepared = {
        key: (engine_requests(sglang[key]["rows"]), sglang[key]["config"].engine_config())
        for key in configs
    }
    # The timed runs take calm decodes in one go (calm leaps); the identity check above ran the
    # engine step by step, so check here that both give the same records.
    leaps_differ = [
        key
        for key, (requests, mirrored) in prepared.items()
        if not _same_records(
            run_engine(requests, mirrored, BuiltinHost()),
            run_engine(requests, mirrored, BuiltinHost(), calm_leaps=False),
        )
    ]
    for requests, mirrored in prepared.values():
        run_engine(requests, mirrored, BuiltinHost(), collect=False)  # (warm-up, not timed)
    for _ in range(args.engine_repeat):
        for key, (requests, mirrored) in prepared.items():
            t, t_cpu = time.perf_counter(), time.thread_time()
            result = run_engine(requests, mirrored, BuiltinHost(), collect=False)
            best = engine[key]
            best["wall"] = min(best["wall"], time.perf_counter() - t)
            best["cpu"] = min(best["cpu"], time.thread_time() - t_cpu)
            best["steps"] = result.num_steps
    load_after = os.getloadavg()

    first = next(iter(sglang.values()))
    print(f"best of {args.repeat} (SGLang), {args.engine_repeat} (engine); cases: " + "; ".join(
        f"{case} ({workloads[case].num_requests} requests, "
        f"{CASES[case][1].kv_tokens}-token pool)" for case in cases
    ))  # fmt: skip
    print(
        f"load average (1, 5, 15 min): before {', '.join(f'{x:.1f}' for x in load_before)}; "
        f"after {', '.join(f'{x:.1f}' for x in load_after)} "
        f"({os.cpu_count()} CPUs); SGLang import {first['import_s']:.1f} s, "
        f"whole recording {wall:.1f} s"
    )
    header = (
        f"{'case':10s} {'setting':17s} {'steps':>6s} {'radix hits':>16s}  {'SGLang CPU':>10s} "
        f"{'(recorder)':>10s} {'engine CPU':>10s} {'ratio CPU':>9s}  {'SGLang wall':>11s} "
        f"{'engine wall':>11s} {'ratio wall':>10s}"
    )
    print(header)
    failed = False
    for (case, name), s in sglang.items():
        e = engine[case, name]
        ratio_cpu = (e["steps"] / e["cpu"]) / (s["steps"] / s["cpu_s"])
        ratio_wall = (e["steps"] / e["wall"]) / (s["steps"] / s["loop_s"])
        hit_share = f"{s['hits']:,} ({100 * s['hits'] / s['prompt']:.0f}%)"
        print(
            f"{case:10s} {name:17s} {s['steps']:6d} {hit_share:>16s}  {s['cpu_s']:9.2f}s "
            f"{s['recorder_cpu_s']:9.2f}s {e['cpu']:9.3f}s {ratio_cpu:8.1f}x  "
            f"{s['loop_s']:10.2f}s {e['wall']:10.3f}s {ratio_wall:9.1f}x"
        )
        if s["mismatch"] is not None:
            print("  decisions DIFFER:\n" + s["mismatch"].render())
            failed = True
        elif e["steps"] != s["steps"]:
            print(f"  the engine ran {e['steps']} steps, SGLang {s['steps']}")
            failed = True
        if ratio_cpu < TARGET:
            failed = True
    for case, name in leaps_differ:
        print(f"  {case}, {name}: the run with calm leaps DIFFERS from the step-by-step run")
        failed = True
    identical = not any(s["mismatch"] for s in sglang.values()) and not leaps_differ
    print(
        "decisions identical step by step in every setting (and the timed runs' calm leaps "
        "give the step-by-step records); "
        f"target >= {TARGET:g}x by CPU time: {'FAILED' if failed else 'met'}"
        if identical
        else "decisions DIFFER"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
