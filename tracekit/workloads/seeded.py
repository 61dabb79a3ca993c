"""Seeded randomness for workloads, as polars expressions with a written-down rule.

The loaders need a few random draws (Poisson arrivals for a lengths-only trace, spreading bucketed
Mooncake timestamps, seeded priorities). The project has no numpy, and polars' own samplers do
not promise the same numbers across releases, so the draws come from a small counter-based
generator written in polars integer arithmetic, which any reader can re-implement:

* ``key = splitmix64(seed XOR stream)``, computed once in Python (``stream`` is a fixed constant
  per purpose, :class:`Stream`, so that the same seed used for two purposes gives unrelated
  numbers);
* for the record at position ``i`` (0-based): ``x_i = splitmix64(key + (i + 1) * GAMMA mod 2**64)``
  with ``GAMMA = 0x9E3779B97F4A7C15``;
* ``u_i = (x_i >> 11) * 2**-53``, a uniform number in ``[0, 1)``.

``splitmix64(z)`` is the finaliser of Steele, Lea and Flood's SplitMix64
(``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31``,
all modulo ``2**64``). Because ``u_i`` depends only on ``(seed, stream, i)``, the first ``n`` draws
are the same whatever the total length, so ``limit`` never changes earlier requests.
"""

from __future__ import annotations

from enum import IntEnum

import polars as pl

__all__ = [
    "Stream",
    "exponential_gaps",
    "splitmix64",
    "uniform",
    "uniform_integers",
]

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


class Stream(IntEnum):
    """Fixed stream constants: one per purpose, mixed into the seed."""

    POISSON = 1
    """Inter-arrival gaps of a generated Poisson process."""
    BUCKET_SPREAD = 2
    """Offsets that spread requests inside a Mooncake timestamp bucket."""
    PRIORITY = 3
    """Seeded priority levels."""
    SHUFFLE = 4
    """Sort keys that shuffle a lengths-only trace."""
    ARRIVALS = 5
    """Inter-arrival gaps of a client model's generated arrivals (``poisson``, ``gamma:<b>``)."""
    ORDER = 6
    """Sort keys of a client model's ``shuffled:<seed>`` request order."""
    PREFIX_GROUP = 16
    """Prefix group of each request under ``--shared-prefix-tokens`` (:mod:`.content`)."""


def splitmix64(value: int) -> int:
    """Apply the SplitMix64 finaliser to one 64-bit integer (reference implementation).

    Parameters
    ----------
    value
        Any integer; it is reduced modulo ``2**64`` first.

    Returns
    -------
    int
        The mixed value in ``[0, 2**64)``.

    Examples
    --------
    >>> splitmix64(0x9E3779B97F4A7C15)
    16294208416658607535
    """
    z = value & _MASK
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def _u64(value: int) -> pl.Expr:
    return pl.lit(value & _MASK, dtype=pl.UInt64)


def _mix_expr(z: pl.Expr) -> pl.Expr:
    # Polars has no shift operator on expressions; for unsigned integers ``z >> k`` is exactly
    # ``z // 2**k``, and UInt64 multiplication wraps modulo 2**64 like the reference.
    z = z.xor(z // _u64(1 << 30)) * _u64(_MIX1)
    z = z.xor(z // _u64(1 << 27)) * _u64(_MIX2)
    return z.xor(z // _u64(1 << 31))


def uniform(seed: int, stream: Stream) -> pl.Expr:
    """Return an expression of one uniform ``[0, 1)`` draw per row of the frame it runs in.

    Parameters
    ----------
    seed
        The user's seed (any integer, reduced modulo ``2**64``).
    stream
        The purpose of the draws.

    Returns
    -------
    pl.Expr
        A Float64 expression; row ``i`` gets ``u_i`` of the module docstring's rule.

    Examples
    --------
    >>> import polars as pl
    >>> pl.DataFrame({"x": [1, 2]}).select(u=uniform(7, Stream.PRIORITY).round(6))["u"].to_list()
    [0.068586, 0.780302]
    """
    key = splitmix64(seed ^ int(stream))
    counter = pl.int_range(pl.len(), dtype=pl.UInt64) + _u64(1)
    bits = _mix_expr(_u64(key) + counter * _u64(_GAMMA))
    return (bits // _u64(1 << 11)).cast(pl.Float64) * (2.0**-53)


def exponential_gaps(rate: float, seed: int) -> pl.Expr:
    """Return an expression of exponential inter-arrival gaps (seconds) at ``rate`` per second.

    Parameters
    ----------
    rate
        Mean arrivals per second (> 0).
    seed
        The seed; stream :attr:`Stream.POISSON`.

    Returns
    -------
    pl.Expr
        ``-ln(1 - u_i) / rate``, Float64, always finite because ``u_i < 1``.
    """
    return -((1.0 - uniform(seed, Stream.POISSON)).log()) / rate


def uniform_integers(levels: int, seed: int, stream: Stream) -> pl.Expr:
    """Return an expression of uniform integers in ``[0, levels)``, one per row.

    Parameters
    ----------
    levels
        Number of distinct values (>= 1).
    seed
        The seed.
    stream
        The purpose of the draws.

    Returns
    -------
    pl.Expr
        Int64 ``floor(u_i * levels)``.
    """
    return (uniform(seed, stream) * levels).floor().cast(pl.Int64)
