"""``tracekit record sim``: run a workload through the embedded engine and record a bundle.

One run = one workload, one engine configuration, one strategy on one host path. Records stream
from the engine straight into the bundle writer (nothing is kept in memory), and the bundle
appears only when the run completed (atomic write). Until then the hidden ``.OUT.partial-PID``
folder holds every full row group as a part file and a manifest that says ``complete: false``;
a run killed there (or stopped by SIGTERM or Ctrl-C, which flush the rest first) leaves it as a
truncated bundle, and the next run into ``OUT`` removes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from tracekit import __version__
from tracekit.engine import (
    DecisionRecord,
    EngineConfig,
    RequestRecord,
    StepRecord,
    run_engine,
)
from tracekit.engine.config import recorded_form
from tracekit.engine.request import engine_requests
from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import PreemptionPolicyStats
from tracekit.latency.spec import latency_manifest
from tracekit.recording.rows import (
    candidate_rows,
    decision_row,
    request_row,
    scheduled_rows,
    step_row,
)
from tracekit.recording.state import final_state as _final_state
from tracekit.strategies import HostPath, StrategySpec
from tracekit.trace.rows import AdmissionRow
from tracekit.trace.timestamps import utc_now_iso
from tracekit.trace.writer import BundleWriter
from tracekit.workloads import Workload, load_workload, with_shared_prefix
from tracekit.workloads.load_spec import client_model

__all__ = [
    "ENGINE_NAMES",
    "SimRun",
    "TraceObserver",
    "load_run_workload",
    "make_run_id",
    "record_sim",
]

# The policy's own log lines, kept in the bundle for analysers that count them.
POLICY_LOG = "policy.log"

ENGINE_NAMES = {"vllm": "embedded-vllm", "sglang": "embedded-sglang"}

Progress = Callable[[int, int], None]

# Outcome -> counters it increments (docs/contracts.md, "The controller and its counters"), for
# hosts that keep no counters.
_COUNTED = {
    "selected": ("calls", "selections"),
    "abstained": ("calls", "abstentions"),
    "invalid": ("calls", "failures", "invalid_selections"),
    "exception": ("calls", "failures"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class SimRun:
    """Everything that defines one simulated run (and so its deterministic run id)."""

    workload: Workload
    engine_config: EngineConfig
    strategy: StrategySpec
    host_path: HostPath
    seed: int = 0

    def manifest(self, run_id: str) -> dict[str, Any]:
        """The bundle manifest's run fields."""
        workload = self.workload
        return {
            "run_id": run_id,
            "tool_version": __version__,
            "created_at": utc_now_iso(),
            "engine": ENGINE_NAMES[self.engine_config.mode],
            "engine_config": recorded_form(self.engine_config),
            "scheduling_policy": self.engine_config.scheduling_policy,
            "host_path": "builtin" if self.strategy.kind == "builtin" else self.host_path,
            "strategy": self.strategy.name,
            "strategy_config": self.strategy.settings or None,
            "workload": workload.describe(),
            "time_scaling": float(workload.options.get("rate_scale", 1.0)),
            "window": workload.options.get("window"),
            "seed": self.seed,
            "clock": self.engine_config.clock,
        }


def make_run_id(run: SimRun, *, engine: str | None = None) -> str:
    """A stable id from everything that defines the run: same inputs, same id.

    ``engine`` names another engine than the embedded one (``vllm-0.32.0`` for a run recorded
    from the real scheduler): it enters the digest and the id, so the two recordings of one run
    get different ids.
    """
    identity = run.manifest("")
    identity.pop("created_at")
    identity.pop("tool_version")
    label = f"{run.strategy.label}-{run.host_path}"
    if engine is not None:
        identity["engine"] = engine
        label = f"{label}-{engine.replace('.', '')}"
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    return f"{label}-{digest[:10]}"


