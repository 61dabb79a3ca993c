"""``tracekit fidelity``: check the embedded engine against the real vLLM scheduler.

:func:`compare_fidelity` reads two bundles of the same run, one recorded by ``tracekit record
sim`` and one by ``tracekit record vllm`` (any two bundles of one run work: a fixture and its live
re-recording, say), and walks them step by step. For each step, in this order, it compares the
step's victim decisions (requester, victim, built-in victim, outcome, KV usage and the full
candidate list), the per-request scheduled tokens (ids, order and counts, from the optional
``scheduled`` table), the prefix-cache hit of each admission (request, admission number and
cached tokens, from the optional ``admissions`` table), then the step row (index, time, duration,
running and waiting counts, KV blocks, prefill and decode tokens, preemptions, and the step's
``cache_hit_tokens``); after the last step, every request's outcome (with its
``num_cached_tokens`` and ``resume_cached_tokens``). The cache hits are compared where both
bundles recorded them (trace v2: ``record sim``, and ``record vllm`` since it reads the driver's
hits); a bundle without them (older recordings) skips that comparison, with a note. So are,
where both bundles recorded them, each candidate's blocks held and blocks only it holds, the
blocks and tokens each preemption freed, and each step's cached blocks evicted.

The first difference is reported with both engines' state side by side: the running queue (in
order, with computed and output tokens and KV blocks), the waiting set and the KV blocks used at
the start of the step, rebuilt from each bundle's own records, and that step's scheduled tokens,
decisions (with their context) and step row. A vLLM change that alters scheduling is then located
to the step and the rule in minutes.

Inputs that are not two recordings of one run (different requests, scheduling configuration or
strategy) raise :class:`FidelityInputError`, as do unreadable bundles (``TraceSchemaError``): the
command exits 2. A match exits 0, a mismatch 1.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracekit.engine.config import PRE_FEATURE_SETTINGS
from tracekit.engine.fake_model import stop_rule
from tracekit.hosts.preemption_policy import CANDIDATE_FIELDS
from tracekit.real_engine.comparison import FidelityInputError, FidelityVerdict, same_value
from tracekit.trace.bundle import Bundle, open_trace
from tracekit.trace.text import text_table

__all__ = [
    "EngineState",
    "FidelityInputError",
    "FidelityReport",
    "Mismatch",
    "compare_vllm_fidelity",
]

# Engine settings that change scheduling decisions: both bundles must agree on them.
SCHEDULING_KEYS = (
    "mode",
    "num_blocks",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "watermark",
    "scheduling_policy",
    "max_model_len",
    "long_prefill_token_threshold",
    "full_sequence_must_fit",
    "clock",
    "step_s",
    "cost_model",
    "enable_prefix_caching",
    "async_scheduling",
)
REQUEST_INPUTS = (
    "request_id",
    "arrival_s",
    "prompt_tokens",
    "target_output_tokens",
    "max_tokens",
    "priority",
)
REQUEST_OUTCOMES = (
    "status",
    "output_tokens",
    "num_preemptions",
    "recomputed_tokens",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
)
#: The per-request prefix-cache outcomes (trace v2), compared where both bundles have them.
REQUEST_CACHE_OUTCOMES = ("num_cached_tokens", "resume_cached_tokens")
STEP_FIELDS = (
    "step",
    "time_s",
    "duration_s",
    "num_running",
    "num_waiting",
    "kv_blocks_used",
    "kv_blocks_total",
    "scheduled_prefill_tokens",
    "scheduled_decode_tokens",
    "num_preemptions",
)
DECISION_FIELDS = (
    "requesting_request_id",
    "applied_victim_id",
    "builtin_victim_id",
    "outcome",
    "kv_usage",
    "time_s",
    "scheduling_policy",
)

# What preempting each candidate frees, and what the preemption freed: compared where both
# bundles recorded them (record sim always; record vllm since it reads the real block pool).
BLOCK_FIELDS = ("num_blocks_held", "num_blocks_exclusive")
FREED_FIELDS = ("freed_blocks", "freed_tokens")
OPTIONAL_DECISION_FIELDS = (*FREED_FIELDS, "candidate_blocks")


@dataclass
class EngineState:
    """One engine around one step: its state at the start and what it did in the step."""

    label: str
    step: int | None
    time_s: float | None = None
    # (request_id, computed tokens, output tokens, KV blocks) in running-queue order.
    running: list[tuple[str, int, int, int]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    kv_blocks_used: int | None = None
    kv_blocks_total: int | None = None
    scheduled: list[tuple[str, int]] | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    step_row: dict[str, Any] | None = None
    # (request_id, admission, cached tokens) of the step's admissions, if recorded.
    admissions: list[tuple[str, int, int]] | None = None


@dataclass
class Mismatch:
    """The first difference between the two bundles."""

    # decision | scheduled | cache | step | length | request
    kind: str
    step: int | None
    what: str
    first: Any
    second: Any
    first_state: EngineState | None = None
    second_state: EngineState | None = None


@dataclass
class FidelityReport(FidelityVerdict):
    """The outcome of :func:`compare_vllm_fidelity`."""

    first_path: str
    second_path: str
    first_engine: str
    second_engine: str
    # What was compared and found identical (up to the mismatch, if any).
    compared: dict[str, int]
    mismatch: Mismatch | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-compatible data."""
        data = asdict(self)
        data["matched"] = self.matched
        return data

    def render(self, width: int = 110) -> str:
        """A readable report; on a mismatch, both engines' state side by side."""
        a, b = self.first_engine, self.second_engine
        counts = ", ".join(f"{n} {name}" for name, n in self.compared.items())
        lines = []
        if self.mismatch is None:
            lines.append(f"fidelity: MATCH ({a} vs {b}): identical {counts}")
        else:
            m = self.mismatch
            where = f"step {m.step}" if m.step is not None else "after the last step"
            lines.append(f"fidelity: MISMATCH at {where} ({m.kind}): {m.what}")
            lines.append(f"  identical before it: {counts}")
        lines.append(f"  A: {self.first_path} ({a})")
        lines.append(f"  B: {self.second_path} ({b})")
        lines.extend(f"  note: {note}" for note in self.notes)
        if self.mismatch is not None:
            lines.append("")
            lines.extend(_render_mismatch(self.mismatch, a, b, width))
        return "\n".join(lines)


