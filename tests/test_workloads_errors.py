"""Every kind of bad workload input raises one clear, one-line WorkloadError.

Each case writes a small bad file, calls a loader, and checks that the message names the file,
the field and the line or record where known, says what was expected and found, and how to fix
it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.errors import TracekitError, WorkloadError
from tracekit.workloads import (
    load_workload,
    read_azure,
    read_bidkv_trace,
    read_mooncake,
    read_sessions,
    read_table,
    read_vidur,
    read_vllm_workload,
    scan_azure,
    scan_table,
)

DATA = Path(__file__).resolve().parent / "data" / "workloads"

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_AZURE = AZURE_HEADER + "2023-11-16 18:15:46.6805900,374,44\n"


def moon(**fields: Any) -> str:
    line = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
    line.update(fields)
    return json.dumps({k: v for k, v in line.items() if v is not ...}) + "\n"


def bidkv(**fields: Any) -> str:
    line = {
        "request_id": "r0",
        "prompt_tokens": [1, 2],
        "max_new_tokens": 4,
        "arrival_offset_ms": 0,
    }
    line.update(fields)
    return json.dumps({k: v for k, v in line.items() if v is not ...}) + "\n"


def vllm(*requests: dict[str, Any], **top: Any) -> str:
    document: dict[str, Any] = {"workload_name": "w", "request_rate": 1.0, "seed": 1}
    document["requests"] = list(requests)
    document.update(top)
    return json.dumps(document, indent=2)


def request(**fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "request_id": "a",
        "prompt": "hello",
        "max_tokens": 8,
        "arrival_time_ms": 0,
        "metadata": {"actual_prompt_tokens": "5"},
    }
    entry.update(fields)
    return {k: v for k, v in entry.items() if v is not ...}


@dataclass
class Case:
    """A bad input, how to load it, and what the message must say."""

    name: str
    filename: str
    content: str | bytes | None
    load: Callable[[Path], Any]
    expect: list[str] = field(default_factory=list)


CASES = [
    # --- empty and unreadable files ---
    Case("missing file", "absent.csv", None, read_azure, ["no such file", "check the path"]),
    Case("empty csv", "empty.csv", b"", read_azure, ["empty file (0 bytes)"]),
    Case("header only", "header.csv", AZURE_HEADER, read_azure, ["no request rows"]),
    Case("empty jsonl", "empty.jsonl", b"", read_mooncake, ["empty file"]),
    Case("blank jsonl", "blank.jsonl", "\n\n  \n", read_mooncake, ["only blank lines"]),
    Case("empty via load", "empty.csv", b"", load_workload, ["empty file"]),
    Case("empty via scan_azure", "empty.csv", b"", scan_azure, ["empty file"]),
    Case("empty via scan_table", "empty.csv", b"", scan_table, ["empty file"]),
    # --- Azure CSV ---
    Case(
        "azure missing column",
        "a.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,1\n",
        read_azure,
        ["field 'GeneratedTokens'", "columns TIMESTAMP, ContextTokens, GeneratedTokens"],
    ),
    Case(
        "azure bad timestamp",
        "a.csv",
        GOOD_AZURE + "yesterday at noon,5,6\n",
        read_azure,
        ["line 3", "field 'TIMESTAMP'", "'yesterday at noon'", "2023-11-16 18:15:46.6805900"],
    ),
    Case(
        "azure NaN tokens",
        "a.csv",
        AZURE_HEADER + "2023-11-16 18:15:46.68,NaN,3\n",
        read_azure,
        ["line 2", "field 'ContextTokens'", "an integer >= 1", "'NaN'"],
    ),
    Case(
        "azure negative tokens",
        "a.csv",
        GOOD_AZURE + "2023-11-16 18:15:47.0,-5,3\n",
        read_azure,
        ["line 3", "field 'ContextTokens'", "'-5'"],
    ),
    Case(
        "azure zero output",
        "a.csv",
        GOOD_AZURE + GOOD_AZURE[len(AZURE_HEADER) :].replace(",44", ",0"),
        read_azure,
        ["line 3", "field 'GeneratedTokens'", "an integer >= 1", "'0'"],
    ),
    Case(
        "azure fractional tokens",
        "a.csv",
        AZURE_HEADER + "2023-11-16 18:15:46.68,12.5,3\n",
        read_azure,
        ["field 'ContextTokens'", "'12.5'"],
    ),
    Case(
        "azure empty cell",
        "a.csv",
        GOOD_AZURE + "2023-11-16 18:15:47.0,,3\n",
        read_azure,
        ["line 3", "field 'ContextTokens'", "an empty value"],
    ),
    Case(
        "azure text tokens",
        "a.csv",
        AZURE_HEADER + "2023-11-16 18:15:46.68,many,3\n",
        read_azure,
        ["field 'ContextTokens'", "'many'"],
    ),
    Case(
        "azure huge tokens",
        "a.csv",
        AZURE_HEADER + "2023-11-16 18:15:46.68,1e20,3\n",
        read_azure,
        ["field 'ContextTokens'", "'1e20'"],
    ),
    Case(
        "csv too many fields",
        "a.csv",
        GOOD_AZURE + "2023-11-16 18:15:47.0,1,2,3,4\n",
        read_azure,
        ["CSV parse error", "same number of fields"],
    ),
    # --- Mooncake JSONL ---
    Case(
        "mooncake bad json line",
        "m.jsonl",
        moon() + '{"timestamp": 5, "input_length": \n',
        read_mooncake,
        ["line 2", "invalid JSON (Expecting value at column 33)", "repair or delete that line"],
    ),
    Case(
        "mooncake array line",
        "m.jsonl",
        moon() + "[1, 2, 3]\n",
        read_mooncake,
        ["line 2", "a JSON list"],
    ),
    Case(
        "mooncake missing key",
        "m.jsonl",
        moon(output_length=...),
        read_mooncake,
        ["field 'output_length'"],
    ),
    Case(
        "mooncake negative timestamp",
        "m.jsonl",
        moon() + moon(timestamp=-3),
        read_mooncake,
        ["line 2", "field 'timestamp'", "a number >= 0", "-3"],
    ),
    Case(
        "mooncake NaN-like timestamp",
        "m.jsonl",
        moon() + moon(timestamp="soon"),
        read_mooncake,
        ["field 'timestamp'", "'soon'"],
    ),
    Case(
        "mooncake zero input",
        "m.jsonl",
        moon() + "\n" + moon(input_length=0),
        read_mooncake,
        ["line 3", "field 'input_length'", "an integer >= 1"],
    ),
    Case(
        "mooncake hash length",
        "m.jsonl",
        moon(input_length=1025, hash_ids=[1, 2]),
        read_mooncake,
        ["line 1", "field 'hash_ids'", "ceil(input_length / 512)", "2 ids for 1025 input tokens"],
    ),
    Case(
        "mooncake hash type",
        "m.jsonl",
        moon(hash_ids="abc"),
        read_mooncake,
        ["field 'hash_ids'", "a list of integers"],
    ),
    Case(
        "mooncake bad bucket",
        "m.jsonl",
        moon(),
        lambda p: read_mooncake(p, bucket="smear"),  # type: ignore[arg-type]
        ["field 'bucket'", "auto, burst, spread", "'smear'"],
    ),
    Case(
        "mooncake bad bucket_ms",
        "m.jsonl",
        moon(),
        lambda p: read_mooncake(p, bucket="spread", bucket_ms=0),
        ["field 'bucket_ms'", "> 0"],
    ),
    Case(
        "mooncake spread one stamp",
        "m.jsonl",
        moon() + moon(),
        lambda p: read_mooncake(p, bucket="spread"),
        ["two distinct timestamps", "bucket_ms"],
    ),
    # --- BidKV frozen trace ---
    Case(
        "bidkv empty prompt",
        "t.jsonl",
        bidkv() + "\n" + bidkv(request_id="r1", prompt_tokens=[]),
        read_bidkv_trace,
        ["line 3", "field 'prompt_tokens'", "a non-empty list of token ids"],
    ),
    Case(
        "bidkv text prompt",
        "t.jsonl",
        bidkv(prompt_tokens="hello"),
        read_bidkv_trace,
        ["field 'prompt_tokens'", "a list of token ids"],
    ),
    Case(
        "bidkv zero max_new_tokens",
        "t.jsonl",
        bidkv(max_new_tokens=0),
        read_bidkv_trace,
        ["line 1", "field 'max_new_tokens'", "an integer >= 1"],
    ),
    Case(
        "bidkv missing arrival",
        "t.jsonl",
        bidkv(arrival_offset_ms=...),
        read_bidkv_trace,
        ["field 'arrival_offset_ms'"],
    ),
    Case(
        "bidkv duplicate ids",
        "t.jsonl",
        bidkv() + bidkv(arrival_offset_ms=5),
        read_bidkv_trace,
        ["field 'request_id'", "unique request ids", "'r0' more than once"],
    ),
    # --- vLLM workload JSON ---
    Case(
        "vllm truncated json",
        "w.json",
        vllm(request())[:-20],
        read_vllm_workload,
        ["invalid JSON", "line ", "column ", "cut short"],
    ),
    Case(
        "vllm top-level array",
        "w.json",
        json.dumps([request()]),
        read_vllm_workload,
        ["field 'requests'", "'requests' array"],
    ),
    Case(
        "vllm empty requests",
        "w.json",
        vllm(),
        read_vllm_workload,
        ["field 'requests'", "at least one request"],
    ),
    Case(
        "vllm text prompt without count",
        "w.json",
        vllm(request(), request(request_id="b", metadata={"dataset": "x"})),
        read_vllm_workload,
        ["requests[1]", "metadata.actual_prompt_tokens", "found neither", "re-freeze"],
    ),
    Case(
        "vllm bad count",
        "w.json",
        vllm(request(metadata={"actual_prompt_tokens": "lots"})),
        read_vllm_workload,
        ["requests[0]", "field 'metadata.actual_prompt_tokens'", "'lots'"],
    ),
    Case(
        "vllm negative arrival",
        "w.json",
        vllm(request(arrival_time_ms=-1)),
        read_vllm_workload,
        ["requests[0]", "field 'arrival_time_ms'", "a number >= 0"],
    ),
    Case(
        "vllm missing max_tokens",
        "w.json",
        vllm(request(max_tokens=...)),
        read_vllm_workload,
        ["field 'max_tokens'"],
    ),
    # --- vidur CSVs ---
    Case(
        "vidur lengths without rate",
        "v.csv",
        "num_prefill_tokens,num_decode_tokens\n5,6\n",
        read_vidur,
        ["field 'rate'", "the option was not given", "rate=<requests per second>"],
    ),
    Case(
        "vidur zero rate",
        "v.csv",
        "num_prefill_tokens,num_decode_tokens\n5,6\n",
        lambda p: read_vidur(p, rate=0),
        ["field 'rate'", "a finite number > 0", "found 0"],
    ),
    Case(
        "vidur rate on replay",
        "v.csv",
        "Date,Time,PromptTokenCount,CompletionTokenCount\nd,1,2,3\n",
        lambda p: read_vidur(p, rate=2.0),
        ["field 'rate'", "no rate option for a vidur 'replay' file"],
    ),
    Case(
        "vidur zero rate on replay",
        "v.csv",
        "Date,Time,PromptTokenCount,CompletionTokenCount\nd,1,2,3\n",
        lambda p: read_vidur(p, rate=0),
        ["field 'rate'", "no rate option"],
    ),
    Case(
        "vidur shuffle on arrived",
        "v.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,2,3\n",
        lambda p: read_vidur(p, shuffle=True),
        ["field 'shuffle'", "no shuffle option for a vidur 'arrived' file"],
    ),
    Case(
        "vidur several dates",
        "v.csv",
        "Date,Time,PromptTokenCount,CompletionTokenCount\nd1,1,2,3\nd2,1,2,3\n",
        read_vidur,
        ["field 'date'", "d1, d2", "pass date="],
    ),
    Case(
        "vidur unknown date",
        "v.csv",
        "Date,Time,PromptTokenCount,CompletionTokenCount\nd1,1,2,3\n",
        lambda p: read_vidur(p, date="d9"),
        ["field 'date'", "'d9'", "(d1)"],
    ),
    Case(
        "vidur bad time",
        "v.csv",
        "Date,Time,PromptTokenCount,CompletionTokenCount\nd,noon,2,3\n",
        read_vidur,
        ["line 2", "field 'Time'", "'noon'"],
    ),
    Case(
        "vidur zero decode",
        "v.csv",
        "num_prefill_tokens,num_decode_tokens\n5,6\n7,0\n",
        lambda p: read_vidur(p, rate=1.0),
        ["line 3", "field 'num_decode_tokens'", "an integer >= 1"],
    ),
    Case(
        "vidur unknown header",
        "v.csv",
        "foo,bar\n1,2\n",
        read_vidur,
        ["line 1", "a vidur header", "found columns foo, bar"],
    ),
    Case(
        "vidur intervals without lengths",
        "v.csv",
        "arrival_time\n2024-01-01 00:00:00\n",
        read_vidur,
        ["field 'lengths'", "lengths=<vidur lengths CSV>"],
    ),
    Case(
        "vidur bad arrival_time",
        "v.csv",
        "arrival_time,num_prefill_tokens,num_decode_tokens\n2024-01-01 00:00:00,1,2\nlater,1,2\n",
        read_vidur,
        ["line 3", "field 'arrival_time'", "'later'"],
    ),
    # --- plain tables ---
    Case(
        "table missing output",
        "t.csv",
        "arrival_s,prompt_tokens\n0,5\n",
        read_table,
        ["field 'output_tokens'"],
    ),
    Case(
        "table cap below output",
        "t.csv",
        "arrival_s,prompt_tokens,output_tokens,max_tokens\n0,5,9,4\n",
        read_table,
        ["line 2", "field 'max_tokens'", "a cap >= output_tokens (9)", "'4'"],
    ),
    Case(
        "table negative arrival",
        "t.csv",
        "arrival_s,prompt_tokens,output_tokens\n0,5,9\n-2,5,9\n",
        read_table,
        ["line 3", "field 'arrival_s'", "a number >= 0"],
    ),
    Case(
        "table infinite arrival",
        "t.csv",
        "arrival_s,prompt_tokens,output_tokens\ninf,5,9\n",
        read_table,
        ["line 2", "field 'arrival_s'", "'inf'"],
    ),
    Case(
        "table empty id",
        "t.csv",
        "request_id,arrival_s,prompt_tokens,output_tokens\n,0,5,9\n",
        read_table,
        ["line 2", "field 'request_id'", "a non-empty request id"],
    ),
    Case(
        "table csv prefix ids",
        "t.csv",
        'arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,5,9,"[1,2]"\n',
        read_table,
        ["field 'prefix_hash_ids'", "Parquet"],
    ),
    Case(
        "junk parquet",
        "t.parquet",
        b"definitely not parquet",
        read_table,
        ["a readable Parquet file", "truncated or corrupt"],
    ),
    # --- detection and format names ---
    Case(
        "unknown format name",
        "a.csv",
        GOOD_AZURE,
        lambda p: load_workload(p, format="splunk"),
        ["field 'format'", "azure, mooncake", "'splunk'"],
    ),
    Case(
        "unknown csv header",
        "a.csv",
        "when,what\n1,2\n",
        load_workload,
        ["line 1", "a known CSV header", "'when,what'", "format="],
    ),
    Case(
        "unknown json keys",
        "a.jsonl",
        '{"when": 1}\n',
        load_workload,
        ["a Mooncake line", "keys when"],
    ),
    Case(
        "table reader on azure file",
        "a.csv",
        GOOD_AZURE,
        read_table,
        ["field 'arrival_s'", "columns: TIMESTAMP, ContextTokens, GeneratedTokens"],
    ),
    Case(
        "table reader with other format",
        "a.csv",
        GOOD_AZURE,
        lambda p: read_table(p, format="azure"),
        ["field 'format'", "'csv' or 'parquet'", "'azure'"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_raises_one_line_error(tmp_path: Path, case: Case) -> None:
    path = tmp_path / case.filename
    if isinstance(case.content, bytes):
        path.write_bytes(case.content)
    elif isinstance(case.content, str):
        path.write_text(case.content, encoding="utf-8")
    with pytest.raises(WorkloadError) as raised:
        case.load(path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert "expected " in message
    assert "found " in message
    assert "fix: " in message
    for fragment in case.expect:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert isinstance(raised.value, TracekitError)


def test_truncated_parquet(tmp_path: Path) -> None:
    whole = tmp_path / "whole.parquet"
    pl.DataFrame(
        {"arrival_s": [float(i) for i in range(500)], "prompt_tokens": 5, "output_tokens": 1}
    ).write_parquet(whole)
    cut = tmp_path / "cut.parquet"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    for loader in (read_table, load_workload):
        with pytest.raises(WorkloadError, match="truncated or corrupt"):
            loader(cut)


def test_every_parquet_reader_gives_the_same_error(tmp_path: Path) -> None:
    # A table, its lazy scan and a conversation log read Parquet through one function: the
    # copies had drifted (two proposed a fix without the likely cause).
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 definitely not parquet PAR1")
    messages = []
    for loader in (read_table, scan_table, read_sessions):
        with pytest.raises(WorkloadError) as raised:
            loader(junk)
        messages.append(str(raised.value))
    assert len(set(messages)) == 1, messages
    assert "re-write the Parquet file (was the copy cut short?)" in messages[0]


def test_parquet_without_rows(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    schema = {"arrival_s": pl.Float64, "prompt_tokens": pl.Int64, "output_tokens": pl.Int64}
    pl.DataFrame(schema=schema).write_parquet(path)
    with pytest.raises(WorkloadError, match="no request rows"):
        read_table(path)


AZURE = DATA / "azure_small.csv"


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        ({"rate_scale": 0}, ["field 'rate_scale'", "a finite number > 0", "found 0"]),
        ({"rate_scale": -1.5}, ["field 'rate_scale'", "-1.5"]),
        ({"rate_scale": math.nan}, ["field 'rate_scale'", "nan"]),
        ({"rate_scale": True}, ["field 'rate_scale'", "True"]),
        ({"limit": 0}, ["field 'limit'", "an integer >= 1", "found 0"]),
        ({"limit": -3}, ["field 'limit'", "-3"]),
        ({"limit": 2.5}, ["field 'limit'", "2.5"]),
        ({"window": (5, 5)}, ["field 'window'", "0 <= start_s < end_s", "(5, 5)"]),
        ({"window": (10, 2)}, ["field 'window'", "(10, 2)"]),
        ({"window": (-1, 3)}, ["field 'window'", "(-1, 3)"]),
        ({"window": (math.nan, 3)}, ["field 'window'"]),
        ({"window": "0-10"}, ["field 'window'", "'0-10'"]),
        ({"window": (1, 2, 3)}, ["field 'window'"]),
        ({"window": (500, 600)}, ["field 'window'", "a window holding at least one request"]),
        ({"priority_levels": 0}, ["field 'priority_levels'", "an integer >= 1"]),
        ({"priority_seed": "x"}, ["field 'priority_seed'", "an integer", "'x'"]),
        ({"bucket": "burst"}, ["field 'bucket'", "an option of the 'azure' loader (none)"]),
        ({"format": "vidur", "rate": 1.0, "dates": "x"}, ["field 'dates'", "rate, seed"]),
        ({"format": "vidur", "seed": 1.5}, ["field 'seed'", "an integer"]),
    ],
)
def test_bad_load_options(options: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(WorkloadError) as raised:
        load_workload(AZURE, **options)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(str(AZURE))
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
