"""The report's headroom section, from a real oracle run on a real results folder.

The oracle runs on the shipped real-vLLM Azure recording into ``oracle/`` of a copy of the
shared results folder and the page must show its numbers (``qualify --oracle`` itself is run
at the end); without ``oracle/`` the section
is absent. In headless Chromium (when installed) the page with the section renders without a
script error.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from report_helpers import copy_results, shared_results

from tracekit.oracle import OracleSettings
from tracekit.oracle.job import run_oracle
from tracekit.qualify import write_report
from tracekit.report.headroom_section import headroom_section
from tracekit.strategies import parse_strategy_list

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def oracle_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = copy_results(
        shared_results(tmp_path_factory), tmp_path_factory.mktemp("oracle") / "results"
    )
    # The oracle runs on the shipped real-vLLM recording (its figures are checked against the
    # recording in tests/test_oracle.py); the page only reads oracle/.
    fixture = Path(__file__).resolve().parents[1] / "traces/vllm-fixtures/vllm-0.32.0/azure-fcfs"
    run_oracle(
        fixture,
        results / "oracle",
        parse_strategy_list("lcf,mcf"),
        OracleSettings(horizon=64),
        limit=40,
    )
    return results


def test_headroom_section_shows_the_oracle_numbers(oracle_results: Path) -> None:
    page = write_report(oracle_results, oracle_results / "report.html").read_text("utf-8")
    summary = json.loads((oracle_results / "oracle" / "oracle.json").read_text("utf-8"))
    assert 'id="headroom"' in page
    section = page[page.index('id="headroom"') :]
    section = section[: section.index("</section>")]
    text = re.sub(r"<[^>]+>", " ", section)
    assert "headroom" in text
    for row in summary["closed"]:
        assert row["strategy"] in text
    for row in summary["strategies"]:
        assert row["strategy"] in text
    if summary["most_lost"]:
        assert summary["most_lost"][0]["builtin_victim_id"] in text


def test_no_headroom_section_without_the_oracle(report_results: Path, tmp_path: Path) -> None:
    page = write_report(report_results, tmp_path / "report.html").read_text("utf-8")
    assert 'id="headroom"' not in page


def test_headroom_section_without_inputs_says_so() -> None:
    section = headroom_section(None)
    assert "did not run" in "".join(section.body)


@pytest.mark.browser
def test_headroom_section_in_a_browser(oracle_results: Path, tmp_path: Path) -> None:
    """Headless Chromium renders the page with the section and logs no script error.

    (The DevTools harness of tests/test_browser_report.py checks charts and layout of the
    standard page; test modules do not import each other, so this one dumps the DOM.)
    """
    executable = next((shutil.which(n) for n in CHROMIUM if shutil.which(n)), None)
    if executable is None:
        pytest.skip("chromium is not installed (CI installs Debian's chromium package)")
    page = write_report(oracle_results, tmp_path / "report.html")
    with tempfile.TemporaryDirectory(prefix="tracekit-chromium-") as profile:
        done = subprocess.run(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=20000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'id="headroom"' in dom
    assert "Decisions where the built-in rule loses the most" in dom
    errors = [line for line in done.stderr.splitlines() if "Uncaught" in line]
    assert errors == []


def test_qualify_with_oracle_writes_the_headroom_section(tmp_path: Path) -> None:
    from tracekit.engine.config import make_engine_config
    from tracekit.qualify import QualifyPlan, run_qualify
    from tracekit.strategies import resolve_strategy
    from tracekit.workloads import load_workload

    sample = Path(__file__).resolve().parents[1] / "traces/azure-llm-2023/azure_conv_sample.csv"
    plan = QualifyPlan(
        load_workload(sample, limit=90),
        make_engine_config(
            num_blocks=300, max_model_len=4608, enable_prefix_caching=False, async_scheduling=False
        ),
        tuple(parse_strategy_list("builtin,lcf")),
        resolve_strategy("bidkv"),
        oracle=True,
    )
    results = run_qualify(plan, tmp_path / "results", jobs=1)
    summary = json.loads((results / "oracle" / "oracle.json").read_text("utf-8"))
    assert summary["trace"] == "builtin"  # the folder's name: no staging path leaks
    # static-random runs for the A/A control (whose second arm the oracle leaves out).
    assert {row["strategy"] for row in summary["closed"]} == {
        "builtin",
        "lcf",
        "bidkv",
        "static-random",
        "oracle-greedy",
    }
    assert 'id="headroom"' in (results / "report.html").read_text("utf-8")
