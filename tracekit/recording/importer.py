"""``tracekit record import``: turn what the original BidKV logs into trace bundles.

Two sources exist on GPU deployments of the original (docs/trace-format.md, "Imports"):

``preemption-events``
    The legacy preemption-candidate JSONL (``BIDKV_LOG_PREEMPTION_EVENTS``): one event per
    line with every running request in running order and the choices of four simulated strategies.
    It records no requesting request, no step and not which victim the engine applied.
``snapshots``
    The production policy's decision snapshots: JSON/JSONL of ``get_recent_snapshots()``
    dictionaries, or log files with ``[BidKV][...] latest_snapshot={...}`` lines. They hold only
    the policy's top-k candidates, in rank order, without prompt, output or max-token counts.

Every field a source lacks is listed in the manifest's ``missing_fields`` (and
``partial_candidates`` when the candidate set is not the full host-ordered set), so replay and
validation know what they can trust.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from tracekit import __version__
from tracekit.defaults import EVENT_STRATEGIES
from tracekit.errors import WorkloadError
from tracekit.hosts.preemption_policy import PreemptionCandidate, PreemptionPolicyStats
from tracekit.recording.rows import candidate_rows, decision_row
from tracekit.trace.timestamps import utc_now_iso
from tracekit.trace.writer import BundleWriter

__all__ = ["ImportKind", "detect_import_kind", "import_logs"]

ImportKind = Literal["preemption-events", "snapshots"]

# Snapshot reasons of decisions where the V4 policy abstained (docs/policy.md#the-bidkv-decision).
ABSTAIN_REASONS = ("liveness_abstain", "cascade_abstain")
_SNAPSHOT_LINE = re.compile(r"latest_snapshot=(\{.*\})\s*$")


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` from JSONL, a JSON array, or log lines with snapshots."""
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(
            f"{path}: byte {exc.start} is not UTF-8 text; pass the original BidKV's JSONL events "
            "or its log with decision snapshots"
        ) from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
        for number, item in enumerate(items, start=1):
            if not isinstance(item, dict):
                raise WorkloadError(
                    f"{path}: item {number} of the JSON list is {type(item).__name__}, expected "
                    "a JSON object (an event or a snapshot)"
                )
            yield number, item
        return
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        match = _SNAPSHOT_LINE.search(line)
        try:
            if match:
                record = ast.literal_eval(match.group(1))
            elif line.startswith("{"):
                record = json.loads(line)
            else:
                continue  # other log lines
        except (ValueError, SyntaxError) as exc:
            raise WorkloadError(
                f"{path}: line {number}: cannot parse the record ({exc}); fix or remove the line"
            ) from None
        if not isinstance(record, dict):
            raise WorkloadError(f"{path}: line {number}: expected a JSON object")
        yield number, record


def detect_import_kind(path: Path) -> ImportKind:
    """Which original log ``path`` holds, from its first record."""
    for _, record in _records(path):
        if "strategy_choices" in record:
            return "preemption-events"
        if "selected_victim_id" in record:
            return "snapshots"
        break
    raise WorkloadError(
        f"{path}: neither a preemption-event log (field 'strategy_choices') nor decision "
        "snapshots (field 'selected_victim_id'); pass --kind or the right file"
    )


def _need(path: Path, line: int, record: dict[str, Any], field: str) -> Any:
    if field not in record or record[field] is None:
        raise WorkloadError(f"{path}: line {line}: field {field!r} is missing; the record is cut")
    return record[field]


def _count(path: Path, line: int, record: dict[str, Any], field: str, default: int = 0) -> int:
    value = record.get(field, default)
    if not isinstance(value, int | float) or value != value or value < 0:
        raise WorkloadError(
            f"{path}: line {line}: field {field!r} is {value!r}, expected a count >= 0"
        )
    return int(value)


def _event_decision(
    path: Path, line: int, record: dict[str, Any], applied_strategy: str
) -> tuple[SimpleNamespace, str, str | None]:
    candidates = []
    for entry in _need(path, line, record, "candidates"):
        candidates.append(
            PreemptionCandidate(
                str(_need(path, line, entry, "request_id")),
                0,
                float(entry.get("arrival_ms", 0.0)) / 1000.0,
                _count(path, line, entry, "num_prompt_tokens"),
                _count(path, line, entry, "num_output_tokens"),
                _count(path, line, entry, "num_computed_tokens"),
                _count(path, line, entry, "num_preemptions"),
                _count(path, line, entry, "max_output_tokens", 256),
            )
        )
    if not candidates:
        raise WorkloadError(f"{path}: line {line}: field 'candidates' is empty")
    context = SimpleNamespace(
        candidates=tuple(candidates),
        scheduling_policy="fcfs",
        requesting_request_id=None,
        kv_cache_usage=float(_need(path, line, record, "kv_usage")),
        now=float(_need(path, line, record, "ts")),
    )
    builtin = candidates[-1].request_id
    choice = record.get("strategy_choices", {}).get(applied_strategy)
    return context, builtin, choice


