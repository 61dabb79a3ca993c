"""Workload format names and automatic detection from a file's extension and first bytes."""

from __future__ import annotations

import difflib
import json
from enum import Enum
from pathlib import Path

from tracekit.errors import WorkloadError
from tracekit.workloads._errors import describe_value, workload_error
from tracekit.workloads._readers import check_readable

__all__ = [
    "WorkloadFormat",
    "detect_format",
    "is_summary_only",
    "parse_format",
    "summary_only_error",
]


class WorkloadFormat(str, Enum):
    """The workload formats tracekit reads; the values are the names users pass."""

    AZURE = "azure"
    """Azure LLM inference trace 2023 CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)."""
    MOONCAKE = "mooncake"
    """Mooncake trace JSONL (``timestamp`` ms, ``input_length``, ``output_length``,
    ``hash_ids``)."""
    BIDKV_TRACE = "bidkv-trace"
    """Original BidKV frozen trace JSONL (``prompt_tokens`` id lists, ``arrival_offset_ms``)."""
    VLLM_WORKLOAD = "vllm-workload"
    """Original BidKV vLLM workload JSON document (``requests`` with ``arrival_time_ms``)."""
    VIDUR = "vidur"
    """vidur trace CSVs (replay, lengths-only or arrival-time shapes)."""
    CSV = "csv"
    """Plain canonical table as CSV (``arrival_s,prompt_tokens,output_tokens,...``)."""
    PARQUET = "parquet"
    """Plain canonical table as Parquet."""
    VLLM_BENCH = "vllm-bench"
    """``vllm bench serve --save-result --save-detailed`` result JSON: a measured run
    (:mod:`tracekit.workloads.vllm_bench`)."""
    GUIDELLM = "guidellm"
    """GuideLLM benchmark report JSON: a measured run (:mod:`tracekit.workloads.guidellm`)."""
    AIPERF = "aiperf"
    """AIPerf ``profile_export.jsonl``: a measured run (:mod:`tracekit.workloads.aiperf`)."""
    SESSIONS = "sessions"
    """Multi-turn conversation log, CSV or Parquet (``session_id``, ``turn``, ``arrival_s``,
    ``new_prompt_tokens``, ``output_tokens``): :mod:`tracekit.workloads.sessions`."""


_PARQUET_MAGIC = b"PAR1"
_SNIFF_BYTES = 1 << 20


def parse_format(name: str | WorkloadFormat, path: str | Path) -> WorkloadFormat:
    """Turn a user-given format name into a :class:`WorkloadFormat`.

    Parameters
    ----------
    name
        A format name such as ``"azure"`` (case-insensitive, ``_`` accepted for ``-``).
    path
        The workload file, named in the error message.

    Returns
    -------
    WorkloadFormat
        The matching format.

    Examples
    --------
    >>> parse_format("BIDKV_TRACE", "t.jsonl")
    <WorkloadFormat.BIDKV_TRACE: 'bidkv-trace'>
    """
    if isinstance(name, WorkloadFormat):
        return name
    normalised = str(name).strip().lower().replace("_", "-")
    try:
        return WorkloadFormat(normalised)
    except ValueError:
        names = [member.value for member in WorkloadFormat]
        near = difflib.get_close_matches(normalised, names, n=1)
        raise workload_error(
            path,
            field="format",
            expected=f"one of {', '.join(names)}",
            found=describe_value(name),
            fix=f"pass {near[0]!r} (the closest name)"
            if near
            else "pass a known format name, or none to auto-detect",
        ) from None


def _classify_csv_header(header: list[str]) -> WorkloadFormat | None:
    names = set(header)
    if {"session_id", "turn", "new_prompt_tokens"} <= names:
        return WorkloadFormat.SESSIONS
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= names:
        return WorkloadFormat.AZURE
    if {"arrival_s", "prompt_tokens", "output_tokens"} <= names:
        return WorkloadFormat.CSV
    if {"PromptTokenCount", "CompletionTokenCount"} <= names or names & {
        "num_prefill_tokens",
        "arrival_time",
        "arrived_at",
    }:
        return WorkloadFormat.VIDUR
    return None


#: Top-level keys of a ``vllm bench serve --save-result`` JSON.
_VLLM_BENCH_KEYS = {"request_rate", "burstiness", "max_concurrency", "duration", "completed"}


def _classify_json_object(keys: set[str]) -> WorkloadFormat | None:
    if keys >= _VLLM_BENCH_KEYS:
        return WorkloadFormat.VLLM_BENCH
    if {"metadata", "metrics"} <= keys:
        return WorkloadFormat.AIPERF
    if {"benchmarks", "metadata"} <= keys:
        return WorkloadFormat.GUIDELLM
    if {"timestamp", "input_length", "output_length"} <= keys:
        return WorkloadFormat.MOONCAKE
    if {"prompt_tokens", "max_new_tokens"} <= keys or "arrival_offset_ms" in keys:
        return WorkloadFormat.BIDKV_TRACE
    if "requests" in keys:
        return WorkloadFormat.VLLM_WORKLOAD
    return None