# --------------------------------------------------------------------------------- loading
@dataclass
class _Run:
    """One bundle's records, grouped by step."""

    path: Path
    manifest: dict[str, Any]
    steps: list[dict[str, Any]]
    decisions: dict[int, list[dict[str, Any]]]
    scheduled: dict[int, list[tuple[str, int]]] | None
    requests: dict[str, dict[str, Any]]
    # step -> (request_id, admission, cached tokens) in recorded order, if the table exists.
    admissions: dict[int, list[tuple[str, int, int]]] | None = None

    @property
    def has_step_hits(self) -> bool:
        """Whether the steps carry their prefix-cache hits (null: not recorded)."""
        return bool(self.steps) and all(r.get("cache_hit_tokens") is not None for r in self.steps)

    @property
    def engine(self) -> str:
        return str(self.manifest.get("engine", "?"))

    @property
    def config(self) -> dict[str, Any]:
        recorded = dict(self.manifest.get("engine_config") or {})
        # A manifest older than a vLLM feature was recorded with it off (PRE_FEATURE_SETTINGS).
        return {**PRE_FEATURE_SETTINGS, **recorded} if recorded else recorded


def _load(path: str | Path) -> _Run:
    dataset = open_trace(path)
    if len(dataset) != 1:
        raise FidelityInputError(
            f"{path}: holds {len(dataset)} bundles; pass one bundle folder per engine"
        )
    bundle: Bundle = dataset.bundles[0]
    if not bundle.complete:
        raise FidelityInputError(f"{bundle.path}: the recording never completed; re-record it")
    steps = dataset.scan("steps").drop("run_id").sort("step").collect().to_dicts()
    decisions_frame = dataset.scan("decisions").sort("seq").collect()
    candidates = (
        dataset.scan("candidates")
        .sort("seq", "position")
        .collect()
        .select("seq", *CANDIDATE_FIELDS, *BLOCK_FIELDS)
    )
    by_seq: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    blocks_by_seq: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    num_fields = len(CANDIDATE_FIELDS) + 1
    for row in candidates.iter_rows():
        by_seq[row[0]].append(row[1:num_fields])
        blocks_by_seq[row[0]].append(row[num_fields:])
    decisions: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in decisions_frame.select("seq", "step", *DECISION_FIELDS, *FREED_FIELDS).to_dicts():
        row["candidates"] = by_seq.get(row["seq"], [])
        blocks = blocks_by_seq.get(row["seq"], [])
        # Null block counts (a recording made before they were written) are not compared.
        row["candidate_blocks"] = None if any(None in b for b in blocks) else blocks
        decisions[row["step"]].append(row)
    scheduled = None
    if bundle.has_table("scheduled"):
        scheduled = defaultdict(list)
        frame = dataset.scan("scheduled").collect()
        for step, request_id, tokens in frame.select(
            "step", "request_id", "num_tokens"
        ).iter_rows():
            scheduled[step].append((request_id, tokens))
    requests = {
        row["request_id"]: row
        for row in dataset.scan("requests").drop("run_id").collect().to_dicts()
    }
    admissions = None
    if bundle.has_table("admissions"):
        admissions = defaultdict(list)
        frame = dataset.scan("admissions").collect()
        for step, request_id, admission, tokens in frame.select(
            "step", "request_id", "admission", "cached_tokens"
        ).iter_rows():
            admissions[step].append((request_id, admission, tokens))
    return _Run(bundle.path, bundle.manifest, steps, decisions, scheduled, requests, admissions)


