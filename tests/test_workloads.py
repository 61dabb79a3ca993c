"""Workload loaders: each format on small fixtures and on the shipped real traces.

Expected values come from outside the loaders: numbers computed by hand from the fixture files,
the statistics in the shared data README, the standard library's csv/json/datetime modules, and
vidur's own pre-processing of the same Azure trace (``vidur_arrived.csv``).
"""

from __future__ import annotations

import csv
import dataclasses
import doctest
import hashlib
import importlib
import json
import math
import shutil
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal, assert_series_not_equal

from tracekit.errors import WorkloadError
from tracekit.workloads import (
    PREFIX_HASH_IDS,
    Workload,
    WorkloadFormat,
    WorkloadRequest,
    detect_format,
    load_workload,
    read_azure,
    read_bidkv_trace,
    read_mooncake,
    read_table,
    read_vidur,
    read_vllm_workload,
    scan_azure,
    scan_table,
    workload_schema,
)
from tracekit.workloads.seeded import Stream, splitmix64

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "workloads"
TRACES = ROOT / "traces"
AZURE_FULL = TRACES / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_SAMPLE = TRACES / "azure-llm-2023" / "azure_conv_sample.csv"
MOONCAKE = TRACES / "mooncake-synthetic" / "synthetic_trace.jsonl"
SHAREGPT = TRACES / "sharegpt-lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"

CANONICAL = workload_schema()


def reference_uniform(seed: int, stream: Stream, count: int) -> list[float]:
    """The documented draw rule, re-implemented with Python integers."""
    key = splitmix64(seed ^ int(stream))
    gamma = 0x9E3779B97F4A7C15
    return [(splitmix64(key + (i + 1) * gamma) >> 11) * 2.0**-53 for i in range(count)]


@pytest.fixture(scope="module")
def azure_full() -> Workload:
    return read_azure(AZURE_FULL)


@pytest.fixture(scope="module")
def mooncake_full() -> Workload:
    return read_mooncake(MOONCAKE)


# --- the canonical table and the Workload record ----------------------------------------------


def test_schema_is_declared_once_with_the_documented_columns() -> None:
    assert workload_schema().names() == [
        "request_id",
        "arrival_s",
        "prompt_tokens",
        "output_tokens",
        "max_tokens",
        "priority",
    ]
    assert workload_schema(prefix_hash_ids=True)[PREFIX_HASH_IDS] == pl.List(pl.Int64)
    assert workload_schema()["arrival_s"] == pl.Float64


def test_workload_records_source_hash_and_format() -> None:
    workload = read_azure(DATA / "azure_small.csv")
    assert workload.name == "azure_small"
    assert workload.source == DATA / "azure_small.csv"
    assert workload.format == "azure" == WorkloadFormat.AZURE.value
    assert workload.sha256 == hashlib.sha256((DATA / "azure_small.csv").read_bytes()).hexdigest()
    with pytest.raises(dataclasses.FrozenInstanceError):
        workload.name = "other"  # type: ignore[misc]


def test_iter_requests_yields_rows_in_arrival_order() -> None:
    workload = read_table(DATA / "table.csv")
    requests = list(workload.iter_requests())
    assert [r.request_id for r in requests] == ["r-b", "r-a", "r-d", "r-c"]
    assert requests[1] == WorkloadRequest("r-a", 0.5, 100, 10, 20, 1, None)
    assert all(isinstance(r, tuple) for r in requests)
    mooncake = read_mooncake(DATA / "mooncake_small.jsonl")
    assert next(mooncake.iter_requests()).prefix_hash_ids == (0, 1)


def test_workload_rejects_an_invalid_frame() -> None:
    good = read_table(DATA / "table.csv")
    unsorted = good.frame.reverse()
    with pytest.raises(WorkloadError, match="sorted by arrival"):
        dataclasses.replace(good, frame=unsorted)
    with pytest.raises(WorkloadError, match="workload columns"):
        dataclasses.replace(good, frame=good.frame.drop("priority"))
    capped = good.frame.with_columns(max_tokens=pl.lit(0, dtype=pl.Int64))
    with pytest.raises(WorkloadError, match="max_tokens"):
        dataclasses.replace(good, frame=capped)


