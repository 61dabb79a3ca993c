"""vLLM's built-in preemption victim: the one copy of the rule.

FCFS preempts the tail of the running queue (vLLM's ``running.pop()``); PRIORITY preempts the
first request with the largest ``(priority, arrival_time)``, that is the least important request
(a larger priority value is less important), the latest arrival among equals, and the first in
queue order among exact ties (``max()`` keeps the first maximal element, as vLLM's does); see
docs/contracts.md, "The built-in victim".

Everything that needs the rule imports it from here: the production policy (its own default
victim), tracekit's typed and legacy hosts, its embedded engine and its hooks on the real vLLM
scheduler. It lives in ``bidkv`` because ``bidkv`` imports nothing from ``tracekit``, and it is
standard library only, as the hosts are. tracekit's replay evaluates the same rule on polars
columns; a test holds the two equal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, TypeVar

__all__ = ["PRIORITY_KEY", "builtin_victim"]

T = TypeVar("T")

#: The PRIORITY key of a request with vLLM's attribute names.
PRIORITY_KEY: Callable[[Any], Any] = attrgetter("priority", "arrival_time")


def builtin_victim(
    running: Sequence[T], scheduling_policy: object, priority_key: Callable[[T], Any] = PRIORITY_KEY
) -> T:
    """Return vLLM's victim among ``running``.

    Parameters
    ----------
    running
        The running requests, in queue order; non-empty.
    scheduling_policy
        ``"priority"`` selects the PRIORITY rule; anything else is FCFS.
    priority_key
        Reads ``(priority, arrival_time)`` from a request; :data:`PRIORITY_KEY` reads those
        attributes (the embedded engine, whose requests call the arrival ``arrival_s``, passes
        its own).

    Returns
    -------
    object
        One of ``running``: PRIORITY the first with the largest key, FCFS the last.

    Raises
    ------
    ValueError, IndexError
        If ``running`` is empty (under PRIORITY and FCFS respectively); callers check first.
    """
    if scheduling_policy == "priority":
        return max(running, key=priority_key)
    return running[-1]
