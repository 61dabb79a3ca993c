"""Small hand-made trace bundles for the trace-format tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tracekit.engine import EngineConfig, EngineRequest, run_engine
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyStats,
)
from tracekit.recording.rows import candidate_rows, decision_row
from tracekit.recording.sim import TraceObserver
from tracekit.trace.rows import ROW_TYPES
from tracekit.trace.writer import BundleWriter

RUN = "run-a"


def base_manifest(run_id: str = RUN) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tool_version": "test",
        "created_at": "2026-11-30T00:00:00+00:00",
        "engine": "embedded-vllm",
        "engine_config": {"num_blocks": 11, "block_size": 16},
        "scheduling_policy": "fcfs",
        "host_path": "typed",
        "strategy": "builtin",
        "strategy_config": None,
        "workload": {"name": "hand", "source": None, "sha256": None},
        "time_scaling": 1.0,
        "window": None,
        "seed": 0,
        "clock": "steps",
    }


def cand(rid: str, computed: int, arrival: float = 0.0) -> PreemptionCandidate:
    return PreemptionCandidate(rid, 0, arrival, computed, 0, computed, 0, 16)


def write_bundle(out: Path, run_id: str = RUN, **overrides: Any) -> Path:
    """Two FCFS decisions over three requests; the policy selects r0, then abstains.

    ``overrides`` may replace 'decisions' rows (list of tuples) or 'requests' rows.
    """
    stats = PreemptionPolicyStats(policy_name="p", enabled=True)
    contexts = [
        PreemptionContext((cand("r0", 48), cand("r1", 32), cand("r2", 16)), "fcfs", "r2", 1.0, 1.0),
        PreemptionContext((cand("r1", 40), cand("r2", 24)), "fcfs", "r2", 1.0, 2.0),
    ]
    decisions = []
    candidates = []
    for seq, (ctx, raw, outcome) in enumerate(
        [(contexts[0], "r0", "selected"), (contexts[1], None, "abstained")]
    ):
        stats.calls += 1
        if outcome == "selected":
            stats.selections += 1
        else:
            stats.abstentions += 1
        builtin = ctx.candidates[-1].request_id
        applied = raw if outcome == "selected" else builtin
        decisions.append(
            decision_row(
                run_id=run_id,
                seq=seq,
                step=seq + 3,
                context=ctx,
                builtin_victim_id=builtin,
                raw=raw,
                outcome=outcome,
                applied_victim_id=applied,
                decision_reason="strategy",
                stats=stats,
            )
        )
        candidates.extend(candidate_rows(run_id, seq, ctx.candidates))
    requests = [
        (
            run_id,
            f"r{i}",
            i,
            float(i),
            16 + i,
            4,
            4,
            0,
            0.0,
            0.1,
            5.0,
            "finished",
            4,
            1 - i // 2,
            16,
        )
        for i in range(3)
    ]
    steps = [
        (run_id, s, s * 0.5, 0.5, 2, 1, 8, 10, 16, 2, 1 if s in (3, 4) else 0) for s in range(6)
    ]
    decisions = overrides.pop("decisions", decisions)
    requests = overrides.pop("requests", requests)
    candidates = overrides.pop("candidates", candidates)
    manifest = {**base_manifest(run_id), **overrides}
    with BundleWriter(out, manifest) as writer:
        for table, rows in (
            ("requests", requests),
            ("decisions", decisions),
            ("candidates", candidates),
            ("steps", steps),
        ):
            for row in rows:
                writer.append(table, ROW_TYPES[table](*row))
    return out


#: The prefix-cache run worked out by hand in tests/test_trace_v2_cache.py's docstring: block
#: size 4, 7 usable blocks, vLLM 0.32 FCFS, prefix caching on (its requests:
#: :func:`hand_cache_requests`).
HAND_CACHE_CONFIG = dict(
    num_blocks=8, block_size=4, max_model_len=28, max_num_seqs=2, clock="steps",
    enable_prefix_caching=True,
)  # fmt: skip


def hand_cache_requests() -> list[EngineRequest]:
    """A and B at 0: 10-token prompts sharing 8 tokens; A stops after 12 outputs, B after 8."""
    return [
        EngineRequest("A", 0.0, 10, 12, 12, 0, (7,), 8),
        EngineRequest("B", 0.0, 10, 8, 8, 0, (7,), 8),
    ]


def engine_config(**settings: object) -> EngineConfig:
    """An engine configuration with synchronous scheduling where the engine offers async."""
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    if "async_scheduling" in names:
        settings.setdefault("async_scheduling", False)
    return EngineConfig(**settings)  # type: ignore[arg-type]


def record_engine_bundle(
    out: Path, config: EngineConfig, requests: list[EngineRequest], run_id: str = "cache-hand"
) -> Path:
    """Run ``requests`` on the embedded engine (built-in victims) into a v2 bundle at ``out``."""
    manifest = base_manifest(run_id)
    manifest["engine_config"] = dataclasses.asdict(config)
    tables = ["requests", "decisions", "candidates", "steps"]
    admissions = config.enable_prefix_caching
    with BundleWriter(out, manifest, tables=[*tables, "admissions"] if admissions else tables) as w:
        observer = TraceObserver(
            w,
            run_id,
            policy_name="builtin",
            scheduling_policy="fcfs",
            record_cache=True,
            record_admissions=admissions,
        )
        run_engine(requests, config, None, observer, collect=False, check_consistency=True)
    return out


def rewrite_table(bundle: Path, table: str, frame: Any) -> Path:
    """Write ``frame`` (polars) as ``table`` of ``bundle``, and its row count into the manifest.

    A tampered table that keeps its manifest consistent: readers refuse a table whose rows
    disagree with the manifest (docs/trace-format.md, "Validation"), so tests that change a
    run's rows to provoke a finding say how many rows the table now holds, as a recorder would.
    """
    import json

    path = bundle / f"{table}.parquet"
    frame.write_parquet(path)
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text("utf-8"))
    manifest["tables"][table]["rows"] = frame.height
    manifest_path.write_text(json.dumps(manifest, indent=2), "utf-8")
    return path