def _check_inputs(a: _Run, b: _Run, notes: list[str]) -> None:
    config_a, config_b = a.config, b.config
    differ = [k for k in SCHEDULING_KEYS if config_a.get(k) != config_b.get(k)]
    if differ:
        shown = ", ".join(f"{k} {config_a.get(k)!r} vs {config_b.get(k)!r}" for k in differ)
        raise FidelityInputError(
            f"the bundles were recorded with different engine settings ({shown}); record both "
            "with the same options"
        )
    if config_a.get("mode", "vllm") != "vllm":
        raise FidelityInputError("fidelity compares vLLM-mode runs; SGLang mode has no real twin")
    if a.manifest.get("strategy") != b.manifest.get("strategy"):
        raise FidelityInputError(
            f"the bundles ran different strategies ({a.manifest.get('strategy')!r} vs "
            f"{b.manifest.get('strategy')!r})"
        )
    inputs_a = {rid: tuple(r[k] for k in REQUEST_INPUTS) for rid, r in a.requests.items()}
    inputs_b = {rid: tuple(r[k] for k in REQUEST_INPUTS) for rid, r in b.requests.items()}
    if inputs_a != inputs_b:
        only = sorted(set(inputs_a) ^ set(inputs_b))[:3]
        changed = sorted(k for k in set(inputs_a) & set(inputs_b) if inputs_a[k] != inputs_b[k])
        detail = f"requests in one only: {only}" if only else f"inputs differ for {changed[:3]}"
        raise FidelityInputError(
            f"the bundles ran different workloads ({detail}); record both from the same "
            "workload and options"
        )
    version_a, version_b = config_a.get("vllm_version"), config_b.get("vllm_version")
    if version_a != version_b:
        notes.append(
            f"engine_config.vllm_version differs ({version_a} vs {version_b}): the embedded "
            "engine follows one release's rules"
        )
    if a.scheduled is None or b.scheduled is None:
        notes.append(
            "per-step scheduled tokens not compared: a bundle lacks the scheduled table "
            "(record with --record-scheduled)"
        )
    if config_a.get("enable_prefix_caching"):
        if not (a.has_step_hits and b.has_step_hits):
            notes.append(
                "prefix-cache hits not compared: a bundle did not record them (a real-vLLM "
                "recording made before record vllm wrote the cache columns); re-record it"
            )
        elif a.admissions is None or b.admissions is None:
            notes.append(
                "per-admission cache hits not compared: a bundle lacks the admissions table"
            )