class TraceObserver:
    """Streams engine records into a :class:`BundleWriter` as schema rows."""

    def __init__(
        self,
        writer: BundleWriter,
        run_id: str,
        *,
        policy_name: str,
        scheduling_policy: str,
        record_scheduled: bool = False,
        total_requests: int = 0,
        progress: Progress | None = None,
        record_cache: bool = False,
        record_admissions: bool = False,
        record_evictions: bool = True,
        record_ignore_eos: bool = True,
    ) -> None:
        self.writer = writer
        # Whether request records say what the request ran with (the embedded engine); the
        # real-vLLM drivers send every request with ignore_eos and a stop token of their own,
        # so their requests' ignore_eos column stays null.
        self.record_ignore_eos = record_ignore_eos
        # Whether step records carry the prefix-cache figures (the embedded engine: 0 with
        # caching off); otherwise the trace's cache columns of steps and requests stay null.
        self.record_cache = record_cache
        # Whether they carry the cached blocks evicted too (not the real-vLLM recorder's).
        self.record_evictions = record_evictions
        # req_id -> hit tokens at its first schedule / summed over its resumes, until it ends.
        self._first_hits: dict[str, int] = {}
        self._resume_hits: dict[str, int] = {}
        # req_id -> admissions seen so far (first schedule + resumes), for the admissions table.
        self._admitted: dict[str, int] = {}
        self._append_admission = writer.appender("admissions") if record_admissions else None
        # Appenders of the tables written once per step or per candidate (the hot path).
        self._append_step = writer.appender("steps")
        self._append_candidate = writer.appender("candidates")
        self._append_scheduled = writer.appender("scheduled") if record_scheduled else None
        self.run_id = run_id
        self.scheduling_policy = scheduling_policy
        self.record_scheduled = record_scheduled
        self.stats = PreemptionPolicyStats(policy_name=policy_name, enabled=True)
        self.total = total_requests
        self.done = 0
        self.progress = progress

    def on_decision(self, record: DecisionRecord) -> None:
        """Write the decision and its candidates."""
        self._update_stats(record)
        append = self._append_candidate
        for row in candidate_rows(
            self.run_id, record.seq, record.candidates, record.candidate_blocks
        ):
            append(row)
        context = _DecisionContext(
            record.candidates,
            self.scheduling_policy,
            record.requesting_request_id,
            record.kv_cache_usage,
            record.time_s,
        )
        self.writer.append(
            "decisions",
            decision_row(
                run_id=self.run_id,
                seq=record.seq,
                step=record.step,
                context=context,
                builtin_victim_id=record.builtin_victim_id,
                raw=record.raw_result,
                outcome=record.outcome,
                applied_victim_id=record.victim_id,
                decision_reason=record.decision_reason,
                stats=self.stats,
                freed_blocks=record.freed_blocks,
                freed_tokens=record.freed_tokens,
            ),
        )

    def _update_stats(self, record: DecisionRecord) -> None:
        counters = record.counters or {}
        stats = self.stats
        if "selections" in counters:
            # A typed host's controller keeps the real counters: record them as they are.
            for name in ("calls", "selections", "abstentions", "failures", "invalid_selections"):
                setattr(stats, name, int(counters[name]))
            stats.enabled = bool(counters.get("enabled", True))
            return
        for name in _COUNTED.get(record.outcome, ()):
            setattr(stats, name, getattr(stats, name) + 1)
        if record.outcome in ("invalid", "exception"):
            stats.enabled = False

    def on_step(self, record: StepRecord) -> None:
        """Write the step (and, if asked, its per-request scheduled tokens)."""
        self._append_step(
            step_row(self.run_id, record, cache=self.record_cache, evictions=self.record_evictions)
        )
        if record.cache_hits:
            first, resume, admitted = self._first_hits, self._resume_hits, self._admitted
            append = self._append_admission
            for request_id, tokens in record.cache_hits.items():
                # The first admission of a request is its first schedule; later ones resume it.
                if request_id in first:
                    resume[request_id] = resume.get(request_id, 0) + tokens
                else:
                    first[request_id] = tokens
                index = admitted.get(request_id, 0)
                admitted[request_id] = index + 1
                if append is not None:
                    append(
                        AdmissionRow(
                            self.run_id, request_id, index, record.step, record.time_s, tokens
                        )
                    )
        if self._append_scheduled is not None:
            append = self._append_scheduled
            for row in scheduled_rows(self.run_id, record):
                append(row)

    def on_request(self, record: RequestRecord) -> None:
        """Write the finished request."""
        first = self._first_hits.pop(record.request_id, 0)
        resume = self._resume_hits.pop(record.request_id, 0)
        self._admitted.pop(record.request_id, None)
        ignore_eos = record.ignore_eos if self.record_ignore_eos else None
        if self.record_cache:
            # Never scheduled (rejected): no first-schedule hit to speak of, and no resume.
            scheduled = record.first_scheduled_s is not None
            row = request_row(
                self.run_id, record, first if scheduled else None, resume, ignore_eos=ignore_eos
            )
        else:
            row = request_row(self.run_id, record, ignore_eos=ignore_eos)
        self.writer.append("requests", row)
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


class _DecisionContext(NamedTuple):
    """The context fields of a decision record, as ``decision_row`` reads them."""

    candidates: Any
    scheduling_policy: str
    requesting_request_id: str
    kv_cache_usage: float
    now: float


