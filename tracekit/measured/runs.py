"""Reading measured runs and their engine configuration: what the commands call.

- :func:`read_measured_run`: any of the three clients' files, detected like a workload;
- :func:`measured_engine_config`: the server's engine configuration from explicit options over
  its start-up log (``--server-log``) over the engine's defaults, with where each value came
  from;
- :func:`calibrate_results`: ``tracekit calibrate RESULT ...``, the model file written whole;
- :func:`accuracy`: ``tracekit accuracy RESULT ...``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit import safe_output
from tracekit.engine.config import EngineConfig, make_engine_config
from tracekit.errors import ConfigError
from tracekit.latency.calibrated import load_calibrated_model
from tracekit.measured.calibrate import RequestFit, fit_from_runs
from tracekit.measured.compare import Comparison, compare_runs
from tracekit.measured.server_log import OPTIONS, merge_engine_options, read_vllm_server_log
from tracekit.measured.simulate import RequestOverheads
from tracekit.measured.spread import LatencySpread
from tracekit.workloads.aiperf import read_aiperf_run
from tracekit.workloads.detect import WorkloadFormat, detect_format, is_summary_only
from tracekit.workloads.guidellm import read_guidellm_run
from tracekit.workloads.measured import MeasuredRun
from tracekit.workloads.vllm_bench import read_vllm_bench_run

__all__ = [
    "MEASURED_FORMATS",
    "accuracy",
    "calibrate_results",
    "is_measured_result",
    "measured_engine_config",
    "read_measured_run",
    "record_measured_error",
]

#: The workload formats that are measured runs.
MEASURED_FORMATS = (WorkloadFormat.VLLM_BENCH, WorkloadFormat.GUIDELLM, WorkloadFormat.AIPERF)


def is_measured_result(path: str | Path) -> bool:
    """Whether ``path`` is a benchmark client's result file (not a trace bundle)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        return detect_format(path) in MEASURED_FORMATS
    except Exception:  # any unreadable file is simply not a result ...
        # ... but a client's statistics-only output is one, which reading refuses by name.
        return is_summary_only(path)


def read_measured_run(path: str | Path, *, benchmark: int | None = None) -> MeasuredRun:
    """Read a ``vllm bench serve``, GuideLLM or AIPerf result as a :class:`MeasuredRun`.

    Raises
    ------
    tracekit.errors.WorkloadError
        The file is not one of the three (one line naming it and the formats), or is bad.
    """
    path = Path(path)
    fmt = detect_format(path)
    if fmt is WorkloadFormat.VLLM_BENCH:
        return read_vllm_bench_run(path)
    if fmt is WorkloadFormat.GUIDELLM:
        return read_guidellm_run(path, benchmark=benchmark)
    if fmt is WorkloadFormat.AIPERF:
        return read_aiperf_run(path)
    raise ConfigError(
        f"{path}: a {fmt.value} workload, not a benchmark result; pass a vllm bench serve "
        "--save-detailed JSON, a GuideLLM report or an AIPerf profile_export.jsonl"
    )


def measured_engine_config(
    options: dict[str, Any], server_log: str | Path | None = None
) -> tuple[EngineConfig, dict[str, Any]]:
    """The engine configuration of a measured server, and where each value came from.

    ``options`` holds :func:`~tracekit.engine.config.make_engine_config` keywords (``None``:
    unset); a start-up log fills what they leave unset; the engine's defaults the rest. The
    second value lists the sources and the options neither gave (``defaulted``).
    """
    log = read_vllm_server_log(server_log) if server_log is not None else None
    merged, where = merge_engine_options(options, log)
    config = make_engine_config(**merged)
    provenance = {
        "sources": where,
        "defaulted": [f for f in OPTIONS if f not in where],
        "server_log": None if log is None else log.describe(),
    }
    return config, provenance


