"""The first divergence's candidate tables list ``position`` first, then the contract's fields.

``tracekit qualify`` writes ``diff/diff.json`` with sorted keys, and the legacy and typed
candidate tables once showed their columns in alphabetical order, with ``position``
in the middle. The columns follow ``PreemptionCandidate``'s field order (docs/report.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_helpers import shared_results

from tracekit.hosts.preemption_policy import CANDIDATE_FIELDS
from tracekit.qualify import write_report
from tracekit.qualify.diff_frames import first_difference

EXPECTED = ["position", *CANDIDATE_FIELDS]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_results(tmp_path_factory)


def test_diff_json_lists_candidate_fields_alphabetically(results: Path) -> None:
    # The premise: the stored document is in alphabetical order, as qualify writes it.
    diff = json.loads((results / "diff" / "diff.json").read_text())
    pairs = diff.get("pairs") or [diff]
    candidate = pairs[0]["divergence"]["legacy"]["candidates"][0]
    assert list(candidate) == sorted(candidate)


def test_first_difference_orders_candidate_fields_by_the_contract(results: Path) -> None:
    diff = json.loads((results / "diff" / "diff.json").read_text())
    divergence = (first_difference(diff) or {})["divergence"]
    for side in ("legacy", "typed"):
        for candidate in divergence[side]["candidates"]:
            keys = [k for k in candidate if not k.startswith("sglang_")]
            assert keys == EXPECTED
    # The document itself is not modified.
    pairs = diff.get("pairs") or [diff]
    first = pairs[0]["divergence"]["legacy"]["candidates"][0]
    assert list(first) == sorted(first)


def test_candidate_tables_put_position_first_then_the_contract_order(
    results: Path, tmp_path: Path
) -> None:
    page = write_report(results, tmp_path / "report.html").read_text()
    for title in ("legacy candidates", "typed candidates"):
        match = re.search(
            rf"<caption>{title}</caption><thead><tr>(.*?)</tr></thead>", page, flags=re.S
        )
        assert match, title
        headers = [
            re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", match.group(1))
        ]
        assert headers == EXPECTED
