"""Fuzz the typed controller: counts per category of what ``select_victim`` did.

The audit fuzzed 172,000 policy inputs; this gives the controller 180,000 seeded contexts by
default (two seeds, 100,000 and 80,000), each to a fresh controller around one of the policies
of ``tests/test_controller_fuzz.py`` (no policy, every production strategy, two configured
BidKV variants, one that raises, one that returns garbage, one that returns the first id and
one that answers with hostile ``str`` subclasses). The contexts (``tests/fuzz_helpers.py``) are
about half well formed, half broken in exactly one place, and a fifth of them carry hostile
``str``/``int``/``float`` subclasses whose comparisons, hash and conversions raise or lie.

Categories, per kind of context:

- ``handled``: what the contract documents (the policy's valid answer or the built-in victim; a
  broken context as a contract failure naming its candidate and field, with the documented
  fallback; a hostile one answered exactly as its plain twin);
- ``escaped``: an exception left ``select_victim`` (the audit's "tracebacks");
- ``not plain``: the victim was not a plain ``str`` (a subclass leaked through);
- ``otherwise``: another victim or other counters than documented.

Usage: ``python benchmarks/controller_fuzz.py [--count 100000,80000] [--seeds 20260,20261]
[--hostile 0.2] [--json]``. The e2e tier runs the same counts
(``tests/test_controller_fuzz.py::test_the_controller_never_raises_on_180000_contexts``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz_helpers import fuzz_cases
from test_controller_fuzz import POLICIES, Lines, check_case


def run(counts: list[int], seeds: list[int], hostile: float) -> dict[str, object]:
    """Fuzz and count; the first few problems of each category are kept."""
    log = Lines()
    logging.getLogger("vllm").setLevel(logging.ERROR)
    host = logging.getLogger("vllm.preemption_policy")
    host.propagate = False
    host.addHandler(log)
    table: dict[str, Counter[str]] = {}
    examples: dict[str, list[str]] = {}
    started = time.perf_counter()
    for count, seed in zip(counts, seeds, strict=True):
        for i, case in enumerate(fuzz_cases(seed=seed, count=count, hostile_share=hostile)):
            kind = (
                "broken" if case.broken else "hostile" if case.plain is not None else "well-formed"
            )
            log.lines.clear()
            problem = check_case(case, POLICIES[i % len(POLICIES)], log)
            if problem is None:
                category = "handled"
            elif problem.startswith("escape"):
                category = "escaped"
            elif problem.startswith("not a plain str"):
                category = "not plain"
            else:
                category = "otherwise"
            table.setdefault(kind, Counter())[category] += 1
            if category != "handled" and len(examples.setdefault(category, [])) < 3:
                examples[category].append(problem)
    total = Counter[str]()
    for row in table.values():
        total.update(row)
    return {
        "contexts": sum(counts),
        "seeds": seeds,
        "hostile_share": hostile,
        "kinds": {kind: dict(row) for kind, row in sorted(table.items())},
        "total": dict(total),
        "examples": examples,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", default="100000,80000", help="Contexts per seed.")
    parser.add_argument("--seeds", default="20260,20261")
    parser.add_argument("--hostile", type=float, default=0.2, help="Share of hostile contexts.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run(
        [int(c) for c in args.count.split(",")], [int(s) for s in args.seeds.split(",")],
        args.hostile,
    )  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
        return
    categories = ("handled", "escaped", "not plain", "otherwise")
    print(f"{report['contexts']:,} contexts in {report['seconds']} s")
    print(f"{'kind':12}" + "".join(f"{c:>11}" for c in categories))
    for kind, row in report["kinds"].items():  # type: ignore[attr-defined]
        print(f"{kind:12}" + "".join(f"{row.get(c, 0):>11,}" for c in categories))
    total = report["total"]
    print(f"{'all':12}" + "".join(f"{total.get(c, 0):>11,}" for c in categories))  # type: ignore[attr-defined]
    for category, problems in report["examples"].items():  # type: ignore[attr-defined]
        print(f"{category}: {problems}")


if __name__ == "__main__":
    main()
