"""The SGLang fixtures: small runs recorded from SGLang 0.5.23's real scheduling objects.

``tests/data/sglang-0.5.23/<name>/`` holds one bundle per fixture below, recorded by
:func:`tracekit.sglang.record.record_sglang` (no policy: SGLang's own retraction rule).
``tests/test_engine_sglang_fixtures.py`` re-runs each on the engine's SGLang mode and requires
every step to match (:mod:`tracekit.sglang.compare`) without SGLang; ``tests/test_sglang_live.py``
records them again from the installed SGLang and requires the same bundles' decisions. Remake
them (after a deliberate change) with::

    python -m tracekit.sglang.fixtures [--out tests/data] [--sglang-venv DIR] [names...]

The workloads (their step files are stored gzipped, ``sglang-steps.jsonl.gz``):

``azure``
    The first 60 requests of the shipped Azure conversation sample at twice their rate, on a
    4,000-token pool with at most 32 running requests, 512-token chunks and a 2,048-token
    prefill budget: chunked prefills, the full-``max_new`` admission reservation, the
    ``new_token_ratio`` decay and a retraction once it has decayed.
``azure-late``
    A second Azure conversation slice (requests arriving 60 to 68 s into the sample, rate x2),
    same configuration. (The Azure *code* trace is not shipped with the project, so both Azure
    slices come from the conversation trace.)
``mooncake``
    Mooncake rows arriving 996.272 s to 1,005.711 s (rate x2) on a 12,000-token pool: prompts
    share ``hash_ids`` prefixes, so with the radix cache on they hit the tree; prompts of 8,192
    tokens or more are rejected.
``shared-prefix``
    The shared-prefix table of the vLLM fixtures (four prompt groups sharing one or two
    512-token content blocks, rate x2) on a 2,100-token pool: many radix-cache hits, chunked
    prefills that continue from the tree, eviction of the least recently used leaves.
``synthetic``
    The decode-heavy synthetic workload of the vLLM fixtures (``synthetic-chunked.csv``: short
    prompts with long outputs next to long prompts) on a 1,000-token pool: retractions.

Each is recorded with the radix cache on and off and with both retraction policies (``length``,
SGLang's default, and ``priority`` with priorities 0..2 from ``priority_seed=1``), on the steps
clock (50 ms steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit.recording.sim import load_run_workload
from tracekit.sglang.protocol import SglangConfig
from tracekit.sglang.record import gzip_steps
from tracekit.workloads import Workload

__all__ = ["FIXTURES", "FIXTURES_DIR", "SGLANG_VERSION", "SglangFixture", "record_fixtures"]

#: The SGLang release the fixtures come from.
SGLANG_VERSION = "0.5.23"
#: Where the fixtures live, relative to the repository root.
FIXTURES_DIR = Path("tests") / "data" / f"sglang-{SGLANG_VERSION}"

_AZURE = Path("traces") / "azure-llm-2023" / "azure_conv_sample.csv"
_MOONCAKE = Path("traces") / "mooncake-synthetic" / "synthetic_trace.jsonl"
_SYNTHETIC = Path("traces") / "vllm-fixtures" / "workloads" / "synthetic-chunked.csv"
_SHARED_PREFIX = Path("traces") / "vllm-fixtures" / "workloads" / "shared-prefix.parquet"


@dataclasses.dataclass(frozen=True)
class SglangFixture:
    """One fixture run: a workload slice and an SGLang configuration."""

    name: str
    workload: Path
    workload_options: dict[str, Any]
    config: SglangConfig

    def load_workload(self, root: Path) -> Workload:
        """The workload, read from ``root`` but recorded with its repository-relative path."""
        workload = load_run_workload(root / self.workload, **self.workload_options)
        return dataclasses.replace(workload, source=self.workload)


_BASE = {
    "azure": (
        _AZURE,
        {"limit": 60, "rate_scale": 2.0, "priority_seed": 1},
        SglangConfig(
            kv_tokens=4000,
            max_running_requests=32,
            chunked_prefill_size=512,
            max_prefill_tokens=2048,
            max_context_len=4000,
            step_s=0.05,
        ),
    ),
    "azure-late": (
        _AZURE,
        {"window": (60.0, 68.0), "rate_scale": 2.0, "priority_seed": 1},
        SglangConfig(
            kv_tokens=4000,
            max_running_requests=32,
            chunked_prefill_size=512,
            max_prefill_tokens=2048,
            max_context_len=4000,
            step_s=0.05,
        ),
    ),
    "mooncake": (
        _MOONCAKE,
        {"window": (996.272, 1005.711), "rate_scale": 2.0, "priority_seed": 1},
        SglangConfig(
            kv_tokens=12000,
            max_running_requests=12,
            chunked_prefill_size=2048,
            max_prefill_tokens=4096,
            max_context_len=8192,
            step_s=0.05,
        ),
    ),
    "shared-prefix": (
        _SHARED_PREFIX,
        {"rate_scale": 2.0},
        SglangConfig(
            kv_tokens=2100,
            max_running_requests=16,
            chunked_prefill_size=512,
            max_prefill_tokens=1024,
            max_context_len=2048,
            step_s=0.05,
        ),
    ),
    "synthetic": (
        _SYNTHETIC,
        {},
        SglangConfig(
            kv_tokens=1000,
            max_running_requests=12,
            chunked_prefill_size=256,
            max_prefill_tokens=512,
            max_context_len=1000,
            step_s=0.05,
        ),
    ),
}


def _fixtures() -> dict[str, SglangFixture]:
    out = {}
    for base, (workload, options, config) in _BASE.items():
        for radix in (True, False):
            for policy in ("length", "priority"):
                name = f"{base}-{'radix' if radix else 'noradix'}-{policy}"
                out[name] = SglangFixture(
                    name,
                    workload,
                    options,
                    dataclasses.replace(config, radix_cache=radix, retraction_policy=policy),
                )
    return out


#: Every fixture, by name.
FIXTURES: dict[str, SglangFixture] = _fixtures()


def record_fixtures(
    root: Path,
    *,
    out: Path | None = None,
    names: Sequence[str] | None = None,
    venv: str | None = None,
) -> list[Path]:
    """Record the fixtures (all, or ``names``) from the installed SGLang into ``out/<name>``."""
    from tracekit.sglang.record import record_sglang

    chosen = list(names) if names else list(FIXTURES)
    base = out or root / FIXTURES_DIR
    fixtures = [FIXTURES[n] for n in chosen]
    bundles = record_sglang(
        [f.load_workload(root) for f in fixtures],
        [base / n for n in chosen],
        config=[f.config for f in fixtures],
        venv=venv,
        run_ids=[f"sglang-fixture-{n}" for n in chosen],
        overwrite=True,
    )
    for bundle in bundles:
        gzip_steps(bundle)
    return bundles


def main(argv: list[str] | None = None) -> int:
    """``python -m tracekit.sglang.fixtures``: remake the fixtures from the installed SGLang."""
    parser = argparse.ArgumentParser(prog="python -m tracekit.sglang.fixtures")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root")
    parser.add_argument("--out", type=Path, default=None, help=f"default: {FIXTURES_DIR}")
    parser.add_argument("--sglang-venv", default=None, help="the SGLang environment")
    parser.add_argument("names", nargs="*", help="fixtures to record (default: all)")
    args = parser.parse_args(argv)
    for path in record_fixtures(
        args.root, out=args.out, names=args.names or None, venv=args.sglang_venv
    ):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
