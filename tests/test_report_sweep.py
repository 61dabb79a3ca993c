"""The report of a sweep folder: several cells share repeats, strategies and request ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from sweep_helpers import SMOKE

from tracekit.qualify import QUALIFICATION_NAME, load_results, write_report
from tracekit.qualify.frames import most_preempted_frame
from tracekit.sweep import run_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "smoke"
    run_sweep(SMOKE, out, jobs=1)
    return out


def test_most_preempted_ties_come_in_the_same_order_every_time(sweep: Path) -> None:
    results = load_results(sweep)
    first = most_preempted_frame(results, limit=50)
    # The smoke sweep's cells preempt the same request the same number of times: ties.
    keys = ["strategy", "repeat", "request_id", "num_preemptions", "recomputed_tokens"]
    assert first.select(keys).is_duplicated().any()
    for _ in range(10):
        assert_frame_equal(most_preempted_frame(results, limit=50), first)


def test_sweep_report_is_deterministic(sweep: Path, tmp_path: Path) -> None:
    a = write_report(sweep, tmp_path / "a" / "report.html")
    b = write_report(sweep, tmp_path / "b" / "report.html")
    assert a.read_bytes() == b.read_bytes()
    assert (a.parent / QUALIFICATION_NAME).read_bytes() == (
        b.parent / QUALIFICATION_NAME
    ).read_bytes()