def _snapshot_decision(
    path: Path, line: int, record: dict[str, Any]
) -> tuple[SimpleNamespace, str, str, str | None]:
    ranked = sorted(record.get("candidates") or [], key=lambda c: c.get("rank", 0))
    candidates = [
        PreemptionCandidate(
            str(_need(path, line, c, "request_id")),
            0,
            float(c.get("arrival_time", 0.0)),
            0,
            0,
            _count(path, line, c, "tokens_freed"),
            _count(path, line, c, "num_preemptions"),
            0,
        )
        for c in ranked
    ]
    selected = str(_need(path, line, record, "selected_victim_id"))
    default = str(record.get("default_victim_id") or selected)
    known = {c.request_id for c in candidates}
    # Snapshots keep only the top-k; the chosen and default victims are candidates too.
    for rid in (selected, default):
        if rid not in known:
            candidates.append(PreemptionCandidate(rid, 0, 0.0, 0, 0, 0, 0, 0))
            known.add(rid)
    context = SimpleNamespace(
        candidates=tuple(candidates),
        scheduling_policy=str(record.get("policy") or "fcfs").lower(),
        requesting_request_id=None,
        kv_cache_usage=float(record.get("kv_utilization") or 0.0),
        now=float(_need(path, line, record, "timestamp_s")),
    )
    return context, selected, default, record.get("decision_reason")


def import_logs(
    path: str | Path,
    out: str | Path,
    *,
    kind: ImportKind | None = None,
    applied_strategy: str = "pe-lifo",
    run_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Convert an original BidKV log into a trace bundle at ``out``.

    Parameters
    ----------
    path
        The log file.
    out
        The bundle folder to create (written atomically).
    kind
        ``preemption-events`` or ``snapshots``; detected from the first record when omitted.
    applied_strategy
        For preemption events: which logged strategy the engine ran (its choice is recorded as
        the applied victim); ``pe-lifo`` means vLLM's built-in FCFS tail.
    run_id
        Run id; defaults to ``import-<first 12 hex of the file's sha256>``.
    overwrite
        Replace an existing bundle at ``out`` (once the new one is complete; only a bundle).
    """
    source = Path(path)
    if not source.is_file():
        raise WorkloadError(f"{source}: no such file; pass the original BidKV log to import")
    if applied_strategy not in EVENT_STRATEGIES:
        raise WorkloadError(
            f"--applied-strategy {applied_strategy!r} is unknown; use one of "
            f"{', '.join(EVENT_STRATEGIES)}"
        )
    kind = kind or detect_import_kind(source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    run_id = run_id or f"import-{digest[:12]}"
    missing: dict[str, list[str]] = {"decisions": ["step", "requesting_request_id"]}
    if kind == "preemption-events":
        missing["candidates"] = ["priority"]
        if applied_strategy == "pe-lifo":
            missing["decisions"].append("raw_result")
    else:
        missing["decisions"] += ["controller counters"]
        missing["candidates"] = [
            "priority",
            "num_prompt_tokens",
            "num_output_tokens",
            "max_tokens",
            "candidates beyond the snapshot's top_k",
        ]
    manifest = {
        "run_id": run_id,
        "tool_version": __version__,
        "created_at": utc_now_iso(),
        "engine": "import",
        "engine_config": None,
        "scheduling_policy": "fcfs",
        "host_path": "legacy" if kind == "preemption-events" else "typed",
        "strategy": applied_strategy if kind == "preemption-events" else "bidkv",
        "strategy_config": None,
        "workload": {"name": source.stem, "source": str(source), "sha256": digest, "format": kind},
        "time_scaling": 1.0,
        "window": None,
        "seed": None,
        "clock": "wall",
        "missing_tables": ["requests", "steps"],
        "missing_fields": missing,
        "partial_candidates": kind == "snapshots",
    }
    stats = PreemptionPolicyStats(policy_name=manifest["strategy"], enabled=True)
    with BundleWriter(
        out, manifest, tables=["decisions", "candidates"], overwrite=overwrite
    ) as writer:
        seq = 0
        for line, record in _records(source):
            if kind == "preemption-events":
                context, builtin, choice = _event_decision(source, line, record, applied_strategy)
                if applied_strategy == "pe-lifo" or choice is None:
                    outcome, raw, applied, reason = "builtin", None, builtin, None
                else:
                    stats.calls += 1
                    stats.selections += 1
                    outcome, raw, applied, reason = "selected", choice, choice, "strategy"
            else:
                context, selected, builtin, reason = _snapshot_decision(source, line, record)
                stats.calls += 1
                if reason in ABSTAIN_REASONS:
                    # The policy returned None; its snapshot names its own default victim.
                    stats.abstentions += 1
                    outcome, raw, applied = "abstained", None, builtin
                else:
                    stats.selections += 1
                    outcome, raw, applied = "selected", selected, selected
            for row in candidate_rows(run_id, seq, context.candidates):
                writer.append("candidates", row)
            writer.append(
                "decisions",
                decision_row(
                    run_id=run_id,
                    seq=seq,
                    step=-1,
                    context=context,
                    builtin_victim_id=builtin,
                    raw=raw,
                    outcome=outcome,
                    applied_victim_id=applied,
                    decision_reason=reason,
                    stats=stats,
                ),
            )
            seq += 1
        if seq == 0:
            raise WorkloadError(f"{source}: holds no records to import")
    return Path(out)
