"""One-line workload errors and checks of option values, shared by every loader."""

from __future__ import annotations

import math
from pathlib import Path

from tracekit.errors import WorkloadError

__all__ = [
    "check_int_option",
    "check_positive_option",
    "describe_value",
    "first_line",
    "option_error",
    "workload_error",
]

_MAX_FOUND_CHARS = 60


def workload_error(
    path: str | Path,
    *,
    expected: str,
    found: str,
    fix: str,
    where: str | None = None,
    field: str | None = None,
) -> WorkloadError:
    """Build the one-line :class:`~tracekit.errors.WorkloadError` every loader raises.

    Parameters
    ----------
    path
        The workload file.
    expected
        What the loader needed, e.g. ``"an integer > 0"``.
    found
        What it found instead, already formatted (see :func:`describe_value`).
    fix
        How the user can fix the input.
    where
        The record's location, e.g. ``"line 7"``, when one record is at fault.
    field
        The source field (column or JSON key) at fault, under its source name.

    Returns
    -------
    WorkloadError
        The error, with its message on a single line.
    """
    location = ", ".join(
        part for part in (where, f"field {field!r}" if field else None) if part is not None
    )
    head = f"{path}: {location}: " if location else f"{path}: "
    message = f"{head}expected {expected}, found {found}; fix: {fix}"
    # Messages end up in a one-line CLI error: never let a value smuggle in a line break.
    return WorkloadError(" ".join(message.split()))


def describe_value(value: object) -> str:
    """Format a source value for the ``found`` part of an error message.

    Parameters
    ----------
    value
        The raw value (a CSV cell string, a JSON value, or ``None`` for a missing one).

    Returns
    -------
    str
        ``"an empty value"`` for ``None`` or blank strings, otherwise the value's ``repr``,
        shortened to a readable length.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return "an empty value"
    text = repr(value)
    if len(text) > _MAX_FOUND_CHARS:
        text = text[: _MAX_FOUND_CHARS - 3] + "..."
    return text


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def option_error(
    path: str | Path, name: str, value: object, *, expected: str, fix: str
) -> WorkloadError:
    """Build the error for a bad option value (a loader or :func:`load_workload` argument).

    Parameters
    ----------
    path
        The workload file the option was given for.
    name
        The option's name.
    value
        The value given.
    expected
        What the option accepts.
    fix
        How to fix it.

    Returns
    -------
    WorkloadError
        The one-line error.
    """
    found = "no value (the option was not given)" if value is None else describe_value(value)
    return workload_error(path, field=name, expected=expected, found=found, fix=fix)


def check_int_option(
    path: str | Path,
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """Return ``value`` if it is an integer (not a bool) in ``[minimum, maximum]``, else raise.

    Parameters
    ----------
    path
        The workload file, for the message.
    name
        The option's name.
    value
        The value given.
    minimum
        Smallest allowed value, or ``None``.
    maximum
        Largest allowed value, or ``None``.

    Returns
    -------
    int
        The value.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        bound = "" if minimum is None else f" >= {minimum}"
        bound += "" if maximum is None else f"{' and' if bound else ''} <= {maximum}"
        raise option_error(
            path, name, value, expected=f"an integer{bound}", fix=f"pass {name}=<integer{bound}>"
        )
    return value


def check_positive_option(path: str | Path, name: str, value: object) -> float:
    """Return ``value`` as float if it is a finite real number > 0 (not a bool), else raise.

    Parameters
    ----------
    path
        The workload file, for the message.
    name
        The option's name.
    value
        The value given.

    Returns
    -------
    float
        The value.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise option_error(
            path, name, value, expected="a finite number > 0", fix=f"pass {name}=<number > 0>"
        )
    return float(value)
