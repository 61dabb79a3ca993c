"""One-line errors for client-model options (``--arrivals``, ``--order``, ``--max-tokens``, ...).

These options describe the load generator, not a workload file, so they raise
:class:`~tracekit.errors.ConfigError` named after the command-line flag, the way the CLI's other
option errors read: ``--arrivals 'posson': expected ...; did you mean 'poisson'?; fix: ...``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence

from tracekit.defaults import MAX_SEED
from tracekit.errors import ConfigError

__all__ = [
    "MAX_SEED",
    "check_count",
    "check_seed",
    "check_seconds",
    "client_option_error",
    "suggest",
]


def suggest(value: str, choices: Sequence[str]) -> str | None:
    """Return the choice closest to ``value``, or ``None`` when nothing is close.

    Parameters
    ----------
    value
        What the user typed.
    choices
        The accepted spellings.

    Returns
    -------
    str or None
        The best match above ``difflib``'s default similarity cut-off (0.6).

    Examples
    --------
    >>> suggest("posson", ["recorded", "poisson", "constant"])
    'poisson'
    """
    matches = difflib.get_close_matches(value.strip().lower(), list(choices), n=1)
    return matches[0] if matches else None


def client_option_error(
    flag: str, value: object, *, expected: str, fix: str, did_you_mean: str | None = None
) -> ConfigError:
    """Build the one-line error for a bad client-model option.

    Parameters
    ----------
    flag
        The command-line flag, e.g. ``"--arrivals"`` (the library keyword is its snake-case
        twin).
    value
        The value given.
    expected
        What the option accepts.
    fix
        How to fix it.
    did_you_mean
        A close valid spelling, when one exists.

    Returns
    -------
    ConfigError
        The error, its message on one line.
    """
    hint = f" (did you mean {did_you_mean!r}?)" if did_you_mean else ""
    message = f"{flag} {value!r}: expected {expected}{hint}; fix: {fix}"
    return ConfigError(" ".join(message.split()))


def check_count(flag: str, value: object, *, allow_none: bool = True) -> int | None:
    """Return ``value`` if it is an integer >= 1 (not a bool), or ``None`` when allowed.

    Parameters
    ----------
    flag
        The flag, for the message.
    value
        The value given.
    allow_none
        Whether ``None`` (the option not given) is accepted.

    Returns
    -------
    int or None
        The value.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise client_option_error(
            flag, value, expected="an integer >= 1", fix=f"pass {flag} N with N >= 1"
        )
    return value


def check_seconds(flag: str, value: object, *, allow_zero: bool) -> float:
    """Return ``value`` as a float if it is a finite number of seconds, > 0 (or >= 0).

    Parameters
    ----------
    flag
        The flag, for the message.
    value
        The value given.
    allow_zero
        Whether 0 is accepted.

    Returns
    -------
    float
        The value.
    """
    bound = ">= 0" if allow_zero else "> 0"
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        raise client_option_error(
            flag,
            value,
            expected=f"a finite number of seconds {bound}",
            fix=f"pass {flag} S with S {bound}",
        )
    return float(value)  # type: ignore[arg-type]


def check_seed(flag: str, value: object) -> int:
    """Return ``value`` if it is an integer (not a bool), else raise.

    Parameters
    ----------
    flag
        The flag, for the message.
    value
        The value given.

    Returns
    -------
    int
        The seed.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not -MAX_SEED <= value <= MAX_SEED:
        raise client_option_error(
            flag, value, expected="an integer seed within +-(2**63 - 1)", fix=f"pass {flag} 0"
        )
    return value
