"""Shared fixtures: hand-made trace bundles, sweep matrices and the report's results folder.

The builders live in the helper modules next to this file (``trace_helpers``, ``sweep_helpers``,
``report_helpers``). Tests reach them through the fixtures below rather than importing from one
another, so that each test module can be run, moved or deleted on its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import report_helpers
import sweep_helpers
import trace_helpers

# The test tiers (fast, live, e2e) and the guard that a test starting a real engine is in the
# live tier: the hooks live in tests/tiers.py (docs/testing.md).
from tiers import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_terminal_summary,
    pytest_xdist_make_scheduler,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository checkout the tests run from."""
    return REPO


@pytest.fixture(scope="session")
def azure_sample() -> Path:
    """The shipped Azure conversation sample (a CSV workload)."""
    return sweep_helpers.SAMPLE


@pytest.fixture
def write_bundle() -> Callable[..., Path]:
    """``write_bundle(out, run_id="run-a", **overrides)``: a two-decision hand-made bundle."""
    return trace_helpers.write_bundle


@pytest.fixture
def base_manifest() -> Callable[..., dict[str, Any]]:
    """``base_manifest(run_id)``: the manifest fields of a hand-made bundle."""
    return trace_helpers.base_manifest


@pytest.fixture
def tiny_matrix(tmp_path: Path) -> Path:
    """A sweep matrix of 2 strategies on 60 Azure requests and 300 blocks (~0.1 s a run)."""
    return sweep_helpers.write_matrix(tmp_path, sweep_helpers.TINY)


@pytest.fixture(scope="session")
def report_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real qualification results folder, built once per session; tests must not modify it."""
    return report_helpers.shared_results(tmp_path_factory)


@pytest.fixture
def report_results_copy(report_results: Path, tmp_path: Path) -> Path:
    """A private copy of :func:`report_results` that a test may modify."""
    return report_helpers.copy_results(report_results, tmp_path / "results")


@pytest.fixture
def no_bidkv_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``BIDKV_*`` variable and no ``VLLM_EXTENSION_BUNDLES``, for tests of the defaults.

    The policy reads ``BIDKV_UTILITY_*`` defaults from the environment and the host reads its
    bundle admission, so a developer's shell must not change what these tests see.
    """
    for name in list(os.environ):
        if name.startswith("BIDKV_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("VLLM_EXTENSION_BUNDLES", raising=False)
