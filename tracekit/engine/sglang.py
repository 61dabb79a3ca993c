"""SGLang mode: prefill-first batches and decode retraction (a behavioural model, not a replica).

What is modelled, after SGLang's ``managers/scheduler.py`` (``get_next_batch_to_run``,
``update_running_batch``), ``managers/schedule_policy.py`` (``PrefillAdder``) and
``managers/schedule_batch.py`` (``check_decode_mem``, ``retract_decode``):

- A step is either a prefill batch or a decode batch. A prefill batch is formed whenever a waiting
  request can be admitted; otherwise every running request decodes one token.
- Admission reserves future decode tokens: ``rem_total = free tokens - sum over running of
  min(max_new - generated, 4096) * new_token_ratio``; a waiting request is admitted while
  ``input + min(max_new, 4096) * new_token_ratio <= rem_total``, the step's prefill token budget
  (``max_num_batched_tokens``) lasts and fewer than ``max_num_seqs`` requests run. A prompt
  longer than what is left of the budget is chunked (one chunked request at a time).
- Before a decode step, when the blocks for one more token of every running request are not free,
  requests are retracted one at a time. SGLang sorts the batch by ``(len(output), -len(prompt))``
  descending and pops from the end (fewest outputs first, longest prompt among ties); that is the
  built-in victim here. At least one request is retracted once retraction starts and at least one
  is always kept. Retracted requests free all their KV, go to the back of the waiting queue and
  later prefill prompt plus output again.
- ``new_token_ratio`` starts at 0.7, decays linearly to 0.098 over 600 decode steps without
  retraction, and after a retraction is re-estimated as
  ``min(1, (sum(generated) + 20 * kept) / sum(max_new))`` over the kept requests.

How the policy is consulted: every retraction is one victim decision. The host sees the running
batch in running order, ``requesting_request_id`` is ``""`` (SGLang has no requesting request)
and ``builtin_victim_id`` is SGLang's choice above, so a controller that falls back (abstention,
failure) applies SGLang's rule. Not modelled: the radix cache, mixed chunked prefill, overlap
scheduling, priority-based retraction, page sizes other than ``block_size``.
"""

from __future__ import annotations

from tracekit.engine.base import DecisionCallback, ScheduledStep, SchedulerBase
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import VictimHost
from tracekit.engine.request import RequestState, RequestStatus

__all__ = [
    "CLIP_MAX_NEW_TOKENS",
    "INIT_NEW_TOKEN_RATIO",
    "MIN_NEW_TOKEN_RATIO",
    "NEW_TOKEN_RATIO_DECAY_STEPS",
    "RETRACT_DECODE_STEPS",
    "SglangScheduler",
    "retraction_order",
]

