"""A step-time model fitted to an engine's measured step durations.

The model is linear in the step's make-up, with non-negative coefficients::

    t = c0 + c1 * prefill_tokens + c2 * decode_seqs + c3 * kv_tokens_read + c4 * num_sequences
          + c5 * prefill_attention_pairs

- ``c0``: fixed cost of a step (launches, scheduling, sampling set-up, the weights' read when it
  does not depend on the batch);
- ``c1``: per prefill token (dense matmuls over the chunk);
- ``c2``: per decoding sequence (its one token through the matmuls);
- ``c3``: per context token read by attention (KV bandwidth);
- ``c4``: per scheduled request (input preparation, sampling);
- ``c5``: per query-key pair of the prefill chunks' causal attention (a chunk of ``n`` tokens
  after ``c`` cached ones has ``n * c + n * (n + 1) / 2``). A prefill's attention is quadratic in
  the chunk, which no linear total captures; on the live engine's tiny model (4 layers, hidden
  256) attention outweighs the matmuls beyond about a thousand tokens of context, and without
  this term a relative fit under-estimated the calibration slice's prefill steps by 16 and 22 % of
  their CPU time in two runs (``docs/engine.md``, Time fidelity). Models of version 1 have no
  such term (``c5 = 0``).

It is fitted by non-negative least squares on the **relative** error (each step weighted by one
over its measured duration, the default: short decode steps count as much as long prefill
steps, which is what the reported MAPE measures) or on the **absolute** error (seconds: the
model's total over the training steps equals the measured total, which is what latencies and
throughput add up). A seeded random fraction of the steps is held out and the
error on it (MAPE, P50 and P95 of the absolute relative error) is reported and saved with the
model. Data with too few steps, durations of tiny spread, or a make-up that cannot separate the
terms (a term that never varies, or terms that move together) is refused with a
:class:`~tracekit.errors.ConfigError`.

The least squares is done on the 6 x 6 normal equations (5 x 5 without the pairs term; sums
computed by Polars expressions, the small solve in pure Python), so no numpy is needed.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError
from tracekit.latency.interface import StepShape

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MIN_STEPS",
    "TERMS",
    "WEIGHTINGS",
    "CalibratedModel",
    "FitError",
    "FitErrors",
    "evaluate_step_time_model",
    "fit_step_time_model",
    "load_calibrated_model",
    "nnls",
]

FORMAT = "tracekit-step-time-model"
FORMAT_VERSION = 2
#: Written instead of :data:`FORMAT_VERSION` when a model carries request overheads or a
#: measured error (a model fitted to measured per-request latencies, ``tracekit calibrate
#: RESULT``); otherwise the file is version 2 as before.
FORMAT_VERSION_MEASURED = 3
#: Versions :func:`load_calibrated_model` reads (version 1: no ``prefill_attention_pairs``;
#: version 3: ``request_overheads`` and ``measured_error``).
READABLE_VERSIONS = (1, 2, 3)
#: Feature columns of the design, in coefficient order (``intercept`` is the constant 1).
TERMS = (
    "intercept",
    "num_prefill_tokens",
    "num_decode_seqs",
    "kv_tokens_read",
    "num_sequences",
    "prefill_attention_pairs",
)
#: The term fitted only when the steps have it (a live bundle's ``step_shapes.parquet`` does).
PAIRS = "prefill_attention_pairs"
#: Fewest steps a fit accepts (before the hold-out split).
MIN_STEPS = 50
#: Smallest coefficient of variation of the durations a fit accepts.
MIN_DURATION_CV = 0.01
#: Smallest relative pivot of the scaled normal equations: below it the design is rank-deficient.
_PIVOT_TOL = 1e-9
#: How the least squares weighs each step (see :func:`fit_step_time_model`).
WEIGHTINGS = ("relative", "absolute")


class FitError(ConfigError):
    """Measured steps that cannot be fitted (too few, too uniform, or rank-deficient)."""


@dataclass(frozen=True, slots=True)
class FitErrors:
    """Relative error of a model on a set of steps.

    Attributes
    ----------
    num_steps
        Steps evaluated.
    mape_pct
        Mean absolute percentage error, percent.
    p50_rel, p95_rel
        Median and 95th percentile of ``|predicted - measured| / measured`` (fractions).
    """

    num_steps: int
    mape_pct: float
    p50_rel: float
    p95_rel: float


@dataclass(frozen=True)
class CalibratedModel:
    """A fitted linear step-time model (see the module docstring).

    Parameters
    ----------
    coefficients
        One non-negative coefficient per :data:`TERMS` entry, seconds per unit.
    fit
        What the fit saw: step counts, the seed and fraction of the hold-out split, and the
        range (min, mean, max) of every input and of the durations.
    errors
        ``{"train": FitErrors, "holdout": FitErrors}`` as plain mappings.
    source
        Where the model was loaded from or what it was fitted on (recorded, not interpreted).
    request_overheads
        Per-request time outside the step loop, seconds (``ttft_s``,
        ``ttft_per_prompt_token_s``, ``e2e_s``; ``tracekit.measured.simulate.RequestOverheads``):
        fitted with the step coefficients from measured per-request latencies. Empty for a
        model fitted to step times.
    measured_error
        The model's error against measured runs (``tracekit.measured.calibrate``): per metric,
        the relative error on the runs it was fitted on and on held-out runs, with the runs'
        own noise floor. Carried into manifests, so reports whose step times came from this
        model print it next to their verdicts (``docs/latency.md``, "Measured error").
    request_spread
        ``{"ttft_s": [...]}``: the TTFT residuals of the fitted runs' requests, seconds, mean 0
        (``tracekit.measured.spread.LatencySpread``): the scatter of live TTFTs around the
        model's, which the latency percentiles of ``tracekit accuracy`` include. Empty for a
        model fitted to step times.
    request_overheads_by_client
        Client name (``vllm-bench``, ``guidellm``, ``aiperf``) -> its overheads, when the
        model was fitted to runs of several clients (``request_overheads`` is one of them, the
        set the engine's own runs use); ``tracekit accuracy`` takes each run's client's.
    """

    coefficients: tuple[float, ...]
    fit: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    request_overheads: dict[str, float] = field(default_factory=dict)
    measured_error: dict[str, Any] = field(default_factory=dict)
    request_spread: dict[str, list[float]] = field(default_factory=dict)
    request_overheads_by_client: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.coefficients) != len(TERMS):
            raise ConfigError(
                f"calibrated model: expected {len(TERMS)} coefficients ({', '.join(TERMS)}), "
                f"found {len(self.coefficients)}"
            )
        for term, value in zip(TERMS, self.coefficients, strict=True):
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(
                    f"calibrated model: coefficient {term} must be finite and >= 0, got {value}"
                )

    @property
    def name(self) -> str:
        """``calibrated:<source>``."""
        return f"calibrated:{self.source or 'in-memory'}"

    def step_time_s(self, shape: StepShape) -> float:
        """The fitted time of the step; linear, so it extrapolates beyond the fitted range."""
        c0, c1, c2, c3, c4, c5 = self.coefficients
        t = (
            c0
            + c1 * shape.num_prefill_tokens
            + c2 * shape.num_decode_seqs
            + c3 * shape.kv_tokens_read
            + c4 * shape.num_sequences
        )
        if c5:
            t += c5 * prefill_attention_pairs(shape)
        return t

    def request_overheads_s(self, prompt_tokens: int, output_tokens: int) -> tuple[float, float]:
        """A request's time outside the step loop: before its first token, and after it.

        Before the first token, and from the first token to the last (the engine adds them to
        its records; ``tracekit.engine.step_time``). From :attr:`request_overheads`
        (``tracekit.measured.simulate.RequestOverheads``'s fields; 0 for a model fitted to
        step times).
        """
        o = self.request_overheads
        if not o:
            return 0.0, 0.0
        before = o.get("ttft_s", 0.0) + o.get("ttft_per_prompt_token_s", 0.0) * prompt_tokens
        after = o.get("e2e_s", 0.0) + o.get("e2e_per_output_token_s", 0.0) * max(
            output_tokens - 1, 0
        )
        return before, after

    @property
    def step_time_totals_s(self) -> Any:
        """:meth:`step_time_s` from a step's five totals, or None when the model needs its chunks.

        The attention-pairs term depends on each chunk, not on the totals; the engine's clock
        then builds each step's shape (``tracekit.engine.clock.StepModelClock``).
        """
        return None if self.coefficients[5] else self._totals

    def _totals(self, p: int, tokens: int, prefix: int, d: int, context: int) -> float:
        c0, c1, c2, c3, c4, _ = self.coefficients
        return c0 + c1 * tokens + c2 * d + c3 * (prefix + tokens + context + d) + c4 * (p + d)

    def describe(self) -> dict[str, Any]:
        """Kind, name, coefficients, the fit's summary and its held-out errors."""
        return {
            "kind": "calibrated",
            "name": self.name,
            "measured": True,
            "coefficients": dict(zip(TERMS, self.coefficients, strict=True)),
            "fit": self.fit,
            "errors": self.errors,
            **self._measured_fields(spread_in_full=False),
        }

    def _measured_fields(self, *, spread_in_full: bool) -> dict[str, Any]:
        """What a model fitted to measured runs adds, each field only when it has one.

        ``spread_in_full``: the spread's residuals themselves (the saved file), or only how
        many there are (:meth:`describe`, which manifests and reports copy).
        """
        fields: dict[str, Any] = {}
        if self.request_overheads:
            fields["request_overheads"] = self.request_overheads
        if self.request_overheads_by_client:
            fields["request_overheads_by_client"] = self.request_overheads_by_client
        if self.measured_error:
            fields["measured_error"] = self.measured_error
        if self.request_spread:
            fields["request_spread"] = (
                self.request_spread
                if spread_in_full
                else {"num_residuals": len(self.request_spread["ttft_s"])}
            )
        return fields

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON document :func:`load_calibrated_model` reads."""
        measured = self._measured_fields(spread_in_full=True)
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION_MEASURED if measured else FORMAT_VERSION,
            "kind": "calibrated",
            "model": "t = "
            + " + ".join(f"c[{t}] * {t}" for t in TERMS).replace(" * intercept", ""),
            "units": "seconds",
            "terms": list(TERMS),
            "coefficients": dict(zip(TERMS, self.coefficients, strict=True)),
            "fit": self.fit,
            "errors": self.errors,
            **measured,
        }

    def save(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path`` (indented, sorted keys)."""
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        return path


def load_calibrated_model(path: str | Path) -> CalibratedModel:
    """Read a model saved by :meth:`CalibratedModel.save`.

    Raises
    ------
    ConfigError
        When the file is missing, is not JSON, or is not a step-time model of a readable
        version.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: calibrated model file not found") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read a calibrated model as JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a step-time model (expected format {FORMAT!r})")
    version = doc.get("version")
    if version not in READABLE_VERSIONS:
        raise ConfigError(
            f"{path}: step-time model version {version!r} is not supported "
            f"(expected one of {', '.join(map(str, READABLE_VERSIONS))})"
        )
    terms = TERMS if version != 1 else TERMS[:5]
    coeffs = doc.get("coefficients")
    if not isinstance(coeffs, dict) or set(coeffs) != set(terms):
        raise ConfigError(f"{path}: field coefficients must have exactly {', '.join(terms)}")
    coeffs = {PAIRS: 0.0} | coeffs
    try:
        values = tuple(float(coeffs[t]) for t in TERMS)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: field coefficients must be numbers") from None
    overheads = doc.get("request_overheads") or {}
    if not _seconds_map(overheads):
        raise ConfigError(f"{path}: field request_overheads must map names to finite seconds >= 0")
    by_client = doc.get("request_overheads_by_client") or {}
    if not isinstance(by_client, dict) or not all(_seconds_map(v) for v in by_client.values()):
        raise ConfigError(
            f"{path}: field request_overheads_by_client must map client names to "
            "request_overheads mappings; fit the model again with tracekit calibrate"
        )
    spread = _read_spread(path, doc.get("request_spread") or {})
    try:
        return CalibratedModel(
            values,
            dict(doc.get("fit") or {}),
            dict(doc.get("errors") or {}),
            str(path),
            {k: float(v) for k, v in overheads.items()},
            dict(doc.get("measured_error") or {}),
            spread,
            {str(c): {k: float(v) for k, v in o.items()} for c, o in by_client.items()},
        )
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _seconds_map(value: Any) -> bool:
    """Whether ``value`` maps names to finite seconds >= 0."""
    return isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        for v in value.values()
    )


def _read_spread(path: Path, doc: Any) -> dict[str, list[float]]:
    """``request_spread``: ``{"ttft_s": [finite seconds, ...]}``."""
    if not doc:
        return {}
    values = doc.get("ttft_s") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or set(doc) != {"ttft_s"}
        or not isinstance(values, list)
        or not all(isinstance(v, int | float) and math.isfinite(v) for v in values)
    ):
        raise ConfigError(
            f'{path}: field request_spread must be {{"ttft_s": [finite seconds, ...]}}; fit '
            "the model again with tracekit calibrate"
        )
    return {"ttft_s": [float(v) for v in values]}


# ---------------------------------------------------------------------------------------------
# Fitting


def prefill_attention_pairs(shape: StepShape) -> int:
    """Query-key pairs of the causal attention of ``shape``'s prefill chunks.

    A chunk of ``n`` tokens after ``c`` cached ones: each of its tokens attends to the ``c``
    cached tokens and to itself and the chunk's tokens before it, ``n * c + n * (n + 1) / 2``.

    >>> prefill_attention_pairs(StepShape.of(prefill=[(3, 0), (2, 10)], decode=[50]))
    29
    """
    return sum(
        ch.num_tokens * ch.num_computed_tokens + ch.num_tokens * (ch.num_tokens + 1) // 2
        for ch in shape.prefill_chunks
    )


def nnls(gram: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float]:
    """Non-negative least squares on the normal equations (Lawson and Hanson's active set).

    Minimises ``|X b - y|^2`` subject to ``b >= 0`` given ``gram = X'X`` and ``rhs = X'y``.

    Parameters
    ----------
    gram
        The ``k x k`` symmetric positive definite matrix ``X'X``.
    rhs
        ``X'y``.

    Returns
    -------
    list of float
        The solution ``b``.

    Examples
    --------
    Unconstrained optimum ``(1, 2)`` is feasible, so it is returned:

    >>> [round(v, 9) for v in nnls([[2.0, 1.0], [1.0, 2.0]], [4.0, 5.0])]
    [1.0, 2.0]

    The unconstrained optimum ``(3, -1)`` is not; the best non-negative answer is ``(2.5, 0)``:

    >>> [round(v, 9) for v in nnls([[2.0, 1.0], [1.0, 2.0]], [5.0, 1.0])]
    [2.5, 0.0]
    """
    k = len(rhs)
    x = [0.0] * k
    passive: set[int] = set()
    tol = 1e-12 * max(1.0, max(abs(v) for v in rhs))

    def gradient(point: list[float]) -> list[float]:
        return [rhs[i] - sum(gram[i][j] * point[j] for j in range(k)) for i in range(k)]

    for _ in range(3 * k + 10):
        w = gradient(x)
        candidates = [i for i in range(k) if i not in passive and w[i] > tol]
        if not candidates:
            break
        passive.add(max(candidates, key=lambda i: w[i]))
        while True:
            idx = sorted(passive)
            z_p = _solve([[gram[i][j] for j in idx] for i in idx], [rhs[i] for i in idx])
            z = [0.0] * k
            for i, v in zip(idx, z_p, strict=True):
                z[i] = v
            if all(z[i] > 0 for i in idx):
                x = z
                break
            alpha = min(x[i] / (x[i] - z[i]) for i in idx if z[i] <= 0)
            x = [x[i] + alpha * (z[i] - x[i]) for i in range(k)]
            passive = {i for i in idx if x[i] > tol}
            for i in range(k):
                if i not in passive:
                    x[i] = 0.0
    return x


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve ``a x = b`` by Gaussian elimination with partial pivoting (``a`` is small)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def _min_pivot(a: list[list[float]]) -> tuple[float, int]:
    """Smallest pivot of a Cholesky factorisation of a unit-diagonal matrix, and its column."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    worst, worst_col = math.inf, -1
    for j in range(n):
        d = a[j][j] - sum(low[j][p] ** 2 for p in range(j))
        if d < worst:
            worst, worst_col = d, j
        if d <= _PIVOT_TOL:
            return d, j
        low[j][j] = math.sqrt(d)
        for i in range(j + 1, n):
            low[i][j] = (a[i][j] - sum(low[i][p] * low[j][p] for p in range(j))) / low[j][j]
    return worst, worst_col


def _frame(steps: Any, target: str = "duration_s") -> Any:
    """The steps as a Polars frame with :data:`TERMS` (intercept excluded) and ``duration_s``.

    Accepts a Polars DataFrame with those columns (the duration read from column ``target``;
    without a ``prefill_attention_pairs`` column that term is 0 and not fitted) or a sequence of
    ``(StepShape, duration_s)``.
    """
    import polars as pl

    columns = [*TERMS[1:], "duration_s"]
    if isinstance(steps, pl.DataFrame):
        if PAIRS not in steps.columns:
            steps = steps.with_columns(pl.lit(0).alias(PAIRS))
        needed = [*TERMS[1:], target]
        missing = [c for c in needed if c not in steps.columns]
        if missing:
            raise ConfigError(
                f"calibrate: the steps lack column(s) {', '.join(missing)}; "
                f"expected {', '.join(needed)}"
            )
        frame = steps.select(
            *(pl.col(c).cast(pl.Float64) for c in TERMS[1:]),
            pl.col(target).cast(pl.Float64).alias("duration_s"),
        )
    else:
        rows = list(steps)
        frame = pl.DataFrame(
            {
                "num_prefill_tokens": [s.num_prefill_tokens for s, _ in rows],
                "num_decode_seqs": [s.num_decode_seqs for s, _ in rows],
                "kv_tokens_read": [s.kv_tokens_read for s, _ in rows],
                "num_sequences": [s.num_sequences for s, _ in rows],
                PAIRS: [prefill_attention_pairs(s) for s, _ in rows],
                "duration_s": [d for _, d in rows],
            },
            schema={c: pl.Float64 for c in columns},
        )
    bad = frame.filter(~(pl.col("duration_s") > 0) | pl.any_horizontal(pl.all().is_null()))
    if bad.height:
        raise FitError(
            f"calibrate: {bad.height} step(s) have a missing or non-positive duration_s or "
            "make-up; every measured step needs a positive duration"
        )
    return frame


def _predicted(coefficients: Sequence[float]) -> Any:
    """The model's step time as a Polars expression over the :data:`TERMS` columns."""
    import polars as pl

    return pl.lit(coefficients[0]) + sum(
        (pl.col(t) * c for t, c in zip(TERMS[1:], coefficients[1:], strict=True)), pl.lit(0.0)
    )


def _errors(frame: Any, coefficients: Sequence[float]) -> FitErrors:
    """MAPE and P50/P95 of the absolute relative error of ``coefficients`` on ``frame``."""
    import polars as pl

    pred = _predicted(coefficients)
    rel = ((pred - pl.col("duration_s")).abs() / pl.col("duration_s")).alias("rel")
    out = frame.select(
        (rel.mean() * 100).alias("mape"),
        rel.quantile(0.5, "linear").alias("p50"),
        rel.quantile(0.95, "linear").alias("p95"),
    ).row(0)
    return FitErrors(frame.height, float(out[0]), float(out[1]), float(out[2]))


def evaluate_step_time_model(
    model: CalibratedModel, steps: Any, *, target: str = "duration_s"
) -> tuple[FitErrors, float]:
    """``model`` on measured steps: its relative error, and its total over them (seconds).

    ``steps`` is what :func:`fit_step_time_model` takes (a frame whose measured time is in
    column ``target``; without a ``prefill_attention_pairs`` column that term counts 0).
    """
    frame = _frame(steps, target)
    total = frame.select(_predicted(model.coefficients).sum()).item()
    return _errors(frame, model.coefficients), float(total)


def fit_step_time_model(
    steps: Any,
    *,
    seed: int = 0,
    holdout_fraction: float = 0.2,
    source: str = "",
    weighting: str = "relative",
    target: str = "duration_s",
) -> CalibratedModel:
    """Fit the linear step-time model to measured steps and measure it on held-out steps.

    Parameters
    ----------
    steps
        A Polars DataFrame with columns ``num_prefill_tokens``, ``num_decode_seqs``,
        ``kv_tokens_read``, ``num_sequences`` and ``duration_s`` (seconds), one row per
        measured step; or a sequence of ``(StepShape, duration_s)`` pairs.
    seed
        Seed of the hold-out split (``random.Random(seed)``), recorded in the model.
    holdout_fraction
        Fraction of the steps held out for the error report (at least one step is held out).
    source
        What the steps came from (a recording's path), recorded in the model.
    weighting
        ``"relative"`` (default): least squares on each step's relative error, so short decode
        steps count as much as long prefill steps (what MAPE measures). ``"absolute"``: least
        squares on the error in seconds; with a free intercept its residuals sum to zero over
        the training steps, so the model's **total** over them equals the measured total,
        which is what queueing delays and throughput add up (``docs/engine.md``, Time
        fidelity).
    target
        The column of a DataFrame ``steps`` holding the measured time (``duration_s``; a live
        bundle's ``step_shapes.parquet`` also has ``cpu_s``).

    Returns
    -------
    CalibratedModel
        The fitted model with its training and held-out errors.

    Raises
    ------
    FitError
        Fewer than :data:`MIN_STEPS` steps, durations whose coefficient of variation is below
        :data:`MIN_DURATION_CV`, a term that never varies or terms that move together (the
        scaled normal equations are singular).
    """
    import polars as pl

    if not 0 < holdout_fraction < 1:
        raise ConfigError(f"calibrate: holdout_fraction must be in (0, 1), got {holdout_fraction}")
    if weighting not in WEIGHTINGS:
        raise ConfigError(
            f"calibrate: weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}"
        )
    frame = _frame(steps, target)
    n = frame.height
    if n < MIN_STEPS:
        raise FitError(
            f"calibrate: {n} measured steps are too few to fit a step-time model; "
            f"record at least {MIN_STEPS}"
        )
    mean_d, std_d = frame.select(
        pl.col("duration_s").mean().alias("mean"), pl.col("duration_s").std().alias("std")
    ).row(0)
    if std_d / mean_d < MIN_DURATION_CV:
        raise FitError(
            f"calibrate: the {n} step durations are too uniform to fit (coefficient of variation "
            f"{std_d / mean_d:.4f} < {MIN_DURATION_CV}); record a workload that mixes prefill "
            "and decode steps of different sizes"
        )
    # The pairs term is fitted when the steps have it (a prefill somewhere); otherwise it is 0.
    has_pairs = frame.select(pl.col(PAIRS).max()).item() > 0
    terms = TERMS if has_pairs else TERMS[:5]
    num_holdout = max(1, round(n * holdout_fraction))
    held = set(random.Random(seed).sample(range(n), num_holdout))
    frame = frame.with_columns(pl.Series("holdout", [i in held for i in range(n)]))
    train = frame.filter(~pl.col("holdout"))
    test = frame.filter(pl.col("holdout"))

    # Weighted least squares: each row of the design and of the target is multiplied by its
    # weight, one over its duration (relative error) or one (seconds). The intercept column is
    # the weight itself: a broadcast literal would be summed once, not once per row.
    one = pl.col("duration_s") * 0.0 + 1.0
    w = 1.0 / pl.col("duration_s") if weighting == "relative" else one
    design = [w, *(pl.col(t) * w for t in terms[1:])]
    y = pl.col("duration_s") * w
    k = len(terms)
    sums = train.select(
        *((design[i] * design[j]).sum().alias(f"g{i}_{j}") for i in range(k) for j in range(i, k)),
        *((design[i] * y).sum().alias(f"r{i}") for i in range(k)),
    ).row(0, named=True)
    gram = [[0.0] * k for _ in range(k)]
    for i in range(k):
        for j in range(i, k):
            gram[i][j] = gram[j][i] = float(sums[f"g{i}_{j}"])
    rhs = [float(sums[f"r{i}"]) for i in range(k)]
    _check_design(gram, frame, train.height, terms)

    scale = [math.sqrt(gram[i][i]) for i in range(k)]
    scaled = [[gram[i][j] / (scale[i] * scale[j]) for j in range(k)] for i in range(k)]
    beta = nnls(scaled, [rhs[i] / scale[i] for i in range(k)])
    fitted = [b / s for b, s in zip(beta, scale, strict=True)]
    coefficients = tuple(fitted + [0.0] * (len(TERMS) - k))

    summary = frame.select(
        *(
            e
            for c in [*TERMS[1:], "duration_s"]
            for e in (
                pl.col(c).min().alias(f"{c}.min"),
                pl.col(c).mean().alias(f"{c}.mean"),
                pl.col(c).max().alias(f"{c}.max"),
            )
        )
    ).row(0, named=True)
    inputs = {
        c: {s: summary[f"{c}.{s}"] for s in ("min", "mean", "max")}
        for c in [*TERMS[1:], "duration_s"]
    }
    fit = {
        "method": f"non-negative least squares on the {weighting} error",
        "weighting": weighting,
        "target": target,
        "terms": list(terms),
        "num_steps": n,
        "num_train": train.height,
        "num_holdout": test.height,
        "holdout_fraction": holdout_fraction,
        "seed": seed,
        "split": "random.Random(seed).sample(range(num_steps), num_holdout)",
        "source": source,
        "inputs": inputs,
    }
    errors = {
        "train": _as_dict(_errors(train, coefficients)),
        "holdout": _as_dict(_errors(test, coefficients)),
    }
    return CalibratedModel(coefficients, fit, errors, source)


def _as_dict(e: FitErrors) -> dict[str, Any]:
    return {
        "num_steps": e.num_steps,
        "mape_pct": e.mape_pct,
        "p50_rel": e.p50_rel,
        "p95_rel": e.p95_rel,
    }


def _check_design(
    gram: list[list[float]], frame: Any, num_train: int, terms: Sequence[str]
) -> None:
    """Refuse a design whose terms cannot be told apart, naming the culprit.

    The check is on the normal equations scaled to a unit diagonal (``g_ij / sqrt(g_ii g_jj)``,
    the cosines between the weighted columns), so it does not depend on the terms' units or on
    the weighting's scale: relative (durations of milliseconds, weights of hundreds) and
    absolute weighting (weights 1) are judged alike.
    """
    import polars as pl

    for term in terms[1:]:
        lo, hi = frame.select(pl.col(term).min().alias("lo"), pl.col(term).max().alias("hi")).row(0)
        if lo == hi:
            raise FitError(
                f"calibrate: {term} is {lo:g} in every step, so its cost cannot be told apart "
                "from the fixed cost; record a workload where it varies"
            )
    k = len(gram)
    if any(gram[i][i] <= 0 for i in range(k)):
        raise FitError("calibrate: the design has an all-zero term; cannot fit")
    unit = [[gram[i][j] / math.sqrt(gram[i][i] * gram[j][j]) for j in range(k)] for i in range(k)]
    pivot, col = _min_pivot(unit)
    if pivot <= _PIVOT_TOL:
        raise FitError(
            f"calibrate: the {num_train} training steps cannot separate {terms[col]} from the "
            "other terms (they move together: rank-deficient design); record a workload that "
            "mixes prefill chunks, decode batches and context lengths"
        )
