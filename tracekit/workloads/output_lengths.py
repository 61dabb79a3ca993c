"""Output lengths: what the model produced (``output_tokens``) against what the client allowed.

A workload has two length columns. ``output_tokens`` is the request's *real* output length: the
engine generates that many tokens and then stops, as if the model had sampled an end-of-sequence
token. ``max_tokens`` is the client's cap, the ``max_tokens`` sampling parameter: it is what a
victim policy or an admission rule can see before the request finishes, and it also stops
generation. A table may carry its own ``max_tokens`` column (see ``docs/workloads.md``); the
trace formats that record only one length set both columns to it.

:func:`apply_max_tokens` is the rule form, ``--max-tokens N``: every request is sent with
``max_tokens = N`` and so stops at ``min(output_tokens, N)``. It replaces any recorded caps.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from tracekit.workloads._options import check_count
from tracekit.workloads.model import Workload

__all__ = ["apply_max_tokens"]


def apply_max_tokens(workload: Workload, max_tokens: int | None) -> Workload:
    """Return ``workload`` as sent by a client whose cap is ``max_tokens``.

    Parameters
    ----------
    workload
        The workload.
    max_tokens
        ``N`` >= 1: every request's ``max_tokens`` becomes ``N`` and its ``output_tokens``
        becomes ``min(output_tokens, N)`` (a longer request is cut at the cap, as the engine
        would cut it). ``None`` keeps the workload's own ``max_tokens`` column.

    Returns
    -------
    Workload
        A new workload. ``options["client_max_tokens"]`` records ``N`` (or ``None``) and
        ``options["num_capped"]`` how many requests the cap shortened (0 for ``None``).

    Raises
    ------
    tracekit.errors.ConfigError
        When ``max_tokens`` is not an integer >= 1.

    Examples
    --------
    Outputs 5, 300 and 4000 tokens under ``--max-tokens 2048`` become 5, 300 and 2048, each with
    ``max_tokens`` 2048 (``docs/workloads.md``, "Client models").
    """
    cap = check_count("--max-tokens", max_tokens)
    if cap is None:
        options = {**workload.options, "client_max_tokens": None, "num_capped": 0}
        return dataclasses.replace(workload, options=options)
    output = pl.col("output_tokens")
    num_capped = workload.frame.select((output > cap).sum()).item()
    frame = workload.frame.with_columns(
        output_tokens=pl.min_horizontal(output, pl.lit(cap, dtype=pl.Int64)),
        max_tokens=pl.lit(cap, dtype=pl.Int64),
    )
    options = {**workload.options, "client_max_tokens": cap, "num_capped": int(num_capped)}
    return dataclasses.replace(workload, frame=frame, options=options)