def _cache_checks(a: _Run, b: _Run) -> tuple[bool, bool]:
    """Whether to compare the steps' and requests' cache hits, and the admissions table."""
    hits = a.has_step_hits and b.has_step_hits
    return hits, hits and a.admissions is not None and b.admissions is not None


# --------------------------------------------------------------------------------- comparing
def compare_vllm_fidelity(sim: str | Path, vllm: str | Path) -> FidelityReport:
    """Compare two recordings of one vLLM-mode run step by step; report the first difference.

    ``tracekit fidelity`` (:func:`tracekit.real_engine.fidelity.compare_fidelity`) checks both
    bundles whole first and runs this for every pair that is not an SGLang recording.

    Parameters
    ----------
    sim
        A bundle recorded by ``tracekit record sim`` (the embedded engine), or any bundle.
    vllm
        A bundle of the same run recorded by ``tracekit record vllm`` (the real scheduler).

    Returns
    -------
    FidelityReport
        ``matched`` and ``exit_code``; on a mismatch, its step, kind and both engines' state.

    Raises
    ------
    FidelityInputError
        The bundles are not recordings of one run (workload, scheduling settings or strategy
        differ), a path holds several bundles, or a recording is incomplete.
    TraceSchemaError
        A bundle cannot be read.
    """
    a, b = _load(sim), _load(vllm)
    notes: list[str] = []
    _check_inputs(a, b, notes)
    report = FidelityReport(str(a.path), str(b.path), a.engine, b.engine, {}, None, notes)
    compared = {"steps": 0, "decisions": 0, "scheduled_rows": 0, "requests": 0}
    hits, admissions = _cache_checks(a, b)
    if hits:
        compared["cache_hit_steps"] = 0
    if admissions:
        compared["admissions"] = 0
    report.compared = compared
    for index in range(max(len(a.steps), len(b.steps))):
        row_a = a.steps[index] if index < len(a.steps) else None
        row_b = b.steps[index] if index < len(b.steps) else None
        if row_a is None or row_b is None:
            present = row_a or row_b
            assert present is not None
            who = "A" if row_b is None else "B"
            report.mismatch = _mismatch(
                a,
                b,
                "length",
                present["step"],
                f"only {who} has a step {present['step']} ({len(a.steps)} vs {len(b.steps)} steps)",
                row_a,
                row_b,
            )
            return report
        step = min(row_a["step"], row_b["step"])
        if row_a["step"] != row_b["step"]:
            report.mismatch = _mismatch(
                a,
                b,
                "step",
                step,
                f"the next step after step {a.steps[index - 1]['step'] if index else 'start'} "
                f"is {row_a['step']} in A and {row_b['step']} in B (idle time differs)",
                row_a["step"],
                row_b["step"],
            )
            return report
        found = _compare_step(a, b, step, row_a, row_b, compared, hits, admissions)
        if found is not None:
            report.mismatch = found
            return report
        compared["steps"] += 1
    for request_id in sorted(a.requests):
        ra, rb = a.requests[request_id], b.requests[request_id]
        for key in REQUEST_OUTCOMES:
            if not same_value(ra[key], rb[key]):
                report.mismatch = Mismatch(
                    "request",
                    None,
                    f"request {request_id}: {key} {ra[key]!r} vs {rb[key]!r}",
                    {k: ra[k] for k in REQUEST_OUTCOMES},
                    {k: rb[k] for k in REQUEST_OUTCOMES},
                )
                return report
        if hits:
            for key in REQUEST_CACHE_OUTCOMES:
                if ra[key] != rb[key]:
                    report.mismatch = Mismatch(
                        "cache",
                        None,
                        f"request {request_id}: {key} {ra[key]!r} vs {rb[key]!r}",
                        {k: ra[k] for k in REQUEST_CACHE_OUTCOMES},
                        {k: rb[k] for k in REQUEST_CACHE_OUTCOMES},
                    )
                    return report
        compared["requests"] += 1
    return report


