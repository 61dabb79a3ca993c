"""The parameter types of every command: bounded numbers, closed choices, renamed options.

docs/index.md, "Conventions": every numeric option has a range, and a value outside it (NaN
and infinities included) is a usage error naming the option and the range, before any work; a
value of the wrong type is refused, never rounded or coerced (``--limit 1.5``, ``--jobs 2.0``).
An unknown value of a closed set gets "did you mean". An option renamed for the one dialect
keeps its old spelling as a hidden alias that warns on stderr.

The ranges are the library's where it has one (:data:`tracekit.engine.config.ENGINE_RANGES`),
and otherwise the bounds of a trace (:mod:`tracekit.defaults`): counts up to 2**40, times
up to 1e10 s, seeds within +-(2**63 - 1) (what an int64 column holds).
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from tracekit.defaults import MAX_COUNT, MAX_FINITE, MAX_SEED, MAX_TIME_S

__all__ = [
    "JOBS",
    "MAX_RATE",
    "RATE",
    "SEED",
    "Choice",
    "Count",
    "Number",
    "closest",
    "count",
    "deprecated_alias",
    "jobs_option",
    "seconds",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Largest request rate (requests per second) an option takes: a million, beyond any server
#: (the workload's own bound, which ``--arrivals``' rates and burstiness share).
MAX_RATE = MAX_FINITE
#: Largest number of worker processes.
MAX_JOBS = 4096


class Count(click.IntRange):
    """A whole number in ``[low, high]`` (``high`` defaults to 2**40, the largest count)."""

    name = "integer"

    def __init__(self, low: int = 1, high: int = MAX_COUNT) -> None:
        super().__init__(low, high)


class Number(click.FloatRange):
    """A finite number in a range: NaN and infinities are refused, whatever the bounds."""

    name = "float"

    def __init__(
        self,
        low: float | None,
        high: float,
        *,
        low_open: bool = False,
        high_open: bool = False,
        infinite: bool = False,
    ) -> None:
        super().__init__(low, high, min_open=low_open, max_open=high_open)
        self.infinite = infinite

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse ``value`` as a float, refuse it unless finite, then check the range.

        With ``infinite``, ``inf`` (a documented value, such as vLLM's ``--request-rate inf``)
        is taken as it is.
        """
        number = click.FLOAT.convert(value, param, ctx)
        if self.infinite and number == math.inf:
            return number
        if not math.isfinite(number):
            allowed = " (inf is allowed)" if self.infinite else ""
            self.fail(f"{value!r} is not a finite number{allowed}", param, ctx)
        return super().convert(number, param, ctx)


def count(low: int = 1, high: int = MAX_COUNT) -> Count:
    """:class:`Count` from ``low`` to ``high``."""
    return Count(low, high)


def seconds(*, zero: bool = True, high: float = MAX_TIME_S) -> Number:
    """A duration in seconds: >= 0 (``zero``) or > 0, up to ``high``."""
    return Number(0.0, high, low_open=not zero)


#: Seeds of every seeded choice.
SEED = Count(-MAX_SEED, MAX_SEED)
#: A request rate in requests per second; ``inf`` sends every request at 0, as vLLM's
#: ``--request-rate inf`` does (docs/workloads.md, "Client models").
RATE = Number(0.0, MAX_RATE, low_open=True, infinite=True)
#: Worker processes.
JOBS = Count(1, MAX_JOBS)


def closest(value: str, choices: Sequence[str]) -> str | None:
    """The choice closest to ``value`` (difflib's ratio of 0.6 or more), or None."""
    found = difflib.get_close_matches(value, list(choices), n=1)
    return found[0] if found else None


class Choice(click.Choice):  # type: ignore[type-arg]
    """:class:`click.Choice` whose error adds "did you mean" for a near miss."""

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        """Click's message, with the closest choice when there is one."""
        message = super().get_invalid_choice_message(value, ctx).rstrip(".")
        near = closest(str(value), [str(c) for c in self.choices])
        return f"{message} (did you mean {near!r}?)." if near else f"{message}."


def jobs_option(what: str, **kwargs: Any) -> Callable[[F], F]:
    """``--jobs`` (parameter ``jobs``): worker processes; default the number of cores.

    One default everywhere (docs/index.md, "Conventions"): None, which the library turns into
    :func:`tracekit.sweep.executors.default_jobs`. Results are identical for any number.
    ``what`` says what the workers do.
    """
    kwargs.setdefault(
        "help",
        f"Worker processes {what} (default: the number of cores; 1 runs in this process). "
        "Results are identical for any number.",
    )
    return click.option("--jobs", type=JOBS, default=None, **kwargs)


def deprecated_alias(
    old: str,
    new: str,
    dest: str,
    *,
    convert: Callable[[Any], Any] | None = None,
    unit: str | None = None,
    **kwargs: Any,
) -> Callable[[F], F]:
    """A hidden option ``old`` that stands for option ``new`` (parameter ``dest``) and warns.

    For an option renamed to the dialect every command speaks: scripts keep working, and stderr
    says what to write instead. ``kwargs`` are the option's (its type and callback, so the old
    spelling is checked as the new one is). Both spellings with different values are refused.
    An old spelling in another unit (``--slo-ttft-ms``) gives ``convert`` (old value to new)
    and ``unit``, the new unit named in the warning. Use it like ``click.option``, below
    ``click.command``.
    """
    hidden = f"deprecated_{dest}"

    def decorator(function: F) -> F:
        @functools.wraps(function)
        def command(*args: Any, **options: Any) -> Any:
            value = options.pop(hidden)
            if value is not None:
                given = value
                if convert is not None:
                    value = convert(value)
                meaning = "same meaning" if unit is None else f"in {unit}: {new} {value:g}"
                click.echo(f"warning: {old} is deprecated; use {new} ({meaning})", err=True)
                ctx = click.get_current_context()
                explicit = ctx.get_parameter_source(dest) is click.core.ParameterSource.COMMANDLINE
                if explicit and options[dest] != value:
                    raise click.UsageError(
                        f"{old} {given} contradicts {new} {options[dest]}; pass {new} only"
                    )
                options[dest] = value
            return function(*args, **options)

        option = click.option(old, hidden, hidden=True, default=None, **kwargs)
        return option(command)  # type: ignore[return-value]

    return decorator
