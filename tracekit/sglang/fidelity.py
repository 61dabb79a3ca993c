"""``tracekit fidelity`` for SGLang recordings: the engine's SGLang mode against real SGLang.

:func:`compare_sglang_fidelity` takes two bundles of one run, at least one of them recorded by
``tracekit record sglang`` (:func:`tracekit.sglang.record.is_sglang_bundle`):

- **An engine bundle and an SGLang recording** (``tracekit record sim --engine-mode sglang
  --block-size 1 --num-blocks <kv tokens + 1> --record-scheduled ...``, see
  docs/sglang-recorder.md): the engine's configuration must mirror the recording's
  (:func:`tracekit.sglang.compare.engine_config`) and the requests must be the same. Both
  bundles' own tables are then walked step by step: the step indices, the scheduled requests
  (ids, order and tokens, from the ``scheduled`` tables) and the retraction victims in order
  (``decisions``); after the last step, each request's status, output tokens and retractions.
  On a mismatch, the engine is re-run from the recording's scenario and the first difference of
  the full step stream (radix hits, ``new_token_ratio``, the waiting queue) is shown as well.
- **Two SGLang recordings** (a fixture and its live re-recording, say): the same scenario is
  required, and the two full step streams are compared.

Inputs that are not two recordings of one run raise :class:`FidelityInputError` (exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.real_engine.comparison import FidelityInputError, FidelityVerdict
from tracekit.sglang.compare import (
    EngineStep,
    StepMismatch,
    engine_config,
    engine_steps,
    first_mismatch,
)
from tracekit.sglang.record import is_sglang_bundle, read_sglang_scenario, read_sglang_steps

__all__ = ["SglangFidelityReport", "compare_sglang_fidelity"]

# EngineConfig fields a mirrored SGLang run must agree on.
_CONFIG_KEYS = (
    "mode",
    "num_blocks",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "scheduling_policy",
    "retraction_policy",
    "radix_cache",
    "chunked_prefill_size",
    "overlap_schedule",
    "enable_priority_scheduling",
    "schedule_low_priority_values_first",
    "disable_priority_preemption",
    "priority_scheduling_preemption_threshold",
    "clock",
    "step_s",
)
_PRIORITY_OPTIONS = (
    "schedule_low_priority_values_first",
    "disable_priority_preemption",
    "priority_scheduling_preemption_threshold",
)
_OUTCOMES = ("status", "output_tokens", "num_preemptions")


@dataclass(frozen=True, slots=True)
class SglangFidelityReport(FidelityVerdict):
    """The result of :func:`compare_sglang_fidelity`."""

    first: str
    second: str
    first_engine: str
    second_engine: str
    num_steps: int
    mismatch: StepMismatch | None
    detail: StepMismatch | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible form."""

        def mismatch(m: StepMismatch | None) -> dict[str, Any] | None:
            if m is None:
                return None
            return {
                "index": m.index,
                "step": m.step,
                "field": m.field,
                "first": m.recorded,
                "second": m.engine,
                "context": m.context,
            }

        return {
            "first": self.first,
            "second": self.second,
            "first_engine": self.first_engine,
            "second_engine": self.second_engine,
            "matched": self.matched,
            "num_steps": self.num_steps,
            "mismatch": mismatch(self.mismatch),
            "engine_rerun_mismatch": mismatch(self.detail),
            "notes": self.notes,
        }

    def render(self) -> str:
        """A short text report."""
        head = f"{self.first} ({self.first_engine}) vs {self.second} ({self.second_engine})"
        if self.mismatch is None:
            lines = [f"match: {self.num_steps} steps identical", head]
        else:
            m = self.mismatch
            lines = [
                f"MISMATCH at step {m.step}, {m.field}",
                head,
                f"  {self.first_engine}: {m.recorded}",
                f"  {self.second_engine}: {m.engine}",
            ]
            lines += [f"  {k}: {v}" for k, v in m.context.items()]
            if self.detail is not None:
                lines += ["engine re-run against the SGLang step stream:", self.detail.render()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _engine_name(bundle: Path) -> str:
    import json

    try:
        manifest = json.loads((bundle / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError) as error:
        raise FidelityInputError(f"{bundle}: no readable manifest.json ({error})") from None
    if not isinstance(manifest, dict):
        raise FidelityInputError(f"{bundle}: manifest.json is not an object")
    return str(manifest.get("engine", "?"))


def compare_sglang_fidelity(
    first: str | os.PathLike[str], second: str | os.PathLike[str]
) -> SglangFidelityReport:
    """Compare two bundles of one SGLang run (at least one recorded by ``record sglang``).

    Raises
    ------
    FidelityInputError
        Neither bundle is an SGLang recording, or they are not recordings of one run.
    """
    a, b = Path(first), Path(second)
    for path in (a, b):
        if not path.is_dir():
            raise FidelityInputError(f"{path}: not a bundle folder")
    a_sg, b_sg = is_sglang_bundle(a), is_sglang_bundle(b)
    if not (a_sg or b_sg):
        raise FidelityInputError(f"neither {a} nor {b} was recorded by tracekit record sglang")
    names = _engine_name(a), _engine_name(b)
    if a_sg and b_sg:
        config_a, rows_a = read_sglang_scenario(a)
        config_b, rows_b = read_sglang_scenario(b)
        if config_a != config_b or rows_a != rows_b:
            raise FidelityInputError(
                f"{a} and {b} were recorded from different scenarios (configuration or "
                "requests); record both from one workload and configuration"
            )
        steps_a = read_sglang_steps(a)
        steps_b = [_as_engine_step(s) for s in read_sglang_steps(b)]
        return SglangFidelityReport(
            str(a), str(b), *names, len(steps_a), first_mismatch(steps_a, steps_b)
        )
    sglang, sim = (a, b) if a_sg else (b, a)
    config, rows = read_sglang_scenario(sglang)
    _check_mirrored(sim, sglang, config, rows)
    ta, tb = _tables(sim), _tables(sglang)
    mismatch = _compare_tables(ta, tb)
    detail = None
    if mismatch is not None:
        detail = first_mismatch(read_sglang_steps(sglang), engine_steps(config, rows))
    if not a_sg:
        return SglangFidelityReport(str(a), str(b), *names, len(ta["steps"]), mismatch, detail)
    flipped = None
    if mismatch is not None:
        flipped = StepMismatch(
            mismatch.index,
            mismatch.step,
            mismatch.field,
            mismatch.engine,
            mismatch.recorded,
            mismatch.context,
        )
    return SglangFidelityReport(str(a), str(b), *names, len(ta["steps"]), flipped, detail)


def _as_engine_step(s: Any) -> EngineStep:
    return EngineStep(
        s.step,
        s.mode,
        tuple((r.request_id, r.new_tokens, r.cached_tokens) for r in s.reqs),
        tuple(s.victims),
        s.new_token_ratio,
        tuple(s.waiting),
        s.preempted_ids,
    )


def _check_mirrored(sim: Path, sglang: Path, config: Any, rows: list[tuple[Any, ...]]) -> None:
    import json

    manifest = json.loads((sim / "manifest.json").read_text("utf-8"))
    recorded = manifest.get("engine_config") or {}
    expected = engine_config(config)
    # The priority sub-options do nothing without priority scheduling: not compared then.
    inert = set() if expected.enable_priority_scheduling else set(_PRIORITY_OPTIONS)
    differ = [
        f"{key}={recorded.get(key)!r} (needs {getattr(expected, key)!r})"
        for key in _CONFIG_KEYS
        if key not in inert and recorded.get(key) != getattr(expected, key)
    ]
    if differ:
        raise FidelityInputError(
            f"{sim}: the engine run does not mirror {sglang}: " + ", ".join(differ)
        )
    ids = sorted(str(r[0]) for r in rows)
    try:
        sim_ids = sorted(pl.read_parquet(sim / "requests.parquet")["request_id"].to_list())
    except (OSError, pl.exceptions.PolarsError) as error:
        raise FidelityInputError(f"{sim}: unreadable requests table ({error})") from None
    if sim_ids != ids:
        raise FidelityInputError(f"{sim} and {sglang} hold different requests")
    if not (sim / "scheduled.parquet").is_file():
        raise FidelityInputError(
            f"{sim}: no scheduled table; record the engine run with --record-scheduled"
        )


def _tables(bundle: Path) -> dict[str, pl.DataFrame]:
    try:
        return {
            name: pl.read_parquet(bundle / f"{name}.parquet")
            for name in ("steps", "scheduled", "decisions", "requests")
        }
    except (OSError, pl.exceptions.PolarsError) as error:
        raise FidelityInputError(f"{bundle}: unreadable tables ({error})") from None


def _compare_tables(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> StepMismatch | None:
    """First difference of (sim, sglang) tables; ``recorded`` holds sim's side."""

    def per_step(frame: pl.DataFrame, columns: list[str]) -> dict[int, list[tuple[Any, ...]]]:
        grouped: dict[int, list[tuple[Any, ...]]] = {}
        for row in frame.select(["step", *columns]).iter_rows():
            grouped.setdefault(int(row[0]), []).append(tuple(row[1:]))
        return grouped

    steps_a = a["steps"]["step"].to_list()
    steps_b = b["steps"]["step"].to_list()
    sched_a = per_step(a["scheduled"], ["request_id", "num_tokens"])
    sched_b = per_step(b["scheduled"], ["request_id", "num_tokens"])
    dec_a = per_step(a["decisions"].sort("seq"), ["applied_victim_id"])
    dec_b = per_step(b["decisions"].sort("seq"), ["applied_victim_id"])
    for i, (sa, sb) in enumerate(zip(steps_a, steps_b, strict=False)):
        if sa != sb:
            return StepMismatch(i, sa, "step index", sa, sb)
        if sched_a.get(sa, []) != sched_b.get(sb, []):
            return StepMismatch(i, sa, "scheduled", sched_a.get(sa, []), sched_b.get(sb, []))
        va = [v[0] for v in dec_a.get(sa, [])]
        vb = [v[0] for v in dec_b.get(sb, [])]
        if va != vb:
            return StepMismatch(i, sa, "victims", va, vb)
    if len(steps_a) != len(steps_b):
        n = min(len(steps_a), len(steps_b))
        return StepMismatch(n, -1, "number of steps", len(steps_a), len(steps_b))
    ra = {r[0]: r[1:] for r in a["requests"].select(["request_id", *_OUTCOMES]).iter_rows()}
    rb = {r[0]: r[1:] for r in b["requests"].select(["request_id", *_OUTCOMES]).iter_rows()}
    for rid in sorted(ra):
        if ra[rid] != rb.get(rid):
            return StepMismatch(
                len(steps_a), -1, f"request {rid} ({', '.join(_OUTCOMES)})", ra[rid], rb.get(rid)
            )
    return None
