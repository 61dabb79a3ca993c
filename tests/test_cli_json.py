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
    # A relaxed SLO keeps this pressured cell from being overloaded, so that it is judged.
    args = ["qualify", "--workload", azure_sample, *SMALL, *SINGLE, "--strategy", "builtin,bidkv",
            "--repeat-by", "seeds", "--slo-ttft-s", "1000", "--slo-tpot-s", "10", "--jobs", "1",
            "--json", "--out", out]  # fmt: skip
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    # Repeats by seeds of recorded arrivals are one traffic: nothing is judged, so NO-GO (1).
    assert result.exit_code == qualify_exit(out) == 1, result.output
    payload = json.loads(result.stdout)
    assert payload["out"] == str(out)
    assert payload["report"] == str(out / "report.html")
    assert "report.html" in payload["files"]
    assert "started" in result.stderr
    # The verdicts, with their intervals, and the decision the exit status carries.
    assert payload["decision"] == "no-go" and payload["exit_code"] == 1
    document = json.loads((out / "qualification.json").read_text("utf-8"))
    assert payload["headline"] == document["headline"]["text"]
    (verdict,) = [v for v in payload["verdicts"] if v["strategy"] == "bidkv"]
    assert verdict["label"] == "inconclusive" and "not independent samples" in verdict["reason"]
    goodput = verdict["endpoints"]["goodput"]
    assert set(goodput) >= {"mean", "low", "high", "n", "unit", "margin", "verdict"}
    assert goodput["n"] == 10
    assert payload["gate"]["status"] == "passed"
    assert payload["aa_control"]["nominal"] == 0.05
    # Repeats by seeds of recorded arrivals are the same traffic: nothing is judged, so the
    # family of the correction is empty (docs/report.md, "Error control").
    assert payload["rule"]["comparisons"] == 0


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


def test_report_json(report_results_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "page" / "report.html"
    _, payload = invoke("report", report_results_copy, "--out", out, "--json")
    assert payload["report"] == str(out)
    assert payload["qualification"] == str(out.with_name("qualification.json"))
    written = json.loads(out.with_name("qualification.json").read_text("utf-8"))
    assert payload["headline"] == written["headline"]


def test_calibrate_json(azure_sample: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    invoke("record", "sim", "--workload", azure_sample, *SMALL, "--record-scheduled", "--json",
           "--out", bundle)  # fmt: skip
    model = tmp_path / "model.json"
    _, payload = invoke("calibrate", bundle, "--out", model, "--json")
    assert payload["out"] == str(model) and payload["latency"] == f"calibrated:{model}"
    assert payload["num_steps"] > payload["holdout"]["num_steps"] > 0
    assert payload["coefficients"] == json.loads(model.read_text("utf-8"))["coefficients"]
    assert set(payload["fitted_range"]) == {"num_prefill_tokens", "num_decode_seqs",
                                            "kv_tokens_read"}  # fmt: skip


def test_manifest_validate_json(repo_root: Path, tmp_path: Path) -> None:
    good = repo_root / "bidkv" / "manifests" / "vllm-hust-extension-v0.3.json"
    _, payload = invoke("manifest", "validate", good, "--json")
    assert payload["valid"] is True and payload["problem"] is None and payload["checks"]
    broken = tmp_path / "broken.json"
    manifest = json.loads(good.read_text("utf-8"))
    manifest.pop("name", None)
    manifest["schema_version"] = "9"
    broken.write_text(json.dumps(manifest), "utf-8")
    _, payload = invoke("manifest", "validate", broken, "--json", exit_code=1)
    assert payload["valid"] is False and str(broken) in payload["problem"]
