"""Record runs from SGLang 0.5.23's real scheduling objects into trace bundles.

The project's environment spawns the Python of a separate SGLang environment
(``scripts/install-sglang-cpu.sh``) running :mod:`tracekit.sglang.driver`, sends it every run as
a scenario (:mod:`tracekit.sglang.protocol`), and writes what it streams back with
:class:`tracekit.trace.writer.BundleWriter`: the ``steps``, ``scheduled``, ``decisions`` (one per
retracted request), ``candidates`` and ``requests`` tables, plus ``sglang-steps.jsonl``, every
step record whole (admissions with their cached tokens, the decode batch, each retraction's
candidate batch, keep order, victims, ``new_token_ratio`` before and after, and where the victims
went in the waiting queue), for the step-by-step comparison with the engine's SGLang mode.

One driver process serves all the runs of one call (importing SGLang takes 10 to 20 s). The SGLang
environment is found from, in order: the ``venv`` argument, ``$BIDKV_SGLANG_VENV`` and
``~/.cache/bidkv/sglang-cpu-venv``. ``docs/sglang-recorder.md`` describes the driver and its
limits.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import lzma
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tracekit
from tracekit import safe_output
from tracekit.engine.request import request_fields
from tracekit.errors import ConfigError
from tracekit.real_engine.environment import SGLANG, SglangDriverError, SglangUnavailableError
from tracekit.real_engine.process import record_runs, run_messages
from tracekit.sglang.protocol import (
    PROTOCOL_VERSION,
    SglangConfig,
    SglangStep,
    scenario_message,
    step_from_wire,
)
from tracekit.trace.rows import ROW_TYPES
from tracekit.trace.schema import trace_schema
from tracekit.trace.timestamps import utc_now_iso
from tracekit.trace.writer import BundleWriter
from tracekit.workloads.model import Workload

__all__ = [
    "DEFAULT_SGLANG_VENV",
    "OUTCOME_COLUMNS",
    "SCENARIO_FILE",
    "STEPS_FILE",
    "SglangDriverError",
    "SglangUnavailableError",
    "bundle_rows",
    "compress_steps",
    "find_sglang_python",
    "is_sglang_bundle",
    "read_sglang_scenario",
    "read_sglang_steps",
    "record_run",
    "record_sglang",
    "request_outcome",
    "request_rows",
    "run_driver",
]

#: Where ``scripts/install-sglang-cpu.sh`` puts SGLang unless ``BIDKV_SGLANG_VENV`` says otherwise.
DEFAULT_SGLANG_VENV = SGLANG.default_venv
#: The bundle file with every step record whole, one JSON object a line.
STEPS_FILE = "sglang-steps.jsonl"
#: The bundle file with the scenario sent to the driver (configuration and request rows).
SCENARIO_FILE = "sglang-scenario.json"
#: The files a recording holds besides its tables (the step file, or its compressed forms).
SIDE_FILES = (SCENARIO_FILE, STEPS_FILE, STEPS_FILE + ".xz", STEPS_FILE + ".gz")

Progress = Callable[[int, int], None]

# Finish reasons -> the requests table's status, in the trace format's words (schemas/
# trace-v1.json: finished | unfinished | aborted; a prompt over the context length is
# "rejected", as the engine writes it).
_STATUS = {
    "FINISH_MATCHED_TOKEN": "finished",
    "FINISH_LENGTH": "finished",
    "FINISH_ABORT": "aborted",
    "rejected": "rejected",
}


#: The environment's Python: ``venv`` (a folder or its Python), ``$BIDKV_SGLANG_VENV``, then
#: :data:`DEFAULT_SGLANG_VENV` (``RealEngine.python``).
find_sglang_python = SGLANG.python


def run_driver(
    scenarios: Sequence[Mapping[str, Any]],
    *,
    venv: str | os.PathLike[str] | None = None,
    parse: Callable[[str], dict[str, Any]] = json.loads,
) -> Generator[dict[str, Any], None, None]:
    """Run ``scenarios`` (:func:`scenario_message` each) in one driver; yield its messages.

    The first message is ``hello``; then, per scenario in order, its records and ``end`` (or
    ``error``). Closing the generator early stops the driver. ``parse`` turns each output line
    into its message (see :func:`tracekit.real_engine.process.run_driver_process`).

    Raises
    ------
    SglangUnavailableError
        No SGLang environment.
    SglangDriverError
        The driver exited before answering every scenario (with its standard error's tail).
    """
    python = find_sglang_python(venv)
    model_dir = python.parent.parent / "bidkv-tiny-llama"
    yield from SGLANG.run_driver(
        python,
        ["-m", "tracekit.sglang.driver", "--model-dir", str(model_dir)],
        [json.dumps(s, separators=(",", ":")) + "\n" for s in scenarios],
        parse=parse,
    )


def request_rows(workload: Workload) -> list[tuple[Any, ...]]:
    """A workload's requests as a scenario sends them (see :func:`scenario_message`)."""
    return [
        (
            *request_fields(r),
            r.prefix_hash_ids,
            bool(getattr(r, "ignore_eos", False)),
        )
        for r in workload.iter_requests()
    ]


def make_run_id(workload: Workload, config: SglangConfig, engine: str) -> str:
    """A stable id from the workload, the configuration and the SGLang release."""
    identity = {
        "workload": workload.describe(),
        "config": dataclasses.asdict(config),
        "engine": engine,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    return f"builtin-{engine.replace('.', '')}-{digest[:10]}"


def record_sglang(
    workloads: Sequence[Workload],
    outs: Sequence[str | os.PathLike[str]],
    *,
    config: SglangConfig | Sequence[SglangConfig] = SglangConfig(),  # noqa: B008 - frozen
    venv: str | os.PathLike[str] | None = None,
    run_ids: Sequence[str] | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Run each workload on SGLang's real scheduling objects; write its bundle to ``outs[i]``.

    Parameters
    ----------
    workloads
        The requests of each run (``prefix_hash_ids``, when present, give shared prompt prefixes:
        radix-cache hits).
    outs
        One bundle folder per run; each appears only once its run completed.
    config
        One SGLang configuration for every run, or one per run.
    venv
        The SGLang environment (see :func:`find_sglang_python`).
    run_ids
        Defaults to :func:`make_run_id`.
    progress
        Called with ``(finished requests, total requests)`` of the current run.
    overwrite
        Replace existing bundles (once the new one is complete).

    Returns
    -------
    list of Path
        The bundle folders, in the order of ``workloads``.

    Raises
    ------
    ConfigError
        Mismatched lengths.
    SglangUnavailableError
        No SGLang environment.
    SglangDriverError
        SGLang failed to start or a run failed inside the driver (no bundle is written for it;
        earlier runs' bundles are kept).
    """
    configs = [config] * len(workloads) if isinstance(config, SglangConfig) else list(config)
    if len(workloads) != len(outs) or len(configs) != len(workloads):
        raise ConfigError(
            f"record_sglang: {len(workloads)} workloads, {len(outs)} output folders and "
            f"{len(configs)} configurations"
        )
    if run_ids is not None and len(run_ids) != len(workloads):
        raise ConfigError(f"record_sglang: {len(workloads)} workloads but {len(run_ids)} run ids")
    requests = [request_rows(w) for w in workloads]
    scenarios = [scenario_message(i, configs[i], requests[i]) for i in range(len(workloads))]
    messages = run_driver(scenarios, venv=venv)

    def record_one(i: int, hello: dict[str, Any]) -> Path:
        run_id = None if run_ids is None else run_ids[i]
        return record_run(
            i,
            messages,
            hello,
            workloads[i],
            configs[i],
            Path(outs[i]),
            run_id=run_id,
            requests=requests[i],
            progress=progress,
            overwrite=overwrite,
        )

    return record_runs(
        messages,
        len(workloads),
        record_one,
        driver=SGLANG.driver,
        error=SglangDriverError,
        protocol=PROTOCOL_VERSION,
    )


def record_run(
    index: int,
    messages: Iterator[dict[str, Any]],
    hello: Mapping[str, Any],
    workload: Workload,
    config: SglangConfig,
    out: Path,
    *,
    run_id: str | None = None,
    requests: Sequence[Sequence[Any]] | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> Path:
    """Write run ``index``'s bundle to ``out`` from the driver's ``messages`` (up to its ``end``).

    For a caller that runs its own driver (:func:`run_driver`) with other work in it;
    :func:`record_sglang` calls it for each run. ``requests``: the rows sent in the run's
    scenario (default :func:`request_rows` of ``workload``).
    """
    rows = request_rows(workload) if requests is None else requests
    engine = f"sglang-{hello['sglang_version']}"
    if run_id is None:
        run_id = make_run_id(workload, config, engine)
    run_messages = _collect(index, messages, len(rows), progress)
    manifest = _manifest(workload, config, run_id, engine, hello, run_messages[-1])
    return _write_bundle(out, manifest, rows, config, run_messages, overwrite)


def _collect(
    index: int, messages: Iterator[dict[str, Any]], total: int, progress: Progress | None
) -> list[dict[str, Any]]:
    """The messages of run ``index``, its ``end`` last."""
    collected = []
    finished = 0
    for message in run_messages(index, messages, SGLANG.driver, SglangDriverError):
        collected.append(message)
        if message.get("kind") == "request":
            finished += 1
            if progress is not None:
                progress(finished, total)
    return collected


def _manifest(
    workload: Workload,
    config: SglangConfig,
    run_id: str,
    engine: str,
    hello: Mapping[str, Any],
    end: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tool_version": tracekit.__version__,
        "created_at": utc_now_iso(),
        "engine": engine,
        "engine_config": dataclasses.asdict(config),
        "scheduling_policy": "priority" if config.retraction_policy == "priority" else "fcfs",
        "host_path": "builtin",
        "strategy": "builtin",
        "strategy_config": None,
        "workload": workload.describe(),
        "time_scaling": float(workload.options.get("rate_scale", 1.0)),
        "window": workload.options.get("window"),
        "seed": 0,
        "clock": "steps",
        "sglang": {
            **end.get("sglang_config", {}),
            "python": hello.get("python"),
            "recorder": {
                "driver": "tracekit.sglang.driver",
                "import_s": hello.get("import_s"),
                "num_steps": end.get("num_steps"),
                **end.get("timing", {}),
            },
        },
    }


def bundle_rows(
    run_id: str,
    config: SglangConfig,
    requests: Sequence[Sequence[Any]],
    messages: Sequence[Mapping[str, Any]],
) -> dict[str, list[tuple[Any, ...]]]:
    """The trace tables' rows for one run's driver messages (schema column order).

    Parameters
    ----------
    run_id
        The bundle's run id.
    config
        The run's SGLang configuration (for the steps clock and the pool size).
    requests
        The workload rows sent in the scenario (see :func:`scenario_message`).
    messages
        The run's ``step`` and ``request`` messages in driver order (``end`` is ignored).

    Returns
    -------
    dict
        Table name -> rows: ``steps``, ``scheduled``, ``decisions``, ``candidates``,
        ``requests``, and ``admissions`` with the radix cache on. Decisions: one per retracted
        request, in order; the candidates of the k-th victim of one ``retract_decode`` call are
        the batch without the k-1 before it, in batch order; ``builtin_victim_id`` and
        ``applied_victim_id`` are SGLang's victim. A preemption at admission
        (``PrefillAdder.preempt_to_schedule``) is SGLang's own rule, not a victim decision: it
        counts in ``steps.num_preemptions`` and ``requests.num_preemptions`` only. Radix hits
        are recorded as the engine records prefix-cache hits: each admission of a request from
        the waiting queue (its first, or a resume after a retraction or preemption) with its
        matched prefix, summed per step in ``steps.cache_hit_tokens``, the first in
        ``requests.num_cached_tokens`` and the later ones in ``resume_cached_tokens``.
    """
    schema = trace_schema()
    columns = {name: schema.table(name).column_names for name in schema.tables}
    by_id = {str(r[0]): (index, r) for index, r in enumerate(requests)}
    step_s = config.step_s
    policy = "priority" if config.retraction_policy == "priority" else "fcfs"
    tables: dict[str, list[tuple[Any, ...]]] = {
        "steps": [],
        "scheduled": [],
        "decisions": [],
        "candidates": [],
        "requests": [],
    }
    if config.radix_cache:
        tables["admissions"] = []
    recomputed: dict[str, int] = {}
    # req_id -> radix hits of its first admission / of its later ones, and admissions so far.
    first_hit: dict[str, int] = {}
    resume_hit: dict[str, int] = {}
    admitted: dict[str, int] = {}
    seq = 0

    def row(table: str, values: Mapping[str, Any]) -> None:
        # By field name into the table's typed row, which the writer requires.
        tables[table].append(ROW_TYPES[table](**{c: values.get(c) for c in columns[table]}))

    for message in messages:
        kind = message.get("kind")
        if kind == "step":
            step = step_from_wire(message)
            time_s = step.step * step_s
            for retraction in step.retractions:
                batch = list(retraction.candidates)
                used = config.kv_tokens - retraction.free_tokens_before
                for victim in retraction.victims:
                    for position, c in enumerate(batch):
                        arrival, max_tokens = _arrival_and_max(by_id, c.request_id)
                        row(
                            "candidates",
                            {
                                "run_id": run_id,
                                "seq": seq,
                                "position": position,
                                "request_id": c.request_id,
                                "priority": 0 if c.priority is None else int(c.priority),
                                "arrival_time": arrival,
                                "num_prompt_tokens": c.prompt_tokens,
                                "num_output_tokens": c.output_tokens,
                                "num_computed_tokens": c.held_tokens,
                                "num_preemptions": c.retractions,
                                "max_tokens": max_tokens,
                                "sglang_output_len": c.output_tokens,
                                "sglang_prompt_len": c.prompt_tokens,
                            },
                        )
                    row(
                        "decisions",
                        {
                            "run_id": run_id,
                            "seq": seq,
                            "step": step.step,
                            "time_s": time_s,
                            "requesting_request_id": None,
                            "kv_usage": used / config.kv_tokens,
                            "scheduling_policy": policy,
                            "num_candidates": len(batch),
                            "builtin_victim_id": victim,
                            "raw_result": None,
                            "raw_result_type": "not-called",
                            "outcome": "builtin",
                            "applied_victim_id": victim,
                            "decision_reason": None,
                            "calls": 0,
                            "selections": 0,
                            "abstentions": 0,
                            "failures": 0,
                            "invalid_selections": 0,
                            "policy_enabled": False,
                        },
                    )
                    seq += 1
                    gone = next(c for c in batch if c.request_id == victim)
                    recomputed[victim] = recomputed.get(victim, 0) + gone.held_tokens
                    batch.remove(gone)
            for rid, held in step.preempted:
                recomputed[rid] = recomputed.get(rid, 0) + held
            hits = 0
            for r in step.admissions:
                hits += r.cached_tokens
                index = admitted.get(r.request_id, 0)
                admitted[r.request_id] = index + 1
                if index == 0:
                    first_hit[r.request_id] = r.cached_tokens
                else:
                    resume_hit[r.request_id] = resume_hit.get(r.request_id, 0) + r.cached_tokens
                if "admissions" in tables:
                    row(
                        "admissions",
                        {
                            "run_id": run_id,
                            "request_id": r.request_id,
                            "admission": index,
                            "step": step.step,
                            "time_s": time_s,
                            "cached_tokens": r.cached_tokens,
                        },
                    )
            row(
                "steps",
                {
                    "run_id": run_id,
                    "step": step.step,
                    "time_s": time_s,
                    "duration_s": step_s,
                    # Requests holding KV after scheduling: the running batch, and those of a
                    # prefill batch (merged into it at the next iteration).
                    "num_running": len(set(step.running) | {r.request_id for r in step.reqs}),
                    # Outputs do not change the waiting queue: this is it after scheduling.
                    "num_waiting": len(step.waiting),
                    "kv_blocks_used": config.kv_tokens - step.free_tokens,
                    "kv_blocks_total": config.kv_tokens,
                    "scheduled_prefill_tokens": step.num_prefill_tokens,
                    "scheduled_decode_tokens": step.num_decode_tokens,
                    "num_preemptions": len(step.victims) + len(step.preempted),
                    "cache_hit_tokens": hits,
                    # (How many tree tokens SGLang evicted is not read back.)
                    "cached_blocks_evicted": None,
                },
            )
            for r in step.reqs:
                row(
                    "scheduled",
                    {
                        "run_id": run_id,
                        "step": step.step,
                        "request_id": r.request_id,
                        "num_tokens": r.new_tokens,
                    },
                )
        elif kind == "request":
            rid = str(message["request_id"])
            index, r = by_id[rid]
            first = message.get("first_step")
            row(
                "requests",
                {
                    "run_id": run_id,
                    "request_id": rid,
                    "input_index": index,
                    "arrival_s": float(r[1]),
                    "prompt_tokens": int(r[2]),
                    "target_output_tokens": int(r[3]),
                    "max_tokens": int(r[4]),
                    "priority": int(r[5]),
                    **request_outcome(message, float(r[1]), step_s),
                    "recomputed_tokens": recomputed.get(rid, 0),
                    # Never scheduled (rejected): no first-schedule hit, as the engine records.
                    "num_cached_tokens": None if first is None else first_hit.get(rid, 0),
                    "resume_cached_tokens": resume_hit.get(rid, 0),
                    # (Protocol 1 rows have no ignore_eos: it was off.)
                    "ignore_eos": bool(r[7]) if len(r) > 7 else False,
                },
            )
    return tables


#: The requests-table columns a driver's ``request`` message decides (:func:`request_outcome`).
OUTCOME_COLUMNS = (
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "status",
    "output_tokens",
    "num_preemptions",
)


def request_outcome(message: Mapping[str, Any], arrival_s: float, step_s: float) -> dict[str, Any]:
    """The :data:`OUTCOME_COLUMNS` of a request from its ``request`` message (steps clock)."""
    first = message.get("first_step")
    first_token = message.get("first_token_step")
    status = _STATUS.get(message["finish_reason"], str(message["finish_reason"]).lower())
    return {
        "first_scheduled_s": None if first is None else first * step_s,
        "first_token_s": None if first_token is None else (first_token + 1) * step_s,
        "finish_s": arrival_s if status == "rejected" else (message["finish_step"] + 1) * step_s,
        "status": status,
        "output_tokens": int(message["output_tokens"]),
        "num_preemptions": int(message["retractions"]),
    }


def _arrival_and_max(
    by_id: Mapping[str, tuple[int, Sequence[Any]]], request_id: str
) -> tuple[float, int]:
    _, r = by_id[request_id]
    return float(r[1]), int(r[4])


def _write_bundle(
    out: Path,
    manifest: dict[str, Any],
    requests: Sequence[Sequence[Any]],
    config: SglangConfig,
    messages: Sequence[Mapping[str, Any]],
    overwrite: bool,
) -> Path:
    tables = bundle_rows(manifest["run_id"], config, requests, messages)
    with BundleWriter(
        out, manifest, tables=list(tables), overwrite=overwrite,
        side_files=SIDE_FILES,
    ) as writer:  # fmt: skip
        for name, rows in tables.items():
            for values in rows:
                writer.append(name, values)
        scenario = scenario_message(0, config, requests)
        with open(writer.folder / SCENARIO_FILE, "w", encoding="utf-8") as handle:
            json.dump(
                {"config": scenario["config"], "requests": scenario["requests"]},
                handle,
                separators=(",", ":"),
            )
        with open(writer.folder / STEPS_FILE, "w", encoding="utf-8") as steps:
            for message in messages:
                if message.get("kind") == "step":
                    steps.write(json.dumps(message, separators=(",", ":")) + "\n")
    return out


def read_sglang_steps(bundle: str | os.PathLike[str]) -> list[SglangStep]:
    """The step records of a bundle written by :func:`record_sglang`, in order.

    Reads ``sglang-steps.jsonl``, or its compressed form ``sglang-steps.jsonl.xz`` (the
    committed fixtures, see :func:`compress_steps`) or ``.gz`` (older fixtures).
    """
    path = _steps_path(Path(bundle))
    opener: Any = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix, open)
    with opener(path, "rt", encoding="utf-8") as lines:
        return [step_from_wire(json.loads(line)) for line in lines if line.strip()]


def _steps_path(bundle: Path) -> Path:
    """The bundle's step file: plain, or compressed (xz, then gz); the plain name if none."""
    path = bundle / STEPS_FILE
    for candidate in (path, path.with_name(STEPS_FILE + ".xz"), path.with_name(STEPS_FILE + ".gz")):
        if candidate.is_file():
            return candidate
    return path


def read_sglang_scenario(
    bundle: str | os.PathLike[str],
) -> tuple[SglangConfig, list[tuple[Any, ...]]]:
    """The configuration and request rows a bundle of :func:`record_sglang` was recorded from.

    Rows are ``(request_id, arrival_s, prompt_tokens, output_tokens, max_tokens, priority,
    prefix_hash_ids or None, ignore_eos)`` in input order (False for protocol 1's rows, which
    have no ``ignore_eos``).
    """
    with open(Path(bundle) / SCENARIO_FILE, encoding="utf-8") as handle:
        raw = json.load(handle)
    config = SglangConfig.from_wire(raw["config"])
    # Protocol 1 rows have no ignore_eos: it was off.
    return config, [(*r[:7], bool(r[7]) if len(r) > 7 else False) for r in raw["requests"]]


def is_sglang_bundle(bundle: str | os.PathLike[str]) -> bool:
    """Whether ``bundle`` was recorded by :func:`record_sglang` (it has a step file)."""
    return _steps_path(Path(bundle)).is_file()


def compress_steps(bundle: str | os.PathLike[str]) -> Path:
    """Replace a bundle's ``sglang-steps.jsonl`` by ``sglang-steps.jsonl.xz`` (deterministic).

    The step file of a run of a few thousand steps is about a megabyte of repetitive JSON;
    xz (no time stamp in its header, so re-recording an unchanged run gives the same bytes)
    makes it a few percent of that, half of what gzip does.
    """
    path = Path(bundle) / STEPS_FILE
    target = path.with_name(STEPS_FILE + ".xz")
    packed = lzma.compress(path.read_bytes(), preset=9 | lzma.PRESET_EXTREME)
    safe_output.write_bytes(target, packed)
    path.unlink()
    return target
