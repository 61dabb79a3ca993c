"""Requests: the frozen input record and the mutable state the scheduler keeps per request.

The state mirrors the fields of vLLM's ``vllm/v1/request.py`` ``Request`` that scheduling reads
(``num_prompt_tokens``, ``num_output_tokens``, ``num_computed_tokens``, ``num_preemptions``,
``priority``, ``arrival_time``, ``max_tokens``, ``status``) without the token ids themselves:
with fake model outputs only their counts matter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

from tracekit.engine.content import MOONCAKE_BLOCK_TOKENS

if TYPE_CHECKING:  # (prefix_cache imports this module)
    from tracekit.engine.prefix_cache import Block

__all__ = [
    "FINISHED_STATUSES",
    "EngineRequest",
    "RequestStatus",
    "REQUEST_FIELDS",
    "SchedulerRequest",
    "engine_requests",
    "request_fields",
]


class RequestStatus:
    """Request status names (vLLM ``RequestStatus`` members, lower-cased, plus ``rejected``)."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    #: Reached its target output length: the stand-in for an end-of-sequence token.
    FINISHED_STOPPED = "finished_stopped"
    #: Reached ``max_tokens`` or ``max_model_len`` (vLLM ``FINISHED_LENGTH_CAPPED``).
    FINISHED_LENGTH_CAPPED = "finished_length_capped"
    #: Never scheduled: the prompt does not fit in ``max_model_len`` (vLLM rejects it on input).
    REJECTED = "rejected"
    #: Cancelled by its client (vLLM ``FINISHED_ABORTED``): taken out of its queue, KV freed.
    #: Spelled as the trace's ``status`` column spells it.
    ABORTED = "aborted"


