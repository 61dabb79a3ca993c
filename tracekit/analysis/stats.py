"""Student's t distribution and paired confidence intervals, in the standard library only.

The verdict rule that uses them: docs/report.md, "Effectiveness (per cell and strategy)".

A qualification compares a strategy with the built-in baseline over paired repeats (disjoint
windows of the workload, or regenerated arrivals). Each repeat gives one paired change; the mean
change and its interval use Student's t with ``n - 1`` degrees of freedom, at the confidence the
rule asks for (``1 - alpha / m`` once the multiple-comparison correction is applied, so the
quantiles must be exact far into the tail: :func:`t_quantile` is, to about 1e-10).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Interval",
    "paired_interval",
    "regularized_beta",
    "t_cdf",
    "t_critical",
    "t_critical_95",
    "t_quantile",
]

# Continued fractions and bisection stop here: the quantiles are exact well past print precision.
_EPS = 1e-15
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz evaluation)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    value = d
    for m in range(1, 10_000):
        # The even step d_{2m}, then the odd step d_{2m+1} of the fraction.
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            value *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return value


def regularized_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` for ``a, b > 0``, ``0 <= x <= 1``.

    Evaluated by its continued fraction on the side where it converges fast (``x`` below
    ``(a + 1) / (a + b + 2)``) and by the symmetry ``I_x(a, b) = 1 - I_{1-x}(b, a)`` otherwise.
    """
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = _t_tail(abs(t), df)
    return 1.0 - tail if t > 0 else tail


def _t_tail(t: float, df: float) -> float:
    """``P(T > t)`` for ``t >= 0``: ``I_x(df / 2, 1 / 2) / 2`` with ``x = df / (df + t^2)``.

    Near 0 (``t^2 < df``) through the complement ``1 - I_y(1 / 2, df / 2)``,
    ``y = t^2 / (df + t^2)``, so that ``x`` close to 1 loses no precision.
    """
    square = t * t
    if square < df:
        return 0.5 * (1.0 - regularized_beta(0.5, df / 2.0, square / (df + square)))
    return 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + square))


def _t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``0 < p < 1``).

    Newton's method on the upper tail (the distribution is symmetric), kept inside a bracket
    that bisection narrows whenever a step would leave it; relative precision about 1e-12.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    upper_tail = 1.0 - p

    def tail(t: float) -> float:
        return _t_tail(t, df)

    low, high = 0.0, 1.0
    while tail(high) > upper_tail:
        low, high = high, high * 2.0
        if high > 1e12:
            return math.inf
    t = 0.5 * (low + high)
    for _ in range(200):
        excess = tail(t) - upper_tail  # > 0: t is too small
        if excess > 0:
            low = t
        else:
            high = t
        step = excess / _t_pdf(t, df)
        nxt = t + step
        if not low < nxt < high:
            nxt = 0.5 * (low + high)
        if abs(nxt - t) <= 1e-13 * nxt or high - low <= 1e-13 * high:
            return nxt
        t = nxt
    return t


@functools.lru_cache(maxsize=4096)
def t_critical(confidence: float, df: int) -> float:
    """The two-sided critical value of Student's t: ``t_{(1 + confidence) / 2}(df)``."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return t_quantile(0.5 + confidence / 2.0, df)


# Two-sided 95% critical values of Student's t by degrees of freedom (1..30), to three decimals:
# the table the reference analysers and the original experiments print (they list df 1..9 with
# these values and use 1.96 beyond). The original experiments' summaries reproduce it
# (tracekit.experiment.summary); the verdict rule uses the exact quantiles of t_critical.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_critical_95(df: int) -> float:
    """The three-decimal table's two-sided 95% value for ``df`` (1.96 beyond 30).

    The table the original experiments print (see the comment above); exact quantiles at any
    confidence are :func:`t_critical`'s.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its two-sided confidence interval.

    ``low``/``high`` are ``None`` for n < 2; ``sd`` is the sample standard deviation (``None``
    for n < 2) and ``confidence`` the interval's level.
    """

    n: int
    mean: float
    low: float | None
    high: float | None
    sd: float | None = None
    confidence: float = 0.95


def paired_interval(changes: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean of the paired changes and its Student-t interval at ``confidence`` (NaN dropped)."""
    values = [v for v in changes if not math.isnan(v)]
    n = len(values)
    if n == 0:
        return Interval(0, math.nan, None, None, None, confidence)
    mean = math.fsum(values) / n
    if n < 2:
        return Interval(n, mean, None, None, None, confidence)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_critical(confidence, n - 1) * sd / math.sqrt(n)
    return Interval(n, mean, mean - half, mean + half, sd, confidence)