def _compare_step(
    a: _Run,
    b: _Run,
    step: int,
    row_a: dict[str, Any],
    row_b: dict[str, Any],
    compared: dict[str, int],
    hits: bool = False,
    admissions: bool = False,
) -> Mismatch | None:
    decisions_a, decisions_b = a.decisions.get(step, []), b.decisions.get(step, [])
    for position in range(max(len(decisions_a), len(decisions_b))):
        da = decisions_a[position] if position < len(decisions_a) else None
        db = decisions_b[position] if position < len(decisions_b) else None
        if da is None or db is None:
            return _mismatch(
                a,
                b,
                "decision",
                step,
                f"{len(decisions_a)} victim decisions in A, {len(decisions_b)} in B",
                [_decision_key(d) for d in decisions_a],
                [_decision_key(d) for d in decisions_b],
            )
        for key in (*DECISION_FIELDS, "candidates", *OPTIONAL_DECISION_FIELDS):
            if key in OPTIONAL_DECISION_FIELDS and (da[key] is None or db[key] is None):
                continue  # one bundle did not record it
            if not same_value(da[key], db[key]):
                return _mismatch(
                    a,
                    b,
                    "decision",
                    step,
                    f"decision {position + 1} of the step (seq {da['seq']} / {db['seq']}): "
                    f"{key} differs",
                    da[key],
                    db[key],
                )
        compared["decisions"] += 1
    if a.scheduled is not None and b.scheduled is not None:
        sched_a, sched_b = a.scheduled.get(step, []), b.scheduled.get(step, [])
        if sched_a != sched_b:
            return _mismatch(
                a, b, "scheduled", step, _describe_scheduled(sched_a, sched_b), sched_a, sched_b
            )
        compared["scheduled_rows"] += len(sched_a)
    if admissions:
        assert a.admissions is not None and b.admissions is not None
        adm_a, adm_b = a.admissions.get(step, []), b.admissions.get(step, [])
        if adm_a != adm_b:
            return _mismatch(a, b, "cache", step, _describe_admissions(adm_a, adm_b), adm_a, adm_b)
        compared["admissions"] += len(adm_a)
    for key in STEP_FIELDS:
        if not same_value(row_a[key], row_b[key]):
            return _mismatch(
                a,
                b,
                "step",
                step,
                f"steps.{key} {row_a[key]!r} vs {row_b[key]!r}",
                row_a[key],
                row_b[key],
            )
    if hits:
        if row_a["cache_hit_tokens"] != row_b["cache_hit_tokens"]:
            return _mismatch(
                a,
                b,
                "cache",
                step,
                f"steps.cache_hit_tokens {row_a['cache_hit_tokens']!r} vs "
                f"{row_b['cache_hit_tokens']!r}",
                row_a["cache_hit_tokens"],
                row_b["cache_hit_tokens"],
            )
        compared["cache_hit_steps"] += 1
        evicted_a, evicted_b = row_a["cached_blocks_evicted"], row_b["cached_blocks_evicted"]
        if evicted_a is not None and evicted_b is not None and evicted_a != evicted_b:
            return _mismatch(
                a,
                b,
                "cache",
                step,
                f"steps.cached_blocks_evicted {evicted_a!r} vs {evicted_b!r}",
                evicted_a,
                evicted_b,
            )
    return None


def _describe_admissions(a: list[tuple[str, int, int]], b: list[tuple[str, int, int]]) -> str:
    keys_a, keys_b = [(r, n) for r, n, _ in a], [(r, n) for r, n, _ in b]
    if keys_a != keys_b:
        return f"admitted requests differ: {keys_a[:6]} vs {keys_b[:6]}"
    hits = [
        f"{r} admission {n}: {x} vs {y} cached tokens"
        for (r, n, x), (_, _, y) in zip(a, b, strict=True)
        if x != y
    ]
    return f"prefix-cache hits differ ({', '.join(hits[:4])})"


