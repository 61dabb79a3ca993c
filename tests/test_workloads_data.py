"""The shipped traces under traces/ are exactly the files traces/DATA_SOURCES.md describes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tracekit.workloads import read_azure

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
SOURCES = TRACES / "DATA_SOURCES.md"

# One table row per file: | `relative/path` | `sha256` | bytes | change |
ROW = re.compile(r"^\| `(?P<path>[^`]+)` \| `(?P<sha>[0-9a-f]{64})` \| (?P<size>\d+) \|", re.M)

# Upstream digests as published in the project's shared data README (independent of this repo).
UPSTREAM = {
    "azure-llm-2023/AzureLLMInferenceTrace_conv.csv": (
        "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"
    ),
    "mooncake-synthetic/synthetic_trace.jsonl": (
        "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131"
    ),
    "sharegpt-lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv": (
        "6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f"
    ),
}


def listed() -> dict[str, tuple[str, int]]:
    text = SOURCES.read_text(encoding="utf-8")
    return {m["path"]: (m["sha"], int(m["size"])) for m in ROW.finditer(text)}


def test_every_listed_file_matches_its_sha256_and_size() -> None:
    entries = listed()
    assert len(entries) == 7
    for relative, (sha, size) in entries.items():
        data = (TRACES / relative).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha, relative
        assert len(data) == size, relative


# Recordings and workloads this project made itself (tests/test_fidelity_fixtures.py and
# tests/test_engine_sglang_fixtures.py check them), not data.
GENERATED = ("vllm-fixtures/", "sglang-fixtures/")


def test_every_shipped_file_is_listed() -> None:
    shipped = {
        path.relative_to(TRACES).as_posix()
        for path in TRACES.rglob("*")
        if path.is_file() and path != SOURCES
    }
    shipped = {path for path in shipped if not path.startswith(GENERATED)}
    assert shipped == set(listed())


@pytest.mark.parametrize(("relative", "sha"), sorted(UPSTREAM.items()))
def test_copies_are_the_upstream_files(relative: str, sha: str) -> None:
    assert listed()[relative][0] == sha
    assert hashlib.sha256((TRACES / relative).read_bytes()).hexdigest() == sha


def test_each_trace_folder_ships_its_licence() -> None:
    for folder in ("azure-llm-2023", "mooncake-synthetic", "sharegpt-lengths"):
        assert (TRACES / folder / "LICENSE").is_file()
    assert "Attribution 4.0 International" in (TRACES / "azure-llm-2023" / "LICENSE").read_text(
        encoding="utf-8-sig"
    )
    for folder in ("mooncake-synthetic", "sharegpt-lengths"):
        assert "Apache License" in (TRACES / folder / "LICENSE").read_text(encoding="utf-8")


def test_mooncake_is_labelled_semi_synthetic() -> None:
    section = SOURCES.read_text(encoding="utf-8").split("## `mooncake-synthetic/`")[1]
    assert "semi-synthetic" in section.split("##")[0].lower()


def test_sample_is_the_documented_cut() -> None:
    full = (TRACES / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv").read_bytes()
    sample = (TRACES / "azure-llm-2023" / "azure_conv_sample.csv").read_bytes()
    # `head -n 1001`: the header and the first 1,000 requests, each line with its newline.
    expected = b"".join(full.splitlines(keepends=True)[:1001])
    assert sample == expected
    assert sample.count(b"\n") == 1001
    assert "head -n 1001" in SOURCES.read_text(encoding="utf-8")


def test_sample_creates_kv_pressure_but_every_request_fits() -> None:
    frame = read_azure(TRACES / "azure-llm-2023" / "azure_conv_sample.csv").frame
    block_tokens, num_blocks, max_num_seqs = 16, 600, 32
    blocks = (frame["prompt_tokens"] + frame["output_tokens"] + block_tokens - 1) // block_tokens
    # About 8 average requests fill the 600 blocks, far below the running limit of 32 ...
    assert num_blocks / blocks.mean() < max_num_seqs / 3  # type: ignore[operator]
    # ... yet the largest request still fits an empty cache.
    assert blocks.max() == 269
    assert blocks.max() <= num_blocks  # type: ignore[operator]