def record_sim(
    run: SimRun,
    out: str | Path,
    *,
    run_id: str | None = None,
    record_scheduled: bool = False,
    progress: Progress | None = None,
    overwrite: bool = False,
    stop_on_signals: bool = False,
) -> Path:
    """Run ``run`` on the embedded engine and write its bundle to ``out``.

    Parameters
    ----------
    run
        Workload, engine configuration, strategy and host path.
    out
        The bundle folder to create; it appears only once the run completed.
    run_id
        Defaults to :func:`make_run_id`.
    record_scheduled
        Also write the optional ``scheduled`` table (tokens per request per step).
    progress
        Called with ``(finished requests, total requests)`` as requests finish.
    overwrite
        Replace an existing bundle at ``out`` (once the new one is complete).
    stop_on_signals
        On SIGTERM or Ctrl-C (SIGINT), main thread only: flush what was recorded into the
        partial folder and raise :class:`~tracekit.trace.writer.RecordingInterrupted`, which
        names it.

    Returns
    -------
    Path
        The bundle folder.

    Raises
    ------
    RecordingInterrupted
        Stopped by SIGTERM or SIGINT (with ``stop_on_signals``); the flushed rows are kept.
    KeyboardInterrupt
        Stopped by Ctrl-C without ``stop_on_signals``; the flushed rows are kept too.
    """
    run_id = run_id or make_run_id(run)
    tables = ["requests", "decisions", "candidates", "steps"]
    if record_scheduled:
        tables.append("scheduled")
    # Each admission's prefix-cache hit (trace v2), where the engine looks the cache up
    # (vLLM's prefix cache, SGLang's radix cache).
    config = run.engine_config
    admissions = bool(config.enable_prefix_caching) or bool(
        config.mode == "sglang" and config.radix_cache
    )
    if admissions:
        tables.append("admissions")
    requests = engine_requests(run.workload)
    # The step-time model that produced the times (docs/latency.md); not part of the run id.
    manifest = {**run.manifest(run_id), "latency": latency_manifest(run.engine_config)}
    writer = BundleWriter(out, manifest, tables=tables, overwrite=overwrite)
    signums = (signal.SIGTERM, signal.SIGINT) if stop_on_signals else ()
    with (
        writer.stop_on_signals(*signums),
        writer,
        policy_log(writer.folder / POLICY_LOG),
    ):
        # Built inside the log context so that the policy's INIT line is kept too.
        host = run.strategy.make_host(run.host_path)
        observer = TraceObserver(
            writer,
            run_id,
            policy_name=run.strategy.name,
            # The policy the victim host saw (SGLang: the retraction policy's).
            scheduling_policy=run.engine_config.victim_scheduling_policy,
            record_scheduled=record_scheduled,
            total_requests=len(requests),
            progress=progress,
            record_cache=True,
            record_admissions=admissions,
        )
        client = client_model(run.workload)
        result = run_engine(
            requests, run.engine_config, host, observer, collect=False, client=client
        )
        writer.manifest["final_state"] = _final_state(host, result.num_steps, result.end_s)
    return Path(out)


@contextlib.contextmanager
def policy_log(path: Path) -> Iterator[None]:
    """Send the policy's log lines (logger ``vllm``, INFO and up) to ``path`` during a run.

    The lines keep the formats of docs/policy.md, "Counters, snapshots, logs", so analysers that
    count ``[BidKV] ...`` lines
    work on recorded runs; they do not reach the console.
    """
    logger = logging.getLogger("vllm")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def load_run_workload(
    path: str | Path,
    *,
    format: str | None = None,
    limit: int | None = None,
    window: tuple[float, float | None] | None = None,
    rate_scale: float = 1.0,
    priority_seed: int | None = None,
    shared_prefix_tokens: int | None = None,
    prefix_groups: int | None = None,
    prefix_seed: int = 0,
    priority_levels: int = 3,
) -> Workload:
    """Load the workload of a run (see :func:`tracekit.workloads.load_workload`).

    ``shared_prefix_tokens`` / ``prefix_groups`` / ``prefix_seed``: give every request a shared
    prompt prefix (:func:`tracekit.workloads.with_shared_prefix`; groups default to 1).
    """
    workload = load_workload(
        path,
        format=format,
        limit=limit,
        window=window,
        rate_scale=rate_scale,
        priority_seed=priority_seed,
        priority_levels=priority_levels,
    )
    if shared_prefix_tokens is None:
        if prefix_groups is not None:
            raise ConfigError(
                f"--prefix-groups {prefix_groups!r}: expected only with --shared-prefix-tokens; "
                "fix: add --shared-prefix-tokens N or drop --prefix-groups"
            )
        return workload
    groups = 1 if prefix_groups is None else prefix_groups
    return with_shared_prefix(workload, shared_prefix_tokens, groups, prefix_seed)
