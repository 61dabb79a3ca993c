"""The calibrated step-time model fitted to measured per-request latencies.

A benchmark client measures each request's TTFT and end-to-end latency, not the engine's steps.
The engine's schedule is exact (``docs/engine.md``), so, given the schedule, each latency is a
sum of step times plus the time the request spends outside the step loop:

    TTFT_i = o_ttft[c] + share_i * t(s_a) + sum(t(s), a < s <= f)
    E2E_i  = TTFT_i + sum(t(s), f < s <= l)

where ``s_a`` is the step under way when request ``i`` arrived (``share_i`` of it still to run),
``f`` the step producing its first token, ``l`` its last token's step, ``c`` the client that
measured it (each client its own HTTP, streaming and parsing: GuideLLM's time before the first
token was 0.19 s against vllm bench's 0.015 s on the committed runs), and ``t(s) = c . x(s)``
the linear step-time model of :mod:`tracekit.latency.calibrated` over the step's make-up
``x(s)``. Both latencies are linear in the unknowns, so for a fixed schedule they are one
non-negative regression, in seconds, the TTFTs and the E2Es each scaled by their mean
(:func:`_weights`), least squares by default or a Huber loss (``huber_delta``,
:data:`HUBER_DELTA`: a request held up by another process on a shared machine then counts by
its size, not its square).

**What is fitted** (:data:`FIT_TERMS`, :data:`FREE_OVERHEADS`). Client latencies are sums over
many steps, so terms that move together cannot be told apart, and a term left free takes up
another's cost: per decoding sequence and per scheduled request are the same in decode steps
(the weakest direction of the design, a thousand times below the next on the measured runs),
so the per-scheduled-request term is left out; an overhead per prompt token outside the loop
traded against prefill's cost inside the steps (a refit put 84 us per prompt token outside the
loop and none in the steps, and prefill then no longer occupied the engine in the
simulation); an overhead after the last token took up the decode steps' misfit. Both stay 0
unless asked for (``overheads=``), as does one per output token
(:class:`~tracekit.measured.simulate.RequestOverheads`).

The schedule depends on the step times (which requests have arrived by which step), so the
objective, the loss of the model's *own* simulated latencies against the measured ones, is
piecewise: a small change of a coefficient moves an arrival across a step boundary and a
latency by a whole step. :func:`fit_from_runs` minimises it by Levenberg-Marquardt rounds:
simulate the current model; if it beats the best model so far, keep it and shorten the damping,
else go back to the best and lengthen it; propose the next model by the damped regression on
the best model's schedule. It stops, and records why (``stop_reason``), at a **fixed point**
(the undamped fit on the best model's schedule moves its latencies by less than ``tol``: on
runs whose schedule does not depend on the step times, for example every request sent at once,
that is the generating model exactly), when the **objective is stable** (the rounds' steps,
taken, improved the best model by less than :data:`STABLE_RTOL` over :data:`STABLE_ROUNDS`
rounds: the schedules cycle around a minimum, as the damping went 100 <-> 1000 in the earlier
fits that ended "not converged"), at a **local minimum** (every step within ``DAMPING_MAX``
fits worse), or at ``max_iterations``; it always returns the best model simulated.

The overheads are constants, so the model gives each request's expected latencies; live TTFTs
scatter around them (on a shared CPU, the client's and the server's share changes request by
request), and a constant fits the means, not the percentiles. The fitted model therefore keeps
its **spread** (:class:`~tracekit.measured.spread.LatencySpread`): the TTFT residuals of the
fitted requests the simulation did not queue (:func:`_spread`), centred, which ``tracekit
accuracy`` convolves with the simulated latencies.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.engine.config import EngineConfig
from tracekit.errors import ConfigError
from tracekit.latency.calibrated import PAIRS, TERMS, CalibratedModel, FitError, nnls
from tracekit.measured.compare import compare_metrics
from tracekit.measured.metrics import run_metrics
from tracekit.measured.server_log import OPTIONS as SERVER_OPTIONS
from tracekit.measured.simulate import RequestOverheads, SimulatedRun, simulate_run
from tracekit.measured.spread import LatencySpread, simulated_metrics
from tracekit.workloads.measured import MeasuredRun

__all__ = ["OVERHEADS", "RequestFit", "fit_from_runs", "initial_model"]

#: One row of the regression: the features (step terms summed over a latency's window, then
#: the free overheads' columns), the measured latency less the window's constant part, and its
#: kind (0: TTFT, 1: E2E).
Row = tuple[list[float], float, int]

#: The overhead unknowns a fit can take, after the step terms, in design order
#: (:class:`~tracekit.measured.simulate.RequestOverheads`).
OVERHEADS = ("ttft_s", "ttft_per_prompt_token_s", "e2e_s", "e2e_per_output_token_s")
#: The overheads fitted by default: the time before the first token. The time after the last
#: token (``e2e_s``) is the stream's end, a few milliseconds, and a free one took up the
#: decode steps' misfit on the shared machine's runs (44 and 430 ms in two fits,
#: docs/latency.md, "Calibration from measured runs"); per prompt token, it traded against
#: prefill's cost inside the steps; per output token, it did worse on held-out rates.
FREE_OVERHEADS = ("ttft_s",)
#: The step terms fitted by default.
FIT_TERMS = (
    "intercept",
    "num_prefill_tokens",
    "num_decode_seqs",
    "kv_tokens_read",
    "prefill_attention_pairs",
)
#: The fit stops once the best model improved by less than this share over the last
#: :data:`STABLE_ROUNDS` rounds.
STABLE_RTOL = 1e-3
STABLE_ROUNDS = 4
#: Fewest successful measured requests a fit accepts.
MIN_REQUESTS = 20
#: A Huber threshold for ``fit_from_runs(huber_delta=...)``, in units of the mean latency of the
#: row's kind (``_weights``): a latency off by more than a fifth of its kind's mean moves the fit
#: by its size, not its square. Not the default: on the shared machine's runs of
#: docs/latency.md, "End to end", it fitted the bulk and missed the measured means and tails
#: (median held-out E2E mean error 29 % against least squares' 11 %), which contain the
#: stalls that other processes cause.
HUBER_DELTA = 0.2
#: Levenberg-Marquardt damping of the rounds (``_nnls_weighted``): the first step's, the least
#: above none (an accepted step divides it by 10, and below this it is 0: the undamped fit),
#: and the largest tried before the fit stops at a local minimum.
DAMPING_START = 1e-2
DAMPING_MIN = 1e-5
DAMPING_MAX = 1e3


@dataclass(frozen=True)
class RequestFit:
    """A model fitted to measured runs, and how the fit went.

    Attributes
    ----------
    model
        The step coefficients, with ``request_overheads`` and ``measured_error`` (the error of
        every metric on the runs it was fitted on).
    overheads
        The fitted overheads.
    iterations
        Simulate-and-fit rounds run.
    converged
        Whether the last round moved the predicted latencies by less than the tolerance.
    history
        Per round: the model simulated, its objective (weighted squared error of its simulated
        latencies over the weighted squared measured ones) and the mean relative change the
        round's fit proposed.
    stop_reason
        Why the rounds stopped: ``"fixed point"``, a cycle of schedules (the best model kept),
        or the round limit (the best model kept).
    overheads_by_client
        With runs of several clients: each client's overheads (``overheads`` is one of them).
    """

    model: CalibratedModel
    overheads: RequestOverheads
    iterations: int
    converged: bool
    history: tuple[dict[str, Any], ...]
    stop_reason: str = ""
    overheads_by_client: dict[str, RequestOverheads] = dataclasses.field(default_factory=dict)


def initial_model(runs: Sequence[MeasuredRun]) -> CalibratedModel:
    """A starting model: every step lasts the measured median TPOT (its decode-step time)."""
    tpots = []
    for run in runs:
        ok = run.frame.filter(pl.col("ok") & (pl.col("output_tokens") > 1))
        tpots.extend(
            ok.select(
                (pl.col("e2e_s") - pl.col("ttft_s")) / (pl.col("output_tokens") - 1)
            ).to_series()
        )
    tpots = sorted(t for t in tpots if t > 0)
    step = tpots[len(tpots) // 2] if tpots else 0.01
    return CalibratedModel((step, 0.0, 0.0, 0.0, 0.0, 0.0), source="initial: median TPOT")


def _with_model(config: EngineConfig, model: CalibratedModel, folder: Path, k: int) -> EngineConfig:
    path = model.save(folder / f"round-{k}.json")
    return dataclasses.replace(config, latency=f"calibrated:{path}")


def _overhead_features(name: str, kind: int, prompt: float, output: float) -> float:
    """The column of overhead ``name`` in a TTFT (``kind`` 0) or E2E (1) row."""
    if name == "ttft_s":
        return 1.0
    if name == "ttft_per_prompt_token_s":
        return prompt
    if name == "e2e_s":
        return float(kind)
    if name == "e2e_per_output_token_s":
        return kind * max(output - 1.0, 0.0)
    raise ValueError(f"unknown overhead {name!r}")


def _design(
    run: MeasuredRun,
    sim: SimulatedRun,
    terms: Sequence[str],
    overheads: Sequence[str] = ("ttft_s", "e2e_s"),
) -> list[Row]:
    """(features, measured, kind) rows: TTFT (kind 0) and E2E (1) of each request served.

    Requests served in both the measurement and the simulation. The features are the step
    terms summed over the request's windows (see the module docstring) followed by the columns
    of the free ``overheads``; the constant part of a window (idle steps' fixed length, the
    engine's wait for an idle request's arrival) is taken off the measured value.
    """
    steps = sim.steps
    x = [steps[t].to_list() for t in terms]
    idle = steps["idle"].to_list()
    duration = steps["duration_s"].to_list()
    starts = steps["time_s"].to_list()
    n = steps.height
    # Prefix sums of each term and of the idle steps' durations.
    cum = [[0.0] * (n + 1) for _ in terms]
    cum_idle = [0.0] * (n + 1)
    for j in range(n):
        for t in range(len(terms)):
            cum[t][j + 1] = cum[t][j] + x[t][j]
        cum_idle[j + 1] = cum_idle[j] + (duration[j] if idle[j] else 0.0)
    measured = run.frame.select("request_id", "ok", "ttft_s", "e2e_s").rows_by_key(
        "request_id", named=True, unique=True
    )
    rows: list[Row] = []
    for r in sim.requests.filter(pl.col("ok")).iter_rows(named=True):
        m = measured.get(r["request_id"])
        if m is None or not m["ok"]:
            continue
        a, f, last, share = r["first_step"], r["token_step"], r["last_step"], r["first_frac"]
        if a > f:
            continue
        # The engine waits for an arrival while idle: that wait is no step's time.
        wait = max(0.0, starts[a] - r["arrival_s"])

        def window(lo: int, hi: int, first_share: float) -> list[float]:
            # Steps lo..hi inclusive, the first counted at first_share.
            return [
                first_share * x[t][lo] + (cum[t][hi + 1] - cum[t][lo + 1])
                for t in range(len(terms))
            ]

        ttft_x = window(a, f, share)
        ttft_const = (
            wait + share * (duration[a] if idle[a] else 0.0) + (cum_idle[f + 1] - cum_idle[a + 1])
        )
        e2e_x = window(a, last, share)
        e2e_const = ttft_const + (cum_idle[last + 1] - cum_idle[f + 1])
        prompt, output = float(r["prompt_tokens"]), float(r["output_tokens"])
        for kind, x_, y in (
            (0, ttft_x, m["ttft_s"] - ttft_const),
            (1, e2e_x, m["e2e_s"] - e2e_const),
        ):
            extra = [_overhead_features(o, kind, prompt, output) for o in overheads]
            rows.append(([*x_, *extra], y, kind))
    return rows


def _weights(rows: list[Row]) -> list[float]:
    """One over the mean measured value of its kind (TTFT rows, E2E rows), for every row.

    Least squares in seconds within each kind, so the model's TTFTs and E2Es add up to the
    measured ones (latency percentiles and throughput are sums of step times), with the two
    kinds on one scale. A relative error per request (one over each value) is biased towards
    the fastest requests: on a loaded machine whose repeats ran 8 times apart in speed, it fitted
    a model 55 % short of both (``docs/latency.md``, "Calibration from measured runs").
    """
    means = {}
    for kind in (0, 1):
        values = [max(y, 0.0) for _, y, k in rows if k == kind]
        means[kind] = max(sum(values) / len(values), 1e-6) if values else 1.0
    return [1.0 / means[k] for _, _, k in rows]


def _nnls_weighted(
    rows: list[Row],
    weights: list[float],
    anchor: Sequence[float] | None = None,
    damping: float = 0.0,
) -> list[float]:
    """Non-negative least squares of ``rows``, each row's residual multiplied by its weight.

    With ``damping`` > 0, plus ``damping`` times the squared distance from ``anchor`` in the
    scaled coefficients (unit diagonal of the normal equations): a Levenberg-Marquardt step,
    which moves the well-determined combinations of terms almost freely and the ill-determined
    ones (terms that move together, such as per decoding sequence and per scheduled request in
    decode-only steps) hardly at all.
    """
    k = len(rows[0][0])
    gram = [[0.0] * k for _ in range(k)]
    rhs = [0.0] * k
    for (features, y, _), w in zip(rows, weights, strict=True):
        fw = [v * w for v in features]
        yw = y * w
        for i in range(k):
            if fw[i] == 0.0:
                continue
            rhs[i] += fw[i] * yw
            gi = gram[i]
            for j in range(k):
                gi[j] += fw[i] * fw[j]
    # Column scaling (unit diagonal); a column that is zero in every row stays at 0.
    active = [i for i in range(k) if gram[i][i] > 0]
    scale = [math.sqrt(gram[i][i]) for i in active]
    scaled = [
        [gram[i][j] / (si * sj) for j, sj in zip(active, scale, strict=True)]
        for i, si in zip(active, scale, strict=True)
    ]
    target = [rhs[i] / s for i, s in zip(active, scale, strict=True)]
    if damping > 0 and anchor is not None:
        for n, (i, si) in enumerate(zip(active, scale, strict=True)):
            scaled[n][n] += damping
            target[n] += damping * anchor[i] * si
    beta = nnls(scaled, target)
    out = [0.0] * k
    for i, b, s in zip(active, beta, scale, strict=True):
        out[i] = b / s
    return out


def _huber(r: float, delta: float | None) -> float:
    a = abs(r)
    return 0.5 * a * a if delta is None or a <= delta else delta * (a - 0.5 * delta)


def _solve(
    rows: list[Row],
    weights: list[float],
    anchor: Sequence[float] | None = None,
    damping: float = 0.0,
    delta: float | None = None,
    rounds: int = 8,
) -> list[float]:
    """Minimise the loss of the weighted residuals, coefficients >= 0.

    Squared with ``delta`` None; else Huber's with threshold ``delta``, by iteratively
    reweighted least squares: a row whose weighted residual is beyond the
    threshold gets weight ``sqrt(delta / |r|)`` (its loss grows linearly), then the least
    squares is solved again, ``rounds`` times or until the loss stops falling. ``anchor`` and
    ``damping``: the Levenberg-Marquardt term of :func:`_nnls_weighted`.
    """
    solution = _nnls_weighted(rows, weights, anchor, damping)
    if delta is None:
        return solution
    loss = _objective(rows, weights, solution, delta)
    for _ in range(rounds):
        robust = []
        for (_, y, _), w, p in zip(rows, weights, _predicted(rows, solution), strict=True):
            r = abs(w * (y - p))
            robust.append(w * (1.0 if r <= delta else math.sqrt(delta / r)))
        proposal = _nnls_weighted(rows, robust, anchor, damping)
        new_loss = _objective(rows, weights, proposal, delta)
        if new_loss >= loss * (1 - 1e-9):
            break
        solution, loss = proposal, new_loss
    return solution


def _predicted(rows: list[Row], solution: Sequence[float]) -> list[float]:
    return [sum(f * c for f, c in zip(features, solution, strict=True)) for features, _, _ in rows]


def _objective(
    rows: list[Row],
    weights: list[float],
    solution: Sequence[float],
    delta: float | None = None,
) -> float:
    """Mean loss of ``solution``'s weighted residuals on ``rows``.

    Half the square, or Huber's beyond ``delta``. On the rows of the schedule that
    ``solution``'s own step model makes, this is the model's simulated-against-measured
    error (0: every latency reproduced), the quantity the fit minimises.
    """
    total = sum(
        _huber(w * (y - p), delta)
        for (_, y, _), w, p in zip(rows, weights, _predicted(rows, solution), strict=True)
    )
    return total / len(rows) if rows else 0.0


def _mean_relative_change(rows: list[Row], a: Sequence[float], b: Sequence[float]) -> float:
    """Mean over ``rows`` of ``|a's latency - b's| / |measured|``."""
    return sum(
        abs(p - q) / max(abs(y), 1e-9)
        for p, q, (_, y, _) in zip(_predicted(rows, a), _predicted(rows, b), rows, strict=True)
    ) / len(rows)


def _spread(runs: Sequence[MeasuredRun], sims: Sequence[SimulatedRun]) -> LatencySpread | None:
    """The fitted model's TTFT residuals on its runs, of the requests it did not queue.

    Requests served on both sides whose first token came at most one step after the step
    under way at their arrival in the simulation: their residual is the time outside the
    model (the client's and the API server's share of the machine, a step's own scatter), not
    the model's misfit of a queue, which a simulation at another rate makes again with its own
    queue (at a saturated held-out rate, residuals of every request over-predicted TTFT P99 by
    268 %, docs/latency.md, "The spread"). All served requests when fewer than
    :data:`MIN_REQUESTS` went unqueued; None when fewer than that were served.
    """
    unqueued: list[float] = []
    every: list[float] = []
    for run, sim in zip(runs, sims, strict=True):
        both = (
            run.frame.filter(pl.col("ok"))
            .select("request_id", "ttft_s")
            .join(
                sim.requests.filter(pl.col("ok")).select(
                    "request_id", "ttft_s", "first_step", "token_step"
                ),
                on="request_id",
                suffix="_sim",
            )
            .with_columns(
                (pl.col("ttft_s") - pl.col("ttft_s_sim")).alias("residual"),
                (pl.col("token_step") - pl.col("first_step") <= 1).alias("unqueued"),
            )
        )
        every.extend(both["residual"])
        unqueued.extend(both.filter(pl.col("unqueued"))["residual"])
    residuals = unqueued if len(unqueued) >= MIN_REQUESTS else every
    if len(residuals) < MIN_REQUESTS:
        return None
    return LatencySpread.from_residuals(residuals)


def fit_from_runs(
    runs: Sequence[MeasuredRun],
    config: EngineConfig,
    *,
    initial: CalibratedModel | None = None,
    max_iterations: int = 20,
    tol: float = 1e-3,
    huber_delta: float | None = None,
    pairs: bool = True,
    terms: Sequence[str] | None = None,
    overheads: Sequence[str] = FREE_OVERHEADS,
    per_client: bool = True,
    spread: bool = True,
    source: str = "",
    workdir: str | os.PathLike[str] | None = None,
) -> RequestFit:
    """Fit the step-time model and the request overheads to measured runs.

    Parameters
    ----------
    runs
        Measured runs of one server configuration (any request rates, any clients; pooled).
    config
        The server's engine configuration (``config.latency`` is replaced each round).
    initial
        The model of the first simulation (default :func:`initial_model`).
    max_iterations, tol
        Stop at a fixed point (the undamped fit on the best model's schedule moves its
        latencies by less than ``tol``, mean relative change), when the best model's objective
        improved by less than :data:`STABLE_RTOL` over the last :data:`STABLE_ROUNDS` rounds
        (the schedules cycle around a minimum), at a local minimum (every step within
        :data:`DAMPING_MAX` fits worse), or after ``max_iterations`` rounds; the best model
        simulated is kept, and ``stop_reason`` says which.
    huber_delta
        None (the default): least squares. A number: Huber's loss, linear beyond that many
        times the kind's mean latency (:data:`HUBER_DELTA` is a choice): a request held up by
        another process counts by its size, not its square, and the model is the engine's
        without the machine's stalls, but then it falls short of the measured means and tails,
        which contain them.
    pairs
        Fit the prefill attention-pairs term (off: without it).
    terms
        The step terms fitted (:data:`FIT_TERMS` by default; any subset of
        :data:`~tracekit.latency.calibrated.TERMS` with the intercept); the others stay 0.
    overheads
        The request overheads fitted (:data:`FREE_OVERHEADS` by default: ``ttft_s``; any of
        :data:`OVERHEADS`); the others stay 0.
    per_client
        One set of overheads per client of the runs (``vllm-bench``, ``guidellm``,
        ``aiperf``: each its own HTTP and stream handling), the step model shared; the
        model's ``request_overheads`` is then the set of the client with the most requests, and
        ``request_overheads_by_client`` every set. Off: one set for all.
    spread
        Keep the fitted requests' TTFT residuals in the model (its ``request_spread``; off:
        constant overheads only).
    source
        Recorded in the model (what it was fitted on).
    workdir
        Where the rounds' model files go (a temporary folder by default).

    Raises
    ------
    FitError
        Fewer than :data:`MIN_REQUESTS` requests served in both the measurement and the
        simulation.
    """
    if not runs:
        raise ConfigError("calibrate: no measured run given")
    model = initial or initial_model(runs)
    fitted = [t for t in (terms or FIT_TERMS) if pairs or t != PAIRS]
    unknown = [t for t in fitted if t not in TERMS] + [o for o in overheads if o not in OVERHEADS]
    if unknown or "intercept" not in fitted:
        raise ConfigError(
            f"calibrate: cannot fit {', '.join(unknown) or 'without the intercept'}; the terms "
            f"are {', '.join(TERMS)} (with intercept) and the overheads {', '.join(OVERHEADS)}"
        )
    # In TERMS order, so that a solution maps back by position.
    step_terms = [t for t in TERMS if t in fitted]
    free_overheads = [o for o in OVERHEADS if o in overheads]
    index = {t: i for i, t in enumerate(TERMS)}

    def coefficients_of(solution: Sequence[float]) -> tuple[float, ...]:
        full = [0.0] * len(TERMS)
        for t, v in zip(step_terms, solution, strict=False):
            full[index[t]] = v
        return tuple(full)

    # One set of overheads per client (each client's own HTTP, streaming and parsing), the
    # step model shared; the default set is the client with the most requests.
    clients = sorted({run.client for run in runs}) if per_client else [""]
    default_client = max(
        clients, key=lambda c: sum(run.num_requests for run in runs if run.client == c or not c)
    )
    width = len(free_overheads)

    def overheads_of(solution: Sequence[float], client: str = "") -> RequestOverheads:
        start = len(step_terms) + clients.index(client or default_client) * width
        values = dict(zip(free_overheads, solution[start : start + width], strict=True))
        return RequestOverheads(**values)

    def run_overheads(solution: Sequence[float], run: MeasuredRun) -> RequestOverheads:
        return overheads_of(solution, run.client if per_client else "")

    def all_overheads(solution: Sequence[float]) -> dict[str, Any]:
        if len(clients) == 1:
            return overheads_of(solution).as_dict()
        return {c: overheads_of(solution, c).as_dict() for c in clients}

    def design(sims: Sequence[SimulatedRun]) -> list[Row]:
        rows: list[Row] = []
        for run, sim in zip(runs, sims, strict=True):
            block = clients.index(run.client if per_client else "")
            before, after = [0.0] * (block * width), [0.0] * ((len(clients) - block - 1) * width)
            for features, y, kind in _design(run, sim, step_terms, free_overheads):
                steps_x, overhead_x = features[: len(step_terms)], features[len(step_terms) :]
                rows.append(([*steps_x, *before, *overhead_x, *after], y, kind))
        return rows

    history: list[dict[str, Any]] = []
    # The model of the current round's schedule, with its overheads (the initial model has none).
    current = [model.coefficients[index[t]] for t in step_terms] + [0.0] * (width * len(clients))
    # The best model simulated so far: (objective, solution, its rows, their weights).
    best: tuple[float, list[float], list[Row], list[float]] | None = None
    best_by_round: list[float] = []
    damping = DAMPING_START
    converged = False
    stop_reason = f"max_iterations ({max_iterations}) reached; the best model simulated is kept"
    num_rows = 0
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        folder = Path(tmp)
        for k in range(1, max_iterations + 1):
            model = CalibratedModel(coefficients_of(current), source=source)
            cfg = _with_model(config, model, folder, k)
            rows = design([simulate_run(run, cfg) for run in runs])
            if len(rows) < 2 * MIN_REQUESTS:
                raise FitError(
                    f"calibrate: {len(rows) // 2} requests were served in both the measured runs "
                    f"and their simulation; fit on at least {MIN_REQUESTS}"
                )
            num_rows = len(rows)
            weights = _weights(rows)
            # The current model's own error: its simulated latencies (on the schedule it makes)
            # against the measured ones. This, not the change between rounds, is what the fit
            # minimises; each round's least squares only proposes the next model.
            objective = _objective(rows, weights, current, huber_delta)
            accepted = best is None or objective < best[0]
            if accepted:
                best = (objective, current, rows, weights)
                damping = damping / 10 if damping / 10 >= DAMPING_MIN else 0.0
            else:
                # Worse than the best: its schedule moved requests the wrong way. Propose again
                # from the best, a shorter step (Levenberg-Marquardt).
                damping = max(damping * 10, DAMPING_MIN)
            assert best is not None
            best_by_round.append(best[0])
            history.append(
                {
                    "round": k,
                    "coefficients": dict(zip(TERMS, coefficients_of(current), strict=True)),
                    "overheads": all_overheads(current),
                    "objective": objective,
                    "accepted": accepted,
                    "damping": damping,
                    "latencies": len(rows),
                }
            )
            _, anchor, best_rows, best_weights = best
            # A fixed point: the undamped fit on the best model's own schedule gives it back
            # (its latencies move by less than tol).
            free = _solve(best_rows, best_weights, delta=huber_delta)
            change = _mean_relative_change(best_rows, free, anchor)
            history[-1]["mean_relative_change"] = change
            if change < tol:
                converged, stop_reason = True, "fixed point"
                # The fixed point's own fit, simulated once more: kept when it is no worse.
                if any(coefficients_of(free)):
                    last = CalibratedModel(coefficients_of(free), source=source)
                    cfg = _with_model(config, last, folder, k + 1)
                    rows = design([simulate_run(run, cfg) for run in runs])
                    if len(rows) == num_rows:
                        weights = _weights(rows)
                        objective = _objective(rows, weights, free, huber_delta)
                        history.append(
                            {
                                "round": k + 1,
                                "coefficients": dict(
                                    zip(TERMS, coefficients_of(free), strict=True)
                                ),
                                "overheads": all_overheads(free),
                                "objective": objective,
                                "accepted": objective <= best[0],
                                "damping": 0.0,
                                "latencies": len(rows),
                                "mean_relative_change": None,
                            }
                        )
                        if objective <= best[0]:
                            best = (objective, free, rows, weights)
                break
            recent = history[-STABLE_ROUNDS:]
            if (
                k > STABLE_ROUNDS
                and any(h["accepted"] for h in recent)
                and best[0] >= best_by_round[-1 - STABLE_ROUNDS] * (1 - STABLE_RTOL)
            ):
                # The schedules cycle around a minimum of the piecewise objective: the last
                # rounds' steps, long and short, were taken and improved the best model by
                # less than the tolerance. (Rounds that all fit worse lengthen the damping
                # until the local-minimum stop below.)
                converged = True
                stop_reason = (
                    f"objective stable (the best model improved by less than {STABLE_RTOL:.1%} "
                    f"over the last {STABLE_ROUNDS} rounds)"
                )
                break
            if damping > DAMPING_MAX:
                # Even a short step from the best model makes a schedule that fits worse: a
                # local minimum of the piecewise objective (the schedule changes in jumps).
                converged = True
                stop_reason = (
                    f"no better model within damping {DAMPING_MAX:g} of the best (a local "
                    "minimum: each step moves requests across step boundaries and fits worse)"
                )
                break
            proposal = (
                _solve(best_rows, best_weights, anchor, damping, huber_delta) if damping else free
            )
            if not any(coefficients_of(proposal)):
                raise FitError("calibrate: the fit gave an all-zero step model; cannot simulate")
            current = proposal
        assert best is not None
        current = best[1]
        model = CalibratedModel(coefficients_of(current), source=source)
        fitted_overheads = overheads_of(current)
        by_client = {c: overheads_of(current, c) for c in clients} if len(clients) > 1 else {}
        # The residuals of the fitted model on its runs (its spread), then its own error on
        # them, metric by metric, the spread included as tracekit accuracy includes it.
        cfg = _with_model(config, model, folder, 0)
        sims = [simulate_run(run, cfg, overheads=run_overheads(current, run)) for run in runs]
        residuals = _spread(runs, sims) if spread else None
        measured, simulated, engine = [], [], []
        for run, sim in zip(runs, sims, strict=True):
            measured.append(run_metrics(run.frame))
            simulated.append(simulated_metrics(sim.requests, residuals))
            engine.append(simulated_metrics(sim.requests))
        errors = {
            m.name: m.error
            for m in compare_metrics(measured, simulated, 0.10)
            if m.error is not None
        }
        engine_errors = {
            m.name: m.error for m in compare_metrics(measured, engine, 0.10) if m.error is not None
        }
    fit = {
        "method": "non-negative regression (least squares, or Huber's loss with huber_delta) "
        "on per-request TTFT and E2E (seconds, each "
        "kind scaled by its mean), Levenberg-Marquardt rounds of simulate and fit; the best "
        "model simulated is kept",
        "target": "per-request latencies",
        "weighting": "seconds, each kind (TTFT, E2E) over its mean",
        "huber_delta": huber_delta,
        "terms": step_terms,
        "overhead_terms": free_overheads,
        "overheads_per_client": per_client,
        "default_client": default_client if per_client else None,
        "iterations": len(history),
        "converged": converged,
        "stop_reason": stop_reason,
        "objective": best[0],
        "tol": tol,
        "num_runs": len(runs),
        "num_latencies": num_rows,
        "runs": [
            {
                "source": str(run.source),
                "client": run.client,
                "request_rate": run.settings.get("request_rate"),
                "burstiness": run.settings.get("burstiness"),
                "num_requests": run.num_requests,
            }
            for run in runs
        ],
        "engine_config": {key: getattr(config, key) for key in SERVER_OPTIONS},
        "history": history,
        "source": source,
    }
    measured_error = {
        "what": "simulated / measured - 1 of each metric, mean over the runs it was fitted on",
        "fitted_runs": errors,
        # The engine's runs (record sim, replay, qualify) add the overheads to every request
        # but not the spread (docs/latency.md, "Measured error"): their error, apart.
        "fitted_runs_without_spread": engine_errors,
    }
    final = CalibratedModel(
        model.coefficients,
        fit,
        {},
        source,
        fitted_overheads.as_dict(),
        measured_error,
        residuals.as_dict() if residuals else {},
        {c: o.as_dict() for c, o in by_client.items()},
    )
    return RequestFit(
        final,
        fitted_overheads,
        len(history),
        converged,
        tuple(history),
        stop_reason,
        by_client,
    )
