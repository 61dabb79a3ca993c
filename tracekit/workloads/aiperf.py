"""Loader for AIPerf's per-request ``profile_export.jsonl`` (``aiperf profile``, 0.13).

One JSON object a line, one line per request: ``metadata`` (``x_request_id``,
``request_start_ns`` and ``request_end_ns`` on the epoch clock, ``benchmark_phase``:
``warmup`` or ``profiling``, ``was_cancelled``), ``metrics`` (each ``{"value", "unit"}``:
``time_to_first_token`` and ``request_latency`` in ms, ``inter_chunk_latency`` a list of ms,
``usage_prompt_tokens`` / ``usage_completion_tokens`` (the server's counts) and
``input_sequence_length`` / ``output_sequence_length`` (the client tokenizer's)) and, for a
failed request, ``error`` (``type``, ``message``) with ``metrics.error_isl``.

Rules: only ``profiling`` lines (warm-up requests are not part of the measured run);
``start_s`` = ``request_start_ns`` / 1e9 minus the first; ``prompt_tokens`` =
``usage_prompt_tokens``, else ``input_sequence_length``, else ``error_isl``; ``output_tokens`` =
``usage_completion_tokens``, else ``output_sequence_length`` (the server's count first: the
client re-tokenises the streamed text, which need not give the same count); ``itl_s`` =
``inter_chunk_latency`` (one gap per streamed chunk); a line with ``error`` or
``was_cancelled`` is failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracekit.workloads._errors import workload_error
from tracekit.workloads._readers import check_readable
from tracekit.workloads.measured import MeasuredRun, measured_run
from tracekit.workloads.model import Workload

__all__ = ["AIPERF_KEYS", "read_aiperf", "read_aiperf_run"]

#: Keys of every line of ``profile_export.jsonl`` (used for detection).
AIPERF_KEYS = ("metadata", "metrics")
CLIENT = "aiperf"

_MS = {"ms": 1e-3, "s": 1.0, "ns": 1e-9, "us": 1e-6}


def _value(metrics: dict[str, Any], key: str) -> Any:
    entry = metrics.get(key)
    return entry.get("value") if isinstance(entry, dict) else None


def _seconds(metrics: dict[str, Any], key: str, path: Path, where: str) -> Any:
    entry = metrics.get(key)
    if not isinstance(entry, dict) or entry.get("value") is None:
        return None
    unit = entry.get("unit", "ms")
    if unit not in _MS:
        raise workload_error(
            path,
            where=where,
            field=f"metrics.{key}.unit",
            expected=f"a time unit ({', '.join(_MS)})",
            found=repr(unit),
            fix="point at the client's own unedited export",
        )
    value = entry["value"]
    scale = _MS[unit]
    return [v * scale for v in value] if isinstance(value, list) else value * scale


def read_aiperf_run(path: str | Path) -> MeasuredRun:
    """Read an AIPerf ``profile_export.jsonl`` as a measured run."""
    path = Path(path)
    check_readable(path)
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise workload_error(
                    path,
                    where=where,
                    expected="a JSON object (AIPerf profile_export.jsonl)",
                    found=f"invalid JSON ({exc.msg} at column {exc.colno})",
                    fix="point at the client's own unedited export; a truncated last line "
                    "means the run was interrupted",
                ) from None
            if not isinstance(record, dict) or not set(AIPERF_KEYS) <= set(record):
                raise workload_error(
                    path,
                    where=where,
                    expected="an AIPerf record with metadata and metrics",
                    found="a line without them",
                    fix="point at AIPerf's profile_export.jsonl (not the summary JSON or CSV)",
                )
            meta = record["metadata"] or {}
            if meta.get("benchmark_phase", "profiling") != "profiling":
                continue
            metrics = record["metrics"] or {}
            error = record.get("error")
            ok = not error and not meta.get("was_cancelled")
            prompt = _value(metrics, "usage_prompt_tokens")
            if prompt is None:
                prompt = _value(metrics, "input_sequence_length")
            if prompt is None:
                prompt = _value(metrics, "error_isl")
            output = _value(metrics, "usage_completion_tokens")
            if output is None:
                output = _value(metrics, "output_sequence_length")
            start_ns = meta.get("request_start_ns")
            if not isinstance(start_ns, int):
                raise workload_error(
                    path,
                    where=where,
                    field="metadata.request_start_ns",
                    expected="the request's start time in integer nanoseconds",
                    found=repr(start_ns),
                    fix="point at the client's own unedited export",
                )
            message = None
            if not ok:
                message = (
                    f"{error.get('type', 'error')}: {error.get('message', '')}"
                    if isinstance(error, dict)
                    else "cancelled"
                )
            rows.append(
                {
                    "request_id": str(meta.get("x_request_id") or f"{CLIENT}-{number}"),
                    "start_s": start_ns / 1e9,
                    "prompt_tokens": prompt,
                    "output_tokens": (output or 0) if ok else 0,
                    "ok": ok,
                    "ttft_s": _seconds(metrics, "time_to_first_token", path, where) if ok else None,
                    "e2e_s": _seconds(metrics, "request_latency", path, where),
                    "itl_s": (_seconds(metrics, "inter_chunk_latency", path, where) or [])
                    if ok
                    else [],
                    "error": message,
                }
            )
    if not rows:
        raise workload_error(
            path,
            expected="at least one profiling request",
            found="none (only warm-up lines, or an empty export)",
            fix="point at the export of a run that profiled requests",
        )
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    settings = {"request_rate": None, "burstiness": None, "max_concurrency": None}
    # The export does not record the run's load settings (its summary JSON does).
    return measured_run(path, CLIENT, columns, settings)


def read_aiperf(path: str | Path) -> Workload:
    """The workload of an AIPerf export (:meth:`MeasuredRun.workload`)."""
    return read_aiperf_run(path).workload()
