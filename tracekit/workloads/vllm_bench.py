"""Loader for ``vllm bench serve --save-result --save-detailed`` result JSON (vLLM 0.32, 0.33).

One JSON document. With ``--save-detailed`` it has one list entry per request, in send order:
``input_lens``, ``output_lens`` (0 for a failed request), ``ttfts``, ``itls`` (per request, the
gaps between its tokens), ``latencies`` (send to last token), ``start_times`` (the client's
``time.perf_counter()`` when it sent the request, after any ``--max-concurrency`` wait) and
``errors`` (empty text when it succeeded); and the run's ``request_rate`` (``"inf"`` for as fast
as possible), ``burstiness``, ``max_concurrency``, ``duration``, ``model_id`` and ``num_prompts``
(``vllm/benchmarks/serve.py``, ``benchmark``). Without ``--save-detailed`` the per-request lists
are missing, and the file is refused with a one-line error naming the flag.

Rules: ``start_s`` = ``start_times`` minus the first; ``prompt_tokens`` = ``input_lens``;
``output_tokens`` = ``output_lens``; a request is ok when its ``errors`` entry is empty;
``request_id`` = ``vllm-bench-<index, 6 digits>`` (the client does not save its request ids).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tracekit.workloads._errors import workload_error
from tracekit.workloads._readers import read_json_document
from tracekit.workloads.measured import MeasuredRun, measured_run
from tracekit.workloads.model import Workload

__all__ = ["VLLM_BENCH_DETAILED", "VLLM_BENCH_KEYS", "read_vllm_bench", "read_vllm_bench_run"]

#: Top-level keys every ``vllm bench serve --save-result`` JSON has (used for detection).
VLLM_BENCH_KEYS = ("request_rate", "burstiness", "max_concurrency", "duration", "completed")
#: The per-request lists ``--save-detailed`` adds, which the loader needs.
VLLM_BENCH_DETAILED = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "errors",
)
CLIENT = "vllm-bench"


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return math.inf if value.strip().lower() == "inf" else float(value)
    return float(value)


def read_vllm_bench_run(path: str | Path) -> MeasuredRun:
    """Read a ``vllm bench serve --save-result --save-detailed`` JSON as a measured run.

    Raises
    ------
    tracekit.errors.WorkloadError
        Not JSON, not a vLLM bench result, saved without ``--save-detailed``, per-request lists
        of different lengths, or a bad value (one line naming the request and the field).
    """
    path = Path(path)
    doc = read_json_document(
        path, what="a vllm bench serve result", fix="point at the file --save-result wrote"
    )
    if not isinstance(doc, dict) or not set(VLLM_BENCH_KEYS) <= set(doc):
        raise workload_error(
            path,
            expected=f"a vllm bench serve result with keys {', '.join(VLLM_BENCH_KEYS)}",
            found="a JSON value without them",
            fix="point at the file vllm bench serve --save-result wrote",
        )
    missing = [key for key in VLLM_BENCH_DETAILED if key not in doc]
    if missing:
        raise workload_error(
            path,
            field=missing[0],
            expected="the per-request lists of vllm bench serve --save-detailed",
            found="a result saved without them (only the run's summary)",
            fix="run vllm bench serve again with --save-result --save-detailed",
        )
    n = len(doc["start_times"])
    for key in VLLM_BENCH_DETAILED:
        value = doc[key]
        if not isinstance(value, list) or len(value) != n:
            found = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
            raise workload_error(
                path,
                field=key,
                expected=f"a list of {n} entries, one per request (as start_times)",
                found=found,
                fix="point at the client's own unedited result",
            )
    ok = [not err for err in doc["errors"]]
    columns = {
        "request_id": [f"{CLIENT}-{i:06d}" for i in range(n)],
        "start_s": doc["start_times"],
        "prompt_tokens": doc["input_lens"],
        "output_tokens": doc["output_lens"],
        "ok": ok,
        "ttft_s": [t if good else None for t, good in zip(doc["ttfts"], ok, strict=True)],
        "e2e_s": [t if good else (t or None) for t, good in zip(doc["latencies"], ok, strict=True)],
        "itl_s": [list(v or []) for v in doc["itls"]],
        "error": [err or None for err in doc["errors"]],
    }
    settings = {
        "request_rate": _number(doc.get("request_rate")),
        "burstiness": _number(doc.get("burstiness")),
        "max_concurrency": doc.get("max_concurrency"),
        "duration_s": _number(doc.get("duration")),
        "model": doc.get("model_id"),
        "num_prompts": doc.get("num_prompts"),
        "date": doc.get("date"),
        "backend": doc.get("backend"),
    }
    # JSON has no infinity: the settings are recorded in manifests.
    settings = {k: ("inf" if v == math.inf else v) for k, v in settings.items()}
    return measured_run(path, CLIENT, columns, settings)


def read_vllm_bench(path: str | Path) -> Workload:
    """The workload of a ``vllm bench serve`` result (:meth:`MeasuredRun.workload`)."""
    return read_vllm_bench_run(path).workload()
