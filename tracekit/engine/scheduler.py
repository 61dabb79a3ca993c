"""The vLLM v1 scheduling step, reproduced decision for decision (vLLM 0.32.0 / 0.33.0).

Source of every rule: ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``,
``_preempt_request``, ``_update_after_schedule`` and ``update_from_output``;
``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots``. ``docs/engine.md`` maps
each rule to its source. Modelled configuration: one full-attention KV cache group, no
speculative decoding, no KV connector, no structured output, and fake model outputs (one sampled
token per scheduled request whose prefill is complete).

There is one ``schedule()`` (:meth:`VllmScheduler.schedule`); the variants override narrow hooks,
as vLLM's ``AsyncScheduler`` overrides narrow hooks of its ``Scheduler``:

- :class:`VllmPrefixCachingScheduler` (``enable_prefix_caching``): where blocks come from and go
  to (:meth:`~VllmScheduler._take_blocks`, :meth:`~VllmScheduler._after_running_allocation`,
  :meth:`~VllmScheduler._admit`, the release hooks);
- :mod:`tracekit.engine.async_scheduler` (``async_scheduling``): what scheduling a step does to
  a request (:meth:`~VllmScheduler._update_after_schedule`) and how outputs are applied; the
  running scan reads each request's ``num_output_placeholders`` (0 when synchronous), as vLLM's
  base ``Scheduler.schedule`` does.

:func:`make_vllm_scheduler` picks the class a configuration needs.

The one departure is deliberate: vLLM picks the victim itself, here the :class:`VictimHost` does
(docs/engine.md, "Victim hosts"). With :class:`~tracekit.engine.hosts.BuiltinHost` the
victims are exactly vLLM's.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from tracekit.engine.base import DecisionCallback, ScheduledStep, SchedulerBase
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import VictimHost
from tracekit.engine.prefix_cache import PrefixCachingBlockPool
from tracekit.engine.request import RequestStatus, SchedulerRequest
from tracekit.hosts.preemption_policy import builtin_victim

__all__ = ["VllmPrefixCachingScheduler", "VllmScheduler", "make_vllm_scheduler"]

# The built-in rule's PRIORITY key on the engine's requests, which call the arrival ``arrival_s``.
_PRIORITY_KEY = attrgetter("priority", "arrival_s")


class VllmScheduler(SchedulerBase):
    """vLLM's v1 ``Scheduler`` over request counts, with the victim chosen by a host.

    Prefix caching off and synchronous scheduling; subclasses change both through hooks.

    Parameters
    ----------
    config
        Engine configuration (``mode`` must be ``"vllm"``).
    host
        Chooses each preemption victim.
    on_decision
        Called with every :class:`DecisionRecord`, in order, as decisions are made.
    """

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        super().__init__(config, host, on_decision)
        self._watermark_blocks = config.watermark_blocks
        # 0.33 lets the running scan go on after a PRIORITY self-preemption; 0.32 stops it.
        self._continue_after_self_preemption = (
            config.vllm_version != "0.32" and config.scheduling_policy == "priority"
        )
        self._eager = type(self)._update_after_schedule in EAGER_UPDATES
        # Step-local state shared with _preempt (set by schedule()).
        self._scheduled: dict[str, int] = {}
        self._num_preempted = 0

    def has_requests(self) -> bool:
        """Whether the engine core steps again (vLLM ``SchedulerInterface.has_requests``).

        Synchronous runs step while a request is unfinished; the asynchronous scheduler also
        steps once more after a request finished (its id still has to reach the model runner).
        """
        return self.has_unfinished_requests()

    # ----------------------------------------------------------------------------- schedule
    def schedule(self, step: int, now: float) -> ScheduledStep:
        """Run one scheduling step (vLLM ``Scheduler.schedule``).

        Schedules the running queue in order, preempting victims chosen by the host when a
        request's KV allocation fails, then (only if nothing was preempted) admits waiting
        requests until one does not fit. Advances ``num_computed_tokens`` of every scheduled
        request, as vLLM does at the end of ``schedule()``.
        """
        config = self.config
        out = ScheduledStep(step, now)
        scheduled = out.num_scheduled_tokens
        self._scheduled = scheduled
        self._num_preempted = 0
        self._begin_step()
        pool = self.block_pool
        running = self.running
        waiting = self.waiting
        block_size = config.block_size
        max_model_len = config.max_model_len
        token_budget = config.max_num_batched_tokens
        # vLLM drops the long-prefill cap when only one request is present (nobody to starve).
        # (The waiting queue changes below only by a preemption, which skips admission, and by
        # the admissions, which count it down.)
        num_waiting = len(waiting)
        long_prefill = config.long_prefill_token_threshold if len(running) + num_waiting > 1 else 0
        after_running_allocation = self._after_running_allocation
        # _update_after_schedule done as each request is scheduled (the same arithmetic, one
        # loop less), until the step needs a victim: the host must see vLLM's state, where
        # nothing has advanced yet, so the advances so far are undone and the step finishes
        # with the separate pass (see _undo_eager).
        eager = self._eager
        is_async = self._is_async
        in_flight = self._eager_in_flight()
        sampled: list[SchedulerRequest] = []
        sample = sampled.append
        take_blocks = self._take_blocks
        prefill = decode = kv_read = 0
        # The last input position a one-token step may take (one slot for the sampled token).
        last_position = max_model_len - 1

        # First, the RUNNING requests, in queue order: the common decodes first, on a fast
        # path, while they last (one token that fits every cap, long_prefill >= 1 and the budget
        # > 0 being checked, in a block the request holds or in one free block more). The
        # general loop below takes over from the first request that is not one and would compute
        # the same for these: it caches up to `known` (<= end), and since computed + 1 == known
        # + placeholders the request samples, as a decode unless it has no output yet.
        req_index = 0
        num_running = len(running)  # (re-read after a preemption, which shortens it)
        if eager:
            for req_index, request in enumerate(running):  # noqa: B007 (read after the loop)
                if not token_budget:
                    break
                computed = request.num_computed_tokens
                num_prompt_tokens = request.num_prompt_tokens
                known = num_prompt_tokens + request.num_output_tokens
                placeholders = request.num_output_placeholders
                if placeholders and (
                    computed + 2 - placeholders >= num_prompt_tokens + request.max_tokens
                ):
                    continue  # (as in the general loop)
                if known + placeholders - computed != 1 or computed >= last_position:
                    break
                room = request.num_blocks * block_size - computed
                if not room:
                    if not pool.num_free_blocks:
                        break
                    take_blocks(request, 1)
                if after_running_allocation is not None and (
                    known // block_size > request.num_cached_blocks
                ):
                    after_running_allocation(request, known)
                request_id = request.request_id
                scheduled[request_id] = 1
                token_budget -= 1
                computed += 1
                request.num_computed_tokens = computed
                if is_async:
                    if in_flight is not None and placeholders:
                        in_flight[request_id] = placeholders
                    request.num_output_placeholders = placeholders + 1
                    sample(request)
                if computed > num_prompt_tokens:
                    decode += 1
                else:
                    prefill += 1
                kv_read += computed
            else:
                req_index = num_running
        while req_index < num_running and token_budget > 0:
            request = running[req_index]
            computed = request.num_computed_tokens
            num_prompt_tokens = request.num_prompt_tokens
            known = num_prompt_tokens + request.num_output_tokens
            num_new_tokens = known - computed
            # Async scheduling's output placeholders (always 0 when synchronous); vLLM reads
            # num_output_placeholders in the base scan too.
            placeholders = request.num_output_placeholders
            if placeholders:
                # vLLM: "Avoid scheduling an extra step when we are sure that the previous
                # step has reached request.max_tokens."
                if computed + 2 - placeholders >= num_prompt_tokens + request.max_tokens:
                    req_index += 1
                    continue
                num_new_tokens += placeholders
            if 0 < long_prefill < num_new_tokens:
                num_new_tokens = long_prefill
            if num_new_tokens > token_budget:
                num_new_tokens = token_budget
            # Keep the input position inside max_model_len (one slot for the sampled token).
            cap = max_model_len - computed - 1
            if num_new_tokens > cap:
                num_new_tokens = cap
            if num_new_tokens <= 0:
                # NOTE(vLLM): `continue`, not `break`: later requests may still be scheduled.
                req_index += 1
                continue

            # allocate_slots: blocks for computed + new tokens beyond those already held. A
            # running request never has the watermark applied (its status is RUNNING).
            end = computed + num_new_tokens
            num_blocks_to_allocate = -(-end // block_size) - request.num_blocks
            if num_blocks_to_allocate > pool.num_free_blocks:
                if eager:
                    self._undo_eager(scheduled, sampled)
                    eager = False
                allocated, req_index, refund = self._allocate_or_preempt(
                    request, num_new_tokens, req_index, step, now
                )
                num_running = len(running)
                token_budget += refund
                if not allocated:
                    if self._continue_after_self_preemption:
                        # The requester preempted itself and left `running`, so `req_index`
                        # already points at the next request.
                        continue
                    break
            elif num_blocks_to_allocate > 0:
                self._take_blocks(request, num_blocks_to_allocate)
            # allocate_slots caches the blocks the step fills, up to the known tokens (vLLM
            # ``num_tokens_to_cache = min(computed + new, request.num_tokens)``), when it fills
            # one not cached yet.
            if after_running_allocation is not None:
                if end > known:
                    end = known
                if end // block_size > request.num_cached_blocks:
                    after_running_allocation(request, end)
            scheduled[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            req_index += 1
            if eager:
                # (as _update_after_schedule; `known` counts no placeholder, `output` does)
                after = computed + num_new_tokens
                request.num_computed_tokens = after
                output = known - num_prompt_tokens + placeholders
                known += placeholders
                if is_async:
                    if placeholders and in_flight is not None:
                        in_flight[request.request_id] = placeholders
                    if after >= known:
                        request.num_output_placeholders = placeholders + 1
                        sampled.append(request)
                if num_new_tokens == 1 and output and after == known:
                    decode += 1
                else:
                    prefill += num_new_tokens
                kv_read += after

        # Next, the WAITING requests, but never in a step that preempted.
        if not self._num_preempted:
            max_num_seqs = config.max_num_seqs
            watermark_blocks = self._watermark_blocks
            admit = self._admit
            while token_budget > 0 and num_waiting > 0:
                if len(running) >= max_num_seqs:
                    break
                request = waiting.peek_request()
                # The watermark applies to WAITING/PREEMPTED requests once anything is running.
                num_new_tokens = admit(
                    request, token_budget, long_prefill, watermark_blocks if running else 0
                )
                if num_new_tokens <= 0:
                    break
                waiting.pop_request()
                num_waiting -= 1
                running.append(request)
                request.status = RequestStatus.RUNNING
                if request.first_scheduled_s is None:
                    request.first_scheduled_s = now
                scheduled[request.request_id] = num_new_tokens
                token_budget -= num_new_tokens
                if eager:
                    # (a waiting request has no placeholders)
                    after = request.num_computed_tokens + num_new_tokens
                    request.num_computed_tokens = after
                    output = request.num_output_tokens
                    known = request.num_prompt_tokens + output
                    if is_async and after >= known:
                        request.num_output_placeholders = 1
                        sampled.append(request)
                    if num_new_tokens == 1 and output and after == known:
                        decode += 1
                    else:
                        prefill += num_new_tokens
                    kv_read += after

        # Invariants of every step (vLLM asserts the first two after its loops).
        assert token_budget >= 0, "token budget overspent"
        assert len(running) <= config.max_num_seqs, "running queue over max_num_seqs"
        assert pool.num_free_blocks >= 0, "KV blocks overcommitted"

        # _update_after_schedule: computed tokens advance when the step is scheduled.
        if eager:
            out.num_prefill_tokens, out.num_decode_tokens = prefill, decode
            out.kv_tokens_read = kv_read
            self._after_update(out, sampled, in_flight)
        else:
            self._update_after_schedule(out)
        out.num_preemptions = self._num_preempted
        return out

    # ----------------------------------------------------------------------------- hooks
    def _begin_step(self) -> None:
        """Reset per-step state before the scan (hook)."""

    #: Whether the scan advances each request as it schedules it (``_update_after_schedule``'s
    #: arithmetic inline). Set per instance: off for a subclass with an ``_update_after_schedule``
    #: not in :data:`EAGER_UPDATES`.
    _eager = True
    #: Async scheduling's output placeholders are added as a step samples (the async mixin).
    _is_async = False

    def _eager_in_flight(self) -> dict[str, int] | None:
        """The ``in_flight_outputs`` map the eager advance fills (async only; hook)."""
        return None

    def _after_update(
        self, out: ScheduledStep, sampled: list[SchedulerRequest], in_flight: dict[str, int] | None
    ) -> None:
        """What ``_update_after_schedule`` does after advancing the requests (hook)."""

    def _undo_eager(self, scheduled: dict[str, int], sampled: list[SchedulerRequest]) -> None:
        """Take back the eager advances of the step so far (before the first victim decision).

        Each scheduled request's ``num_computed_tokens`` goes back by its tokens, and each
        placeholder the step added is removed; the step then ends with
        :meth:`_update_after_schedule`, as vLLM's does.
        """
        requests = self.requests
        for request_id, num_new_tokens in scheduled.items():
            requests[request_id].num_computed_tokens -= num_new_tokens
        for request in sampled:
            request.num_output_placeholders -= 1

    def _take_blocks(self, request: SchedulerRequest, num: int) -> None:
        """Give ``request`` ``num`` more blocks; the caller has checked they are free (hook)."""
        self.block_pool.num_free_blocks -= num
        request.num_blocks += num

    #: Called as ``(request, min(computed + new tokens, known tokens))`` after a running
    #: request's allocation succeeded and the step fills a block beyond its cached ones (prefix
    #: caching keys them: ``cache_full_blocks``); None: nothing to do.
    _after_running_allocation: Callable[[SchedulerRequest, int], None] | None = None

    def _admit(
        self, request: SchedulerRequest, token_budget: int, long_prefill: int, watermark: int
    ) -> int:
        """Allocate for the head of the waiting queue and return its new tokens (hook).

        Returns 0 when it does not fit (the waiting scan stops), having changed nothing. A
        waiting or preempted request has no computed tokens and holds no blocks; a preempted
        one recomputes its prompt and all its output so far.
        """
        need_full, num_blocks, num_new_tokens = self._admission_blocks(
            request, token_budget, long_prefill
        )
        pool = self.block_pool
        free = pool.num_free_blocks
        if admission_refused(need_full, num_blocks, watermark, free):
            return 0
        pool.num_free_blocks = free - num_blocks
        request.num_blocks = num_blocks
        return num_new_tokens

    def _admission_blocks(
        self, request: SchedulerRequest, token_budget: int, long_prefill: int
    ) -> tuple[int, int, int]:
        """What admitting ``request`` needs; it changes nothing.

        ``(blocks of the whole sequence, or 0 unless it must fit, blocks of this step, new
        tokens)``.
        """
        config = self.config
        block_size = config.block_size
        max_model_len = config.max_model_len
        num_tokens = request.num_prompt_tokens + request.num_output_tokens
        num_new_tokens = num_tokens
        if 0 < long_prefill < num_new_tokens:
            num_new_tokens = long_prefill
        if num_new_tokens > token_budget:
            num_new_tokens = token_budget
        need_full = 0
        if config.full_sequence_must_fit:
            need_full = -(-min(num_tokens, max_model_len) // block_size)
        return need_full, -(-min(num_new_tokens, max_model_len) // block_size), num_new_tokens

    def refused_blocks(
        self, request: SchedulerRequest, token_budget: int, long_prefill: int
    ) -> tuple[int, int, int] | None:
        """The blocks ``request``'s admission needs, as long as the pool only gives blocks away.

        ``(whole sequence, this step, cached blocks it hits)``: the attempt is refused when
        either of the first two, plus the watermark, is over the free blocks; with a hit, an
        eviction could change them. ``None`` when that is not known without changing anything
        (the calm leaps then step one at a time).
        """
        need_full, need, _ = self._admission_blocks(request, token_budget, long_prefill)
        return need_full, need, 0

    def _update_after_schedule(self, out: ScheduledStep) -> None:
        """Advance ``num_computed_tokens`` of the scheduled requests; split the step (hook).

        The split into prefill and decode tokens is
        :func:`~tracekit.engine.fake_model.split_tokens`. vLLM ``Scheduler._update_after_schedule``.
        """
        requests = self.requests
        # split_tokens inlined into the same loop (it reads each request after the advance).
        prefill = decode = kv_read = 0
        for request_id, num_new_tokens in out.num_scheduled_tokens.items():
            request = requests[request_id]
            computed = request.num_computed_tokens + num_new_tokens
            request.num_computed_tokens = computed
            output = request.num_output_tokens
            if num_new_tokens == 1 and output and computed == request.num_prompt_tokens + output:
                decode += 1
            else:
                prefill += num_new_tokens
            kv_read += computed
        out.num_prefill_tokens, out.num_decode_tokens, out.kv_tokens_read = prefill, decode, kv_read

    def _allocate_or_preempt(
        self,
        request: SchedulerRequest,
        num_new_tokens: int,
        req_index: int,
        step: int,
        now: float,
    ) -> tuple[bool, int, int]:
        """The ``while True`` loop of vLLM's running scan for one request that does not fit.

        Preempts one host-chosen victim per iteration until the allocation succeeds or the
        victim is ``request`` itself. Returns ``(allocated, req_index, tokens_refunded)``.
        """
        pool = self.block_pool
        block_size = self.config.block_size
        refunded = 0
        while True:
            need = -(-(request.num_computed_tokens + num_new_tokens) // block_size) - (
                request.num_blocks
            )
            if need <= pool.num_free_blocks:
                if need > 0:
                    self._take_blocks(request, need)
                return True, req_index, refunded
            victim = self._choose_victim(
                request.request_id, self._builtin_victim().request_id, step, now
            )
            req_index, refund = self._preempt(victim, req_index)
            refunded += refund
            if victim is request:
                return False, req_index, refunded

    def _builtin_victim(self) -> SchedulerRequest:
        """Return vLLM's victim: PRIORITY the max ``(priority, arrival_time)``, FCFS the tail."""
        return builtin_victim(self.running, self.policy, _PRIORITY_KEY)

    def _preempt(self, victim: SchedulerRequest, req_index: int) -> tuple[int, int]:
        """Preempt ``victim`` and put it back in the waiting queue (vLLM ``_preempt_request``).

        Precondition: ``victim`` is in ``self.running`` with status RUNNING. This removes it from
        the running queue (moving the scan cursor back if it sat before it), withdraws what it was
        scheduled this step (returning those tokens to the budget), frees all its blocks, resets
        ``num_computed_tokens`` to 0 (recompute, no swap), counts the preemption, and prepends it
        to the waiting queue. Returns ``(req_index, tokens_refunded)``.
        """
        running = self.running
        index = next(i for i, r in enumerate(running) if r is victim)
        del running[index]
        if index < req_index:
            req_index -= 1
        # Only possible when the victim sat before the cursor (PRIORITY or a policy's choice).
        refund = self._scheduled.pop(victim.request_id, 0)
        self._release_victim(victim)
        self.waiting.prepend_request(victim)
        self._num_preempted += 1
        return req_index, refund

    def check_consistency(self) -> None:
        """Check the block accounting and queue membership; raise ``AssertionError`` if broken.

        Costs a pass over all requests; tests call it after every step.
        """
        pool = self.block_pool
        held = sum(r.num_blocks for r in self.running)
        assert held == pool.num_used_blocks, f"running hold {held} blocks, pool says {pool}"
        for r in self.running:
            assert r.status == RequestStatus.RUNNING, r
            assert r.num_blocks * self.config.block_size >= r.num_computed_tokens, r
        for r in self.waiting:
            assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), r
            assert r.num_blocks == 0 and r.num_computed_tokens == 0, r
        assert len(self.running) + len(self.waiting) == len(self.requests)