#: Benchmark clients' outputs that hold no per-request data, and what to pass instead: a
#: one-line refusal names the file to pass and the flag that writes it.
_AIPERF_SUMMARY_FIX = (
    "pass the profile_export.jsonl of the same artifact folder (AIPerf writes it at its default "
    "--export-level records; a run with --export-level summary has none: run aiperf profile "
    "again with --export-level records)"
)
_GUIDELLM_CSV_FIX = (
    "pass GuideLLM's JSON report (guidellm run --output kind=json,path=FILE; from a saved "
    "report, guidellm export REPORT --output kind=json,path=FILE)"
)


def summary_only_error(path: str | Path, text: str) -> WorkloadError | None:
    """The refusal of a benchmark client's statistics-only output, from its first bytes.

    AIPerf's summary (``profile_export_aiperf.json`` or ``.csv``) and GuideLLM's CSV report
    hold no per-request data, so no measured run can be read from them; the error names the
    file to pass instead and the flag that writes it. None for any other text.
    """
    first = next((line for line in text.splitlines() if line.strip()), "").strip()
    found = None
    fix = _AIPERF_SUMMARY_FIX
    if '"aiperf_version"' in text and '"request_latency"' in text and first == "{":
        found = "AIPerf's summary (profile_export_aiperf.json: statistics only)"
    elif first.startswith("Metric,avg,"):
        found = "AIPerf's summary CSV (profile_export_aiperf.csv: statistics only)"
    elif first.startswith("Run Info,") and "Benchmark" in first:
        found, fix = "GuideLLM's CSV report (statistics per benchmark only)", _GUIDELLM_CSV_FIX
    if found is None:
        return None
    return workload_error(
        path, expected="a measured run's per-request records", found=found, fix=fix
    )


def _summary_only(path: Path, text: str) -> None:
    error = summary_only_error(path, text)
    if error is not None:
        raise error


def is_summary_only(path: str | Path) -> bool:
    """Whether ``path`` is a benchmark client's statistics-only output (read whole or refused)."""
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return False
    return summary_only_error(path, head.decode("utf-8-sig", errors="replace")) is not None


def _sniff_json(path: Path, head: bytes) -> WorkloadFormat:
    text = head.decode("utf-8-sig", errors="replace")
    _summary_only(path, text)
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        value = json.loads(first)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        detected = _classify_json_object(set(value))
        if detected is not None:
            return detected
        found = f"a JSON object with keys {', '.join(sorted(value)[:8])}"
    elif first.lstrip().startswith("{") and all(f'"{k}"' in text for k in _VLLM_BENCH_KEYS):
        # A vllm bench result is one line; beyond the sniffed bytes it does not parse.
        return WorkloadFormat.VLLM_BENCH
    elif first.lstrip().startswith("{") and '"benchmarks"' in text and '"guidellm_version"' in text:
        # GuideLLM's report is one pretty-printed document.
        return WorkloadFormat.GUIDELLM
    elif first.lstrip().startswith("{") and '"requests"' in text:
        # A pretty-printed document (the vLLM workload JSON is written with indent=2).
        return WorkloadFormat.VLLM_WORKLOAD
    else:
        found = f"a first line {describe_value(first)}"
    raise workload_error(
        path,
        expected=(
            "a Mooncake line (timestamp, input_length, output_length), a BidKV trace line "
            "(prompt_tokens, max_new_tokens, arrival_offset_ms), a vLLM workload document "
            "(requests), a vllm bench serve result, a GuideLLM report or an AIPerf "
            "profile_export.jsonl line (metadata, metrics)"
        ),
        found=found,
        fix="pass format= explicitly or convert the file to one of these formats",
    )


def _sniff_csv(path: Path, head: bytes) -> WorkloadFormat:
    text = head.decode("utf-8-sig", errors="replace")
    _summary_only(path, text)
    first = text.splitlines()[0] if text else ""
    header = [name.strip().strip('"').strip() for name in first.split(",")]
    detected = _classify_csv_header(header)
    if detected is None:
        raise workload_error(
            path,
            where="line 1",
            expected=(
                "a known CSV header (TIMESTAMP,ContextTokens,GeneratedTokens | "
                "arrival_s,prompt_tokens,output_tokens | a vidur header)"
            ),
            found=describe_value(first),
            fix="pass format= explicitly or rename the columns",
        )
    return detected


def detect_format(path: str | Path) -> WorkloadFormat:
    """Detect a workload file's format from its extension and its first bytes.

    ``.parquet``/``.pq`` files (or files starting with the Parquet magic ``PAR1``) are Parquet
    tables. JSON files (``.jsonl``, ``.ndjson``, ``.json``, or content starting with ``{``) are
    told apart by the keys of their first line. Everything else is read as CSV and told apart by
    its header line.

    Parameters
    ----------
    path
        The workload file.

    Returns
    -------
    WorkloadFormat
        The detected format.
    """
    path = Path(path)
    check_readable(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError as error:
        raise workload_error(
            path, expected="a readable file", found=f"a read error ({error})", fix="check the path"
        ) from error
    suffix = path.suffix.lower()
    if suffix in {".parquet", ".pq"} or head.startswith(_PARQUET_MAGIC):
        return WorkloadFormat.PARQUET
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if suffix in {".jsonl", ".ndjson", ".json"} or stripped.startswith(b"{"):
        return _sniff_json(path, head)
    return _sniff_csv(path, head)