def _describe_scheduled(a: list[tuple[str, int]], b: list[tuple[str, int]]) -> str:
    ids_a, ids_b = [r for r, _ in a], [r for r, _ in b]
    if set(ids_a) != set(ids_b):
        only_a = [r for r in ids_a if r not in ids_b]
        only_b = [r for r in ids_b if r not in ids_a]
        return f"scheduled requests differ: only in A {only_a}, only in B {only_b}"
    if ids_a != ids_b:
        return "the same requests are scheduled in a different order"
    tokens = [f"{r}: {x} vs {y}" for (r, x), (_, y) in zip(a, b, strict=True) if x != y]
    return f"scheduled tokens differ ({', '.join(tokens[:4])})"


def _decision_key(d: dict[str, Any]) -> tuple[str, str]:
    return (d["requesting_request_id"], d["applied_victim_id"])


def _mismatch(
    a: _Run, b: _Run, kind: str, step: int, what: str, first: Any, second: Any
) -> Mismatch:
    return Mismatch(
        kind, step, what, first, second, _state_at(a, step, "A"), _state_at(b, step, "B")
    )


# --------------------------------------------------------------------------------- state
def _state_at(run: _Run, step: int, label: str) -> EngineState:
    """``run``'s state at the start of ``step``, rebuilt from its records, and the step itself."""
    config = run.config
    state = EngineState(f"{label}: {run.engine}", step)
    row = next((r for r in run.steps if r["step"] == step), None)
    state.step_row = row
    state.decisions = run.decisions.get(step, [])
    if run.admissions is not None:
        state.admissions = run.admissions.get(step, [])
    state.kv_blocks_total = int(config.get("num_blocks", 1)) - 1
    if row is not None:
        state.time_s = row["time_s"]
    if run.scheduled is None:
        return state
    state.scheduled = run.scheduled.get(step, [])
    block_size = int(config.get("block_size", 16))
    max_model_len = int(config.get("max_model_len", 1 << 62))
    requests = run.requests
    running: list[str] = []
    computed: dict[str, int] = defaultdict(int)
    outputs: dict[str, int] = defaultdict(int)
    finished: set[str] = set()
    # request_id -> the output count at which the fake model stops it.
    stops: dict[str, int] = {}
    for past in run.steps:
        k = past["step"]
        if k >= step:
            break
        for decision in run.decisions.get(k, []):
            victim = decision["applied_victim_id"]
            if victim in running:
                running.remove(victim)
            computed[victim] = 0
        scheduled = run.scheduled.get(k, [])
        for request_id, tokens in scheduled:
            if request_id not in running:
                running.append(request_id)
            computed[request_id] += tokens
        for request_id, _ in scheduled:
            info = requests[request_id]
            if computed[request_id] < info["prompt_tokens"] + outputs[request_id]:
                continue  # a partial prefill samples nothing
            outputs[request_id] += 1
            stop_at = stops.get(request_id)
            if stop_at is None:
                stop_at = stops[request_id] = stop_rule(
                    info["prompt_tokens"],
                    info["target_output_tokens"],
                    info["max_tokens"],
                    max_model_len,
                )[0]
            if outputs[request_id] >= stop_at:
                running.remove(request_id)
                finished.add(request_id)
    state.running = [(r, computed[r], outputs[r], -(-computed[r] // block_size)) for r in running]
    state.kv_blocks_used = sum(entry[3] for entry in state.running)
    now = state.time_s
    step_s = float(config.get("step_s", 0.02))
    in_running = set(running)
    waiting = []
    for request_id, info in requests.items():
        if request_id in in_running or request_id in finished or info["status"] == "rejected":
            continue
        arrival = info["arrival_s"]
        visible = (
            math.ceil(arrival / step_s) <= step
            if config.get("clock") == "steps"
            else now is not None and arrival <= now
        )
        if visible:
            waiting.append(request_id)
    state.waiting = sorted(waiting)
    return state


# --------------------------------------------------------------------------------- rendering
def _render_mismatch(m: Mismatch, label_a: str, label_b: str, width: int) -> list[str]:
    if m.first_state is None or m.second_state is None:
        return [f"  A: {m.first}", f"  B: {m.second}"]
    sa, sb = m.first_state, m.second_state
    rows: list[tuple[str, str, str]] = [("", f"A: {label_a}", f"B: {label_b}")]
    rows.append(("differs", _short(m.first), _short(m.second)))
    time = f"{sa.time_s:.6g} s" if sa.time_s is not None else "-"
    rows.append(("-- start of step", f"{m.step} at {time}", ""))
    if sa.scheduled is not None and sb.scheduled is not None:
        rows.append(("running (queue order)", _running(sa), _running(sb)))
        rows.append(("waiting", " ".join(sa.waiting) or "-", " ".join(sb.waiting) or "-"))
        rows.append(
            (
                "KV blocks used/usable",
                f"{sa.kv_blocks_used}/{sa.kv_blocks_total}",
                f"{sb.kv_blocks_used}/{sb.kv_blocks_total}",
            )
        )
    else:
        rows.append(("running, waiting", "needs the scheduled table", "needs the scheduled table"))
    rows.append(("-- the step", "", ""))
    rows.append(("scheduled tokens", _scheduled(sa.scheduled), _scheduled(sb.scheduled)))
    if sa.admissions is not None or sb.admissions is not None:
        rows.append(("admissions (cached)", _admitted(sa.admissions), _admitted(sb.admissions)))
    for index in range(max(len(sa.decisions), len(sb.decisions))):
        da = sa.decisions[index] if index < len(sa.decisions) else None
        db = sb.decisions[index] if index < len(sb.decisions) else None
        rows.append((f"decision {index + 1}", _decision(da), _decision(db)))
        rows.append(("  candidates", _candidates(da), _candidates(db)))
    rows.append(("step row (after)", _step_row(sa.step_row), _step_row(sb.step_row)))
    return _side_by_side(rows, width)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 400 else text[:397] + "..."


def _running(state: EngineState) -> str:
    return " ".join(f"{r}[c={c},o={o},b={k}]" for r, c, o, k in state.running) or "-"


def _scheduled(scheduled: list[tuple[str, int]] | None) -> str:
    if scheduled is None:
        return "(not recorded)"
    return " ".join(f"{r}:{n}" for r, n in scheduled) or "-"


def _admitted(admissions: list[tuple[str, int, int]] | None) -> str:
    if admissions is None:
        return "(not recorded)"
    return " ".join(f"{r}#{n}:{t}" for r, n, t in admissions) or "-"


def _decision(d: dict[str, Any] | None) -> str:
    if d is None:
        return "-"
    return (
        f"seq {d['seq']} requester {d['requesting_request_id']} victim {d['applied_victim_id']} "
        f"(builtin {d['builtin_victim_id']}, {d['outcome']}) kv_usage {d['kv_usage']:.6f}"
    )


def _candidates(d: dict[str, Any] | None) -> str:
    if d is None:
        return "-"
    # request_id, priority, arrival, prompt, output, computed, preemptions, max_tokens
    return " ".join(f"{c[0]}[p={c[1]},c={c[5]},o={c[4]}]" for c in d["candidates"])


def _step_row(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    return (
        f"running {row['num_running']} waiting {row['num_waiting']} KV {row['kv_blocks_used']}/"
        f"{row['kv_blocks_total']} prefill {row['scheduled_prefill_tokens']} decode "
        f"{row['scheduled_decode_tokens']} preempted {row['num_preemptions']} cache hits "
        f"{row.get('cache_hit_tokens')}"
    )


def _side_by_side(rows: list[tuple[str, str, str]], width: int) -> list[str]:
    """Label, A and B in three columns (a differing row's label marked ``*``), wrapped to fit."""
    label_width = max(len(r[0]) for r in rows)
    column = max(20, (width - label_width - 9) // 2)
    cells: list[tuple[str, str, str]] = []
    for label, left, right in rows:
        mark = "*" if left != right and label and not label.startswith("--") else " "
        wrapped_left = textwrap.wrap(left, column) or [""]
        wrapped_right = textwrap.wrap(right, column) or [""]
        for i in range(max(len(wrapped_left), len(wrapped_right))):
            l_text = wrapped_left[i] if i < len(wrapped_left) else ""
            r_text = wrapped_right[i] if i < len(wrapped_right) else ""
            cells.append((f"{mark}{label}" if i == 0 else "", f"| {l_text}", f"| {r_text}"))
    return [line.rstrip() for line in text_table(cells)]