# --- Azure ------------------------------------------------------------------------------------


def test_azure_fixture_by_hand() -> None:
    workload = read_azure(DATA / "azure_small.csv")
    expected = pl.DataFrame(
        {
            "request_id": [f"azure-{i:06d}" for i in range(6)],
            # 18:15:50.9951690 - 18:15:46.6805900 = 4.314579 s, ...; 18:16:00.0000001 keeps
            # the 7th fractional digit: 13.3194101 s.
            "arrival_s": [0.0, 4.314579, 4.541877, 4.541877, 13.3194101, 120.0],
            "prompt_tokens": [374, 396, 879, 91, 2, 4142],
            "output_tokens": [44, 109, 55, 16, 7, 601],
            "max_tokens": [44, 109, 55, 16, 7, 601],
            "priority": [0] * 6,
        },
        schema=CANONICAL,
    )
    assert_frame_equal(workload.frame, expected)
    assert workload.frame.get_column("arrival_s").to_list() == pytest.approx(
        expected.get_column("arrival_s").to_list(), rel=1e-15, abs=1e-15
    )
    assert workload.options == {"time_origin": "2023-11-16 18:15:46.680590"}


def test_azure_fixture_has_no_trailing_newline() -> None:
    assert not (DATA / "azure_small.csv").read_bytes().endswith(b"\n")


def test_azure_real_trace_matches_published_statistics(azure_full: Workload) -> None:
    frame = azure_full.frame
    assert azure_full.num_requests == 19_366
    assert frame.get_column("prompt_tokens").mean() == pytest.approx(1155, abs=0.5)
    assert frame.get_column("output_tokens").mean() == pytest.approx(211, abs=0.5)
    # Last line 2023-11-16 19:14:08.4025270 minus first 18:15:46.6805900 = 58 min 21.721937 s.
    assert azure_full.duration_s == pytest.approx(3501.721937, abs=1e-9)
    assert azure_full.num_requests / azure_full.duration_s == pytest.approx(5.5, abs=0.1)
    assert frame.get_column("request_id")[-1] == "azure-019365"


def test_azure_real_first_rows_match_the_standard_library(azure_full: Workload) -> None:
    with AZURE_FULL.open(newline="") as handle:
        rows = list(csv.DictReader(handle))[:200]
    # The data README: trim the 7th fractional digit for datetime.fromisoformat.
    stamps = [datetime.fromisoformat(row["TIMESTAMP"][:26]) for row in rows]
    expected = [(stamp - stamps[0]).total_seconds() for stamp in stamps]
    head = azure_full.frame.head(200)
    # The trace's 7th digits are all 0 here, so microseconds are exact.
    assert head.get_column("arrival_s").to_list() == pytest.approx(expected, abs=1e-9)
    assert head.get_column("prompt_tokens").to_list() == [int(r["ContextTokens"]) for r in rows]
    assert head.get_column("output_tokens").to_list() == [int(r["GeneratedTokens"]) for r in rows]
    assert head.get_column("arrival_s")[1] == pytest.approx(4.314579)


def test_azure_sample_is_the_first_thousand_requests(azure_full: Workload) -> None:
    sample = read_azure(AZURE_SAMPLE)
    assert sample.num_requests == 1000
    assert_frame_equal(sample.frame, azure_full.frame.head(1000))
    assert sample.duration_s == pytest.approx(216.027393, abs=1e-9)