#: SGLang ``--init-new-token-ratio`` default.
INIT_NEW_TOKEN_RATIO = 0.7
#: ``init_new_token_ratio * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` (0.14).
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` default.
NEW_TOKEN_RATIO_DECAY_STEPS = 600
#: ``global_config.retract_decode_steps``: decode steps a kept request is assumed to still run.
RETRACT_DECODE_STEPS = 20
#: ``CLIP_MAX_NEW_TOKENS``: cap on the reserved output tokens of one request.
CLIP_MAX_NEW_TOKENS = 4096


def retraction_order(running: list[RequestState]) -> list[RequestState]:
    """SGLang's retraction order: sorted by ``(outputs, -prompt)`` descending; pop from the end.

    Returns a new list; the last element is the first victim.
    """
    return sorted(running, key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens), reverse=True)


class SglangScheduler(SchedulerBase):
    """SGLang-style scheduling over request counts, with retraction victims chosen by a host.

    Parameters
    ----------
    config
        Engine configuration (``mode`` must be ``"sglang"``).
    host
        Chooses each retraction victim.
    on_decision
        Called with every :class:`DecisionRecord`, in order.
    """

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        super().__init__(config, host, on_decision)
        # A request part-way through a chunked prefill: neither waiting nor decoding.
        self.chunked: RequestState | None = None
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self._ratio_decay = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / (
            NEW_TOKEN_RATIO_DECAY_STEPS
        )

    def has_unfinished_requests(self) -> bool:
        """Whether any request is running, chunked or waiting."""
        return bool(self.running) or self.chunked is not None or len(self.waiting) > 0

    def _forget(self, request: RequestState) -> None:
        """An aborted request part-way through its chunked prefill stops being the chunk."""
        if self.chunked is request:
            self.chunked = None

    # ----------------------------------------------------------------------------- schedule
    def schedule(self, step: int, now: float) -> ScheduledStep:
        """One step: a prefill batch if anything can be admitted, else a decode batch."""
        out = ScheduledStep(step, now)
        if not self._schedule_prefill(out, now):
            self._schedule_decode(out, step, now)
        assert sum(out.num_scheduled_tokens.values()) <= self.config.max_num_batched_tokens or (
            out.num_prefill_tokens == 0
        ), "prefill budget overspent"
        assert len(self.running) <= self.config.max_num_seqs, "running batch over max_num_seqs"
        assert self.block_pool.num_free_blocks >= 0, "KV blocks overcommitted"
        return out

    def _reserved_tokens(self, request: RequestState) -> float:
        remaining = request.max_tokens - request.num_output_tokens
        return min(remaining, CLIP_MAX_NEW_TOKENS) * self.new_token_ratio

    def _schedule_prefill(self, out: ScheduledStep, now: float) -> bool:
        config = self.config
        pool = self.block_pool
        block_size = config.block_size
        budget = config.max_num_batched_tokens
        rem_total = pool.num_free_blocks * block_size - sum(
            self._reserved_tokens(r) for r in self.running
        )
        # Blocks left once every admitted input is complete: admission never overcommits KV.
        free_blocks = pool.num_free_blocks
        batch: list[tuple[RequestState, int]] = []
        chunked = self.chunked
        if chunked is not None:
            # The chunked request continues first (SGLang runs no decode while one exists).
            n = min(chunked.num_tokens - chunked.num_computed_tokens, budget)
            batch.append((chunked, n))
            budget -= n
            free_blocks -= -(-chunked.num_tokens // block_size) - chunked.num_blocks
        num_running = len(self.running) + len(batch)
        waiting = self.waiting
        while budget > 0 and len(waiting) > 0 and num_running < config.max_num_seqs:
            request = waiting.peek_request()
            input_tokens = request.num_tokens
            total = input_tokens + min(request.max_tokens, CLIP_MAX_NEW_TOKENS) * (
                self.new_token_ratio
            )
            input_blocks = -(-input_tokens // block_size)
            # Guard, not SGLang: an idle engine admits its head request whatever the
            # reservation says, or a request reserving more than the whole cache would wait
            # forever.
            idle = num_running == 0
            if input_blocks > free_blocks or (total > rem_total and not idle):
                break
            n = min(input_tokens, budget)
            if n < input_tokens and chunked is not None:
                break  # one chunked request at a time
            waiting.pop_request()
            batch.append((request, n))
            request.status = RequestStatus.RUNNING
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now
            rem_total -= total
            free_blocks -= input_blocks
            budget -= n
            num_running += 1
            if n < input_tokens:
                chunked = request
        if not batch:
            return False
        self.chunked = None
        for request, n in batch:
            computed = request.num_computed_tokens + n
            need = -(-computed // block_size) - request.num_blocks
            pool.allocate(need)
            request.num_blocks += need
            request.num_computed_tokens = computed
            out.num_scheduled_tokens[request.request_id] = n
            out.num_prefill_tokens += n
            out.kv_tokens_read += computed
            if computed < request.num_tokens:
                self.chunked = request
            else:
                self.running.append(request)
        return True

    def _schedule_decode(self, out: ScheduledStep, step: int, now: float) -> None:
        running = self.running
        if not running:
            return
        pool = self.block_pool
        if self._decode_blocks(running) > pool.num_free_blocks:
            self._retract(step, now)
            running = self.running
            self.new_token_ratio = min(
                1.0,
                (sum(r.num_output_tokens for r in running) + RETRACT_DECODE_STEPS * len(running))
                / sum(r.max_tokens for r in running),
            )
        else:
            self.new_token_ratio = max(
                self.new_token_ratio - self._ratio_decay, MIN_NEW_TOKEN_RATIO
            )
        block_size = self.config.block_size
        for request in running:
            computed = request.num_computed_tokens + 1
            need = -(-computed // block_size) - request.num_blocks
            if need > 0:
                pool.allocate(need)
                request.num_blocks += need
            request.num_computed_tokens = computed
            out.num_scheduled_tokens[request.request_id] = 1
            out.num_decode_tokens += 1
            out.kv_tokens_read += computed

    def _decode_blocks(self, requests: list[RequestState]) -> int:
        block_size = self.config.block_size
        return sum(
            max(-(-(r.num_computed_tokens + 1) // block_size) - r.num_blocks, 0) for r in requests
        )

    def _retract(self, step: int, now: float) -> None:
        """SGLang ``retract_decode`` with each pop decided by the host."""
        order = retraction_order(self.running)
        first = True
        while first or self._decode_blocks(self.running) > self.block_pool.num_free_blocks:
            if len(self.running) == 1:
                break
            first = False
            builtin = order[-1]
            victim = self._choose_victim("", builtin.request_id, step, now)
            order.remove(victim)
            self._retract_request(victim)

    def _retract_request(self, victim: RequestState) -> None:
        """Retract ``victim``: precondition, it is in ``self.running`` and RUNNING.

        Frees all its blocks without caching them, resets its computed tokens and appends it to
        the waiting queue for a fresh prefill of prompt plus output.
        """
        self.running.remove(victim)
        self._release_victim(victim)
        self.waiting.add_request(victim)

    def check_consistency(self) -> None:
        """Check block accounting and queue membership; raise ``AssertionError`` if broken."""
        holders = list(self.running) + ([self.chunked] if self.chunked is not None else [])
        held = sum(r.num_blocks for r in holders)
        assert held == self.block_pool.num_used_blocks, "block accounting drifted"
        for r in self.waiting:
            assert r.num_blocks == 0 and r.num_computed_tokens == 0, r
        assert len(holders) + len(self.waiting) == len(self.requests)
