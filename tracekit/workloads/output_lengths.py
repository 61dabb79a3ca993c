"""Output lengths: what the model produced (``output_tokens``) against what the client allowed.

A workload has two length columns. ``output_tokens`` is the request's *real* output length: the
engine generates that many tokens and then stops, as if the model had sampled an end-of-sequence
token. ``max_tokens`` is the client's cap, the ``max_tokens`` sampling parameter: it is what a
victim policy or an admission rule can see before the request finishes, and it also stops
generation. A table may carry its own ``max_tokens`` column (see ``docs/workloads.md``); the
trace formats that record only one length set both columns to it.

:func:`apply_max_tokens` is the rule form, ``--max-tokens N``: every request is sent with
``max_tokens = N`` and so stops at ``min(output_tokens, N)``. It replaces any recorded caps.

:func:`apply_ignore_eos` is ``--ignore-eos`` (``vllm bench serve --ignore-eos``; SGLang's
``bench_serving`` sends it unless ``--disable-ignore-eos``): every request is sent with the
``ignore_eos`` sampling parameter, so it ignores the end of sequence and runs to its
``max_tokens`` (``output_tokens`` becomes ``max_tokens``). SGLang's admission also changes for
such requests (docs/engine.md, "ignore_eos in SGLang mode").
"""

from __future__ import annotations

import dataclasses

import polars as pl

from tracekit.workloads._options import check_count
from tracekit.workloads.model import IGNORE_EOS, Workload, canonical_columns

__all__ = ["apply_ignore_eos", "apply_max_tokens"]


def apply_max_tokens(workload: Workload, max_tokens: int | None) -> Workload:
    """Return ``workload`` as sent by a client whose cap is ``max_tokens``.

    Parameters
    ----------
    workload
        The workload.
    max_tokens
        ``N`` >= 1: every request's ``max_tokens`` becomes ``N`` and its ``output_tokens``
        becomes ``min(output_tokens, N)`` (a longer request is cut at the cap, as the engine
        would cut it), or ``N`` for an ``ignore_eos`` request. ``None`` keeps the workload's
        own ``max_tokens`` column.

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
    capped = pl.min_horizontal(output, pl.lit(cap, dtype=pl.Int64))
    if IGNORE_EOS in workload.frame.columns:
        # A request that ignores the end of sequence runs to its (new) cap.
        capped = pl.when(pl.col(IGNORE_EOS)).then(pl.lit(cap, dtype=pl.Int64)).otherwise(capped)
    frame = workload.frame.with_columns(
        output_tokens=capped,
        max_tokens=pl.lit(cap, dtype=pl.Int64),
    )
    options = {**workload.options, "client_max_tokens": cap, "num_capped": int(num_capped)}
    return dataclasses.replace(workload, frame=frame, options=options)


def apply_ignore_eos(workload: Workload) -> Workload:
    """Return ``workload`` as sent by a client that sets ``ignore_eos`` on every request.

    Every request's ``output_tokens`` becomes its ``max_tokens`` (it ignores the end of sequence)
    and the ``ignore_eos`` column is true. ``options["ignore_eos"]`` records it and
    ``options["num_lengthened"]`` how many requests it made longer.

    Examples
    --------
    A request with 5 output tokens and ``max_tokens`` 64 generates 64 tokens.
    """
    output, cap = pl.col("output_tokens"), pl.col("max_tokens")
    lengthened = workload.frame.select((output < cap).sum()).item()
    frame = canonical_columns(
        workload.frame.with_columns(output_tokens=cap, **{IGNORE_EOS: pl.lit(True)})
    )
    options = {**workload.options, "ignore_eos": True, "num_lengthened": int(lengthened)}
    return dataclasses.replace(workload, frame=frame, options=options)
