"""vLLM's ``AsyncScheduler``: schedule step k+1 before the outputs of step k are known.

Sources (vLLM 0.32.0 and 0.33.0): ``vllm/v1/core/sched/async_scheduler.py``
(``AsyncScheduler._update_after_schedule``; 0.32 also ``_update_request_with_output``),
``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule`` running scan,
``_update_after_schedule``, ``_preempt_request``, ``update_from_output``,
``_update_request_with_output``, ``has_finished_requests``) and ``vllm/v1/engine/core.py``
(``EngineCore.step_with_batch_queue``, which :func:`tracekit.engine.engine.run_engine` follows
when ``async_scheduling`` is on). ``docs/engine.md``, "Async scheduling", lists every rule.

The state vLLM keeps per request lives on :class:`~tracekit.engine.request.SchedulerRequest` under
vLLM's names: ``num_output_placeholders`` (tokens sampled by steps still in flight) and
``num_stale_output_tokens`` (in-flight tokens of a request preempted since). As in vLLM,
``num_computed_tokens`` counts the placeholders. vLLM's third counter, ``num_in_flight_tokens``
(tokens scheduled by steps whose output has not been applied), is only read when a request is
preempted, so it is not kept up to date at every step: :meth:`_AsyncMixin.num_in_flight_tokens`
sums the request's tokens over the steps in flight, which is its value by definition.
"""

from __future__ import annotations

from tracekit.engine.base import DecisionCallback, ScheduledStep
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import VictimHost
from tracekit.engine.request import FINISHED_STATUSES, RequestStatus, SchedulerRequest
from tracekit.engine.scheduler import (
    EAGER_UPDATES,
    VllmPrefixCachingScheduler,
    VllmScheduler,
    admission_refused,
)

__all__ = ["AsyncVllmPrefixCachingScheduler", "AsyncVllmScheduler"]


