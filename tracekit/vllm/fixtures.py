"""The fidelity fixtures: small runs recorded from the real vLLM scheduler, and how to remake them.

``traces/vllm-fixtures/vllm-<version>/<name>/`` holds one bundle per fixture below, recorded with
the built-in victim rule from the unmodified scheduler (``record_vllm``, no shim), with the
optional ``scheduled`` table. ``tests/test_fidelity_fixtures.py`` re-runs each one on the embedded
engine and requires every step, scheduled-token map, decision and request to match, without
vLLM; ``tests/test_vllm_live.py`` records them again from the installed vLLM and requires the
same. Remake them (after a deliberate change) with::

    python -m tracekit.vllm.fixtures [--out traces/vllm-fixtures] [--vllm-venv DIR]

The workloads (the prefix-caching and async variants are defined below):

``azure``
    The first 50 requests of the shipped Azure conversation sample at three times their rate,
    on 128 blocks of 16 tokens (about two average requests' final footprint): KV pressure,
    chunked prefill of the longer prompts at a 512-token budget, and prompts over
    ``max_model_len`` rejected.
``synthetic``
    ``synthetic-chunked.csv`` (made by :func:`synthetic_requests`): bursts of one long prompt
    (300 to 800 tokens) and three to six short prompts with long outputs, on 64 blocks with a
    256-token budget and a 128-token long-prefill threshold. Long prompts prefill in chunks while
    short requests grow, so a chunk's allocation often evicts two or three tail requests in one
    ``while True`` loop (multi-victim), PRIORITY victims are sometimes already scheduled in the
    step (budget refund), and requests preempt themselves (the 0.32/0.33 difference).
``mooncake``
    The first 40 requests of the Mooncake semi-synthetic trace at four times their rate, on
    1,100 blocks with ``max_model_len`` 16,384: prompts of up to 16 k tokens prefill over several
    2,048-token steps, longer ones are rejected.
``sessions``
    The 32 turns of ``examples/workloads/conversations-synthetic.csv`` (a multi-turn session log:
    turn k's prompt is the conversation so far, :mod:`tracekit.workloads.sessions`) at ten times
    their rate, with prefix caching on, on 170 blocks (just over the longest turn's 2,221
    prompt tokens) with a 512-token budget: later turns hit their conversation's cached blocks,
    turns preempt each other, and the victims re-hit what was not evicted in between.

Each is recorded under FCFS and under PRIORITY (priorities 0..2 from ``priority_seed=1``; the
synthetic workload carries its own 0..3), on the steps clock (50 ms steps).
"""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit.engine.config import EngineConfig
from tracekit.real_engine.fixtures import (
    AZURE_SAMPLE,
    MOONCAKE_SAMPLE,
    fixture_parser,
    fixture_workload,
    requests_csv,
)
from tracekit.recording.sim import SimRun
from tracekit.strategies import resolve_strategy
from tracekit.workloads import Workload

__all__ = [
    "ASYNC_FIXTURES",
    "FIXTURES",
    "PREFIX_CACHING_FIXTURES",
    "FIXTURE_VERSIONS",
    "Fixture",
    "fixture_dir",
    "record_fixtures",
    "shared_prefix_requests",
    "synthetic_csv",
    "synthetic_requests",
]

#: Where the fixtures live, relative to the repository root.
FIXTURES_DIR = Path("traces") / "vllm-fixtures"
SYNTHETIC_CSV = FIXTURES_DIR / "workloads" / "synthetic-chunked.csv"
SYNTHETIC_SEED = 3
SHARED_PREFIX_TABLE = FIXTURES_DIR / "workloads" / "shared-prefix.parquet"
SHARED_PREFIX_SEED = 5


