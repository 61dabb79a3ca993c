"""vLLM's ``AsyncScheduler``: schedule step k+1 before the outputs of step k are known.

Sources (vLLM 0.32.0 and 0.33.0): ``vllm/v1/core/sched/async_scheduler.py``
(``AsyncScheduler._update_after_schedule``; 0.32 also ``_update_request_with_output``),
``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule`` running scan,
``_update_after_schedule``, ``_preempt_request``, ``update_from_output``,
``_update_request_with_output``, ``has_finished_requests``) and ``vllm/v1/engine/core.py``
(``EngineCore.step_with_batch_queue``, which :func:`tracekit.engine.engine.run_engine` follows
when ``async_scheduling`` is on). ``docs/engine.md``, "Async scheduling", lists every rule.

The state vLLM keeps per request, here in dicts keyed by request id (``RequestState`` stays the
shared record): ``num_output_placeholders`` (tokens sampled by steps still in flight),
``num_in_flight_tokens`` (tokens scheduled by steps whose output has not been applied) and
``num_stale_output_tokens`` (in-flight tokens of a request preempted since). As in vLLM,
``num_computed_tokens`` counts the placeholders.
"""

from __future__ import annotations

from tracekit.engine.base import DecisionCallback, ScheduledStep
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import VictimHost
from tracekit.engine.request import RequestState, RequestStatus
from tracekit.engine.scheduler import VllmPrefixCachingScheduler, VllmScheduler

__all__ = ["AsyncVllmPrefixCachingScheduler", "AsyncVllmScheduler"]


