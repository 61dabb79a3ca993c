"""Client request order: which request arrives when, with the arrival times themselves kept.

``--order recorded|ascending|descending|shuffled:<seed>`` re-orders a workload's requests by
prompt length (or by a seeded shuffle) and hands them the *same* sorted arrival times, in order:
the ``k``-th earliest arrival time goes to the ``k``-th request of the new order. The arrival
process (rate, bursts, gaps) is unchanged; only which request arrives at each instant changes.
This builds the seeds' adversarial "ascending-mixed" cell: short prompts first, long ones last,
at the original arrival times.

Requests move whole: id, lengths, ``max_tokens``, priority and prefix hashes go together. Ties
(equal prompt lengths) keep their current order, in both directions (a stable sort).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tracekit.workloads._options import MAX_SEED, client_option_error, suggest
from tracekit.workloads.model import Workload
from tracekit.workloads.seeded import Stream, uniform

__all__ = ["Order", "OrderKind", "apply_order", "parse_order"]


class OrderKind(StrEnum):
    """How requests are assigned to the arrival times."""

    RECORDED = "recorded"
    """The workload's own order."""
    ASCENDING = "ascending"
    """Shortest prompt first."""
    DESCENDING = "descending"
    """Longest prompt first."""
    SHUFFLED = "shuffled"
    """A seeded random permutation, written ``shuffled:<seed>``: the requests sorted by the
    key ``u_i`` (stream ``ORDER``), ``i`` being the request's current row (arrival position)."""


_SPELLINGS = ("recorded", "ascending", "descending", "shuffled:<seed>")


@dataclass(frozen=True, slots=True)
class Order:
    """A validated request order; build it with :func:`parse_order`.

    Parameters
    ----------
    kind
        The order.
    seed
        The shuffle's seed (stream ``ORDER``); ``None`` unless ``kind`` is ``shuffled``.
    """

    kind: OrderKind
    seed: int | None = None

    def describe(self) -> dict[str, Any]:
        """Return the order as recorded in ``Workload.options["order"]`` (JSON-compatible)."""
        return {"kind": self.kind.value, "seed": self.seed}


def parse_order(text: str | Order) -> Order:
    """Turn an ``--order`` value into a checked :class:`Order`.

    Parameters
    ----------
    text
        ``recorded``, ``ascending``, ``descending`` or ``shuffled:<integer seed>``
        (case-insensitive), or an :class:`Order`, returned unchanged.

    Returns
    -------
    Order
        The order.

    Raises
    ------
    tracekit.errors.ConfigError
        For an unknown order (with a "did you mean"), or ``shuffled`` without an integer seed.

    Examples
    --------
    >>> parse_order("shuffled:7")
    Order(kind=<OrderKind.SHUFFLED: 'shuffled'>, seed=7)
    """
    if isinstance(text, Order):
        return text
    spelled = str(text).strip().lower()
    name, colon, argument = spelled.partition(":")
    if name == "shuffled" and colon:
        try:
            seed: int | None = int(argument)
        except ValueError:
            seed = None
        if seed is None or not -MAX_SEED <= seed <= MAX_SEED:
            raise client_option_error(
                "--order shuffled:<seed>",
                argument,
                expected="an integer seed within +-(2**63 - 1)",
                fix="pass e.g. --order shuffled:0",
            ) from None
        return Order(OrderKind.SHUFFLED, seed)
    if name in ("recorded", "ascending", "descending") and not colon:
        return Order(OrderKind(name))
    near = "shuffled:<seed>" if name == "shuffled" else suggest(spelled, _SPELLINGS)
    raise client_option_error(
        "--order",
        text,
        expected="one of recorded, ascending, descending, shuffled:<seed>",
        did_you_mean=near,
        fix="pass --order ascending (or recorded, descending, shuffled:0)",
    )


def apply_order(workload: Workload, order: str | Order) -> Workload:
    """Return ``workload`` with its requests re-ordered onto its own arrival times.

    Parameters
    ----------
    workload
        The workload (its rows are sorted by arrival).
    order
        An ``--order`` value or an :class:`Order`.

    Returns
    -------
    Workload
        A new workload whose ``arrival_s`` column is the input's, row for row, and whose other
        columns are the requests in the new order; ``options["order"]`` records the order.

    Examples
    --------
    Prompts 30, 10, 20 arriving at 0, 1 and 5 s become 10, 20, 30 at 0, 1 and 5 s under
    ``ascending`` (see ``docs/workloads.md``, "Client models").
    """
    parsed = parse_order(order)
    frame = workload.frame
    times = frame.get_column("arrival_s")
    if parsed.kind is OrderKind.ASCENDING:
        frame = frame.sort("prompt_tokens", maintain_order=True)
    elif parsed.kind is OrderKind.DESCENDING:
        frame = frame.sort("prompt_tokens", descending=True, maintain_order=True)
    elif parsed.kind is OrderKind.SHUFFLED:
        assert parsed.seed is not None
        key = uniform(parsed.seed, Stream.ORDER)
        frame = frame.with_columns(_key=key).sort("_key", maintain_order=True).drop("_key")
    frame = frame.with_columns(times)
    options = {**workload.options, "order": parsed.describe()}
    return dataclasses.replace(workload, frame=frame, options=options)