def test_vidur_processed_trace_agrees_with_azure_loader(azure_full: Workload) -> None:
    # vidur ships the same conversation trace pre-processed (data/processed_traces/
    # splitwise_conv.csv); its first five rows are the fixture vidur_arrived.csv.
    vidur = read_vidur(DATA / "vidur_arrived.csv").frame
    azure = azure_full.frame.head(5)
    assert_series_equal(vidur.get_column("arrival_s"), azure.get_column("arrival_s"), abs_tol=1e-9)
    for column in ("prompt_tokens", "output_tokens", "max_tokens"):
        assert_series_equal(vidur.get_column(column), azure.get_column(column))


def test_azure_timestamp_variants(tmp_path: Path) -> None:
    path = tmp_path / "variants.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16T18:15:46.5,1,1\n"  # T separator, one fractional digit
        "2023-11-16 18:15:47,1,1\n"  # no fraction
        "2023-11-16 20:15:48.25+02:00,1,1\n"  # an offset: 18:15:48.25 UTC
        "2023-11-16 18:15:49.0000000Z,1,1"
    )
    frame = read_azure(path).frame
    assert frame.get_column("arrival_s").to_list() == pytest.approx([0.0, 0.5, 1.75, 2.5])


def test_scan_azure_matches_read_azure() -> None:
    lazy = scan_azure(DATA / "azure_small.csv")
    assert isinstance(lazy, pl.LazyFrame)
    assert_frame_equal(lazy.collect(), read_azure(DATA / "azure_small.csv").frame)


# --- Mooncake ---------------------------------------------------------------------------------


def test_mooncake_fixture_by_hand() -> None:
    workload = read_mooncake(DATA / "mooncake_small.jsonl")
    frame = workload.frame
    assert frame.columns == workload_schema(prefix_hash_ids=True).names()
    assert frame.get_column("arrival_s").to_list() == pytest.approx([0.0, 0.0, 0.04, 0.277, 1.514])
    assert frame.get_column("prompt_tokens").to_list() == [1000, 512, 513, 13, 2048]
    assert frame.get_column("output_tokens").to_list() == [6, 4, 1, 92, 210]
    assert frame.get_column("max_tokens").to_list() == [6, 4, 1, 92, 210]
    assert frame.get_column(PREFIX_HASH_IDS).to_list()[2] == [0, 2]
    assert workload.options["bucket"] == "burst"
    assert workload.options["bucketed"] is False


def test_mooncake_semi_synthetic_trace(mooncake_full: Workload) -> None:
    frame = mooncake_full.frame
    assert mooncake_full.num_requests == 3_993
    assert mooncake_full.duration_s / 60 == pytest.approx(17, abs=0.1)
    # Not bucketed: replayed verbatim, arrival = timestamp / 1000 for each line.
    assert mooncake_full.options["bucket"] == "burst"
    with MOONCAKE.open() as handle:
        first = [json.loads(next(handle)) for _ in range(50)]
    # Polars divides by multiplying with the reciprocal: equal to within an ulp.
    assert frame.get_column("arrival_s").head(50).to_list() == pytest.approx(
        [line["timestamp"] / 1000 for line in first], rel=1e-15, abs=1e-15
    )
    assert frame.get_column("prompt_tokens").head(50).to_list() == [
        line["input_length"] for line in first
    ]
    assert frame.get_column(PREFIX_HASH_IDS).head(50).to_list() == [
        line["hash_ids"] for line in first
    ]
    blocks = frame.select(
        (pl.col(PREFIX_HASH_IDS).list.len() == (pl.col("prompt_tokens") / 512).ceil()).all()
    ).item()
    assert blocks


