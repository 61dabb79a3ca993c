"""Exit codes are documented once, and the documents agree with what the commands do.

They were stated in four places that disagreed: docs/guarantees.md's table, docs/index.md's
prose (which alone listed ``accuracy``'s exit 1), ``tracekit --help`` (which omitted
``accuracy``) and docs/qualify.md's own table (without 130). Now docs/guarantees.md holds the
one table, the others link to it, and ``tracekit --help`` is made from ``FINDINGS``, the list
this test holds to both the table and the commands' code.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.cli.common import FINDINGS, TRUNCATED, leaf_commands

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _table() -> dict[str, str]:
    """The one table: code -> its commands cell."""
    text = (DOCS / "guarantees.md").read_text("utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            rows[cells[0]] = cells[2]
    return rows


def test_the_table_lists_what_1_and_3_mean_for_exactly_the_commands_that_say_so() -> None:
    rows = _table()
    assert sorted(rows) == ["0", "1", "130", "2", "3"]
    findings = dict(re.findall(r"`([a-z ]+)`: ([^;]+)", rows["1"]))
    assert findings == FINDINGS
    assert re.findall(r"`([a-z ]+)`", rows["3"]) == list(TRUNCATED)


def test_the_help_text_states_the_same_codes() -> None:
    text = " ".join(CliRunner().invoke(cli, ["--help"]).output.split())
    listed = re.search(r"1 a finding \(([^)]*)\)", text)
    assert listed is not None, text
    names = [n.strip().removesuffix(" NO-GO") for n in listed.group(1).split(",")]
    assert names == list(FINDINGS)
    for code in ("0 done", "2 bad input", "3 a truncated recording (validate)", "130 interrupted"):
        assert code in text


def test_the_commands_that_can_exit_1_are_exactly_the_listed_ones() -> None:
    # A command reports a finding by exiting with its result's status; the others only ever
    # exit through click (0, or 2 and 130 by the shared error handling).
    exiting = {
        name
        for name, command in leaf_commands(cli)
        if re.search(r"\b(SystemExit|sys\.exit)\(", inspect.getsource(command.callback))  # type: ignore[arg-type]
    }
    assert exiting == set(FINDINGS)


def test_the_other_pages_link_to_the_one_table() -> None:
    for page in ("index.md", "qualify.md", "trace-format.md", "diff.md"):
        text = (DOCS / page).read_text("utf-8")
        assert "guarantees.md#exit-codes" in text, page
    # No second table of exit statuses.
    assert "| exit status | when |" not in (DOCS / "qualify.md").read_text("utf-8")


def test_listed_findings_exit_1(tmp_path: Path) -> None:
    invoke = CliRunner().invoke
    bench = ROOT / "tests" / "data" / "bench-results" / "vllm-bench-rate8.json"
    assert invoke(cli, ["accuracy", str(bench)]).exit_code == 1
    manifest = tmp_path / "m.json"
    manifest.write_text("{}", "utf-8")
    assert invoke(cli, ["manifest", "validate", str(manifest)]).exit_code == 1
    traces = tmp_path / "traces"
    frozen = invoke(cli, ["experiment", "traces", "--out", str(traces), "--num-requests", "5",
                          "--rates", "1"])  # fmt: skip
    assert frozen.exit_code == 0, frozen.output
    (trace,) = (p for p in traces.glob("*.json") if p.name != "manifest.json")
    document = json.loads(trace.read_text("utf-8"))
    trace.write_text(json.dumps({**document, "edited": True}), "utf-8")
    assert (
        invoke(cli, ["experiment", "traces", "--mode", "verify", "--out", str(traces)]).exit_code
        == 1
    )
