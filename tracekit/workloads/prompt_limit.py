"""What to do with prompts the engine would refuse: keep them (rejected), drop them, or cap them.

An engine (vLLM, and the embedded engine like it) refuses on arrival every request whose prompt
is at least ``max_model_len`` tokens. Real traces have such requests. ``--oversize-prompts``
chooses what the loader does with them, once the engine's ``max_model_len`` is known:

- ``reject`` (default): keep them; the engine rejects them in every run of every strategy alike,
  and qualification leaves them out of both arms of every comparison and reports them once;
- ``drop``: remove them from the workload before any run;
- ``cap``: shorten each such prompt to its first ``max_model_len - 1`` tokens (the longest prompt
  the engine admits); the engine then stops its output at ``max_model_len`` tokens in all
  (``finished_length_capped``), as vLLM does.

The choice and the number of requests it touched are recorded in ``options["oversize_prompts"]``.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from tracekit.defaults import OVERSIZE_MODES, OversizeMode
from tracekit.errors import ConfigError
from tracekit.workloads.model import Workload

__all__ = ["OVERSIZE_MODES", "OversizeMode", "fit_prompts"]


def fit_prompts(workload: Workload, max_model_len: int, mode: str = "reject") -> Workload:
    """``workload`` with its prompts of at least ``max_model_len`` tokens treated as ``mode``.

    Parameters
    ----------
    workload
        The loaded workload.
    max_model_len
        The engine's limit (prompt plus output).
    mode
        ``reject``, ``drop`` or ``cap`` (module docstring).

    Returns
    -------
    Workload
        The same workload when nothing is oversize or ``mode`` is ``reject``; otherwise a new
        one whose ``options["oversize_prompts"]`` is ``{"mode", "requests", "max_model_len"}``.

    Raises
    ------
    tracekit.errors.ConfigError
        For an unknown mode, or when dropping would leave no request.

    Examples
    --------
    >>> from tracekit.workloads import load_workload
    >>> w = load_workload("tracekit/data/azure_conv_sample.csv", limit=3)
    >>> w.frame["prompt_tokens"].to_list()
    [374, 396, 879]
    >>> fit_prompts(w, 500, "cap").frame["prompt_tokens"].to_list()
    [374, 396, 499]
    >>> fit_prompts(w, 500, "drop").num_requests
    2
    """
    if mode not in OVERSIZE_MODES:
        raise ConfigError(
            f"--oversize-prompts {mode!r}: expected one of {', '.join(OVERSIZE_MODES)}"
        )
    oversize = pl.col("prompt_tokens") >= max_model_len
    count = int(workload.frame.select(oversize.sum()).item())
    if mode == "reject" or count == 0:
        return workload
    if mode == "drop":
        frame = workload.frame.filter(~oversize)
        if frame.height == 0:
            raise ConfigError(
                f"{workload.source}: --oversize-prompts drop leaves no request (every prompt is "
                f"at least --max-model-len {max_model_len} tokens); raise --max-model-len or "
                "pass --oversize-prompts cap"
            )
    else:
        frame = workload.frame.with_columns(
            pl.when(oversize)
            .then(pl.lit(max_model_len - 1, dtype=pl.Int64))
            .otherwise(pl.col("prompt_tokens"))
            .alias("prompt_tokens")
        )
    options = {
        **workload.options,
        "oversize_prompts": {"mode": mode, "requests": count, "max_model_len": max_model_len},
    }
    return dataclasses.replace(workload, frame=frame, options=options)