@dataclasses.dataclass(frozen=True)
class Fixture:
    """One fixture run: a workload slice, an engine configuration and a scheduling policy."""

    name: str
    workload: Path
    workload_options: dict[str, Any]
    config: dict[str, Any]
    scheduling_policy: str

    def load_workload(self, root: Path) -> Workload:
        """The workload, read from ``root`` but recorded with its repository-relative path."""
        return fixture_workload(root, self.workload, self.workload_options)

    def engine_config(self, vllm_version: str = "0.32") -> EngineConfig:
        """The engine configuration of the run."""
        return EngineConfig(
            **self.config,
            scheduling_policy=self.scheduling_policy,  # type: ignore[arg-type]
            vllm_version=vllm_version,  # type: ignore[arg-type]
        )

    def sim_run(self, root: Path, vllm_version: str = "0.32") -> SimRun:
        """The run, with the built-in victim rule."""
        return SimRun(
            self.load_workload(root),
            self.engine_config(vllm_version),
            resolve_strategy("builtin"),
            "builtin",
        )


_STEPS = {"clock": "steps", "step_s": 0.05}
#: The engine defaults follow vLLM (prefix caching and async scheduling on); every fixture says
#: which of the two it was recorded with, so a change of default never changes its meaning.
_SYNC = {"async_scheduling": False}
_NO_APC = {"enable_prefix_caching": False}
_APC = {"enable_prefix_caching": True}
_ASYNC = {"async_scheduling": True}
#: Mooncake rows 3890 to 3929 (timestamps 996.272 s to 1005.711 s), whose prompts share
#: ``hash_ids`` prefixes with earlier requests of the window under both policies.
_MOONCAKE_SHARED_WINDOW = (996.272, 1005.711)
_MOONCAKE_SHARED_OPTIONS: dict[str, Any] = {
    "window": _MOONCAKE_SHARED_WINDOW,
    "rate_scale": 2.0,
    "priority_seed": 1,
}


def _sizes(
    num_blocks: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    **settings: Any,
) -> dict[str, Any]:
    """A fixture's pool, context and batch sizes (and ``settings``), as EngineConfig fields."""
    return {
        "num_blocks": num_blocks,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        **settings,
    }


#: The sizes of the fixtures of each workload.
_AZURE_CONFIG = _sizes(128, 2000, 512, 16)
_SYNTHETIC_CONFIG = _sizes(64, 1008, 256, 12, long_prefill_token_threshold=128)
_MOONCAKE_CONFIG = _sizes(1100, 16384, 2048, 16)
_SHARED_PREFIX_CONFIG = _sizes(200, 2048, 512, 12)
_SESSIONS = Path("examples") / "workloads" / "conversations-synthetic.csv"
#: The multi-turn session slice: all 32 turns at ten times their rate, priorities 0..2.
_SESSIONS_OPTIONS: dict[str, Any] = {"rate_scale": 10.0, "priority_seed": 1}
#: 170 blocks of 16 tokens: just over the longest turn (2,221 prompt tokens), so turns preempt
#: each other while later turns hit their conversation's cached prompt blocks.
_SESSIONS_CONFIG = _sizes(170, 2560, 512, 12, **_APC)


def _pair(
    name: str, workload: Path, options: dict[str, Any], config: dict[str, Any]
) -> list[Fixture]:
    return [
        Fixture(f"{name}-{policy}", workload, options, {**config, **_STEPS}, policy)
        for policy in ("fcfs", "priority")
    ]


