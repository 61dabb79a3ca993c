"""Each measured step's make-up, from a trace bundle's tables; and ``tracekit calibrate``.

A bundle's ``steps`` table gives each step's duration and its prefill and decode tokens; the
``scheduled`` table gives the tokens each request got in each step; ``decisions`` gives the
preemptions. The make-up :func:`~tracekit.latency.calibrated.fit_step_time_model` needs is
derived from them columnar (Polars, no loop over rows):

- ``num_prefill_tokens`` = ``steps.scheduled_prefill_tokens``;
- ``num_decode_seqs`` = ``steps.scheduled_decode_tokens`` (one token per decoding sequence);
- ``num_sequences`` = the step's rows in ``scheduled``;
- ``prefill_attention_pairs`` = over the step's prefill chunks (a scheduled row that is not one
  token of a request past its prompt), ``n * (computed - n) + n * (n + 1) / 2`` for a chunk of
  ``n`` tokens with ``computed`` tokens computed after it (the calibrated model's quadratic
  term; a one-token recomputation chunk past the prompt counts as a decode here);
- ``kv_tokens_read`` = the sum over the step's scheduled requests of the tokens each has computed
  after the step: the running sum of its ``num_tokens`` since it was last preempted (a
  preemption, ``decisions.applied_victim_id`` at an earlier step, throws its KV away and the
  request starts again from zero, as vLLM and SGLang do without prefix caching).

With prefix caching on, an admission starts from the tokens it hit in the cache: trace v2's
``admissions`` table gives them (``cached_tokens`` of admission k, the resume after the k-th
preemption), and they are added to the running sum of that epoch. A bundle without that table
(v1, or a recorder that cannot see the cache) counts no hits, which under-counts
``kv_tokens_read`` when the engine had prefix caching on (``docs/latency.md``).
Steps with no measured duration (null, or not positive) or nothing scheduled are left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit import safe_output
from tracekit.errors import ConfigError
from tracekit.latency.calibrated import FORMAT as MODEL_FORMAT
from tracekit.latency.calibrated import CalibratedModel, fit_step_time_model

__all__ = ["CalibrationResult", "calibrate_trace", "step_makeup"]


def step_makeup(dataset: Any) -> Any:
    """One row per measured step of ``dataset`` (an opened trace) with its make-up.

    Returns
    -------
    polars.DataFrame
        ``run_id``, ``step``, ``num_prefill_tokens``, ``num_decode_seqs``, ``kv_tokens_read``,
        ``num_sequences``, ``prefill_attention_pairs``, ``duration_s``, sorted by run and step.

    Raises
    ------
    ConfigError
        The bundle has no ``scheduled`` rows (the per-request make-up), or no step has a
        measured duration.
    """
    import polars as pl

    root = dataset.root
    steps = dataset.scan("steps")
    scheduled = dataset.scan("scheduled")
    if scheduled.select(pl.len()).collect().item() == 0:
        raise ConfigError(
            f"calibrate: {root}: table scheduled is empty, so the steps' make-up is unknown; "
            "record with --record-scheduled (record sim, record vllm)"
        )
    # Preemptions: a victim's computed tokens restart from zero in later steps.
    preempted = (
        dataset.scan("decisions")
        .filter(pl.col("applied_victim_id").is_not_null())
        .select("run_id", pl.col("applied_victim_id").alias("request_id"), "step")
        .sort("run_id", "request_id", "step")
        .with_columns(pl.int_range(1, pl.len() + 1).over("run_id", "request_id").alias("epoch"))
        .rename({"step": "preempted_at"})
    )
    rows = (
        scheduled.select("run_id", "request_id", "step", "num_tokens")
        .sort("run_id", "request_id", "step")
        # Epoch of a row = preemptions of its request at earlier steps (join_asof: the last
        # preemption strictly before the row's step).
        .join_asof(
            preempted.with_columns((pl.col("preempted_at") + 1).alias("step")),
            on="step",
            by=["run_id", "request_id"],
            strategy="backward",
        )
        .with_columns(pl.col("epoch").fill_null(0))
    )
    # Each epoch starts from the tokens its admission hit in the prefix cache (trace v2; an
    # empty scan for a bundle without the table, so no hits).
    hits = dataset.scan("admissions").select(
        "run_id",
        "request_id",
        pl.col("admission").alias("epoch"),
        pl.col("cached_tokens").alias("hit"),
    )
    # The running sum below needs each request's rows in step order; a join may reorder them.
    rows = rows.join(hits, on=["run_id", "request_id", "epoch"], how="left").sort(
        "run_id", "request_id", "step"
    )
    prompts = dataset.scan("requests").select("run_id", "request_id", "prompt_tokens")
    n = pl.col("num_tokens")
    rows = (
        rows.with_columns(
            (
                pl.col("num_tokens").cum_sum().over("run_id", "request_id", "epoch")
                + pl.col("hit").fill_null(0)
            ).alias("computed")
        )
        .join(prompts, on=["run_id", "request_id"], how="left")
        .with_columns(
            pl.when((n == 1) & (pl.col("computed") > pl.col("prompt_tokens")))
            .then(0)
            .otherwise(n * (pl.col("computed") - n) + n * (n + 1) // 2)
            .alias("pairs")
        )
        .group_by("run_id", "step")
        .agg(
            pl.len().alias("num_sequences"),
            pl.col("computed").sum().alias("kv_tokens_read"),
            pl.col("pairs").sum().alias("prefill_attention_pairs"),
        )
    )
    frame = (
        steps.filter(pl.col("duration_s").is_not_null() & (pl.col("duration_s") > 0))
        .select(
            "run_id",
            "step",
            pl.col("scheduled_prefill_tokens").alias("num_prefill_tokens"),
            pl.col("scheduled_decode_tokens").alias("num_decode_seqs"),
            "duration_s",
        )
        .join(rows, on=["run_id", "step"], how="inner")
        .select(
            "run_id",
            "step",
            "num_prefill_tokens",
            "num_decode_seqs",
            pl.col("kv_tokens_read").cast(pl.Int64),
            pl.col("num_sequences").cast(pl.Int64),
            pl.col("prefill_attention_pairs").cast(pl.Int64),
            "duration_s",
        )
        .sort("run_id", "step")
        .collect()
    )
    if frame.height == 0:
        raise ConfigError(
            f"calibrate: {root}: no step has a measured duration_s with requests scheduled; "
            "pass a recording whose steps table has measured durations"
        )
    return frame


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """A fitted model and where it was written.

    Attributes
    ----------
    model
        The fitted model (its ``errors["holdout"]`` holds MAPE, P50 and P95).
    out
        The model file.
    num_steps
        Measured steps used (training plus held out).
    """

    model: CalibratedModel
    out: Path
    num_steps: int


#: The live recorder's side table of each step's make-up and measured times, in a live bundle's
#: folder (``tracekit.vllm.live_engine.record`` writes it under this name).
LIVE_STEP_SHAPES = "step_shapes.parquet"


def calibrate_trace(
    trace: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    holdout_fraction: float = 0.2,
    seed: int = 0,
    overwrite: bool = False,
) -> CalibrationResult:
    """Fit a step-time model to one or more recordings' measured steps and write it to ``out``.

    A live bundle (``tracekit record vllm --live``) carries ``step_shapes.parquet``: the make-up
    read inside vLLM (its context counts prefix-cache hits, which the bundle's tables do not
    give) and each step's CPU time. The fit then uses that table, on the CPU time with absolute
    weighting: the CPU time is the step's length without the time other processes held the
    cores, and absolute weighting makes the model's total equal the measured total, which is
    what latencies add up (``docs/engine.md``, Time fidelity). Any other bundle is fitted from
    its tables, on ``duration_s`` with relative weighting (robust to the descheduled tail of a
    loaded machine's wall clock).

    Several recordings are pooled into one fit (their steps together, one hold-out split).
    A machine's speed wanders between runs (on the shared 2-core machine the same live steps
    took 79 to 102 s of CPU in 13 runs), so a model fitted on one run inherits that run's
    speed; pooling runs averages it. Pooled recordings must be of one kind (all live bundles
    with CPU times, or all fitted from their tables).

    Parameters
    ----------
    trace
        A trace bundle (or dataset folder) whose ``steps`` table has measured ``duration_s``
        and whose ``scheduled`` table was recorded; or a sequence of them.
    out
        The model file to write (JSON; written to a temporary file, then renamed).
    holdout_fraction, seed
        The seeded hold-out split the errors are measured on (recorded in the model).
    overwrite
        Replace an existing ``out``, and only a step-time model file (:data:`MODEL_MARK`).

    Raises
    ------
    ConfigError
        A trace cannot be read or lacks the make-up, the traces are of different kinds, or
        their steps are too few or too uniform to fit
        (:class:`~tracekit.latency.calibrated.FitError`); nothing is written.
    """
    import polars as pl

    traces = [Path(trace)] if isinstance(trace, (str, Path)) else [Path(t) for t in trace]
    if not traces:
        raise ConfigError("calibrate: no recording given; pass one or more trace bundles")
    out = Path(out)
    # docs/guarantees.md, "Safe output": checked before the fit, written through a rename.
    safe_output.check_new_file(out, mark=MODEL_MARK, overwrite=overwrite, inputs=traces)
    frames, kinds = zip(*(_measured_steps(t) for t in traces), strict=True)
    for t, kind in zip(traces[1:], kinds[1:], strict=True):
        if kind != kinds[0]:
            raise ConfigError(
                f"calibrate: {t}: {_KINDS[kind][0]}, but {traces[0]} is "
                f"{_KINDS[kinds[0]][0]}; calibrate recordings of one kind together"
            )
    frame = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    source = ", ".join(str(t) for t in traces)
    model = fit_step_time_model(
        frame, seed=seed, holdout_fraction=holdout_fraction, source=source, **_KINDS[kinds[0]][1]
    )
    model = CalibratedModel(
        model.coefficients,
        {**model.fit, "recordings": [str(t) for t in traces]},
        model.errors,
        str(out),
    )
    with safe_output.staged_file(
        out, mark=MODEL_MARK, overwrite=overwrite, inputs=traces
    ) as staging:
        model.save(staging)
    return CalibrationResult(model, out, frame.height)


def _model_file(path: Path) -> str | None:
    """None if ``path`` holds a step-time model (its ``format``), else why not."""
    try:
        document = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        document = None
    if isinstance(document, dict) and document.get("format") == MODEL_FORMAT:
        return None
    return "not a step-time model written by tracekit calibrate"


#: How calibrate recognises a model file it wrote (the only file --overwrite replaces).
MODEL_MARK = safe_output.Mark("tracekit calibrate", _model_file)


#: The kinds of recording, each with its description and how it is fitted.
_KINDS: dict[str, tuple[str, dict[str, str]]] = {
    "live": (
        "a live bundle fitted on its steps' CPU time",
        {"target": "cpu_s", "weighting": "absolute"},
    ),
    "tables": (
        "a bundle fitted from its tables on the wall clock",
        {"target": "duration_s", "weighting": "relative"},
    ),
}


def _measured_steps(trace: Path) -> tuple[Any, str]:
    """One recording's measured steps, and its kind (see :func:`calibrate_trace`)."""
    import polars as pl

    from tracekit.trace import open_trace

    dataset = open_trace(trace)
    shapes_path = Path(dataset.root) / LIVE_STEP_SHAPES
    shapes = pl.read_parquet(shapes_path) if shapes_path.is_file() else None
    if shapes is not None and "cpu_s" in shapes.columns and shapes["cpu_s"].min() > 0:
        return shapes, "live"
    return step_makeup(dataset), "tables"