class _AsyncMixin(VllmScheduler):
    """The hooks vLLM's ``AsyncScheduler`` changes, over either block pool.

    Listed first among the bases of each concrete class, so its hooks come before those of
    :class:`VllmScheduler` or :class:`VllmPrefixCachingScheduler` (whose ``super()`` it calls).
    """

    #: run_engine drives this scheduler as ``step_with_batch_queue`` does.
    async_scheduling = True
    #: The running scan adds output placeholders when it advances requests inline.
    _is_async = True
    #: Fill ``ScheduledStep.in_flight_outputs`` (read by a clock that times a step by its
    #: requests' make-up); the engine turns it off for a clock that reads only the totals.
    keep_in_flight_outputs = True

    def _init_async(self) -> None:
        # The steps scheduled whose output is not applied yet: step -> (its scheduled tokens,
        # the requests it samples a token for, i.e. not a prefill chunk, in scheduling order).
        self._in_flight_steps: dict[int, tuple[dict[str, int], list[SchedulerRequest]]] = {}
        # Requests with stale output tokens still to come (num_stale_output_tokens > 0).
        self._stale: set[SchedulerRequest] = set()
        # vLLM ``finished_req_ids``: finished since the last schedule() (has_finished_requests).
        self._finished_since_schedule = False
        # Caching of the tokens an output confirms: 0.32 AsyncScheduler caches up to
        # computed - placeholders whenever the request was RUNNING; 0.33 Scheduler caches up
        # to computed - in-flight for non-stale outputs of a RUNNING request that had
        # placeholders. With one sampled token and no drafts both give the same count.
        self._caching = bool(self.config.enable_prefix_caching)

    def num_in_flight_tokens(self, request: SchedulerRequest) -> int:
        """The request's tokens in steps whose output is pending (vLLM ``num_in_flight_tokens``)."""
        request_id = request.request_id
        return sum(scheduled.get(request_id, 0) for scheduled, _ in self._in_flight_steps.values())

    def _forget(self, request: SchedulerRequest) -> None:
        """An aborted request's stale tokens go with it (its in-flight output is skipped)."""
        self._stale.discard(request)
        super()._forget(request)

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones not yet reported by a schedule() (vLLM)."""
        if self.running:  # (the usual answer, asked every step, without a call)
            return True
        return self.has_unfinished_requests() or self._finished_since_schedule

    def _update_after_schedule(self, out: ScheduledStep) -> None:
        """Advance computed and in-flight tokens; a step that samples adds a placeholder.

        Also splits the step's tokens as :func:`~tracekit.engine.fake_model.split_tokens` does
        with ``in_flight_outputs`` (the placeholders before the step), in the same loop.
        """
        requests = self.requests
        scheduled = out.num_scheduled_tokens
        sampled: list[SchedulerRequest] = []
        in_flight: dict[str, int] | None = {} if self.keep_in_flight_outputs else None
        prefill = decode = kv_read = 0
        for request_id, num_new_tokens in scheduled.items():
            request = requests[request_id]
            computed = request.num_computed_tokens + num_new_tokens
            request.num_computed_tokens = computed
            # Output so far, the tokens still in flight counted (placeholders before the step).
            placeholders = request.num_output_placeholders
            if placeholders and in_flight is not None:
                in_flight[request_id] = placeholders
            output = request.num_output_tokens + placeholders
            known = request.num_prompt_tokens + output
            # is_prefill_chunk is decided before the placeholder of this step is added.
            if computed >= known:
                request.num_output_placeholders = placeholders + 1
                sampled.append(request)
            if num_new_tokens == 1 and output and computed == known:
                decode += 1
            else:
                prefill += num_new_tokens
            kv_read += computed
        out.num_prefill_tokens, out.num_decode_tokens, out.kv_tokens_read = prefill, decode, kv_read
        self._after_update(out, sampled, in_flight)

    def _eager_in_flight(self) -> dict[str, int] | None:
        return {} if self.keep_in_flight_outputs else None

    def _after_update(
        self, out: ScheduledStep, sampled: list[SchedulerRequest], in_flight: dict[str, int] | None
    ) -> None:
        """Put the step in flight (with the requests it samples) once its requests advanced."""
        # (The num_in_flight_tokens of every scheduled request grow by its tokens here.)
        self._in_flight_steps[out.step] = (out.num_scheduled_tokens, sampled)
        out.in_flight_outputs = in_flight
        self._finished_since_schedule = False
        # This step's output is applied a step late, after the next schedule() has reset the
        # hit map: record its prefix-cache figures now (trace v2).
        self.record_cache_figures(out)

    def _release_victim(self, victim: SchedulerRequest) -> None:
        """``_preempt_request``: in-flight output becomes stale; placeholders are dropped."""
        stale = self.num_in_flight_tokens(victim)
        victim.num_stale_output_tokens = stale
        if stale:
            self._stale.add(victim)
        else:
            self._stale.discard(victim)
        victim.num_output_placeholders = 0
        super()._release_victim(victim)

    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[SchedulerRequest]:
        """Apply step ``out``'s fake outputs (vLLM ``update_from_output`` under async).

        Every request the step sampled for gets one token, even one preempted since (a stale
        output: appended, but its counters are not touched); the token may finish it, from the
        running or the waiting queue. A request that finished earlier is skipped.
        """
        requests = self.requests
        # Applying the output takes the step's tokens out of num_in_flight_tokens.
        scheduled, sampled = self._in_flight_steps.pop(out.step)
        # Outputs of requests preempted since the step was scheduled are stale
        # (num_stale_output_tokens > 0 before it drops by the step's tokens).
        stale: set[SchedulerRequest] | tuple[()] = ()
        if self._stale:
            stale = {r for r in self._stale if r.request_id in scheduled}
            for request in stale:
                request.num_stale_output_tokens -= scheduled[request.request_id]
                if request.num_stale_output_tokens <= 0:
                    self._stale.discard(request)
        # Keying the confirmed blocks: the prefix-caching pool's cache_full_blocks.
        cache_blocks = self._after_running_allocation if self._caching else None
        block_size = self.config.block_size
        running_status = RequestStatus.RUNNING
        finished_statuses = FINISHED_STATUSES
        finished: list[SchedulerRequest] = []
        from_waiting = False
        for request in sampled:
            was_running = request.status == running_status
            if not was_running and request.status in finished_statuses:
                continue  # finished while this step was in flight
            output = request.num_output_tokens + 1
            request.num_output_tokens = output
            if output == 1:
                request.first_token_s = end_s
            placeholders = request.num_output_placeholders
            if not (stale and request in stale):
                placeholders -= 1
                request.num_output_placeholders = placeholders
            # A stale output belongs to a request preempted since, so it is never RUNNING here.
            if cache_blocks is not None and was_running:
                confirmed = request.num_computed_tokens - placeholders
                if confirmed // block_size > request.num_cached_blocks:
                    cache_blocks(request, confirmed)
            if output < request.stop_output_tokens:
                continue
            request.status = request.stop_status
            request.finish_s = end_s
            # A request a stale token finished holds no blocks: they went at its preemption.
            self._release_finished(request)
            self._stale.discard(request)
            del requests[request.request_id]
            finished.append(request)
            from_waiting = from_waiting or not was_running
        if finished:
            self._finished_since_schedule = True
            self.running = [r for r in self.running if r.status == running_status]
            if from_waiting:
                self._drop_finished_waiting(finished)
        return finished

    # ----------------------------------------------------------------------------- calm leaps
    def calm_decodes(self, in_flight_step: int, limit: int | None = None) -> int:
        """How many next steps (at most ``limit``) are calm decodes of the running batch.

        A calm decode is a step in which every running request takes the running scan's fast
        path for one decode token while its last token is in flight, and nothing else happens:
        the step in flight (``in_flight_step``, the only one) sampled exactly the running batch,
        each request has one placeholder and ``num_computed_tokens == prompt + outputs`` (the
        steady state), its first token is back, nothing is stale, no admission is tried (nothing
        waits, or the batch is at ``max_num_seqs``), and the budget holds the batch. The run
        ends before a step whose output would finish a request (``stop_output_tokens``), whose
        scan would skip one for reaching ``max_tokens`` or stop at ``max_model_len``, or whose
        blocks the free pool cannot give in full. Such steps differ only in counters, block
        takes and the prefix cache's keying of full blocks, which :meth:`apply_calm_decodes`
        makes in the same order. 0 when the next step is not calm.
        """
        running = self.running
        steps = self._in_flight_steps
        config = self.config
        n = len(running)
        if (
            not n
            or self._stale
            or not self._eager
            or len(steps) != 1
            or in_flight_step not in steps
            or config.max_num_batched_tokens < n
            or steps[in_flight_step][1] != running  # (identity: one comparison in C)
        ):
            return 0
        pool = self.block_pool
        free = pool.num_free_blocks
        # The head of the waiting queue is tried after every scan (budget left, a seat free);
        # a calm step refuses it. The pool only gives blocks away in calm steps, so a head
        # refused with the blocks free now stays refused. Its cache hit, if it has one, must
        # stay too: no cached block may be evicted then (the blocks the batch keys hold its
        # own new tokens, which no other request's lookup can hit).
        waiting = self.waiting
        budget = config.max_num_batched_tokens - n
        attempts = bool(waiting) and n < config.max_num_seqs and budget > 0
        hit_blocks = 0  # (the refused head's cached hit)
        if attempts:
            head = waiting.peek_request()
            long_prefill = config.long_prefill_token_threshold if n + len(waiting) > 1 else 0
            refusal = self.refused_blocks(head, budget, long_prefill)
            if refusal is None or not admission_refused(
                refusal[0], refusal[1], self._watermark_blocks, free
            ):
                return 0
            hit_blocks = refusal[2]
        bound = (1 << 62) if limit is None else limit
        block_size = config.block_size
        rooms = []
        for r in running:
            outputs = r.num_output_tokens
            computed = r.num_computed_tokens
            if (
                r.num_output_placeholders != 1
                or outputs < 1
                or computed != r.num_prompt_tokens + outputs
            ):
                return 0
            # The output step i applies (outputs + i + 1) must not reach the stop count. That
            # also keeps step i's scan off its other exits: the stop count is at most
            # max_tokens and max_model_len - prompt (fake_model.stop_rule), so the scan neither
            # skips the request for reaching max_tokens (computed + i + 1 < prompt +
            # max_tokens) nor stops at max_model_len's last position.
            if r.stop_output_tokens - outputs - 1 < bound:
                bound = r.stop_output_tokens - outputs - 1
            rooms.append(r.num_blocks * block_size - computed)
        if bound <= 0:
            return 0
        # A request takes a block at each step whose scan finds its blocks full: steps room,
        # room + block_size, ... The run stops before the step the free pool cannot serve (or,
        # with a head to refuse, that would evict a cached block: the unhashed ones go first).
        if hit_blocks:
            free = min(free, pool.num_unhashed_free)
        if _blocks_taken(rooms, bound - 1, block_size) > free:
            # The first step by which the batch has taken more than that.
            low, high = 0, bound - 1
            while low < high:
                mid = (low + high) // 2
                if _blocks_taken(rooms, mid, block_size) > free:
                    high = mid
                else:
                    low = mid + 1
            bound = low
        return bound

    def apply_calm_decodes(self, num_steps: int, last: ScheduledStep) -> list[tuple[int, int]]:
        """Apply ``num_steps`` calm decodes (at most :meth:`calm_decodes`) as the steps would.

        Step by step, the scan in batch order: a request whose blocks are full takes one, and
        the full blocks of what it knows are keyed (``cache_full_blocks``). In a calm step
        what it knows (prompt and outputs) is what it has computed, and the output then
        applied confirms the same count, so the output's own keying finds nothing new. Each
        request gains ``num_steps`` computed tokens and outputs; its placeholder stays one.
        ``last`` is the last step as scheduled: it stays in flight. Returns each step's free
        blocks after its scan and the cached blocks its takes evicted.
        """
        running = self.running
        pool = self.block_pool
        block_size = self.config.block_size
        take_blocks = self._take_blocks
        cache_scan = self._after_running_allocation
        self._begin_step()
        seen = self._evicted_seen
        figures: list[tuple[int, int]] = []
        for _ in range(num_steps):
            for r in running:
                computed = r.num_computed_tokens
                if r.num_blocks * block_size == computed:
                    take_blocks(r, 1)
                if cache_scan is not None and computed // block_size > r.num_cached_blocks:
                    cache_scan(r, computed)
                r.num_computed_tokens = computed + 1
            evicted = getattr(pool, "num_evicted", 0)
            figures.append((pool.num_free_blocks, evicted - seen))
            seen = evicted
        for r in running:
            r.num_output_tokens += num_steps
        self._evicted_seen = seen
        scheduled = last.num_scheduled_tokens
        self._in_flight_steps = {last.step: (scheduled, running[:])}
        self._scheduled = scheduled
        self._num_preempted = 0
        self._finished_since_schedule = False
        if self.keep_in_flight_outputs:
            last.in_flight_outputs = dict.fromkeys(scheduled, 1)
        last.num_evicted_blocks = figures[-1][1]
        last.cache_recorded = True
        return figures

    def _drop_finished_waiting(self, finished: list[SchedulerRequest]) -> None:
        """Take requests that a stale token finished out of the waiting queue."""
        gone = {r.request_id for r in finished}
        waiting = self.waiting
        if not any(r.request_id in gone for r in waiting):
            return
        keep = [r for r in waiting if r.request_id not in gone]
        # Rebuild in admission order: FCFS keeps its order, PRIORITY re-heaps by key.
        from tracekit.engine.queues import create_request_queue

        rebuilt = create_request_queue(self.config.scheduling_policy)
        for r in keep:
            rebuilt.add_request(r)
        self.waiting = rebuilt

    def check_consistency(self) -> None:
        """The base checks plus the async counters."""
        super().check_consistency()
        for request in self.requests.values():
            held = request.num_output_placeholders
            in_flight = self.num_in_flight_tokens(request)
            stale = request.num_stale_output_tokens
            assert held >= 0 and in_flight >= held and stale >= 0, request
            assert (stale > 0) == (request in self._stale), request
            if request.status != RequestStatus.RUNNING:
                assert held == 0, request


def _blocks_taken(rooms: list[int], step: int, block_size: int) -> int:
    """Blocks a calm run's scans take by step ``step`` (from 0), the requests' rooms given.

    A request with ``room`` free slots in its blocks takes one at steps ``room``,
    ``room + block_size``, ...
    """
    total = 0
    for room in rooms:
        if room <= step:
            total += (step - room) // block_size + 1
    return total


EAGER_UPDATES.add(_AsyncMixin._update_after_schedule)


class AsyncVllmScheduler(_AsyncMixin, VllmScheduler):
    """vLLM's ``AsyncScheduler`` with prefix caching off."""

    def __init__(
        self, config: EngineConfig, host: VictimHost, on_decision: DecisionCallback | None = None
    ) -> None:
        VllmScheduler.__init__(self, config, host, on_decision)
        self._init_async()


class AsyncVllmPrefixCachingScheduler(_AsyncMixin, VllmPrefixCachingScheduler):
    """vLLM's ``AsyncScheduler`` with prefix caching on."""

    def __init__(
        self, config: EngineConfig, host: VictimHost, on_decision: DecisionCallback | None = None
    ) -> None:
        VllmPrefixCachingScheduler.__init__(self, config, host, on_decision)
        self._init_async()
