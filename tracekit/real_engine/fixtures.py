"""What the vLLM and SGLang fixture sets share: source workloads, loading, CSV text, the command.

Each engine's fixtures (:mod:`tracekit.vllm.fixtures`, :mod:`tracekit.sglang.fixtures`) are
small runs recorded from the real engine and committed, re-run on the embedded engine by the
tests without the engine, and recorded again from it by the live tests. They slice the same
shipped traces, load their workloads the same way (read from the checkout, recorded with the
repository-relative path), write their generated workloads as the same canonical CSV, and are
remade by the same kind of command (``python -m tracekit.<engine>.fixtures``).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tracekit.engine.request import REQUEST_FIELDS
from tracekit.recording.sim import load_run_workload
from tracekit.workloads import Workload

__all__ = [
    "AZURE_SAMPLE",
    "MOONCAKE_SAMPLE",
    "fixture_parser",
    "fixture_workload",
    "requests_csv",
]

#: The shipped Azure conversation sample, relative to the repository root.
AZURE_SAMPLE = Path("traces") / "azure-llm-2023" / "azure_conv_sample.csv"
#: The shipped Mooncake semi-synthetic trace, relative to the repository root.
MOONCAKE_SAMPLE = Path("traces") / "mooncake-synthetic" / "synthetic_trace.jsonl"
# The canonical table columns of a generated workload's CSV.
_CSV_COLUMNS = REQUEST_FIELDS


def fixture_workload(root: Path, workload: Path, options: Mapping[str, Any]) -> Workload:
    """A fixture's workload, read from ``root`` but recorded with its repository-relative path."""
    loaded = load_run_workload(root / workload, **options)
    return dataclasses.replace(loaded, source=workload)


def requests_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """Generated workload rows as the committed CSV text (canonical table columns)."""
    buffer = io.StringIO()
    buffer.write(",".join(_CSV_COLUMNS) + "\n")
    for row in rows:
        buffer.write(",".join(str(row[c]) for c in _CSV_COLUMNS) + "\n")
    return buffer.getvalue()


def fixture_parser(engine: str, out_default: str) -> argparse.ArgumentParser:
    """The arguments of ``python -m tracekit.<engine>.fixtures`` both engines take.

    ``--root``, ``--out`` (``out_default`` in its help), ``--<engine>-venv`` and the fixture
    names; ``engine`` is the package name, ``vllm`` or ``sglang``.
    """
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    parser = argparse.ArgumentParser(prog=f"python -m tracekit.{engine}.fixtures")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root")
    parser.add_argument("--out", type=Path, default=None, help=f"default: {out_default}")
    parser.add_argument(f"--{engine}-venv", default=None, help=f"the {name} environment")
    return parser