#: Every fixture, by name.
FIXTURES: dict[str, Fixture] = {
    f.name: f
    for f in [
        *_pair(
            "azure",
            AZURE_SAMPLE,
            {"limit": 50, "rate_scale": 3.0, "priority_seed": 1},
            {**_AZURE_CONFIG, **_NO_APC, **_SYNC},
        ),
        *_pair(
            "synthetic",
            SYNTHETIC_CSV,
            {},
            {**_SYNTHETIC_CONFIG, **_NO_APC, **_SYNC},
        ),
        *_pair(
            "mooncake",
            MOONCAKE_SAMPLE,
            {"limit": 40, "rate_scale": 4.0, "priority_seed": 1},
            {**_MOONCAKE_CONFIG, **_NO_APC, **_SYNC},
        ),
        # Prefix caching on (vLLM's default): Mooncake hash_ids and a shared-prefix table.
        *_pair(
            "mooncake-apc",
            MOONCAKE_SAMPLE,
            _MOONCAKE_SHARED_OPTIONS,
            {**_MOONCAKE_CONFIG, **_APC, **_SYNC},
        ),
        *_pair(
            "shared-prefix-apc",
            SHARED_PREFIX_TABLE,
            {},
            {**_SHARED_PREFIX_CONFIG, **_APC, **_SYNC},
        ),
        # Async scheduling on (vLLM's default on GPUs), with prefix caching off and on.
        *_pair(
            "synthetic-async",
            SYNTHETIC_CSV,
            {},
            {**_SYNTHETIC_CONFIG, **_NO_APC, **_ASYNC},
        ),
        *_pair(
            "mooncake-apc-async",
            MOONCAKE_SAMPLE,
            _MOONCAKE_SHARED_OPTIONS,
            {**_MOONCAKE_CONFIG, **_APC, **_ASYNC},
        ),
        *_pair(
            "shared-prefix-apc-async",
            SHARED_PREFIX_TABLE,
            {},
            {**_SHARED_PREFIX_CONFIG, **_APC, **_ASYNC},
        ),
        # A multi-turn session workload (turn k's prompt is the conversation so far), synchronous
        # and async, prefix caching on.
        *_pair("sessions-apc", _SESSIONS, _SESSIONS_OPTIONS, {**_SESSIONS_CONFIG, **_SYNC}),
        *_pair(
            "sessions-apc-async",
            _SESSIONS,
            _SESSIONS_OPTIONS,
            {**_SESSIONS_CONFIG, **_ASYNC},
        ),
    ]
}

#: The fixtures recorded with prefix caching on.
PREFIX_CACHING_FIXTURES: tuple[str, ...] = tuple(
    name for name, f in FIXTURES.items() if f.config.get("enable_prefix_caching")
)

#: The fixtures recorded with async scheduling on.
ASYNC_FIXTURES: tuple[str, ...] = tuple(
    name for name, f in FIXTURES.items() if f.config.get("async_scheduling")
)

#: The vLLM releases fixtures are recorded for, and which fixtures each has.
FIXTURE_VERSIONS: dict[str, tuple[str, ...]] = {
    "0.32.0": tuple(FIXTURES),
    "0.33.0": (
        "synthetic-fcfs",
        "synthetic-priority",
        *PREFIX_CACHING_FIXTURES,
        *(name for name in ASYNC_FIXTURES if name not in PREFIX_CACHING_FIXTURES),
    ),
}


def fixture_dir(root: Path, version: str, name: str) -> Path:
    """The bundle folder of fixture ``name`` recorded from vLLM ``version``."""
    return root / FIXTURES_DIR / f"vllm-{version}" / name


def synthetic_requests(seed: int = SYNTHETIC_SEED, bursts: int = 8) -> list[dict[str, Any]]:
    """The synthetic chunked-prefill workload's rows (deterministic for a seed).

    Each burst, 1.5 s apart (plus 0, 0.25 or 0.5 s), is one long prompt (300 to 800 tokens, 20
    to 80 output tokens) followed 50 ms apart by three to six short prompts (8 to 90 tokens) with
    long outputs (40 to 220 tokens). Priorities are 0..3.
    """
    rng = random.Random(seed)
    rows = []
    for burst in range(bursts):
        start = burst * 1.5 + rng.choice([0.0, 0.25, 0.5])
        rows.append(
            {
                "arrival_s": round(start, 2),
                "prompt_tokens": rng.randint(300, 800),
                "output_tokens": rng.randint(20, 80),
                "priority": rng.randint(0, 3),
            }
        )
        for k in range(rng.randint(3, 6)):
            rows.append(
                {
                    "arrival_s": round(start + 0.05 * (k + 1), 2),
                    "prompt_tokens": rng.randint(8, 90),
                    "output_tokens": rng.randint(40, 220),
                    "priority": rng.randint(0, 3),
                }
            )
    rows.sort(key=lambda r: r["arrival_s"])
    return [
        {"request_id": f"syn-{i:03d}", **row, "max_tokens": row["output_tokens"]}
        for i, row in enumerate(rows)
    ]


