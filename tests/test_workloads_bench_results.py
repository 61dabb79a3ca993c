"""Benchmark results as workloads: the three clients' loaders, on their real output.

The files in tests/data/bench-results/ are unedited outputs of `vllm bench serve`, GuideLLM 0.8.1
and AIPerf 0.13.0 against a real `vllm serve` (README.md there). The loaders are checked against
the figures the clients computed themselves from the same requests (totals, means, medians),
so a loader that read the wrong field, unit or clock fails.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import polars as pl
import pytest

from tracekit.engine.config import make_engine_config
from tracekit.engine.engine import run_engine
from tracekit.engine.hosts import BuiltinHost
from tracekit.engine.request import engine_requests
from tracekit.errors import WorkloadError
from tracekit.workloads import WorkloadFormat, detect_format, load_workload
from tracekit.workloads.aiperf import read_aiperf_run
from tracekit.workloads.guidellm import read_guidellm_run
from tracekit.workloads.vllm_bench import read_vllm_bench_run

DATA = Path(__file__).parent / "data" / "bench-results"
VLLM = DATA / "vllm-bench-rate8.json"
VLLM_FAILED = DATA / "vllm-bench-failures.json"
VLLM_SUMMARY = DATA / "vllm-bench-summary-only.json"
GUIDELLM = DATA / "guidellm-poisson.json"
AIPERF = DATA / "aiperf-profile_export.jsonl"


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (VLLM, WorkloadFormat.VLLM_BENCH),
        (VLLM_FAILED, WorkloadFormat.VLLM_BENCH),
        (GUIDELLM, WorkloadFormat.GUIDELLM),
        (AIPERF, WorkloadFormat.AIPERF),
    ],
)
def test_each_client_output_is_detected(path: Path, fmt: WorkloadFormat) -> None:
    assert detect_format(path) is fmt
    assert load_workload(path).format == fmt.value


def test_vllm_bench_matches_the_clients_own_summary() -> None:
    doc = json.loads(VLLM.read_text())
    run = read_vllm_bench_run(VLLM)
    frame = run.frame
    ok = frame.filter(pl.col("ok"))
    assert run.num_requests == doc["num_prompts"] == 30
    assert ok.height == doc["completed"]
    assert ok["prompt_tokens"].sum() == doc["total_input_tokens"]
    assert ok["output_tokens"].sum() == doc["total_output_tokens"]
    assert ok["ttft_s"].mean() * 1000 == pytest.approx(doc["mean_ttft_ms"], rel=1e-12)
    # vLLM bench's TPOT: (latency - TTFT) / (output tokens - 1), the first token excluded.
    tpot = ok.select((pl.col("e2e_s") - pl.col("ttft_s")) / (pl.col("output_tokens") - 1))
    assert tpot.to_series().median() * 1000 == pytest.approx(doc["median_tpot_ms"], rel=1e-12)
    itls = [gap for row in ok["itl_s"].to_list() for gap in row]
    assert statistics.mean(itls) * 1000 == pytest.approx(doc["mean_itl_ms"], rel=1e-12)
    # Arrivals are the client's send times, relative to the first (perf_counter seconds).
    assert frame["start_s"].to_list() == pytest.approx(
        [t - min(doc["start_times"]) for t in sorted(doc["start_times"])]
    )
    assert run.settings["request_rate"] == 8.0 and run.settings["burstiness"] == 1.0


def test_vllm_bench_workload_lengths_and_arrivals() -> None:
    doc = json.loads(VLLM.read_text())
    workload = load_workload(VLLM)
    assert workload.num_requests == 30
    assert workload.frame["arrival_s"][0] == 0.0
    assert workload.duration_s == pytest.approx(max(doc["start_times"]) - min(doc["start_times"]))
    assert sorted(workload.frame["prompt_tokens"]) == sorted(doc["input_lens"])
    assert workload.frame["output_tokens"].sum() == doc["total_output_tokens"]
    assert (workload.frame["max_tokens"] == workload.frame["output_tokens"]).all()
    assert workload.options["source_request_rate"] == 8.0


def test_failed_requests_are_kept_as_failed() -> None:
    doc = json.loads(VLLM_FAILED.read_text())
    assert doc["failed"] == 1
    run = read_vllm_bench_run(VLLM_FAILED)
    failed = run.frame.filter(~pl.col("ok"))
    assert failed.height == 1 and failed["error"][0] == "Bad Request"
    assert failed["ttft_s"][0] is None
    workload = run.workload()
    assert workload.num_requests == 12
    assert workload.options["num_failed"] == 1
    cancels = workload.frame.filter(pl.col("cancel_after_s").is_not_null())
    assert cancels["request_id"].to_list() == failed["request_id"].to_list()
    # Replayed, it fails again (here its prompt is beyond max_model_len, so it is rejected),
    # and every other request is served.
    config = make_engine_config(block_size=32, num_blocks=256, max_model_len=4096)
    result = run_engine(list(engine_requests(workload)), config, BuiltinHost())
    status = {r.request_id: r.status for r in result.requests}
    assert status[failed["request_id"][0]] in ("rejected", "aborted")
    assert sum(s.startswith("finished") for s in status.values()) == 11


def test_a_result_without_per_request_data_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"--save-detailed") as caught:
        load_workload(VLLM_SUMMARY)
    assert "\n" not in str(caught.value)
    assert str(VLLM_SUMMARY) in str(caught.value)


@pytest.mark.parametrize(
    ("name", "found", "flag"),
    [
        ("aiperf-profile_export_aiperf.json", "AIPerf's summary", "--export-level records"),
        ("aiperf-profile_export_aiperf.csv", "AIPerf's summary CSV", "--export-level records"),
        ("guidellm-poisson.csv", "GuideLLM's CSV report", "--output kind=json"),
    ],
)
def test_client_outputs_without_per_request_data_are_refused_naming_the_flag(
    name: str, found: str, flag: str, tmp_path: Path
) -> None:
    # Real outputs of the same clients: AIPerf's summary beside its profile_export.jsonl, and
    # GuideLLM's CSV of the committed JSON report (guidellm export ... --output kind=csv).
    path = DATA / name
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert f"found {found}" in message and flag in message
    # The commands that take results refuse it alike, exit 2, nothing written.
    from click.testing import CliRunner

    from tracekit.cli import cli

    model = tmp_path / "model.json"
    for argv in (["calibrate", str(path), "--out", str(model)], ["accuracy", str(path)]):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 2, result.output
        assert flag in result.output, result.output
    assert not model.exists()


def test_vllm_bench_lists_of_different_lengths_are_refused(tmp_path: Path) -> None:
    doc = json.loads(VLLM.read_text())
    doc["ttfts"] = doc["ttfts"][:-1]
    bad = tmp_path / "short.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(WorkloadError, match=r"field 'ttfts': expected a list of 30 entries"):
        read_vllm_bench_run(bad)


def test_guidellm_matches_the_clients_own_metrics() -> None:
    doc = json.loads(GUIDELLM.read_text())
    metrics = doc["benchmarks"][0]["metrics"]
    run = read_guidellm_run(GUIDELLM)
    ok = run.frame.filter(pl.col("ok"))
    assert run.num_requests == metrics["request_totals"]["total"] == 24
    assert run.num_failed == metrics["request_totals"]["errored"] == 1
    ttft = metrics["time_to_first_token_ms"]["successful"]
    assert ok["ttft_s"].mean() * 1000 == pytest.approx(ttft["mean"], rel=1e-9)
    assert ok["ttft_s"].median() * 1000 == pytest.approx(ttft["median"], rel=1e-9)
    prompts = metrics["prompt_token_count"]["successful"]
    assert ok["prompt_tokens"].sum() == pytest.approx(prompts["total_sum"])
    # Send to last token: a little below GuideLLM's request_latency, which ends with the stream.
    latency = metrics["request_latency"]["successful"]
    assert 0.9 * latency["mean"] < ok["e2e_s"].mean() < latency["mean"]
    # GuideLLM's inter-token latency is vLLM bench's TPOT (first token excluded), request by
    # request; its time per output token includes the first token.
    stats = {r["request_id"]: r for r in doc["benchmarks"][0]["requests"]["successful"]}
    for row in ok.iter_rows(named=True):
        r = stats[row["request_id"]]
        tpot = (row["e2e_s"] - row["ttft_s"]) / (row["output_tokens"] - 1)
        assert tpot * 1000 == pytest.approx(r["inter_token_latency_ms"], rel=1e-6)
        assert row["e2e_s"] / row["output_tokens"] * 1000 == pytest.approx(
            r["time_per_output_token_ms"], rel=1e-6
        )
    failed = run.frame.filter(~pl.col("ok"))
    assert "400 Bad Request" in failed["error"][0]
    assert run.settings["strategy"] == "poisson" and run.settings["request_rate"] == 6.0


def test_guidellm_sweep_needs_a_benchmark_index(tmp_path: Path) -> None:
    doc = json.loads(GUIDELLM.read_text())
    doc["benchmarks"] = doc["benchmarks"] * 2
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(doc))
    with pytest.raises(WorkloadError, match=r"benchmark.*0: poisson, 1: poisson"):
        load_workload(sweep)
    assert load_workload(sweep, benchmark=1).num_requests == 24


def test_aiperf_export_is_read_in_seconds_with_the_servers_counts() -> None:
    lines = [json.loads(line) for line in AIPERF.read_text().splitlines() if line.strip()]
    run = read_aiperf_run(AIPERF)
    assert run.num_requests == len(lines) == 24
    assert run.num_failed == sum("error" in line for line in lines) == 1
    by_id = {line["metadata"]["x_request_id"]: line for line in lines}
    for row in run.frame.filter(pl.col("ok")).iter_rows(named=True):
        m = by_id[row["request_id"]]["metrics"]
        assert row["ttft_s"] == pytest.approx(m["time_to_first_token"]["value"] / 1000)
        assert row["e2e_s"] == pytest.approx(m["request_latency"]["value"] / 1000)
        assert row["output_tokens"] == m["usage_completion_tokens"]["value"]
        assert row["prompt_tokens"] == m["usage_prompt_tokens"]["value"]
        assert len(row["itl_s"]) == len(m["inter_chunk_latency"]["value"])
    starts = sorted(line["metadata"]["request_start_ns"] for line in lines)
    assert run.frame["start_s"].to_list() == pytest.approx([(s - starts[0]) / 1e9 for s in starts])
    assert "maximum context length" in run.frame.filter(~pl.col("ok"))["error"][0]


def test_aiperf_truncated_line_is_refused_with_its_line(tmp_path: Path) -> None:
    text = AIPERF.read_text()
    cut = tmp_path / "profile_export.jsonl"
    cut.write_text(text[: len(text) - 200])
    with pytest.raises(WorkloadError, match=r"line 24: expected a JSON object .* truncated"):
        read_aiperf_run(cut)
