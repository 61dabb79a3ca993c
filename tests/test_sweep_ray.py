"""The Ray executor gives byte-identical results to the local ones (needs the ``ray`` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_helpers import SMOKE, bundle_files, hidden_leftovers

pytest.importorskip("ray", reason='Ray is not installed: pip install ".[ray]"')

from tracekit.sweep import run_sweep


@pytest.mark.e2e
def test_ray_and_local_runs_write_identical_bundles_and_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    # In-process runs; tests/test_sweep_run.py shows that 2 processes give the same bytes.
    local = run_sweep(SMOKE, tmp_path / "local", jobs=1)
    # A private local Ray instance with 2 CPUs, started and shut down by the executor.
    ray = run_sweep(SMOKE, tmp_path / "ray", jobs=2, ray_address="local")
    assert (local.exit_code, ray.exit_code) == (0, 0)
    assert ray.executor == "ray" and ray.count("done") == 30
    one, two = bundle_files(tmp_path / "local"), bundle_files(tmp_path / "ray")
    assert sorted(one) == sorted(two) and "cells.parquet" in one
    assert [name for name in one if one[name] != two[name]] == []
    payload = json.loads((tmp_path / "ray" / "sweep.json").read_text())
    assert payload["executor"] == {"name": "ray", "workers": 2}
    assert hidden_leftovers(tmp_path / "ray") == []
    # Resuming on Ray skips what is complete (and does not even start Ray).
    again = run_sweep(SMOKE, tmp_path / "ray", ray_address="local")
    assert again.count("skipped") == 30
