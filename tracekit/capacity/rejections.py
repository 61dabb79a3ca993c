"""Requests the engine will refuse, found before a run so that no command drops them silently.

The embedded engine (like vLLM) refuses on arrival every request whose prompt is at least
``max_model_len`` tokens (vLLM's input check; in SGLang mode at least ``min(max_model_len,
pool) - 6``, SGLang's: ``EngineConfig.max_prompt_tokens``); such requests finish as
``rejected`` without being scheduled. In vLLM mode ``max_model_len`` itself never exceeds the
usable KV cache (``EngineConfig`` checks it), so every request that is admitted fits the cache.
Which requests are refused depends only on their prompt lengths, so it is counted from the
workload table before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from tracekit.engine.config import EngineConfig
from tracekit.workloads.model import Workload

__all__ = ["Rejections", "find_rejections", "rejection_warnings"]


@dataclass(frozen=True, slots=True)
class Rejections:
    """How many of a workload's requests an engine configuration refuses on arrival.

    Attributes
    ----------
    source
        The workload's file, for the message.
    num_requests, num_rejected
        Requests in the workload, and how many are refused.
    longest_prompt
        The longest refused prompt (0 when none is).
    max_model_len, block_size
        The configuration that refuses them.
    margin
        ``max_model_len`` less the longest prompt accepted: 1 (vLLM), 7 in SGLang mode when
        the model length binds.
    """

    source: str
    num_requests: int
    num_rejected: int
    longest_prompt: int
    max_model_len: int
    block_size: int
    margin: int = 1

    def warning(self) -> str | None:
        """The one-line warning to print on stderr, or ``None`` when nothing is refused.

        It names the count, the longest prompt and the options that admit them: a
        ``--max-model-len`` above the longest prompt, with ``--num-blocks`` large enough to hold
        that many tokens (``max_model_len`` may not exceed the KV cache).
        """
        if not self.num_rejected:
            return None
        need_len = self.longest_prompt + max(self.margin, 1)
        need_blocks = -(-need_len // self.block_size) + 1  # plus vLLM's null block
        limit = self.max_model_len - self.margin + 1
        return (
            f"warning: {self.num_rejected} of {self.num_requests} requests of {self.source} "
            f"are rejected (prompt >= {limit} tokens, --max-model-len {self.max_model_len}; "
            f"longest {self.longest_prompt} tokens) and finish unserved; to run them pass "
            f"--max-model-len {need_len} --num-blocks {need_blocks} (or more), or drop them "
            f"with --limit/--window"
        )


def find_rejections(workload: Workload, config: EngineConfig) -> Rejections:
    """Count the requests of ``workload`` that ``config`` refuses on arrival.

    Parameters
    ----------
    workload
        The workload, as it will be sent.
    config
        The engine configuration.

    Returns
    -------
    Rejections
        The count and the longest refused prompt.

    Examples
    --------
    >>> from tracekit.workloads import load_workload
    >>> w = load_workload("tracekit/data/azure_conv_sample.csv", limit=50)
    >>> r = find_rejections(w, EngineConfig(num_blocks=65, max_model_len=1024))
    >>> (r.num_rejected, r.longest_prompt)
    (10, 4085)
    """
    refused = pl.col("prompt_tokens") > config.max_prompt_tokens
    count, longest = workload.frame.select(
        refused.sum().alias("count"), pl.col("prompt_tokens").filter(refused).max().alias("longest")
    ).row(0)
    return Rejections(
        source=str(workload.source),
        num_requests=workload.num_requests,
        num_rejected=int(count),
        longest_prompt=int(longest or 0),
        max_model_len=config.max_model_len,
        block_size=config.block_size,
        margin=config.max_model_len - config.max_prompt_tokens,
    )


def rejection_warnings(workloads: Iterable[Workload], configs: Iterable[EngineConfig]) -> list[str]:
    """The distinct warnings of every (workload, configuration) pair (a sweep's matrix).

    A workload at several rates refuses the same requests, so each message appears once.
    """
    configs = list(configs)
    seen: dict[str, None] = {}
    for workload in workloads:
        for config in configs:
            message = find_rejections(workload, config).warning()
            if message is not None:
                seen.setdefault(message, None)
    return list(seen)
