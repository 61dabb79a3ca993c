"""Student's t in the standard library (``tracekit.analysis.stats``) against SciPy's.

The verdict rule's intervals sit far in the tail (``1 - 0.05 / 550``), so the quantiles are
checked there too; SciPy is an independent implementation.
"""

from __future__ import annotations

import math

import pytest

# SciPy is in the dev extra: the reference must be there, never skipped.
import scipy.special as special
import scipy.stats as stats

from tracekit.analysis.stats import (
    paired_interval,
    regularized_beta,
    t_cdf,
    t_critical,
    t_critical_95,
    t_quantile,
)

DFS = (1, 2, 3, 4, 9, 19, 29, 99, 1000)


@pytest.mark.parametrize("df", DFS)
@pytest.mark.parametrize("p", [0.6, 0.975, 0.995, 1 - 0.05 / 22, 1 - 0.05 / 1100, 1 - 1e-7])
def test_quantiles_match_scipy(df: int, p: float) -> None:
    assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-9)
    assert t_quantile(1 - p, df) == pytest.approx(float(stats.t.ppf(1 - p, df)), rel=1e-9)


@pytest.mark.parametrize("df", DFS)
@pytest.mark.parametrize("t", [-40.0, -3.0, -0.5, -1e-3, 0.0, 1e-3, 0.7, 2.0, 12.0])
def test_cdf_matches_scipy(df: int, t: float) -> None:
    assert t_cdf(t, df) == pytest.approx(float(stats.t.cdf(t, df)), rel=1e-10, abs=1e-15)


@pytest.mark.parametrize(("a", "b", "x"), [(0.5, 4.5, 0.2), (4.5, 0.5, 0.99), (2.0, 3.0, 0.5)])
def test_regularized_beta_matches_scipy(a: float, b: float, x: float) -> None:
    assert regularized_beta(a, b, x) == pytest.approx(float(special.betainc(a, b, x)), rel=1e-12)


def test_the_three_decimal_table_is_the_exact_quantiles_rounded() -> None:
    # The original experiments' table (12.706, 4.303, ...) and 1.96 beyond 30.
    assert [t_critical_95(df) for df in (1, 2, 7, 30, 31)] == [12.706, 4.303, 2.365, 2.042, 1.96]
    for df in range(1, 31):
        assert abs(t_critical_95(df) - t_critical(0.95, df)) < 5e-4


def test_paired_interval_by_hand() -> None:
    # Changes 1, 2, 3, 4, 6: mean 3.2, sample sd sqrt(3.7), half-width t(4) sd / sqrt(5).
    interval = paired_interval([1.0, 2.0, 3.0, 4.0, 6.0, math.nan], confidence=0.99)
    sd = math.sqrt(((1 - 3.2) ** 2 + 1.44 + 0.04 + 0.64 + 7.84) / 4)
    half = float(stats.t.ppf(0.995, 4)) * sd / math.sqrt(5)
    assert interval.n == 5
    assert interval.mean == pytest.approx(3.2)
    assert interval.sd == pytest.approx(sd)
    assert (interval.low, interval.high) == (pytest.approx(3.2 - half), pytest.approx(3.2 + half))
    one = paired_interval([5.0])
    assert (one.n, one.mean, one.low, one.high) == (1, 5.0, None, None)