def test_mooncake_bucketed_trace_is_spread_inside_buckets() -> None:
    path = DATA / "mooncake_bucketed.jsonl"
    workload = read_mooncake(path, seed=11)
    assert workload.options["bucketed"] is True
    assert workload.options["bucket"] == "spread"
    assert workload.options["bucket_ms"] == 3000.0  # median of the gaps 3000, 3000, 6000
    assert workload.options["seed"] == 11
    # Each request lands in [t, t + 3 s) of its own timestamp t (records 3 per bucket).
    starts = {f"mooncake-{i:06d}": [0, 0, 0, 3, 3, 3, 6, 6, 6, 12, 12, 12][i] for i in range(12)}
    for request in workload.iter_requests():
        start = starts[request.request_id]
        assert start <= request.arrival_s < start + 3.0
    # The documented rule: t + u_i * width, u_i by record index.
    draws = reference_uniform(11, Stream.BUCKET_SPREAD, 12)
    by_id = dict(zip(workload.frame["request_id"], workload.frame["arrival_s"], strict=True))
    for index, u in enumerate(draws):
        expected = starts[f"mooncake-{index:06d}"] + u * 3.0
        assert by_id[f"mooncake-{index:06d}"] == pytest.approx(expected, abs=1e-12)


def test_mooncake_bucket_modes_and_determinism() -> None:
    path = DATA / "mooncake_bucketed.jsonl"
    burst = read_mooncake(path, bucket="burst")
    assert (
        burst.frame.get_column("arrival_s").to_list()
        == [0.0] * 3 + [3.0] * 3 + [6.0] * 3 + [12.0] * 3
    )
    assert burst.options["bucket_ms"] is None
    same_a = read_mooncake(path, bucket="spread", seed=5).frame
    same_b = read_mooncake(path, bucket="spread", seed=5).frame
    other = read_mooncake(path, bucket="spread", seed=6).frame
    assert_frame_equal(same_a, same_b)
    assert same_a.get_column("arrival_s").to_list() != other.get_column("arrival_s").to_list()
    # A narrower explicit width keeps everyone inside [t, t + 1 s).
    narrow = read_mooncake(path, bucket="spread", bucket_ms=1000)
    offsets = narrow.frame.select(pl.col("arrival_s") - pl.col("arrival_s").floor()).to_series()
    assert offsets.max() < 1.0
    # Spreading a non-bucketed trace on request is allowed and recorded.
    spread = read_mooncake(DATA / "mooncake_small.jsonl", bucket="spread")
    assert spread.options == {
        "bucket": "spread",
        "bucket_requested": "spread",
        "bucketed": False,
        "bucket_ms": 237.0,  # median gap of the distinct stamps 0, 40, 277, 1514
        "seed": 0,
        "hash_block_tokens": 512,
    }


