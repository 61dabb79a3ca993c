"""Recording wrappers that live engines load by qualified name.

``RecordingPolicy`` is a typed ``PreemptionPolicy`` and ``RecordingVictimSelector`` a legacy
``VictimSelector``. Each wraps an inner policy, delegates every call unchanged (same return value,
same exception), and writes the ``decisions`` and ``candidates`` tables of a trace bundle. Rows
are buffered in bounded memory and flushed as complete Parquet part files by count and by time,
so a process killed with SIGKILL leaves every flushed row readable (``tracekit validate`` then
reports the bundle as truncated).

Configured by environment variables, because engines construct policies themselves:

``TRACEKIT_RECORD_DIR``         bundle folder to write (required)
``TRACEKIT_RECORD_POLICY``      qualified name of the wrapped policy (empty: always abstain)
``TRACEKIT_RECORD_RUN_ID``      run id (default ``live-<pid>-<start time>``)
``TRACEKIT_RECORD_FLUSH_ROWS``  decisions per flush (default 1024)
``TRACEKIT_RECORD_FLUSH_S``     seconds between flushes at most (default 5)
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tracekit import __version__
from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import (
    PolicyOutcome,
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyStats,
    builtin_victim_id,
    decision_reason_of,
    load_policy,
    resolve_qualname,
)
from tracekit.recording.rows import candidate_rows, decision_row
from tracekit.trace.writer import BundleWriter

__all__ = ["RecordingPolicy", "RecordingVictimSelector"]

ENV_DIR = "TRACEKIT_RECORD_DIR"
ENV_POLICY = "TRACEKIT_RECORD_POLICY"
ENV_RUN_ID = "TRACEKIT_RECORD_RUN_ID"
ENV_FLUSH_ROWS = "TRACEKIT_RECORD_FLUSH_ROWS"
ENV_FLUSH_S = "TRACEKIT_RECORD_FLUSH_S"


def _env_number(name: str, default: float, kind: type) -> Any:
    raw = os.environ.get(name, "")
    if raw == "":
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not a {kind.__name__}; set a positive number"
        ) from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


class _LiveRecorder:
    """The bundle writer and counters shared by both wrapper faces."""

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        host_path: str,
        strategy: str,
        run_id: str | None,
        flush_rows: int,
        flush_interval_s: float,
        strategy_config: Any = None,
    ) -> None:
        started = dt.datetime.now(dt.timezone.utc)
        self.run_id = run_id or f"live-{os.getpid()}-{started:%Y%m%dT%H%M%S}"
        manifest = {
            "run_id": self.run_id,
            "tool_version": __version__,
            "created_at": started.isoformat(),
            "engine": "live",
            "engine_config": None,
            "scheduling_policy": "unknown",
            "host_path": host_path,
            "strategy": strategy,
            "strategy_config": strategy_config,
            "workload": None,
            "time_scaling": 1.0,
            "window": None,
            "seed": None,
            "clock": "wall",
            "missing_tables": ["requests", "steps"],
            "missing_fields": {"decisions": ["step"]},
        }
        self.writer = BundleWriter(
            out,
            manifest,
            mode="live",
            tables=["decisions", "candidates"],
            row_group_rows=flush_rows,
            flush_interval_s=flush_interval_s,
        )
        self.stats = PreemptionPolicyStats(policy_name=strategy, enabled=True)
        self.seq = 0
        atexit.register(self.close)

    def record(
        self,
        context: Any,
        raw: object,
        outcome: PolicyOutcome,
        applied: str,
        reason: str | None,
    ) -> None:
        if self.seq == 0:
            self.writer.manifest["scheduling_policy"] = str(context.scheduling_policy)
        builtin = builtin_victim_id(context)
        # Candidates first: a flush triggered by the decision row then carries both.
        for row in candidate_rows(self.run_id, self.seq, context.candidates):
            self.writer.append("candidates", row)
        self.writer.append(
            "decisions",
            decision_row(
                run_id=self.run_id,
                seq=self.seq,
                step=-1,
                context=context,
                builtin_victim_id=builtin,
                raw=raw,
                outcome=outcome,
                applied_victim_id=applied,
                decision_reason=reason,
                stats=self.stats,
            ),
        )
        self.seq += 1

    def close(self) -> None:
        self.writer.close(final_state={"controller_stats": self._stats_dict()})

    def _stats_dict(self) -> dict[str, Any]:
        s = self.stats
        return {
            "calls": s.calls,
            "selections": s.selections,
            "abstentions": s.abstentions,
            "failures": s.failures,
            "invalid_selections": s.invalid_selections,
            "enabled": s.enabled,
        }


def _recorder_from_env(host_path: str, strategy: str) -> _LiveRecorder:
    out = os.environ.get(ENV_DIR, "")
    if not out:
        raise ConfigError(f"{ENV_DIR} is not set; set it to the bundle folder to record into")
    return _LiveRecorder(
        Path(out),
        host_path=host_path,
        strategy=strategy,
        run_id=os.environ.get(ENV_RUN_ID) or None,
        flush_rows=_env_number(ENV_FLUSH_ROWS, 1024, int),
        flush_interval_s=_env_number(ENV_FLUSH_S, 5.0, float),
    )


class _Abstain:
    """The inner policy when none is configured: the host's built-in choice, recorded."""

    def select_victim(self, context: Any) -> None:
        return None


