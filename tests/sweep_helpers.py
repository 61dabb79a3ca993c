"""Matrices and misbehaving user strategies for the sweep tests."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
SMOKE = ROOT / "examples" / "sweeps" / "smoke.toml"
PAPER = ROOT / "examples" / "sweeps" / "bidkv-paper-matrix.toml"

# 60 Azure requests on 300 blocks of 16 tokens: a few policy decisions per run, in ~0.1 s. A
# matrix with its strategies (and any other top-level key) ahead of these tables.
TINY_TABLES = f"""
[[workloads]]
path = "{SAMPLE}"
limit = 60

[[engines]]
label = "small"
num_blocks = 300
max_model_len = 4608
"""
TINY = '\nstrategies = ["builtin", "bidkv"]\n' + TINY_TABLES


def matches_now(out: Path, pattern: str) -> list[Path]:
    """What ``pattern`` matches under ``out`` now; a running sweep renames folders as we look."""
    try:
        return list(out.glob(pattern))
    except FileNotFoundError:
        return []


def hidden_leftovers(out: Path) -> list[Path]:
    """Hidden files and folders below a sweep folder (partial bundles, a lock), but its marker.

    ``.tracekit-sweep`` says a sweep wrote the folder (docs/guarantees.md): it stays.
    """
    return [p for p in out.rglob(".*") if p != out / ".tracekit-sweep"]


def write_matrix(folder: Path, text: str, name: str = "matrix.toml") -> Path:
    """Write ``text`` as a matrix file in ``folder``."""
    path = folder / name
    path.write_text(text, "utf-8")
    return path


def bundle_files(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` but sweep.json (it holds durations), by relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "sweep.json"
    }


class RaisingSelector:
    """A legacy selector whose every pick raises: the legacy host does not isolate failures."""

    def pick_victim(self, running: Any, policy: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom from RaisingSelector")

    def select_victim(self, context: Any) -> str | None:
        return None


class CrashingPolicy:
    """A policy whose construction kills its process (as a segfault would)."""

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> CrashingPolicy:
        os._exit(3)


class _Abstainer:
    """Always abstains: the engine applies its built-in victim."""

    def select_victim(self, context: Any) -> str | None:
        return None


class SleepyPolicy:
    """A policy that takes ``SWEEP_TEST_SLEEP`` seconds to start (a run that is surely in flight).

    The policy is built inside the bundle writer, so its run's hidden partial folder exists
    while it sleeps.
    """

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> _Abstainer:
        time.sleep(float(os.environ.get("SWEEP_TEST_SLEEP", "0")))
        return _Abstainer()
