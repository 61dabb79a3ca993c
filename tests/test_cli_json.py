"""``--json`` on record, replay, qualify and sweep: stdout is one JSON document, progress is on
stderr. The shapes are the ones the commands' doc pages describe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_helpers import qualify_exit

from tracekit.cli import cli

SMALL = ["--limit", "60", "--num-blocks", "300", "--max-model-len", "4608"]
# qualify on one cell (the default plan of load cells is tested in test_qualify_loads.py).
SINGLE = ["--load-plan", "single"]


def invoke(*args: str | Path, exit_code: int = 0):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == exit_code, result.output
    return result, json.loads(result.stdout)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, azure_sample: Path) -> Path:
    out = tmp_path_factory.mktemp("json") / "bundle"
    _, payload = invoke("record", "sim", "--workload", azure_sample, *SMALL, "--json", "--out", out)
    assert payload["bundle"] == str(out)
    assert [run["run_id"] for run in payload["runs"]] == [
        json.loads((out / "manifest.json").read_text("utf-8"))["run_id"]
    ]
    return out


def test_record_sim_json_is_the_bundle_and_its_inspection(bundle: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(bundle), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)[0]["run_id"]


def test_replay_open_json(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay"
    _, payload = invoke("replay", bundle, "--strategy", "bidkv,pe", "--json", "--out", out)
    assert payload["mode"] == "open" and payload["out"] == str(out)
    assert [row["strategy"] for row in payload["summary"]] == ["bidkv", "pe"]
    assert payload["failures"] == []
    assert {"decisions", "evaluations", "elapsed_s"} <= set(payload)


def test_replay_closed_json(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "closed"
    args = ["replay", bundle, "--strategy", "bidkv", "--mode", "closed", "--json", "--out", out]
    _, payload = invoke(*args)
    assert payload["mode"] == "closed" and payload["out"] == str(out)
    assert [row["strategy"] for row in payload["summary"]] == ["recorded", "bidkv"]
    assert "throughput_rps" in payload["summary"][1]


def test_sweep_json(tiny_matrix: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    _, payload = invoke("sweep", tiny_matrix, "--jobs", "1", "--json", "--out", out)
    assert payload["out"] == str(out) and payload["exit_code"] == 0
    assert payload["counts"]["done"] == payload["runs"] > 0
    assert payload["failed"] == [] and payload["interrupted"] is False
    assert payload["sweep_json"] == str(out / "sweep.json")


def test_qualify_json(azure_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "qualify"
    args = ["qualify", "--workload", azure_sample, *SMALL, *SINGLE, "--strategy", "builtin,bidkv",
            "--repeat-by", "seeds", "--jobs", "1", "--json", "--out", out]  # fmt: skip
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == qualify_exit(out), result.output  # 1: a NO-GO
    payload = json.loads(result.stdout)
    assert payload["out"] == str(out)
    assert payload["report"] == str(out / "report.html")
    assert "report.html" in payload["files"]
    assert "started" in result.stderr


def test_record_import_json(tmp_path: Path) -> None:
    # One event in the legacy logger's layout (docs/trace-format.md, "Imports").
    candidate = {
        "request_id": "a", "completion_ratio": 0.1, "tokens_freed": 100,
        "num_prompt_tokens": 90, "num_output_tokens": 10, "num_computed_tokens": 100,
        "max_output_tokens": 256, "num_preemptions": 0, "utility_bidkv": 12.5,
        "arrival_ms": 0.0, "age_ms": 5.0,
    }  # fmt: skip
    event = {
        "event_id": 1, "ts": 10.0, "kv_usage": 0.93, "num_candidates": 1,
        "candidates": [candidate], "strategy_choices": {"pe-lifo": "a", "bidkv": "a"},
    }  # fmt: skip
    log = tmp_path / "preemption_events.jsonl"
    log.write_text(json.dumps(event) + "\n", "utf-8")
    out = tmp_path / "bundle"
    _, payload = invoke("record", "import", log, "--json", "--out", out)
    assert payload["bundle"] == str(out)
    assert len(payload["runs"]) == 1