class RecordingPolicy:
    """A typed ``PreemptionPolicy`` that records every call of the policy it wraps."""

    vllm_preemption_policy_api_version = 1

    def __init__(self, inner: Any, recorder: _LiveRecorder) -> None:
        self.inner = inner
        self.recorder = recorder

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> RecordingPolicy:
        """Build the wrapper and its inner policy from the environment (see module docs)."""
        name = os.environ.get(ENV_POLICY, "")
        inner = load_policy(name, vllm_config) if name else _Abstain()
        return cls(inner, _recorder_from_env("typed", name or "builtin"))

    def select_victim(self, context: PreemptionContext) -> str | None:
        """Delegate to the inner policy unchanged and record the call as the host will see it."""
        stats = self.recorder.stats
        stats.calls += 1
        builtin = builtin_victim_id(context)
        try:
            raw = self.inner.select_victim(context)
        except Exception:
            stats.failures += 1
            stats.enabled = False
            self.recorder.record(context, None, "exception", builtin, None)
            self.recorder.writer.flush()
            raise
        reason = decision_reason_of(self.inner)
        if raw is None:
            stats.abstentions += 1
            self.recorder.record(context, raw, "abstained", builtin, reason)
        elif isinstance(raw, str) and any(c.request_id == raw for c in context.candidates):
            stats.selections += 1
            self.recorder.record(context, raw, "selected", raw, reason)
        else:
            stats.invalid_selections += 1
            stats.failures += 1
            stats.enabled = False
            self.recorder.record(context, raw, "invalid", builtin, reason)
            self.recorder.writer.flush()
        return raw

    def close(self) -> None:
        """Flush and mark the bundle complete (also run at interpreter exit)."""
        self.recorder.close()


def _candidate_of(request: Any) -> PreemptionCandidate:
    """A typed candidate view of a legacy host's request object."""
    sampling = getattr(request, "sampling_params", None)
    max_tokens = getattr(request, "max_tokens", None) or getattr(sampling, "max_tokens", 0) or 0
    return PreemptionCandidate(
        str(request.request_id),
        int(getattr(request, "priority", 0) or 0),
        float(getattr(request, "arrival_time", 0.0) or 0.0),
        int(getattr(request, "num_prompt_tokens", 0) or 0),
        int(getattr(request, "num_output_tokens", 0) or 0),
        int(getattr(request, "num_computed_tokens", 0) or 0),
        int(getattr(request, "num_preemptions", 0) or 0),
        int(max_tokens),
    )


class RecordingVictimSelector:
    """A legacy ``VictimSelector`` that records every ``pick_victim`` of the selector it wraps."""

    vllm_victim_selector_api_version = 1

    def __init__(self, inner: Any, recorder: _LiveRecorder) -> None:
        self.inner = inner
        self.recorder = recorder

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> RecordingVictimSelector:
        """Build the wrapper and its inner selector from the environment (see module docs)."""
        name = os.environ.get(ENV_POLICY, "")
        if not name:
            raise ConfigError(f"{ENV_POLICY} must name the victim selector to wrap")
        implementation = resolve_qualname(name)
        inner = implementation.from_vllm_config(vllm_config)
        return cls(inner, _recorder_from_env("legacy", name))

    def pick_victim(
        self,
        running: Sequence[Any],
        policy: Any,
        *,
        kv_utilization: float | None = None,
        now_s: float | None = None,
    ) -> Any:
        """Delegate unchanged; record the decision (the legacy host passes no requester)."""
        policy_name = getattr(policy, "value", None) or str(getattr(policy, "name", policy))
        context = SimpleNamespace(
            candidates=tuple(_candidate_of(r) for r in running),
            scheduling_policy=str(policy_name).lower(),
            requesting_request_id=None,
            kv_cache_usage=kv_utilization or 0.0,
            now=time.monotonic() if now_s is None else now_s,
            builtin_victim_id=None,
        )
        stats = self.recorder.stats
        stats.calls += 1
        victim = self.inner.pick_victim(running, policy, kv_utilization=kv_utilization, now_s=now_s)
        victim_id = str(getattr(victim, "request_id", victim))
        stats.selections += 1
        reason = decision_reason_of(self.inner)
        self.recorder.record(context, victim_id, "selected", victim_id, reason)
        return victim

    def emit_observability_log(self, logger: Any, scheduler_name: str) -> None:
        """Forward to the inner selector."""
        emit = getattr(self.inner, "emit_observability_log", None)
        if emit is not None:
            emit(logger, scheduler_name)

    def export_metrics(self) -> dict[str, Any]:
        """The inner selector's metrics."""
        return dict(self.inner.export_metrics())

    def close(self) -> None:
        """Flush and mark the bundle complete (also run at interpreter exit)."""
        self.recorder.close()
