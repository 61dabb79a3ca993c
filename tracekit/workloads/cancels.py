"""Recorded client cancels: the optional ``cancel_after_s`` column of the canonical table.

A request with ``cancel_after_s = c`` is cancelled by its client ``c`` seconds after it was sent
(``d_k`` in :mod:`tracekit.workloads.client`) unless it has finished by then, whether or not it
has produced tokens; null means never. The engine aborts it the way vLLM does (finished as
aborted, KV freed). It combines with ``--ttft-timeout-s``: whichever deadline comes first and
still applies cancels the request. The delay is relative to sending, so windowing, rate
scaling, re-ordering and generated arrivals leave it unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import polars as pl

from tracekit.workloads._options import client_option_error
from tracekit.workloads.model import CANCEL_AFTER_S, Workload, canonical_columns

__all__ = ["apply_cancels"]


def apply_cancels(workload: Workload, cancels: Mapping[str, float] | None) -> Workload:
    """Return ``workload`` with recorded client cancels set by request id, or removed.

    Parameters
    ----------
    workload
        The workload.
    cancels
        ``{request_id: seconds after sending}``, each finite and > 0; requests not named are
        never cancelled (null). ``None`` removes the column.

    Returns
    -------
    Workload
        A new workload; ``options["num_cancels"]`` records how many requests carry a cancel.

    Raises
    ------
    tracekit.errors.ConfigError
        For an id the workload does not have, or a delay that is not a finite number > 0.

    Examples
    --------
    Cancelling ``r1`` 2.5 s after it is sent gives ``cancel_after_s`` = null, 2.5 for
    requests ``r0``, ``r1`` (``docs/workloads.md``, "Recorded cancels").
    """
    frame = workload.frame.drop(CANCEL_AFTER_S, strict=False)
    if cancels is None:
        options = {**workload.options, "num_cancels": 0}
        return dataclasses.replace(workload, frame=frame, options=options)
    known = set(frame.get_column("request_id").to_list())
    for request_id, delay in cancels.items():
        if request_id not in known:
            raise client_option_error(
                "cancel_after_s",
                request_id,
                expected="the id of a request of the workload",
                fix="name requests that the workload holds",
            )
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
            or delay <= 0
        ):
            raise client_option_error(
                f"cancel_after_s[{request_id!r}]",
                delay,
                expected="a finite number of seconds > 0",
                fix="give a delay > 0, or leave the request out",
            )
    table = pl.DataFrame(
        {"request_id": list(cancels), CANCEL_AFTER_S: [float(v) for v in cancels.values()]},
        schema={"request_id": pl.String, CANCEL_AFTER_S: pl.Float64},
    )
    frame = canonical_columns(frame.join(table, on="request_id", how="left", maintain_order="left"))
    options = {**workload.options, "num_cancels": len(cancels)}
    return dataclasses.replace(workload, frame=frame, options=options)
