"""The fake model: when a request stops, and which scheduled tokens are prefill or decode.

One copy of these rules, used by both embedded engine modes, by the driver of the real vLLM
scheduler (``tracekit.vllm.driver``) and by ``tracekit fidelity``. Standard library only: the
driver runs inside the vLLM environment.

**Sampling.** A scheduled request whose input (prompt plus output so far) is complete after the
step samples one token; a partial (chunked) prefill samples nothing.

**Stop rule.** A request stops at the first sampled token that reaches ``max_tokens`` or
``max_model_len`` (status ``finished_length_capped``, vLLM ``check_stop``) or, failing those, its
target output length (``finished_stopped``: the stand-in for an end-of-sequence token). With one
token per step both limits are output counts known when the request arrives, so
:func:`stop_rule` returns the output count at which it stops and the status it stops with.

**Prefill or decode.** After ``_update_after_schedule`` has advanced ``num_computed_tokens``, a
scheduled request counts as one decode token when it was scheduled exactly one token, already
has output, and that token completes its input; every other scheduled token is prefill (a first
prefill, a chunk, or the recomputation after a preemption).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from tracekit.engine.request import RequestStatus

if TYPE_CHECKING:
    from tracekit.engine.request import SchedulerRequest

__all__ = ["ScheduledRequest", "apply_fake_outputs", "mark_arrived", "split_tokens", "stop_rule"]


class ScheduledRequest(Protocol):
    """What :func:`split_tokens` reads: an engine ``SchedulerRequest`` or a vLLM ``Request``."""

    @property
    def num_computed_tokens(self) -> int:
        """Tokens whose KV is computed (advanced when a step is scheduled)."""
        ...

    @property
    def num_output_tokens(self) -> int:
        """Tokens sampled so far."""
        ...

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt length."""
        ...


def stop_rule(
    prompt_tokens: int, output_tokens: int, max_tokens: int, max_model_len: int
) -> tuple[int, str]:
    """The output count at which a request stops, and its status then.

    Parameters
    ----------
    prompt_tokens, output_tokens, max_tokens
        The request's prompt length, target output length and ``max_tokens``.
    max_model_len
        The engine's; ``prompt_tokens < max_model_len`` (longer prompts are rejected on input).

    Returns
    -------
    tuple[int, str]
        ``(num_output_tokens, status)``: ``finished_length_capped`` when ``max_tokens`` or
        ``max_model_len`` is reached no later than the target, else ``finished_stopped``.
    """
    # The sampled token that makes prompt + output reach max_model_len caps the request.
    cap = min(max_tokens, max_model_len - prompt_tokens)
    if cap <= output_tokens:
        return cap, RequestStatus.FINISHED_LENGTH_CAPPED
    return output_tokens, RequestStatus.FINISHED_STOPPED


def mark_arrived(request: SchedulerRequest, max_model_len: int) -> None:
    """Set a newly added request waiting, with the output count and status it will stop at.

    An ``ignore_eos`` request has no end of sequence: it runs to its ``max_tokens``.
    """
    request.status = RequestStatus.WAITING
    target = request.max_tokens if request.ignore_eos else request.target_output_tokens
    request.stop_output_tokens, request.stop_status = stop_rule(
        request.num_prompt_tokens, target, request.max_tokens, max_model_len
    )


def split_tokens(
    num_scheduled_tokens: Mapping[str, int],
    requests: Mapping[str, ScheduledRequest],
    in_flight_outputs: Mapping[str, int] | None = None,
) -> tuple[int, int, int]:
    """``(prefill tokens, decode tokens, KV tokens read)`` of a step, after it was scheduled.

    Reads each scheduled request after ``num_computed_tokens`` advanced; the KV tokens read are
    its computed tokens then (context plus the scheduled tokens). Under async scheduling,
    ``in_flight_outputs`` gives each request's tokens sampled by steps still in flight before
    this one (vLLM ``num_output_placeholders`` before the step): they count as output already,
    so a decode of a token not yet returned is still a decode.
    """
    prefill = decode = kv_read = 0
    for request_id, num_new_tokens in num_scheduled_tokens.items():
        request = requests[request_id]
        computed = request.num_computed_tokens
        output = request.num_output_tokens
        if in_flight_outputs is not None:
            output += in_flight_outputs.get(request_id, 0)
        # Prompt plus output, not num_tokens: a property call on every decode of the hot loop.
        if num_new_tokens == 1 and output and computed == request.num_prompt_tokens + output:
            decode += 1
        else:
            prefill += num_new_tokens
        kv_read += computed
    return prefill, decode, kv_read


def apply_fake_outputs(
    num_scheduled_tokens: Mapping[str, int],
    requests: dict[str, SchedulerRequest],
    release: Callable[[SchedulerRequest], None],
    end_s: float,
) -> list[SchedulerRequest]:
    """Sample one token for every scheduled request whose input is complete; apply the stops.

    Each request carries ``stop_output_tokens`` and ``stop_status`` from :func:`stop_rule` (set
    when it was added). A finished request's blocks go back through ``release`` (the scheduler's
    block pool decides how) and it leaves ``requests``. Returns the finished requests in
    scheduling order (the caller removes them from its queues).
    """
    finished: list[SchedulerRequest] = []
    for request_id in num_scheduled_tokens:
        request = requests[request_id]
        output = request.num_output_tokens
        if request.num_computed_tokens < request.num_prompt_tokens + output:
            continue
        output += 1
        request.num_output_tokens = output
        if output == 1:
            request.first_token_s = end_s
        if output < request.stop_output_tokens:
            continue
        request.status = request.stop_status
        request.finish_s = end_s
        release(request)
        del requests[request_id]
        finished.append(request)
    return finished