def test_mooncake_without_hash_ids_has_no_prefix_column(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text('{"timestamp": 5, "input_length": 10, "output_length": 2}\n')
    workload = read_mooncake(path)
    assert workload.frame.columns == CANONICAL.names()
    assert workload.frame.get_column("arrival_s").to_list() == [0.005]


# --- BidKV frozen trace and vLLM workload JSON ------------------------------------------------


def test_bidkv_trace_fixture() -> None:
    workload = read_bidkv_trace(DATA / "bidkv_trace.jsonl")
    expected = pl.DataFrame(
        {
            "request_id": ["mixed-0000", "mixed-0001", "mixed-0002", "mixed-0003"],
            "arrival_s": [0.0, 0.2631, 0.2631, 1.50025],
            "prompt_tokens": [3, 5, 1, 10],
            "output_tokens": [128, 64, 1, 256],
            "max_tokens": [128, 64, 1, 256],
            "priority": [0, 0, 0, 0],
        },
        schema=CANONICAL,
    )
    assert_frame_equal(workload.frame, expected)
    assert workload.name == "bidkv_trace"
    assert workload.format == "bidkv-trace"


def test_vllm_workload_fixture() -> None:
    workload = read_vllm_workload(DATA / "vllm_workload.json")
    expected = pl.DataFrame(
        {
            "request_id": ["mixed-0001", "mixed-0000", "mixed-0002"],
            "arrival_s": [0.12, 0.2631, 0.9005],
            "prompt_tokens": [37, 412, 1024],
            "output_tokens": [64, 128, 256],
            "max_tokens": [64, 128, 256],
            "priority": [0, 0, 0],
        },
        schema=CANONICAL,
    )
    assert_frame_equal(workload.frame, expected)
    assert workload.name == "mixed"
    assert workload.options == {
        "source_request_rate": 3.8,
        "source_seed": 42,
        "prompt_tokens_from": "metadata.actual_prompt_tokens",
    }


def test_vllm_workload_counts_token_id_prompts(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    document = {
        "workload_name": "ids",
        "requests": [
            {"request_id": "a", "prompt": [1, 2, 3], "max_tokens": 4, "arrival_time_ms": 0},
            {"request_id": "b", "prompt": [5], "max_tokens": 1, "arrival_time_ms": 1000},
        ],
    }
    path.write_text(json.dumps(document))
    workload = read_vllm_workload(path)
    assert workload.frame.get_column("prompt_tokens").to_list() == [3, 1]
    assert workload.frame.get_column("arrival_s").to_list() == [0.0, 1.0]
    assert workload.options["prompt_tokens_from"] == "prompt"


# --- vidur ------------------------------------------------------------------------------------


def test_vidur_replay_picks_one_date() -> None:
    workload = read_vidur(DATA / "vidur_replay.csv", date="2023-11-16")
    assert workload.frame.get_column("arrival_s").to_list() == [0.0, 0.5, 2.75]
    assert workload.frame.get_column("prompt_tokens").to_list() == [374, 396, 879]
    other = read_vidur(DATA / "vidur_replay.csv", date="2023-11-17")
    assert other.frame.get_column("request_id").to_list() == ["vidur-000003"]
    assert other.options["shape"] == "replay"


def test_vidur_replay_accepts_time_of_day(tmp_path: Path) -> None:
    path = tmp_path / "tod.csv"
    path.write_text(
        "Date,Time,PromptTokenCount,CompletionTokenCount\n"
        "d,10:00:01.5,5,1\nd,10:00:00,6,2\nd,10:01:00,7,3\n"
    )
    frame = read_vidur(path).frame
    assert frame.get_column("arrival_s").to_list() == [0.0, 1.5, 60.0]
    assert frame.get_column("request_id").to_list() == [
        "vidur-000001",
        "vidur-000000",
        "vidur-000002",
    ]


def test_vidur_lengths_get_seeded_poisson_arrivals() -> None:
    workload = read_vidur(DATA / "vidur_lengths.csv", rate=2.0, seed=3)
    draws = reference_uniform(3, Stream.POISSON, 6)
    expected = []
    clock = 0.0
    for u in draws:
        clock += -math.log(1.0 - u) / 2.0
        expected.append(clock)
    assert workload.frame.get_column("arrival_s").to_list() == pytest.approx(expected, rel=1e-12)
    assert workload.frame.get_column("prompt_tokens").to_list() == [74, 290, 1402, 2497, 41, 500]
    assert workload.options == {"shape": "lengths", "seed": 3, "shuffle": False, "rate": 2.0}
    again = read_vidur(DATA / "vidur_lengths.csv", rate=2.0, seed=3)
    assert_frame_equal(workload.frame, again.frame)
    other = read_vidur(DATA / "vidur_lengths.csv", rate=2.0, seed=4)
    assert_series_not_equal(
        other.frame.get_column("arrival_s"), workload.frame.get_column("arrival_s")
    )


def test_vidur_shuffle_permutes_lengths_deterministically() -> None:
    plain = read_vidur(DATA / "vidur_lengths.csv", rate=1.0)
    shuffled = read_vidur(DATA / "vidur_lengths.csv", rate=1.0, shuffle=True, seed=1)
    again = read_vidur(DATA / "vidur_lengths.csv", rate=1.0, shuffle=True, seed=1)
    assert_frame_equal(shuffled.frame, again.frame)
    # The same requests with the same lengths, in another order.
    assert sorted(shuffled.frame["request_id"]) == sorted(plain.frame["request_id"])
    assert shuffled.frame["request_id"].to_list() != plain.frame["request_id"].to_list()
    pairs = set(zip(shuffled.frame["request_id"], shuffled.frame["prompt_tokens"], strict=True))
    assert pairs == set(zip(plain.frame["request_id"], plain.frame["prompt_tokens"], strict=True))


def test_fixtures_copy_the_real_files_where_they_say_so() -> None:
    sharegpt = SHAREGPT.read_text().splitlines()[:6]
    assert (DATA / "vidur_lengths.csv").read_text().splitlines()[:6] == sharegpt
    azure = AZURE_FULL.read_text().splitlines()[:4]
    assert (DATA / "azure_small.csv").read_text().splitlines()[:4] == azure


def test_vidur_sharegpt_lengths_at_a_poisson_rate() -> None:
    workload = read_vidur(SHAREGPT, rate=3.8, seed=42)
    frame = workload.frame
    assert workload.num_requests == 30_731
    with SHAREGPT.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert frame.get_column("prompt_tokens").to_list() == [
        int(r["num_prefill_tokens"]) for r in rows
    ]
    assert frame.get_column("output_tokens").to_list() == [
        int(r["num_decode_tokens"]) for r in rows
    ]
    # Mean gap of 30,731 exponential gaps is within a few percent of 1 / rate.
    assert workload.num_requests / workload.duration_s == pytest.approx(3.8, rel=0.03)


def test_vidur_intervals_paired_with_a_lengths_file() -> None:
    workload = read_vidur(DATA / "vidur_intervals.csv", lengths=DATA / "vidur_lengths.csv")
    assert workload.frame.get_column("arrival_s").to_list() == pytest.approx([0.0, 1.5, 1.65, 4.75])
    assert workload.frame.get_column("prompt_tokens").to_list() == [74, 290, 1402, 2497]
    assert workload.options["num_paired"] == 4  # 4 arrival times, 6 length rows
    floored = read_vidur(
        DATA / "vidur_intervals.csv", lengths=DATA / "vidur_lengths.csv", whole_seconds=True
    )
    assert floored.frame.get_column("arrival_s").to_list() == [0.0, 1.0, 1.0, 4.0]


def test_vidur_intervals_with_own_lengths_and_numeric_times(tmp_path: Path) -> None:
    path = tmp_path / "own.csv"
    path.write_text("arrival_time,num_prefill_tokens,num_decode_tokens\n10,5,1\n12.5,6,2\n")
    frame = read_vidur(path).frame
    assert frame.get_column("arrival_s").to_list() == [0.0, 2.5]
    assert frame.get_column("prompt_tokens").to_list() == [5, 6]


# --- plain tables -----------------------------------------------------------------------------


def test_table_csv_defaults_and_sorting() -> None:
    workload = read_table(DATA / "table.csv")
    expected = pl.DataFrame(
        {
            "request_id": ["r-b", "r-a", "r-d", "r-c"],
            "arrival_s": [0.0, 0.5, 0.5, 2.25],
            "prompt_tokens": [50, 100, 300, 8],
            "output_tokens": [5, 10, 30, 1],
            "max_tokens": [5, 20, 30, 1],  # the empty cell of r-b means output_tokens
            "priority": [0, 1, 0, -1],  # the empty cell of r-d means 0
        },
        schema=CANONICAL,
    )
    assert_frame_equal(workload.frame, expected)
    assert workload.format == "csv"


def test_table_parquet_round_trip_with_prefix_ids(tmp_path: Path) -> None:
    source = read_mooncake(DATA / "mooncake_small.jsonl").frame
    path = tmp_path / "table.parquet"
    source.write_parquet(path)
    workload = read_table(path)
    assert workload.format == "parquet"
    assert_frame_equal(workload.frame, source)
    # No optional columns: ids are numbered, max_tokens and priority defaulted.
    minimal = tmp_path / "minimal.parquet"
    pl.DataFrame(
        {"arrival_s": [1.0, 0.0], "prompt_tokens": [3, 4], "output_tokens": [2, 1]}
    ).write_parquet(minimal)
    frame = read_table(minimal).frame
    assert frame.get_column("request_id").to_list() == ["req-000001", "req-000000"]
    assert frame.get_column("max_tokens").to_list() == [1, 2]
    assert frame.get_column("priority").to_list() == [0, 0]


def test_scan_table_matches_read_table(tmp_path: Path) -> None:
    lazy = scan_table(DATA / "table.csv")
    assert isinstance(lazy, pl.LazyFrame)
    assert_frame_equal(
        lazy.collect().sort("arrival_s", maintain_order=True), read_table(DATA / "table.csv").frame
    )
    path = tmp_path / "t.parquet"
    read_table(DATA / "table.csv").frame.write_parquet(path)
    assert_frame_equal(scan_table(path).collect(), read_table(path).frame)


# --- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("azure_small.csv", WorkloadFormat.AZURE),
        ("mooncake_small.jsonl", WorkloadFormat.MOONCAKE),
        ("mooncake_bucketed.jsonl", WorkloadFormat.MOONCAKE),
        ("bidkv_trace.jsonl", WorkloadFormat.BIDKV_TRACE),
        ("vllm_workload.json", WorkloadFormat.VLLM_WORKLOAD),
        ("vidur_replay.csv", WorkloadFormat.VIDUR),
        ("vidur_arrived.csv", WorkloadFormat.VIDUR),
        ("vidur_lengths.csv", WorkloadFormat.VIDUR),
        ("vidur_intervals.csv", WorkloadFormat.VIDUR),
        ("table.csv", WorkloadFormat.CSV),
    ],
)
def test_detect_format_by_extension_and_header(name: str, expected: WorkloadFormat) -> None:
    assert detect_format(DATA / name) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("azure_small.csv", WorkloadFormat.AZURE),
        ("mooncake_small.jsonl", WorkloadFormat.MOONCAKE),
        ("vllm_workload.json", WorkloadFormat.VLLM_WORKLOAD),
        ("table.csv", WorkloadFormat.CSV),
    ],
)
def test_detect_format_without_extension(
    tmp_path: Path, name: str, expected: WorkloadFormat
) -> None:
    copy = tmp_path / "trace.data"
    shutil.copy(DATA / name, copy)
    assert detect_format(copy) is expected


