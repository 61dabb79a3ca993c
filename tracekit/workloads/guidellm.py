"""Loader for GuideLLM's benchmark report JSON (``guidellm run --output kind=json``, 0.8).

One JSON document: ``metadata`` (``guidellm_version``), ``config`` and ``benchmarks``, one entry
per benchmarked strategy (a sweep has several). Each benchmark has ``config.strategy``
(``type_``: ``poisson``, ``constant``, ``concurrent``, ``synchronous``, ``throughput`` ...;
``rate`` or ``streams``), ``duration`` and ``requests`` with three lists, ``successful``,
``errored`` and ``incomplete``, of per-request statistics: ``request_id``,
``request_start_time`` (epoch seconds), ``request_latency`` (seconds),
``time_to_first_token_ms``, ``prompt_tokens`` and ``output_tokens`` (the server's usage counts),
``info.timings`` (epoch seconds: ``request_start``, ``first_token_iteration``,
``last_token_iteration``) and ``info.error``. ``e2e_s`` is send to last token,
``last_token_iteration - request_start`` (``request_latency`` also holds the stream's end after
the last token). A failed request has no usage counts: its prompt length is the client's token
count (``input_metrics.text_tokens``) or, when that is missing too, its word count
(``input_metrics.text_words``), and its latency ``request_end_time - request_start_time``.
GuideLLM does not save the per-token times, so ``itl_s`` is empty.

Rules: ``start_s`` = ``request_start_time`` minus the first; the lengths are ``prompt_tokens``
and ``output_tokens``; ``successful`` requests are ok; ``errored`` and ``incomplete`` ones are
failed (their error text, or ``incomplete``). ``benchmark=`` picks one benchmark of a sweep (0
by default when the file has one; required when it has several).

GuideLLM's own ``time_per_output_token_ms`` is send to last token over all output tokens,
first token included; its ``inter_token_latency_ms`` is ``(latency - TTFT) / (output tokens -
1)``, which is vLLM bench's TPOT (``docs/latency.md``, "Measured against simulated").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.workloads._errors import option_error, workload_error
from tracekit.workloads._readers import read_json_document
from tracekit.workloads.measured import MeasuredRun, measured_run
from tracekit.workloads.model import Workload

__all__ = ["read_guidellm", "read_guidellm_run"]

CLIENT = "guidellm"


def _load(path: Path) -> dict[str, Any]:
    doc = read_json_document(
        path,
        what="a GuideLLM benchmark report",
        fix="point at the file guidellm run --output kind=json wrote",
    )
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise workload_error(
            path,
            field="benchmarks",
            expected="a GuideLLM benchmark report with a benchmarks list",
            found="a JSON value without one",
            fix="point at the file guidellm run --output kind=json wrote",
        )
    return doc


def _request_row(path: Path, r: Any, where: str, ok: bool) -> dict[str, Any]:
    if not isinstance(r, dict) or "request_start_time" not in r:
        raise workload_error(
            path,
            where=where,
            field="request_start_time",
            expected="a per-request statistics object with request_start_time",
            found="an object without it",
            fix="point at the client's own unedited report",
        )
    info = r.get("info") or {}
    ttft_ms = r.get("time_to_first_token_ms")
    error = info.get("error") if isinstance(info, dict) else None
    prompt = r.get("prompt_tokens")
    if prompt is None and not ok:
        # A failed request has no usage counts: the client's own token count of the prompt,
        # else its word count (a stand-in; a failed request is aborted as soon as it arrives).
        inputs = r.get("input_metrics") or {}
        prompt = inputs.get("text_tokens") or inputs.get("text_words")
    # Send to last token, as the other clients' latency: GuideLLM's request_latency also holds
    # the end of the stream after the last token (its own TPOT and ITL use the token times).
    timings = info.get("timings") if isinstance(info, dict) else None
    last = (timings or {}).get("last_token_iteration")
    start = (timings or {}).get("request_start") or r["request_start_time"]
    latency = last - start if ok and last is not None else r.get("request_latency")
    if latency is None and not ok and r.get("request_end_time") is not None:
        latency = r["request_end_time"] - r["request_start_time"]
    return {
        "request_id": str(r.get("request_id") or where),
        "start_s": r["request_start_time"],
        "prompt_tokens": prompt,
        "output_tokens": r.get("output_tokens") or 0,
        "ok": ok,
        "ttft_s": None if ttft_ms is None or not ok else ttft_ms / 1000.0,
        "e2e_s": latency,
        "itl_s": [],
        "error": None if ok else str(error or where.split("[")[0]),
    }


def read_guidellm_run(path: str | Path, *, benchmark: int | None = None) -> MeasuredRun:
    """Read one benchmark of a GuideLLM report as a measured run.

    Parameters
    ----------
    path
        The report (``guidellm run --output kind=json,path=...``).
    benchmark
        Which benchmark of the report (0-based); needed when it holds several (a sweep).
    """
    path = Path(path)
    doc = _load(path)
    benchmarks = doc["benchmarks"]
    if not benchmarks:
        raise workload_error(
            path,
            field="benchmarks",
            expected="at least one benchmark",
            found="an empty list",
            fix="point at a report of a run that finished a benchmark",
        )
    strategies = [
        str(((b.get("config") or {}).get("strategy") or {}).get("type_")) for b in benchmarks
    ]
    if benchmark is None:
        if len(benchmarks) > 1:
            raise option_error(
                path,
                "benchmark",
                None,
                expected=f"one of the report's {len(benchmarks)} benchmarks "
                f"({', '.join(f'{i}: {s}' for i, s in enumerate(strategies))})",
                fix="pass benchmark=N (--workload-option benchmark=N)",
            )
        benchmark = 0
    if not isinstance(benchmark, int) or not 0 <= benchmark < len(benchmarks):
        raise option_error(
            path,
            "benchmark",
            benchmark,
            expected=f"an index from 0 to {len(benchmarks) - 1}",
            fix="pass the index of one of the report's benchmarks",
        )
    b = benchmarks[benchmark]
    requests = b.get("requests")
    if not isinstance(requests, dict) or not isinstance(requests.get("successful"), list):
        raise workload_error(
            path,
            where=f"benchmarks[{benchmark}]",
            field="requests",
            expected="the per-request statistics (requests.successful, errored, incomplete)",
            found="a benchmark without them",
            fix="run guidellm with its JSON output, which saves every request's statistics",
        )
    rows = []
    for kind, ok in (("successful", True), ("errored", False), ("incomplete", False)):
        for i, r in enumerate(requests.get(kind) or []):
            rows.append(_request_row(path, r, f"{kind}[{i}]", ok))
    columns = {key: [row[key] for row in rows] for key in rows[0]} if rows else {}
    strategy = (b.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    settings = {
        "request_rate": strategy.get("rate") if kind in ("poisson", "constant") else None,
        "burstiness": 1.0 if kind == "poisson" else (float("inf") if kind == "constant" else None),
        "max_concurrency": strategy.get("streams") if kind == "concurrent" else None,
        "duration_s": b.get("duration"),
        "strategy": kind,
        "benchmark": benchmark,
        "num_benchmarks": len(benchmarks),
        "guidellm_version": (doc.get("metadata") or {}).get("guidellm_version"),
        "model": ((b.get("config") or {}).get("backend") or {}).get("model"),
    }
    settings = {k: ("inf" if v == float("inf") else v) for k, v in settings.items()}
    if not rows:
        columns = {"request_id": [], "start_s": []}
    name = path.stem if len(benchmarks) == 1 else f"{path.stem}-{benchmark}"
    return measured_run(path, CLIENT, columns, settings, name=name)


def read_guidellm(path: str | Path, *, benchmark: int | None = None) -> Workload:
    """The workload of one benchmark of a GuideLLM report (:meth:`MeasuredRun.workload`)."""
    return read_guidellm_run(path, benchmark=benchmark).workload()