class VllmPrefixCachingScheduler(VllmScheduler):
    """:class:`VllmScheduler` with vLLM's automatic prefix caching (``enable_prefix_caching``).

    The same step, with the block pool of :mod:`tracekit.engine.prefix_cache`: a waiting request
    first looks up its longest cached prefix (``KVCacheManager.get_computed_blocks``), its
    admission counts the hit blocks that sit in the free queue as allocations
    (``get_num_blocks_to_allocate``), it ``touch``es the hit and starts with
    ``num_computed_tokens`` at the hit; every successful allocation keys the request's newly full
    blocks (``cache_blocks``); a preempted or finished request frees its blocks in reverse order.
    Sources: docs/engine.md, "Prefix caching".
    """

    # The prefix-caching pool replaces the base's block counter (in __init__): a different
    # type, not a subtype, so the override is declared here once. Every method of this class
    # that reaches the pool overrides the one that used the counter.
    block_pool: PrefixCachingBlockPool  # type: ignore[assignment]

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        super().__init__(config, host, on_decision)
        self.block_pool = PrefixCachingBlockPool(config.num_blocks, config.block_size)
        # allocate_slots keys the blocks a running request's step fills.
        self._after_running_allocation = self.block_pool.cache_full_blocks
        #: req_id -> tokens hit in the prefix cache, for every admission of this step (in order).
        self.step_cache_hits: dict[str, int] = {}
        # The waiting head's last failed admission (it is tried every step until it fits):
        # (hit list, request, its tokens, token budget, long-prefill cap, pool ref_epoch) and
        # the blocks each check needed before the watermark. Valid while the pool returns the
        # very same hit list (its remembered lookup is clean: same blocks) and no reference
        # count moved (the evictable count is the same); the checks are then redone against
        # the free blocks of now.
        self._failed_key: tuple[object, ...] | None = None
        self._failed_need = (0, 0)

    def _begin_step(self) -> None:
        # A fresh dict only when the last step admitted anything: an empty one was never handed
        # out (record_cache_figures keeps only a non-empty map), so it can be reused.
        if self.step_cache_hits:
            self.step_cache_hits = {}

    def record_cache_figures(self, out: ScheduledStep) -> None:
        """:meth:`SchedulerBase.record_cache_figures`, reading this scheduler's own fields."""
        hits = self.step_cache_hits
        if hits:
            out.cache_hits = hits
        evicted = self.block_pool.num_evicted
        out.num_evicted_blocks = evicted - self._evicted_seen
        self._evicted_seen = evicted
        out.cache_recorded = True

    def _take_blocks(self, request: SchedulerRequest, num: int) -> None:
        self.block_pool.get_new_blocks(num, request.kv_blocks)
        request.num_blocks += num

    def _admit(
        self, request: SchedulerRequest, token_budget: int, long_prefill: int, watermark: int
    ) -> int:
        """Admission with a prefix-cache lookup (``get_computed_blocks``, ``allocate_slots``)."""
        pool = self.block_pool
        num_tokens = request.num_prompt_tokens + request.num_output_tokens
        # get_computed_blocks: the longest cached prefix, capped at num_tokens - 1.
        hit = pool.find_longest_cache_hit(request)
        memo = self._memoised_need(request, hit, token_budget, long_prefill)
        if memo is not None:
            need_full, need = memo
            free = pool.num_free_blocks
            if admission_refused(need_full, need, watermark, free):
                return 0
        config = self.config
        block_size = config.block_size
        max_model_len = config.max_model_len
        num_hit = len(hit)
        hit_tokens = num_hit * block_size
        num_new_tokens = num_tokens - hit_tokens
        if 0 < long_prefill < num_new_tokens:
            num_new_tokens = long_prefill
        if num_new_tokens > token_budget:
            num_new_tokens = token_budget
        evictable = pool.num_evictable(hit) if hit else 0
        free = pool.num_free_blocks
        computed_capped = hit_tokens if hit_tokens < max_model_len else max_model_len
        need_full = 0
        if config.full_sequence_must_fit:
            full = -(-min(num_tokens, max_model_len) // block_size) - num_hit
            need_full = (full if full > 0 else 0) + evictable
        need_slot = min(computed_capped + num_new_tokens, max_model_len)
        new_blocks = -(-need_slot // block_size) - num_hit
        if new_blocks < 0:
            new_blocks = 0
        need = new_blocks + evictable
        if admission_refused(need_full, need, watermark, free):
            epoch = pool.ref_epoch
            self._failed_key = (hit, request, num_tokens, token_budget, long_prefill, epoch)
            self._failed_need = (need_full, need)
            return 0
        self._failed_key = None
        blocks = request.kv_blocks
        pool.forget_lookup()
        if hit:
            pool.touch(hit)
            blocks.extend(hit)
        request.num_cached_blocks = num_hit
        if new_blocks:
            pool.get_new_blocks(new_blocks, blocks)
        request.num_blocks = len(blocks)
        to_cache = computed_capped + num_new_tokens
        pool.cache_full_blocks(request, to_cache if to_cache < num_tokens else num_tokens)
        request.num_computed_tokens = hit_tokens
        if request.num_cached_tokens < 0:
            request.num_cached_tokens = hit_tokens
        self.step_cache_hits[request.request_id] = hit_tokens
        return num_new_tokens

    def refused_blocks(
        self, request: SchedulerRequest, token_budget: int, long_prefill: int
    ) -> tuple[int, int, int] | None:
        """See :meth:`VllmScheduler.refused_blocks`; known when the last attempt refused it.

        That is the very lookup the last attempt refused (``_failed_key``); it holds while no
        cached block is evicted and no reference count changes (the hit, and what of it is
        evictable, stay).
        """
        hit = self.block_pool.find_longest_cache_hit(request)
        memo = self._memoised_need(request, hit, token_budget, long_prefill)
        return None if memo is None else (memo[0], memo[1], len(hit))

    def _memoised_need(
        self, request: SchedulerRequest, hit: list, token_budget: int, long_prefill: int
    ) -> tuple[int, int] | None:
        """The blocks the last refused attempt needed, if it was this very lookup.

        ``(whole sequence, this step)`` from ``_failed_need`` when ``_failed_key`` names the
        same hit, request, tokens, budget and long-prefill cap, at the same reference epoch;
        otherwise ``None``.
        """
        failed = self._failed_key
        if (
            failed is not None
            and failed[0] is hit
            and failed[1] is request
            and failed[2] == request.num_prompt_tokens + request.num_output_tokens
            and failed[3] == token_budget
            and failed[4] == long_prefill
            and failed[5] == self.block_pool.ref_epoch
        ):
            return self._failed_need
        return None

    def _release_victim(self, victim: SchedulerRequest) -> None:
        """Free the victim's blocks in reverse order (cached ones stay cached until reused)."""
        assert victim.status == RequestStatus.RUNNING, "only running requests can be preempted"
        self.block_pool.free_blocks(victim.kv_blocks)
        victim.kv_blocks = []
        victim.num_blocks = 0
        victim.num_cached_blocks = 0
        victim.recomputed_tokens += victim.num_computed_tokens
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.PREEMPTED
        victim.num_preemptions += 1

    def _release_finished(self, request: SchedulerRequest) -> None:
        """Free a finished request's blocks in reverse order (cached ones stay cached)."""
        self.block_pool.free_blocks(request.kv_blocks)
        request.kv_blocks = []
        request.num_blocks = 0

    def check_consistency(self) -> None:
        """Check block references and queues (see :meth:`PrefixCachingBlockPool.check`)."""
        pool = self.block_pool
        for r in self.running:
            assert r.status == RequestStatus.RUNNING, r
            assert r.num_blocks == len(r.kv_blocks), r
            assert r.num_blocks * self.config.block_size >= r.num_computed_tokens, r
        for r in self.waiting:
            assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), r
            assert r.num_blocks == 0 and r.num_computed_tokens == 0 and not r.kv_blocks, r
        assert len(self.running) + len(self.waiting) == len(self.requests)
        pool.check([r.kv_blocks for r in self.running])


#: The ``_update_after_schedule`` methods whose arithmetic the running scan can do inline.
EAGER_UPDATES: set[Callable[..., None]] = {VllmScheduler._update_after_schedule}


def admission_refused(need_full: int, need: int, watermark: int, free: int) -> bool:
    """Whether vLLM refuses an admission for blocks (``allocate_slots`` returning None).

    ``need_full``: the blocks of the whole sequence when it must fit (else 0); ``need``: the
    blocks of this step (with prefix caching, plus the hit's evictable blocks). Either, with
    the watermark, over the ``free`` blocks refuses it.
    """
    return need_full + watermark > free or need + watermark > free


def make_vllm_scheduler(
    config: EngineConfig, host: VictimHost, on_decision: DecisionCallback | None = None
) -> VllmScheduler:
    """The embedded vLLM scheduler ``config`` asks for (prefix caching and async on or off)."""
    if config.async_scheduling:
        # Imported here: async_scheduler.py builds on the classes of this module.
        from tracekit.engine.async_scheduler import (
            AsyncVllmPrefixCachingScheduler,
            AsyncVllmScheduler,
        )

        if config.enable_prefix_caching:
            return AsyncVllmPrefixCachingScheduler(config, host, on_decision)
        return AsyncVllmScheduler(config, host, on_decision)
    if config.enable_prefix_caching:
        return VllmPrefixCachingScheduler(config, host, on_decision)
    return VllmScheduler(config, host, on_decision)
