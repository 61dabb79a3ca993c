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
from tracekit.engine.scheduler import EAGER_UPDATES, VllmPrefixCachingScheduler, VllmScheduler

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
