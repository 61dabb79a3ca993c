"""Write examples/workloads/conversations-synthetic.csv: a small synthetic multi-turn log.

Usage: ``python scripts/gen_conversations_example.py [--check]``. Synthetic, not measured: 12
conversations of 1 to 5 turns; a conversation starts uniformly in the first 60 s, each next turn
comes 5 to 20 s after the previous one; each turn adds 20 to 400 new prompt tokens and answers
with 20 to 300 tokens (all uniform, ``random.Random(SEED)``). ``--check`` exits 1 when the
committed file differs from this script's output (the test suite runs it).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "workloads" / "conversations-synthetic.csv"
SEED = 12
SESSIONS = 12


def rows(seed: int = SEED) -> list[tuple[str, int, float, int, int]]:
    """The log's rows, sorted by arrival (ties by session and turn)."""
    rng = random.Random(seed)
    out = []
    for s in range(SESSIONS):
        time_s = rng.uniform(0, 60)
        for turn in range(1, rng.randint(1, 5) + 1):
            if turn > 1:
                time_s += rng.uniform(5, 20)
            out.append(
                (f"conv{s:02d}", turn, round(time_s, 3), rng.randint(20, 400), rng.randint(20, 300))
            )
    return sorted(out, key=lambda r: (r[2], r[0], r[1]))


def text() -> str:
    """The CSV text."""
    lines = ["session_id,turn,arrival_s,new_prompt_tokens,output_tokens"]
    lines += [",".join(str(v) for v in row) for row in rows()]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Write (or, with --check, compare) the example file."""
    wanted = text()
    if "--check" in sys.argv[1:]:
        if not OUT.is_file() or OUT.read_text("utf-8") != wanted:
            print(f"{OUT} is out of date; run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(wanted, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
