"""``tracekit validate``, ``inspect`` and ``record import`` through the real click commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from trace_helpers import write_bundle

from tracekit.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_validate_ok_exit_0(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    result = invoke("validate", str(bundle))
    assert result.exit_code == 0
    assert result.output.startswith("ok ")


def test_validate_invalid_exit_1_lists_problems(tmp_path: Path) -> None:
    rows = [("run-a", "r0", 0, 0.0, 16, 4, 4, 0, 0.0, 0.1, 5.0, "finished", 4, 0, 0)] * 2
    bundle = write_bundle(tmp_path / "b", requests=rows)
    result = invoke("validate", str(bundle), "--json")
    assert result.exit_code == 1
    (report,) = json.loads(result.output)
    assert report["status"] == "invalid"
    assert any("request_id is not unique" in p for p in report["problems"])


def test_validate_unreadable_exit_2_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "no such file or folder" in result.output


def test_inspect_text_and_json(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    text = invoke("inspect", str(bundle))
    assert text.exit_code == 0
    assert "abstained 1, selected 1" in text.output
    data = json.loads(invoke("inspect", str(bundle), "--json").output)
    assert data[0]["num_decisions"] == 2


def test_record_import_then_validate(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    event = {
        "event_id": 1,
        "ts": 1.0,
        "kv_usage": 0.9,
        "num_candidates": 2,
        "candidates": [
            {
                "request_id": "x",
                "num_prompt_tokens": 5,
                "num_output_tokens": 1,
                "num_computed_tokens": 6,
                "max_output_tokens": 8,
                "num_preemptions": 0,
            },
            {
                "request_id": "y",
                "num_prompt_tokens": 5,
                "num_output_tokens": 1,
                "num_computed_tokens": 6,
                "max_output_tokens": 8,
                "num_preemptions": 0,
            },
        ],
        "strategy_choices": {"pe-lifo": "y", "bidkv": "x"},
    }
    log.write_text(json.dumps(event) + "\n")
    result = invoke("record", "import", str(log), "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    assert invoke("validate", str(tmp_path / "b")).exit_code == 0


@pytest.mark.parametrize(
    "command", [[], ["validate"], ["inspect"], ["record"], ["record", "import"]]
)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(command: list[str], flag: str) -> None:
    result = invoke(*command, flag)
    assert result.exit_code == 0
    assert "Usage:" in result.output