def test_detect_parquet_by_magic(tmp_path: Path) -> None:
    path = tmp_path / "table.bin"
    read_table(DATA / "table.csv").frame.write_parquet(path)
    assert detect_format(path) is WorkloadFormat.PARQUET
    assert load_workload(path).num_requests == 4


def test_detect_shipped_traces() -> None:
    assert detect_format(AZURE_FULL) is WorkloadFormat.AZURE
    assert detect_format(MOONCAKE) is WorkloadFormat.MOONCAKE
    assert detect_format(SHAREGPT) is WorkloadFormat.VIDUR


def test_explicit_format_name_is_case_insensitive() -> None:
    workload = load_workload(DATA / "bidkv_trace.jsonl", format="BIDKV_TRACE")
    assert workload.format == "bidkv-trace"


# --- load_workload: window, limit, rate_scale, priorities --------------------------------------


def test_load_workload_without_options_equals_the_reader() -> None:
    loaded = load_workload(DATA / "azure_small.csv")
    assert_frame_equal(loaded.frame, read_azure(DATA / "azure_small.csv").frame)
    assert loaded.options == {
        "time_origin": "2023-11-16 18:15:46.680590",
        "limit": None,
        "window": None,
        "rate_scale": 1.0,
        "priority_seed": None,
        "priority_levels": None,
        "num_source_requests": 6,
    }