def synthetic_csv(seed: int = SYNTHETIC_SEED) -> str:
    """:func:`synthetic_requests` as the committed CSV text (canonical table columns)."""
    return requests_csv(synthetic_requests(seed))


def shared_prefix_requests(seed: int = SHARED_PREFIX_SEED, num: int = 60) -> list[dict[str, Any]]:
    """The shared-prefix workload's rows (deterministic for a seed).

    In the spirit of vLLM bench's ``prefix_repetition`` dataset: four prompt groups, each with a
    shared prefix of one or two 512-token content blocks (``prefix_hash_ids`` ``100 * group``,
    ``100 * group + 1``), followed by 16 to 400 tokens of the request's own; outputs of 20 to
    250 tokens; arrivals in bursts of two to five requests 30 ms apart, 0.4 to 1.2 s between
    bursts; priorities 0..3.
    """
    rng = random.Random(seed)
    prefix_blocks = [1, 2, 2, 1]
    rows: list[dict[str, Any]] = []
    t = 0.0
    while len(rows) < num:
        for k in range(rng.randint(2, 5)):
            group = rng.randrange(4)
            ids = [100 * group + b for b in range(prefix_blocks[group])]
            output = rng.randint(20, 250)
            rows.append(
                {
                    "request_id": f"spx-{len(rows):03d}",
                    "arrival_s": round(t + 0.03 * k, 3),
                    "prompt_tokens": 512 * len(ids) + rng.randint(16, 400),
                    "output_tokens": output,
                    "max_tokens": output,
                    "priority": rng.randint(0, 3),
                    "prefix_hash_ids": ids,
                }
            )
        t += rng.uniform(0.4, 1.2)
    return rows[:num]


def write_shared_prefix_table(path: Path, seed: int = SHARED_PREFIX_SEED) -> None:
    """Write :func:`shared_prefix_requests` as a Parquet workload table (canonical columns)."""
    import polars as pl

    from tracekit.workloads.model import workload_schema

    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame(shared_prefix_requests(seed), schema=workload_schema(prefix_hash_ids=True))
    frame.write_parquet(path)


def record_fixtures(
    root: Path,
    *,
    out: Path | None = None,
    names: Sequence[str] | None = None,
    venv: str | None = None,
) -> list[Path]:
    """Record the fixtures from the installed vLLM into ``out/vllm-<version>/<name>``.

    Writes the synthetic workload's CSV first when it is missing. Only the fixtures that
    :data:`FIXTURE_VERSIONS` lists for the installed version are recorded (or ``names``).
    """
    from tracekit.vllm.record import installed_vllm_version, record_vllm

    csv_path = root / SYNTHETIC_CSV
    if not csv_path.is_file():
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        csv_path.write_text(synthetic_csv(), "utf-8")
    if not (root / SHARED_PREFIX_TABLE).is_file():
        write_shared_prefix_table(root / SHARED_PREFIX_TABLE)
    version = installed_vllm_version(venv)
    chosen = list(names) if names is not None else list(FIXTURE_VERSIONS.get(version, ()))
    if not chosen:
        raise SystemExit(f"no fixtures are defined for vLLM {version}")
    base = out or root / FIXTURES_DIR
    runs = [FIXTURES[name].sim_run(root) for name in chosen]
    outs = [base / f"vllm-{version}" / name for name in chosen]
    return record_vllm(runs, outs, venv=venv, record_scheduled=True, overwrite=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m tracekit.vllm.fixtures``: remake the fixtures from the installed vLLM."""
    parser = fixture_parser("vllm", FIXTURES_DIR.as_posix())
    parser.add_argument("names", nargs="*", help="fixtures to record (default: all)")
    args = parser.parse_args(argv)
    for path in record_fixtures(
        args.root, out=args.out, names=args.names or None, venv=args.vllm_venv
    ):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
