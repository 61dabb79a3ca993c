"""Reproduce the direction claims of vLLM RFC #54644 / PR #53723 on the embedded engine.

Set-up, as close to the RFC's offline one as the embedded engine allows (docs/experiments.md,
"Victim choice: the RFC's claims"): 300 requests with the shipped ShareGPT prompt and output
lengths (``traces/sharegpt-lengths``, file order), all arriving at 0 (offline), vLLM 0.32
FCFS rules, 16-token blocks, 256 sequences and an 8,192-token step budget (vLLM's offline
defaults; ``--max-num-seqs``/``--max-num-batched-tokens``), KV caches of 1,600, 800 and 400
blocks, prefix caching off and on (the requests share no content, so a cache hit is a
preempted request finding its own freed blocks again). Strategies: ``builtin`` (vLLM's FCFS
victim, the tail of the running queue: LIFO), ``lcf``, ``static-random`` (the mean of seeds
1 to 5) and ``mcf``; with ``--oracle``, also the greedy hindsight oracle (``tracekit oracle``'s
closed loop).

Measured per run, from the engine's step records (not from the policy's own counters):

- **wasted tokens**: prefill tokens computed beyond each request's prompt once, i.e. the tokens
  recomputed after preemptions (with prefix caching, net of the cache hits that saved them);
- **recompute tax**: wasted tokens over all tokens computed (prefill plus decode);
- **discarded tokens**: computed tokens the preemptions threw away (the victims'
  ``num_computed_tokens``, what vLLM counts as lost whether or not the prefix cache later
  saves them), in all and per preemption.

Prints a Markdown table and, per setting, LCF's change in wasted tokens against the built-in
rule and the order of the strategies.

Usage: ``python benchmarks/rfc_victims.py [--requests 300] [--oracle] [--horizon 128]``
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from tracekit.engine import EngineConfig
from tracekit.engine.engine import EngineRun
from tracekit.engine.request import engine_requests
from tracekit.oracle.rollout import OracleSettings, run_greedy_oracle
from tracekit.strategies import resolve_strategy
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = ROOT / "traces" / "sharegpt-lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
KV_BLOCKS = (1600, 800, 400)
STRATEGIES = ("builtin", "lcf", "static-random", "mcf")


def measure(run: EngineRun) -> dict[str, float]:
    """Wasted tokens and recompute tax of a finished run."""
    result = run.result
    prefill = sum(s.num_prefill_tokens for s in result.steps)
    decode = sum(s.num_decode_tokens for s in result.steps)
    prompts = sum(r.prompt_tokens for r in result.requests if r.status != "rejected")
    wasted = prefill - prompts
    discarded = sum(r.recomputed_tokens for r in result.requests)
    return {
        "wasted": wasted,
        "discarded": discarded,
        "per_preemption": discarded / result.num_preemptions if result.num_preemptions else 0.0,
        "tax": wasted / (prefill + decode) if prefill + decode else 0.0,
        "preemptions": result.num_preemptions,
        "rejected": sum(r.status == "rejected" for r in result.requests),
        "makespan_s": result.end_s,
    }


def _run_engine(requests: list, config: EngineConfig, name: str, seed: int) -> EngineRun:
    spec = resolve_strategy(name, seed=seed)
    run = EngineRun(requests, config, spec.make_host("typed"))
    run.run_to_end()
    return run


def _run(requests: list, config: EngineConfig, name: str, seed: int) -> dict[str, float]:
    return measure(_run_engine(requests, config, name, seed))


def _print(prefix: bool, blocks: int, name: str, m: dict[str, float]) -> None:
    label = "static-random (mean of 5 seeds)" if name == "static-random" else name
    print(
        f"| {'on' if prefix else 'off'} | {blocks} | {label} | {m['wasted']:,} | "
        f"{100 * m['tax']:.1f}% | {m['preemptions']:,} | {round(m['discarded']):,} | "
        f"{m['per_preemption']:.0f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--oracle", action="store_true", help="Add the greedy oracle.")
    parser.add_argument("--horizon", type=int, default=OracleSettings().horizon)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--kv", default=",".join(map(str, KV_BLOCKS)), help="KV block counts.")
    parser.add_argument("--prefix", choices=["off", "on", "both"], default="both")
    args = parser.parse_args()
    # The lengths file has no times: any rate, then every arrival is set to 0 (offline).
    workload = load_workload(LENGTHS, limit=args.requests, rate=1.0)
    requests = [dataclasses.replace(r, arrival_s=0.0) for r in engine_requests(workload)]
    strategies = [*STRATEGIES, *(["oracle"] if args.oracle else [])]
    print(
        "| prefix caching | KV blocks | strategy | wasted tokens | recompute tax | preemptions "
        "| discarded tokens | discarded per preemption |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    summary = []
    prefixes = {"off": (False,), "on": (True,), "both": (False, True)}[args.prefix]
    for prefix in prefixes:
        for blocks in map(int, args.kv.split(",")):
            config = EngineConfig(
                num_blocks=blocks,
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                max_model_len=min(8192, (blocks - 1) * 16),
                enable_prefix_caching=prefix,
                # Synchronous scheduling, as in the figures of docs/experiments.md.
                async_scheduling=False,
            )
            rows = {}
            for name in strategies:
                start = time.perf_counter()
                if name == "oracle":
                    run = run_greedy_oracle(requests, config, OracleSettings(horizon=args.horizon))
                elif name == "static-random":
                    # Five seeds: one draw of a random rule says little; report their mean.
                    seeds = [_run(requests, config, name, seed) for seed in range(1, 6)]
                    rows[name] = m = {k: sum(x[k] for x in seeds) / 5 for k in seeds[0]}
                    m["wasted"] = round(m["wasted"])
                    m["preemptions"] = round(m["preemptions"])
                    m["discarded"] = round(m["discarded"])
                    _print(prefix, blocks, name, m)
                    continue
                else:
                    run = _run_engine(requests, config, name, 0)
                rows[name] = m = measure(run)
                _print(prefix, blocks, name, m)
                m["wall_s"] = time.perf_counter() - start
            base = rows["builtin"]["wasted"]
            lcf = rows["lcf"]["wasted"]
            order = " < ".join(sorted(strategies, key=lambda n: rows[n]["wasted"]))
            change = f"{100 * (lcf - base) / base:+.0f}%" if base else "n/a"
            mcf = rows["mcf"]["wasted"]
            spread = f"{100 * (mcf - lcf) / mcf:.0f}%" if mcf else "n/a"
            summary.append(
                f"prefix {'on' if prefix else 'off'}, {blocks} blocks: LCF vs built-in {change}; "
                f"(MCF - LCF) / MCF {spread}; order {order}; "
                f"rejected {rows['builtin']['rejected']}"
            )
    print()
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
