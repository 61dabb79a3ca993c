"""Token content for any workload: a synthetic shared prefix (``--shared-prefix-tokens``).

In the spirit of vLLM bench's ``prefix_repetition`` dataset: every request is put in one of
``groups`` prefix groups, drawn uniformly with a seeded stream (:mod:`tracekit.workloads.seeded`,
``Stream.PREFIX_GROUP``, so the groups depend only on ``(seed, request position)``), and the
first ``tokens`` prompt tokens of the requests of a group are the same. Prompt lengths are kept:
a prompt of at most ``tokens`` tokens is all prefix; the rest of a longer prompt is unique to its
request.

The prefix is one content id per request (``prefix_hash_ids = [group]``) over ``tokens`` tokens:
the workload records ``content_block_tokens = tokens`` in its options, and
:func:`tracekit.engine.request.engine_requests` passes it on, so the shared region is exactly
``min(prompt_tokens, tokens)`` tokens (:mod:`tracekit.engine.content`). A workload that already
carries content (Mooncake ``hash_ids``, a conversation log) is refused: the two would overlap.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from tracekit.workloads._options import check_count, check_seed, client_option_error
from tracekit.workloads.model import PREFIX_HASH_IDS, Workload
from tracekit.workloads.seeded import Stream, uniform_integers

__all__ = ["CONTENT_BLOCK_TOKENS", "with_shared_prefix"]

#: Workload option naming the tokens per ``prefix_hash_ids`` entry (512 when absent: Mooncake).
CONTENT_BLOCK_TOKENS = "content_block_tokens"


def with_shared_prefix(workload: Workload, tokens: int, groups: int, seed: int = 0) -> Workload:
    """``workload`` with a shared prompt prefix of ``tokens`` tokens in ``groups`` groups.

    Parameters
    ----------
    workload
        Any workload without content (no ``prefix_hash_ids``).
    tokens
        Prefix length in tokens (>= 1).
    groups
        Number of distinct prefixes (>= 1); each request draws one uniformly.
    seed
        Seed of the group draws (recorded as ``prefix_seed``).

    Returns
    -------
    Workload
        The same requests with ``prefix_hash_ids = [group]``; options gain
        ``shared_prefix_tokens``, ``prefix_groups``, ``prefix_seed`` and
        ``content_block_tokens``.

    Raises
    ------
    tracekit.errors.ConfigError
        One line naming the flag: a bad value, or a workload that already carries content.
    """
    check_count("--shared-prefix-tokens", tokens, allow_none=False)
    check_count("--prefix-groups", groups, allow_none=False)
    check_seed("--prefix-seed", seed)
    if PREFIX_HASH_IDS in workload.frame.columns:
        raise client_option_error(
            "--shared-prefix-tokens",
            tokens,
            expected=f"a workload without token content ({workload.source} carries "
            f"{PREFIX_HASH_IDS}: Mooncake hash_ids or a conversation log)",
            fix="drop --shared-prefix-tokens/--prefix-groups, or use a workload without content",
        )
    frame = workload.frame.with_columns(
        pl.concat_list(uniform_integers(groups, seed, Stream.PREFIX_GROUP)).alias(PREFIX_HASH_IDS)
    )
    options = {
        **workload.options,
        "shared_prefix_tokens": tokens,
        "prefix_groups": groups,
        "prefix_seed": seed,
        CONTENT_BLOCK_TOKENS: tokens,
    }
    return dataclasses.replace(workload, frame=frame, options=options)