#: Statuses after which a request never runs again.
FINISHED_STATUSES = frozenset(
    {
        RequestStatus.FINISHED_STOPPED,
        RequestStatus.FINISHED_LENGTH_CAPPED,
        RequestStatus.REJECTED,
        RequestStatus.ABORTED,
    }
)


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request as the engine receives it.

    Parameters
    ----------
    request_id
        Unique id.
    arrival_s
        Arrival time in seconds from the start of the run (also vLLM's ``arrival_time``).
    prompt_tokens
        Prompt length, >= 1.
    output_tokens
        Target output length, >= 1: the request stops after this many tokens, as if the model
        sampled an end-of-sequence token.
    max_tokens
        The request's ``max_tokens`` sampling parameter, >= 1; it also stops generation.
    priority
        vLLM priority: lower values run first under the PRIORITY policy.
    content_ids
        Optional token content (:mod:`tracekit.engine.content`): one id per
        ``content_block_tokens`` prompt tokens, e.g. Mooncake ``hash_ids``. Requests whose
        content ids agree share those prompt tokens; every other token is unique to the request.
        Only prefix caching reads it.
    content_block_tokens
        Prompt tokens per content id (512 for Mooncake ``hash_ids``).
    cancel_after_s
        A recorded client cancel: the client aborts the request this many seconds (finite,
        > 0) after sending it unless it has finished; ``None``: never.
    ignore_eos
        The ``ignore_eos`` sampling parameter: the request ignores its end of sequence and runs
        to ``max_tokens`` (whatever ``output_tokens`` says); SGLang mode also admits it as
        SGLang does (its whole remaining output reserved).
    """

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    priority: int = 0
    content_ids: tuple[int, ...] = ()
    content_block_tokens: int = MOONCAKE_BLOCK_TOKENS
    cancel_after_s: float | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError(f"request_id must be a non-empty string; found {self.request_id!r}")
        where = f"request {self.request_id!r}"
        if (
            not isinstance(self.arrival_s, (int, float))
            or isinstance(self.arrival_s, bool)
            or not math.isfinite(self.arrival_s)
            or self.arrival_s < 0
        ):
            raise ValueError(
                f"{where}: arrival_s must be a finite number >= 0; found {self.arrival_s!r}"
            )
        for name in ("prompt_tokens", "output_tokens", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{where}: {name} must be an integer >= 1; found {value!r}")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ValueError(f"{where}: priority must be an integer; found {self.priority!r}")
        if not isinstance(self.content_ids, tuple) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in self.content_ids
        ):
            raise ValueError(
                f"{where}: content_ids must be a tuple of integers; found {self.content_ids!r}"
            )
        block = self.content_block_tokens
        if not isinstance(block, int) or isinstance(block, bool) or block < 1:
            raise ValueError(
                f"{where}: content_block_tokens must be an integer >= 1; found {block!r}"
            )
        cancel = self.cancel_after_s
        if cancel is not None and (
            not isinstance(cancel, (int, float))
            or isinstance(cancel, bool)
            or not math.isfinite(cancel)
            or cancel <= 0
        ):
            raise ValueError(
                f"{where}: cancel_after_s must be a finite number > 0; found {cancel!r}"
            )
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"{where}: ignore_eos must be a bool; found {self.ignore_eos!r}")


#: The six fields every request has (a workload's, the engine's, a real-engine scenario's):
#: :class:`EngineRequest`'s first six, the order of the drivers' request rows too.
REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(EngineRequest)[:6])
_get_request_fields = attrgetter(*REQUEST_FIELDS)


def request_fields(request: object) -> tuple[str, float, int, int, int, int]:
    """The :data:`REQUEST_FIELDS` of ``request`` (any object that has them), in that order."""
    values: tuple[str, float, int, int, int, int] = _get_request_fields(request)
    return values


class SchedulerRequest:
    """The scheduler's mutable view of one request.

    ``num_computed_tokens`` advances when a step is scheduled (vLLM
    ``Scheduler._update_after_schedule``); ``num_output_tokens`` when that step's output is
    applied (``Scheduler.update_from_output``). ``num_blocks`` counts the KV blocks it holds.
    """

    __slots__ = (
        "arrival_s",
        "block_hashes",
        "cancel_after_s",
        "client_arrival_s",
        "content_block_tokens",
        "content_ids",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "ignore_eos",
        "index",
        "kv_blocks",
        "max_tokens",
        "num_blocks",
        "num_cached_blocks",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_output_placeholders",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "num_stale_output_tokens",
        "priority",
        "recomputed_tokens",
        "request_id",
        "status",
        "stop_output_tokens",
        "stop_status",
        "target_output_tokens",
    )

    def __init__(self, request: EngineRequest, index: int) -> None:
        self.request_id = request.request_id
        self.arrival_s = float(request.arrival_s)
        # When the client meant to send it; ``arrival_s`` becomes the time it was sent (later
        # under --max-concurrency, the difference being its client queue time).
        self.client_arrival_s = self.arrival_s
        self.cancel_after_s = request.cancel_after_s
        self.priority = request.priority
        self.num_prompt_tokens = request.prompt_tokens
        self.target_output_tokens = request.output_tokens
        self.max_tokens = request.max_tokens
        self.ignore_eos = request.ignore_eos
        # The output count at which generation stops and the status it stops with: they depend
        # on max_model_len, so the scheduler sets them on add (fake_model.stop_rule).
        self.stop_output_tokens = 0
        self.stop_status = ""
        # Position in the input; breaks no scheduling tie, only orders records.
        self.index = index
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_blocks = 0
        self.num_preemptions = 0
        # Sum over preemptions of the computed tokens thrown away (to be computed again).
        self.recomputed_tokens = 0
        self.status = RequestStatus.WAITING
        # Prefix caching only (tracekit.engine.prefix_cache): the content model, the block keys
        # computed so far (vLLM ``Request.block_hashes``), the blocks held in order, how many of
        # them are cached (vLLM ``num_cached_block``), and the prefix-cache hit of the first
        # schedule (vLLM ``Request.num_cached_tokens``; -1 until scheduled).
        self.content_ids = request.content_ids
        self.content_block_tokens = request.content_block_tokens
        self.block_hashes: list[object] = []
        self.kv_blocks: list[Block] = []
        self.num_cached_blocks = 0
        self.num_cached_tokens = -1
        # Async scheduling only (tracekit.engine.async_scheduler), vLLM's ``Request`` fields of
        # the same names: tokens sampled by steps still in flight, and in-flight tokens that a
        # preemption since made stale. On the request (not in a table of the scheduler) so the
        # hot loops read them directly.
        self.num_output_placeholders = 0
        self.num_stale_output_tokens = 0
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.finish_s: float | None = None

    @property
    def num_tokens(self) -> int:
        """Prompt plus output so far (vLLM ``Request.num_tokens``)."""
        return self.num_prompt_tokens + self.num_output_tokens

    def __repr__(self) -> str:
        return (
            f"SchedulerRequest({self.request_id!r}, status={self.status}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens}, "
            f"blocks={self.num_blocks}, preemptions={self.num_preemptions})"
        )


class _WorkloadRequest(Protocol):
    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    priority: int


class _Workload(Protocol):
    def iter_requests(self) -> Iterable[_WorkloadRequest]: ...


def engine_requests(workload: _Workload) -> list[EngineRequest]:
    """A workload's requests (``tracekit.workloads.Workload``) as engine inputs, in its order.

    ``prefix_hash_ids`` become the requests' ``content_ids``, ``content_block_tokens`` tokens
    an id: the workload option of that name (a synthetic shared prefix sets it to the prefix
    length), else 512 (Mooncake ``hash_ids``).
    A ``cancel_after_s`` column becomes each request's recorded client cancel, an
    ``ignore_eos`` column its sampling parameter of that name.
    """
    options = getattr(workload, "options", None) or {}
    block = int(options.get("content_block_tokens") or MOONCAKE_BLOCK_TOKENS)
    return [
        EngineRequest(
            *request_fields(r),
            tuple(getattr(r, "prefix_hash_ids", None) or ()),
            block,
            cancel_after_s=getattr(r, "cancel_after_s", None),
            ignore_eos=bool(getattr(r, "ignore_eos", False)),
        )
        for r in workload.iter_requests()
    ]