def calibrate_results(
    results: Sequence[str | Path],
    out: str | Path,
    config: EngineConfig,
    *,
    provenance: dict[str, Any] | None = None,
    initial: str | Path | None = None,
    max_iterations: int = 20,
    spread: bool = True,
    overwrite: bool = False,
) -> RequestFit:
    """Fit the model to measured runs (``tracekit calibrate RESULT ...``) and write it to ``out``.

    The model file is written through a temporary file and a rename; nothing is written when
    a result cannot be read or the fit is refused. An existing ``out`` is refused unless
    ``overwrite`` and it is a model file calibrate wrote (``docs/guarantees.md``, "Safe
    output").
    """
    from tracekit.latency.measured import MODEL_MARK

    out = Path(out)
    safe_output.check_new_file(out, mark=MODEL_MARK, overwrite=overwrite, inputs=list(results))
    runs = [read_measured_run(r) for r in results]
    start = load_calibrated_model(initial) if initial is not None else None
    fit = fit_from_runs(
        runs,
        config,
        initial=start,
        max_iterations=max_iterations,
        spread=spread,
        source=", ".join(str(r) for r in results),
        workdir=None,
    )
    model = dataclasses.replace(
        fit.model,
        fit={**fit.model.fit, "engine_provenance": provenance or {}},
        source=str(out),
    )
    with safe_output.staged_file(
        out, mark=MODEL_MARK, overwrite=overwrite, inputs=list(results)
    ) as staging:
        model.save(staging)
    return dataclasses.replace(fit, model=model)


def accuracy(
    results: Sequence[str | Path | MeasuredRun],
    config: EngineConfig,
    *,
    target: float = 0.10,
    provenance: dict[str, Any] | None = None,
) -> Comparison:
    """Compare repeats of one measured configuration with their simulation (``tracekit accuracy``).

    A ``calibrated:`` model that carries request overheads has them added to the simulated
    latencies, and one that carries a residual spread has its latency percentiles include it
    (``tracekit.measured.spread.spread_requests``); any other model's latencies are the
    engine's alone.
    """
    runs = [r if isinstance(r, MeasuredRun) else read_measured_run(r) for r in results]
    overheads = RequestOverheads()
    by_client: dict[str, RequestOverheads] = {}
    spread = None
    spelling = config.effective_latency
    if spelling.startswith("calibrated:"):
        model = load_calibrated_model(spelling.partition(":")[2])
        overheads = RequestOverheads.from_dict(model.request_overheads)
        by_client = {
            c: RequestOverheads.from_dict(o) for c, o in model.request_overheads_by_client.items()
        }
        spread = LatencySpread.from_dict(model.request_spread)
    comparison = compare_runs(
        runs,
        config,
        overheads=overheads,
        spread=spread,
        target=target,
        client_overheads=by_client,
    )
    # The overheads applied: the runs' client's own where the model has them.
    clients = {run.client for run in runs}
    if len(clients) == 1 and clients <= set(by_client):
        overheads = by_client[next(iter(clients))]
    return dataclasses.replace(
        comparison,
        extra={
            "overheads": overheads.as_dict(),
            "spread_residuals": len(spread) if spread else 0,
            "engine_config": {k: getattr(config, k) for k in OPTIONS},
            "engine_provenance": provenance or {},
        },
    )


#: The metrics a model's measured error lists (report order).
ERROR_METRICS = (
    "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99", "output_throughput",
)  # fmt: skip


def record_measured_error(model_path: str | Path, comparison: Comparison, label: str) -> Path:
    """Add ``comparison``'s errors to a calibrated model file as a held-out measurement.

    The model's ``measured_error["held_out"][label]`` becomes, per metric of
    :data:`ERROR_METRICS`, the error and the repeats' noise floor; the file is rewritten whole
    (temporary file and rename). Qualify reports whose times come from the model print it.
    """
    path = Path(model_path)
    model = load_calibrated_model(path)
    entry = {
        "runs": [r["source"] for r in comparison.runs],
        "errors": {m.name: m.error for m in comparison.metrics if m.name in ERROR_METRICS},
        "noise": {m.name: m.noise for m in comparison.metrics if m.name in ERROR_METRICS},
    }
    # What the engine's own runs (qualify's) use: the overheads, not the spread.
    plain = comparison.without_spread or comparison.metrics
    entry["errors_without_spread"] = {m.name: m.error for m in plain if m.name in ERROR_METRICS}
    measured = dict(model.measured_error)
    measured["held_out"] = {**(measured.get("held_out") or {}), label: entry}
    with safe_output.replacing(path) as staging:
        dataclasses.replace(model, measured_error=measured).save(staging)
    return path
