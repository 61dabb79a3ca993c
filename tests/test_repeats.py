"""Repeat windows: disjoint, re-based, and together holding every request of the workload."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.workloads import load_workload
from tracekit.workloads.repeats import plan_repeats

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


@pytest.mark.parametrize("repeats", [2, 3, 5, 7])
def test_windows_keep_every_request_of_the_shipped_sample(repeats: int) -> None:
    # 216.027393 * 3 / 3 rounds below 216.027393: the last arrival used to fall out of every
    # window, so 999 of the sample's 1,000 requests were used.
    workload = load_workload(SAMPLE)
    windows = plan_repeats(workload, repeats, "windows", seed=0)
    assert sum(r.workload.frame.height for r in windows) == workload.frame.height == 1000


def test_window_edges_are_disjoint_and_rebased(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    pl.DataFrame(
        {
            "arrival_s": [0.0, 1.0, 2.0, 3.0, 4.0, 6.0],
            "prompt_tokens": [10] * 6,
            "output_tokens": [5] * 6,
        }
    ).write_csv(path)
    windows = plan_repeats(load_workload(path), 3, "windows", seed=0)
    # Edges 0, 2, 4, 6: [0, 2) holds 0 and 1; [2, 4) holds 2 and 3; [4, 6] holds 4 and 6.
    assert [r.window for r in windows] == [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0)]
    assert [r.workload.frame["arrival_s"].to_list() for r in windows] == [
        [0.0, 1.0],
        [0.0, 1.0],
        [0.0, 2.0],
    ]