class _AsyncMixin:
    """The hooks vLLM's ``AsyncScheduler`` changes, over either block pool."""

    #: run_engine drives this scheduler as ``step_with_batch_queue`` does.
    async_scheduling = True

    # Set by __init__ of the concrete classes (declared for type checkers).
    requests: dict[str, RequestState]
    running: list[RequestState]
    config: EngineConfig

    def _init_async(self) -> None:
        # req_id -> [num_output_placeholders, num_in_flight_tokens, num_stale_output_tokens]
        # (one list, so the hot loops look a request up once).
        self._counters: dict[str, list[int]] = {}
        self._async_counters = self._counters  # read by VllmScheduler.schedule's running scan
        # step -> the ids of the requests that step samples a token for (not a prefill chunk).
        self._sampling: dict[int, set[str]] = {}
        # vLLM ``finished_req_ids``: finished since the last schedule() (has_finished_requests).
        self._finished_since_schedule = False
        # Caching of the tokens an output confirms: 0.32 AsyncScheduler caches up to
        # computed - placeholders whenever the request was RUNNING; 0.33 Scheduler caches up
        # to computed - in-flight for non-stale outputs of a RUNNING request that had
        # placeholders. With one sampled token and no drafts both give the same count.
        self._caching = bool(self.config.enable_prefix_caching)

    def add_request(self, request: RequestState) -> None:
        """Queue a new request with zero placeholders, in-flight and stale tokens."""
        super().add_request(request)  # type: ignore[misc]
        self._counters[request.request_id] = [0, 0, 0]

    def _forget(self, request: RequestState) -> None:
        """An aborted request's counters go with it (its in-flight output is skipped)."""
        self._counters.pop(request.request_id, None)
        super()._forget(request)  # type: ignore[misc]

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones not yet reported by a schedule() (vLLM)."""
        return self.has_unfinished_requests() or self._finished_since_schedule  # type: ignore[attr-defined]

    def _update_after_schedule(self, out: ScheduledStep) -> None:
        """Advance computed and in-flight tokens; a step that samples adds a placeholder.

        Also splits the step's tokens as :func:`~tracekit.engine.fake_model.split_tokens` does
        with ``in_flight_outputs`` (the placeholders before the step), in the same loop.
        """
        requests = self.requests
        all_counters = self._counters
        sampling: set[str] = set()
        in_flight: dict[str, int] = {}
        prefill = decode = kv_read = 0
        for request_id, num_new_tokens in out.num_scheduled_tokens.items():
            request = requests[request_id]
            computed = request.num_computed_tokens + num_new_tokens
            request.num_computed_tokens = computed
            counters = all_counters[request_id]
            counters[1] += num_new_tokens
            # Output so far, the tokens still in flight counted (placeholders before the step).
            placeholders = counters[0]
            if placeholders:
                in_flight[request_id] = placeholders
            output = request.num_output_tokens + placeholders
            known = request.num_prompt_tokens + output
            # is_prefill_chunk is decided before the placeholder of this step is added.
            if computed >= known:
                counters[0] += 1
                sampling.add(request_id)
            if num_new_tokens == 1 and output and computed == known:
                decode += 1
            else:
                prefill += num_new_tokens
            kv_read += computed
        self._sampling[out.step] = sampling
        out.in_flight_outputs = in_flight
        self._finished_since_schedule = False
        out.num_prefill_tokens, out.num_decode_tokens, out.kv_tokens_read = prefill, decode, kv_read
        # This step's output is applied a step late, after the next schedule() has reset the
        # hit map: record its prefix-cache figures now (trace v2).
        self.record_cache_figures(out)  # type: ignore[attr-defined]

    def _release_victim(self, victim: RequestState) -> None:
        """``_preempt_request``: in-flight output becomes stale; placeholders are dropped."""
        counters = self._counters[victim.request_id]
        counters[2] = counters[1]
        counters[0] = 0
        super()._release_victim(victim)  # type: ignore[misc]

    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[RequestState]:
        """Apply step ``out``'s fake outputs (vLLM ``update_from_output`` under async).

        Every request the step sampled for gets one token, even one preempted since (a stale
        output: appended, but its counters are not touched); the token may finish it, from the
        running or the waiting queue. A request that finished earlier is skipped.
        """
        requests = self.requests
        all_counters = self._counters
        sampling = self._sampling.pop(out.step)
        caching = self._caching
        block_size = self.config.block_size
        running_status = RequestStatus.RUNNING
        finished: list[RequestState] = []
        from_waiting = False
        for request_id, num_tokens in out.num_scheduled_tokens.items():
            request = requests.get(request_id)
            if request is None:
                continue  # finished while this step was in flight
            counters = all_counters[request_id]
            counters[1] -= num_tokens
            is_stale = counters[2] > 0
            if is_stale:
                counters[2] -= num_tokens
            if request_id not in sampling:
                continue  # a partial prefill samples nothing
            was_running = request.status == running_status
            output = request.num_output_tokens + 1
            request.num_output_tokens = output
            if output == 1:
                request.first_token_s = end_s
            if not is_stale:
                counters[0] -= 1
            # A stale output belongs to a request preempted since, so it is never RUNNING here.
            if caching and was_running:
                confirmed = request.num_computed_tokens - counters[0]
                if confirmed // block_size > request.num_cached_blocks:
                    self.block_pool.cache_full_blocks(request, confirmed)  # type: ignore[attr-defined]
            if output < request.stop_output_tokens:
                continue
            request.status = request.stop_status
            request.finish_s = end_s
            # A request a stale token finished holds no blocks: they went at its preemption.
            self._release_finished(request)  # type: ignore[attr-defined]
            del requests[request_id], all_counters[request_id]
            finished.append(request)
            from_waiting = from_waiting or not was_running
        if finished:
            self._finished_since_schedule = True
            self.running = [r for r in self.running if r.status == running_status]
            if from_waiting:
                self._drop_finished_waiting(finished)
        return finished

    def _drop_finished_waiting(self, finished: list[RequestState]) -> None:
        """Take requests that a stale token finished out of the waiting queue."""
        gone = {r.request_id for r in finished}
        waiting = self.waiting  # type: ignore[attr-defined]
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
        super().check_consistency()  # type: ignore[misc]
        for request_id, request in self.requests.items():
            held, in_flight, stale = self._counters.get(request_id, (0, 0, 0))
            assert held >= 0 and in_flight >= held and stale >= 0, request
            if request.status != RequestStatus.RUNNING:
                assert held == 0, request


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
