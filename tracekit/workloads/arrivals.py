"""Client arrival models: keep a workload's recorded arrivals, or generate them as ``vllm bench``.

``--arrivals recorded|poisson|gamma:<burstiness>|constant --rate R`` replaces the arrival times of
a workload's requests (kept in their row order) with those a load generator would produce. The
generated kinds follow ``vllm bench serve`` (vLLM 0.32 and 0.33, ``vllm/benchmarks/serve.py``,
``get_request``), for ``N`` requests at ``--request-rate R`` with ``--burstiness b``:

1. gap ``i`` (``i = 0 .. N-1``) is drawn from a gamma distribution with shape ``b`` and scale
   ``1 / (R * b)`` (mean ``1/R``, variance ``1/(R^2 b)``); ``b = 1`` is the exponential
   (a Poisson process), and ``b = inf`` makes every gap exactly ``1/R``;
2. request ``i`` is due at the sum of gaps ``0 .. i``: the *first request arrives after one
   gap*, not at 0;
3. with no ramp-up (tracekit has none), the arrivals are rescaled so that the last one lands at
   exactly ``N / R`` (``t_i * (N/R) / t_{N-1}``), so the offered rate is exactly ``R``; the
   scale ``1/(R b)`` cancels in this step;
4. ``R = inf`` (``vllm bench``'s default) sends every request at 0 (no rescale).

``poisson`` is ``gamma:1`` and ``constant`` is ``gamma:inf`` (request ``i`` at ``(i+1)/R``).

**Same parametrisation, same distribution, not the same numbers.** ``vllm bench`` draws from
numpy's global legacy generator (``np.random.seed(args.seed)``, then ``np.random.gamma``);
tracekit has no numpy and draws from its own counter-based rule
(:mod:`tracekit.workloads.seeded`, stream ``ARRIVALS``), turned into gamma variates by the rule in
:func:`standard_gamma`. A given ``(kind, rate, seed)`` therefore gives the same arrival process
as ``vllm bench`` with the same ``--request-rate``/``--burstiness``, and the same bytes from run
to run (across platforms, up to the last bit of the C library's ``log``/``cos``), but not the
numbers ``vllm bench --seed`` draws.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import polars as pl

from tracekit.defaults import MAX_FINITE
from tracekit.workloads._options import check_seed, client_option_error, suggest
from tracekit.workloads.model import MAX_ARRIVAL_S, Workload
from tracekit.workloads.seeded import Stream, splitmix64

__all__ = [
    "MAX_FINITE",
    "ArrivalKind",
    "Arrivals",
    "apply_arrivals",
    "arrival_times",
    "parse_arrivals",
    "standard_gamma",
    "uniform_sequence",
]

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


class ArrivalKind(StrEnum):
    """How request arrival times are produced."""

    RECORDED = "recorded"
    """The workload's own arrival times (``vllm bench``'s self-timed traces)."""
    POISSON = "poisson"
    """Exponential gaps: ``gamma:1``."""
    GAMMA = "gamma"
    """Gamma gaps with shape ``burstiness``, written ``gamma:<burstiness>``."""
    CONSTANT = "constant"
    """Equal gaps of ``1/rate``: ``gamma:inf``."""


_SPELLINGS = ("recorded", "poisson", "gamma:<burstiness>", "constant")
_EXPECTED = "one of recorded, poisson, gamma:<burstiness>, constant"


@dataclass(frozen=True, slots=True)
class Arrivals:
    """A validated arrival model; build it with :func:`parse_arrivals`.

    Parameters
    ----------
    kind
        The model.
    rate
        Requests per second (> 0, ``inf`` allowed: all at 0); ``None`` for ``recorded``.
    burstiness
        The gamma shape ``b`` (> 0, ``inf`` allowed); 1 for ``poisson``, ``inf`` for
        ``constant``, ``None`` for ``recorded``.
    seed
        Seed of the gap draws (stream ``ARRIVALS``).
    """

    kind: ArrivalKind
    rate: float | None = None
    burstiness: float | None = None
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        """Return the model as recorded in ``Workload.options["arrivals"]`` (JSON-compatible).

        Infinite ``rate`` or ``burstiness`` are written as the string ``"inf"`` (JSON has no
        infinity).
        """

        def number(value: float | None) -> float | str | None:
            return "inf" if value is not None and math.isinf(value) else value

        return {
            "kind": self.kind.value,
            "rate": number(self.rate),
            "burstiness": number(self.burstiness),
            "seed": self.seed,
        }


def _parse_positive(flag: str, value: object, fix: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    # inf is a documented value (every request at 0; a constant rate); a finite value beyond a
    # million is none a server sees, and gamma draws overflow to NaN gaps near 1e308.
    within = 0 < number <= MAX_FINITE or number == math.inf
    if isinstance(value, bool) or not within:
        raise client_option_error(
            flag, value, expected=f"a number > 0 and <= {MAX_FINITE:g} (inf allowed)", fix=fix
        )
    return number


def parse_arrivals(text: str | Arrivals, *, rate: float | None = None, seed: int = 0) -> Arrivals:
    """Turn ``--arrivals``/``--rate``/``--seed`` values into a checked :class:`Arrivals`.

    Parameters
    ----------
    text
        ``recorded``, ``poisson``, ``gamma:<burstiness>`` or ``constant`` (case-insensitive),
        or an :class:`Arrivals`, returned unchanged.
    rate
        Requests per second, > 0 (``inf`` sends everything at 0); required by every kind but
        ``recorded``, which refuses it.
    seed
        Seed of the gap draws.

    Returns
    -------
    Arrivals
        The model.

    Raises
    ------
    tracekit.errors.ConfigError
        For an unknown kind (with a "did you mean"), a burstiness <= 0 or NaN, a missing,
        <= 0 or NaN rate, a rate given with ``recorded``, or a seed that is not an integer.

    Examples
    --------
    >>> parse_arrivals("gamma:0.5", rate=4.0)
    Arrivals(kind=<ArrivalKind.GAMMA: 'gamma'>, rate=4.0, burstiness=0.5, seed=0)
    """
    if isinstance(text, Arrivals):
        return text
    seed = check_seed("--seed", seed)
    spelled = str(text).strip().lower()
    name, colon, argument = spelled.partition(":")
    if name == "gamma" and colon:
        burstiness: float | None = _parse_positive(
            "--arrivals gamma:<burstiness>", argument, "pass e.g. --arrivals gamma:0.5"
        )
    elif name in ("poisson", "constant", "recorded") and not colon:
        burstiness = {"poisson": 1.0, "constant": math.inf, "recorded": None}[name]
    else:
        near = "gamma:<burstiness>" if name == "gamma" else suggest(spelled, _SPELLINGS)
        raise client_option_error(
            "--arrivals",
            text,
            expected=_EXPECTED,
            did_you_mean=near,
            fix="pass --arrivals poisson (or recorded, constant, gamma:0.5)",
        )
    kind = ArrivalKind(name)
    if kind is ArrivalKind.RECORDED:
        if rate is not None:
            raise client_option_error(
                "--rate",
                rate,
                expected="no rate with --arrivals recorded (the workload's own times are kept)",
                fix="drop --rate, use --rate-scale to replay faster, or pick --arrivals poisson",
            )
        return Arrivals(kind, None, None, seed)
    if rate is None:
        raise client_option_error(
            "--rate",
            rate,
            expected=f"a request rate for --arrivals {spelled}",
            fix="pass --rate R (requests per second, > 0)",
        )
    checked_rate = _parse_positive("--rate", rate, "pass --rate R with R > 0")
    return Arrivals(kind, checked_rate, burstiness, seed)


def uniform_sequence(seed: int, stream: Stream) -> Iterator[float]:
    """Yield the uniform draws ``u_0, u_1, ...`` of :mod:`tracekit.workloads.seeded`, in order.

    The same numbers as :func:`tracekit.workloads.seeded.uniform` gives rows ``0, 1, ...``,
    computed in Python for rules that consume a variable number of draws.

    Parameters
    ----------
    seed
        The seed.
    stream
        The purpose of the draws.

    Yields
    ------
    float
        ``u_i`` in ``[0, 1)``.
    """
    key = splitmix64(seed ^ int(stream))
    counter = 0
    while True:
        counter += 1
        yield (splitmix64((key + counter * _GAMMA) & _MASK) >> 11) * 2.0**-53


def _marsaglia_tsang(shape: float, draws: Iterator[float]) -> float:
    # Marsaglia and Tsang (2000), shape >= 1; every attempt takes exactly three draws.
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        u1, u2, u3 = next(draws), next(draws), next(draws)
        x = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
        v = (1.0 + c * x) ** 3
        if v > 0 and math.log(1.0 - u3) < 0.5 * x * x + d - d * v + d * math.log(v):
            return d * v


def standard_gamma(shape: float, num: int, seed: int) -> list[float]:
    """Draw ``num`` gamma variates with shape ``shape`` and scale 1, by a written-down rule.

    The draws ``u_0, u_1, ...`` of :func:`uniform_sequence` (stream ``ARRIVALS``) are consumed
    in order:

    * ``shape == 1``: one draw, ``-ln(1 - u)`` (the exponential);
    * ``shape > 1``: Marsaglia and Tsang's method: with ``d = shape - 1/3`` and
      ``c = 1/sqrt(9d)``, each attempt takes three draws ``u1, u2, u3``,
      ``x = sqrt(-2 ln(1-u1)) cos(2 pi u2)`` (Box-Muller), ``v = (1 + c x)^3``, and is
      accepted, giving ``d v``, when ``v > 0`` and ``ln(1-u3) < x^2/2 + d - d v + d ln v``;
    * ``shape < 1``: ``g (1-u)^(1/shape)``, where ``g`` is drawn as above with shape
      ``shape + 1`` and ``u`` is the next draw.

    Parameters
    ----------
    shape
        The gamma shape, finite and > 0.
    num
        How many variates.
    seed
        The seed.

    Returns
    -------
    list of float
        ``num`` variates; the first ``k`` are the same whatever ``num`` is.
    """
    draws = uniform_sequence(seed, Stream.ARRIVALS)
    if shape == 1.0:
        return [-math.log(1.0 - next(draws)) for _ in range(num)]
    if shape > 1.0:
        return [_marsaglia_tsang(shape, draws) for _ in range(num)]
    out = []
    for _ in range(num):
        boosted = _marsaglia_tsang(shape + 1.0, draws)
        out.append(boosted * (1.0 - next(draws)) ** (1.0 / shape))
    return out


def arrival_times(num_requests: int, arrivals: Arrivals) -> list[float]:
    """Return the generated arrival times of ``num_requests`` requests, in seconds.

    Parameters
    ----------
    num_requests
        ``N``, >= 1.
    arrivals
        A generated model (not ``recorded``, which has no times of its own).

    Returns
    -------
    list of float
        Non-decreasing times; the last is ``N / rate`` (exactly, for ``constant`` and
        ``inf`` rates; up to rounding otherwise), all 0 for an infinite rate.

    Examples
    --------
    >>> arrival_times(4, parse_arrivals("constant", rate=2.0))
    [0.5, 1.0, 1.5, 2.0]
    """
    if arrivals.kind is ArrivalKind.RECORDED or arrivals.rate is None:
        raise ValueError("recorded arrivals have no generated times")
    rate, shape = arrivals.rate, arrivals.burstiness
    assert shape is not None
    if math.isinf(rate):
        return [0.0] * num_requests
    if math.isinf(shape):
        return [(i + 1) / rate for i in range(num_requests)]
    total = 0.0
    cumulative = []
    for gap in standard_gamma(shape, num_requests, arrivals.seed):
        total += gap
        cumulative.append(total)
    if total == 0.0:  # vllm bench skips the rescale when the last delay is 0
        return cumulative
    end = num_requests / rate
    factor = end / total
    # The rescaled last arrival is ``end`` up to rounding; write it exactly, and never let a
    # rounded earlier one pass it.
    return [min(t * factor, end) for t in cumulative[:-1]] + [end]


def apply_arrivals(
    workload: Workload, arrivals: str | Arrivals, *, rate: float | None = None, seed: int = 0
) -> Workload:
    """Return ``workload`` with its arrivals replaced by the client model's.

    The requests keep their row order (arrival order, or the order set by
    :func:`~tracekit.workloads.order.apply_order`); row ``i`` gets generated time ``i``.
    ``options["arrivals"]`` records the model (:meth:`Arrivals.describe`).

    Parameters
    ----------
    workload
        The workload.
    arrivals
        ``recorded``, ``poisson``, ``gamma:<burstiness>``, ``constant``, or an
        :class:`Arrivals`.
    rate
        Requests per second (see :func:`parse_arrivals`).
    seed
        Seed of the gap draws.

    Returns
    -------
    Workload
        A new workload; ``recorded`` keeps the times and only records the option.

    Raises
    ------
    tracekit.errors.ConfigError
        For a bad option (see :func:`parse_arrivals`), or a rate so low that the last request
        would arrive more than ``MAX_ARRIVAL_S`` after the start.
    """
    model = parse_arrivals(arrivals, rate=rate, seed=seed)
    options = {**workload.options, "arrivals": model.describe()}
    if model.kind is ArrivalKind.RECORDED:
        return dataclasses.replace(workload, options=options)
    assert model.rate is not None
    num = workload.num_requests
    if num / model.rate > MAX_ARRIVAL_S:
        raise client_option_error(
            "--rate",
            model.rate,
            expected=f"a rate at which {num} requests arrive within {MAX_ARRIVAL_S:g} s",
            fix=f"pass --rate above {num / MAX_ARRIVAL_S:g}",
        )
    times = pl.Series("arrival_s", arrival_times(num, model), dtype=pl.Float64)
    frame = workload.frame.with_columns(times)
    return dataclasses.replace(workload, frame=frame, options=options)
