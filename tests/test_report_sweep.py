"""The report of a sweep folder: several cells share repeats, strategies and request ids."""

from __future__ import annotations

import html
import re
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


def _header(page: str) -> tuple[str, dict[str, str]]:
    header = re.search(r"<header>(.*?)</header>", page, flags=re.S)
    assert header
    title = re.search(r"<h1>(.*?)</h1>", header.group(1))
    assert title
    rows = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", header.group(1)))
    return html.unescape(title.group(1)), {k: html.unescape(v) for k, v in rows.items()}


def test_sweep_report_header_describes_the_sweep(sweep: Path, tmp_path: Path) -> None:
    # The header once said "bidkv on ?", an empty engine and "2 by windows ()".
    page = write_report(sweep, tmp_path / "report.html").read_text()
    title, rows = _header(page)
    assert "?" not in title
    assert title == "Qualification report: bidkv on sweep smoke"
    assert "<title>Qualification report: bidkv on sweep smoke</title>" in page
    assert "?" not in "".join(rows.values())
    assert rows["sweep"].startswith("smoke (")
    assert rows["sweep"].endswith("examples/sweeps/smoke.toml): 4 cells, 30 runs")
    # The one workload, with its hash, request count and the rates it ran at.
    assert rows["workloads"].startswith("azure_conv_sample (sha256 199ec10343bc..., 120 requests)")
    assert "rate scale 1.0, 2.0" in rows["workloads"]
    assert rows["candidate"] == "bidkv vs baseline builtin"
    assert rows["strategies"] == "builtin, pe, bidkv"
    # The policy grid's points, not "defaults".
    assert rows["policy settings"] == (
        "p996a95ca: utility_preempt_weight=0.3; p17aea9e2: utility_preempt_weight=1.0 "
        "(others default)"
    )
    assert rows["engines"].startswith("small: mode=vllm, num_blocks=300, block_size=16,")
    assert "max_model_len=4608" in rows["engines"]
    repeats = rows["repeats"]
    assert repeats.startswith("3 by windows (")
    assert "()" not in repeats
    # Thirds of the 120 requests' 45.5028 s.
    assert "azure_conv_sample at rate scale 1.0: r0: window 0 to 15.1676 s, seed 0" in repeats
    assert "fewer than the 3 repeats" not in repeats
    assert rows["SLO"] == "TTFT <= 2.0 s, TPOT <= 0.1 s"


def test_a_sweep_with_too_few_repeats_says_so(tmp_path: Path) -> None:
    # With 2 repeats every effectiveness label is bound to be inconclusive: the header says why.
    text = SMOKE.read_text("utf-8").replace("count = 3", "count = 2")
    text = text.replace('"../../traces/', f'"{SMOKE.parents[2].as_posix()}/traces/')
    text = text.replace("limit = 120", "limit = 40")
    matrix = tmp_path / "two.toml"
    matrix.write_text(text, "utf-8")
    out = tmp_path / "two"
    run_sweep(matrix, out, jobs=1)
    _, rows = _header(write_report(out, tmp_path / "report.html").read_text())
    assert rows["repeats"].startswith("2 by windows (")
    assert "fewer than the 3 repeats the effectiveness rule needs" in rows["repeats"]