def test_window_keeps_half_open_interval_relative_to_its_start() -> None:
    # Arrivals 0, 4.314579, 4.541877, 4.541877, 13.3194101, 120.
    workload = load_workload(DATA / "azure_small.csv", window=(4.4, 13.3194101))
    assert workload.frame.get_column("request_id").to_list() == ["azure-000002", "azure-000003"]
    assert workload.frame.get_column("arrival_s").to_list() == pytest.approx([0.141877] * 2)
    assert workload.options["window"] == [4.4, 13.3194101]
    open_end = load_workload(DATA / "azure_small.csv", window=(13.3194101, None))
    assert open_end.frame.get_column("arrival_s").to_list() == pytest.approx([0.0, 106.6805899])
    assert open_end.options["window"] == [13.3194101, None]


def test_limit_applies_after_the_window() -> None:
    workload = load_workload(DATA / "azure_small.csv", window=(4, 1000), limit=2)
    assert workload.frame.get_column("request_id").to_list() == ["azure-000001", "azure-000002"]
    assert workload.options["num_source_requests"] == 6


def test_rate_scale_divides_arrivals() -> None:
    base = read_azure(DATA / "azure_small.csv").frame.get_column("arrival_s")
    fast = load_workload(DATA / "azure_small.csv", rate_scale=2.0).frame.get_column("arrival_s")
    slow = load_workload(DATA / "azure_small.csv", rate_scale=0.5).frame.get_column("arrival_s")
    assert fast.to_list() == pytest.approx((base / 2).to_list())
    assert slow.to_list() == pytest.approx((base * 2).to_list())


def test_window_then_rate_scale_on_the_real_sample() -> None:
    workload = load_workload(AZURE_SAMPLE, window=(60, 120), rate_scale=2.0)
    assert workload.duration_s <= 30.0
    with AZURE_SAMPLE.open(newline="") as handle:
        stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in csv.DictReader(handle)]
    offsets = [(s - stamps[0]).total_seconds() for s in stamps]
    assert workload.num_requests == sum(60 <= o < 120 for o in offsets)


def test_seeded_priorities_are_deterministic_and_stable_under_slicing() -> None:
    full = load_workload(AZURE_SAMPLE, priority_seed=7, priority_levels=4)
    again = load_workload(AZURE_SAMPLE, priority_seed=7, priority_levels=4)
    other = load_workload(AZURE_SAMPLE, priority_seed=8, priority_levels=4)
    assert_frame_equal(full.frame, again.frame)
    assert_series_not_equal(full.frame.get_column("priority"), other.frame.get_column("priority"))
    priorities = full.frame.get_column("priority")
    assert set(priorities.unique().to_list()) == {0, 1, 2, 3}
    assert priorities.to_list() == [
        math.floor(u * 4) for u in reference_uniform(7, Stream.PRIORITY, 1000)
    ]
    assert full.options["priority_seed"] == 7
    assert full.options["priority_levels"] == 4
    # A request keeps its priority whatever window or limit selects it.
    sliced = load_workload(
        AZURE_SAMPLE, priority_seed=7, priority_levels=4, window=(100, 150), limit=40
    )
    joined = sliced.frame.join(full.frame, on="request_id", suffix="_full")
    assert joined.height == 40
    assert_series_equal(
        joined.get_column("priority"), joined.get_column("priority_full"), check_names=False
    )


def test_loader_options_pass_through_load_workload() -> None:
    workload = load_workload(DATA / "mooncake_bucketed.jsonl", bucket="burst")
    assert workload.options["bucket"] == "burst"
    lengths = load_workload(DATA / "vidur_lengths.csv", rate=5.0, seed=9, limit=3)
    assert lengths.options["rate"] == 5.0
    assert lengths.options["seed"] == 9
    assert lengths.num_requests == 3


# --- documentation examples -------------------------------------------------------------------


@pytest.mark.parametrize("module", ["seeded", "model", "detect", "azure", "load"])
def test_docstring_examples_run(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples use repository-relative trace paths
    imported = importlib.import_module(f"tracekit.workloads.{module}")
    result = doctest.testmod(imported, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
