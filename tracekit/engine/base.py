"""What the vLLM and SGLang schedulers share: queues, arrival, victim decisions, outputs.

:class:`SchedulerBase` holds the state and verbs both modes have in common (the request table,
the waiting and running queues, the block pool, the decision counter), asks the host for a victim
and records the decision in one place (:meth:`SchedulerBase._choose_victim`), resets a preempted
request in one place (:meth:`SchedulerBase._release_victim`) and applies the fake model's outputs
(:mod:`tracekit.engine.fake_model`). A mode writes its ``schedule()`` and overrides narrow
hooks: where a preempted request goes back in the waiting queue, what else counts as unfinished,
and what its consistency check covers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tracekit.engine.block_pool import BlockPool
from tracekit.engine.config import EngineConfig
from tracekit.engine.fake_model import apply_fake_outputs, mark_arrived
from tracekit.engine.hosts import VictimHost
from tracekit.engine.outputs import DecisionRecord
from tracekit.engine.queues import create_request_queue
from tracekit.engine.request import RequestStatus, SchedulerRequest
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    candidates_of,
)

__all__ = [
    "DecisionCallback",
    "ScheduledStep",
    "SchedulerBase",
    "candidate_blocks",
    "make_candidates",
]

DecisionCallback = Callable[[DecisionRecord], None]


class ScheduledStep:
    """What one ``schedule()`` call decided (cf. vLLM ``SchedulerOutput``)."""

    __slots__ = (
        "cache_hits",
        "cache_recorded",
        "in_flight_outputs",
        "kv_tokens_read",
        "no_batch",
        "num_decode_tokens",
        "num_evicted_blocks",
        "num_preemptions",
        "num_prefill_tokens",
        "num_scheduled_tokens",
        "step",
        "time_s",
    )

    def __init__(self, step: int, time_s: float) -> None:
        self.step = step
        self.time_s = time_s
        # req_id -> num_scheduled_tokens, in scheduling order: running queue first, then admitted.
        self.num_scheduled_tokens: dict[str, int] = {}
        self.num_prefill_tokens = 0
        self.num_decode_tokens = 0
        # Context tokens (already computed plus scheduled) whose KV the step's attention reads.
        self.kv_tokens_read = 0
        self.num_preemptions = 0
        # Prefix caching, filled by SchedulerBase.record_cache_figures: req_id -> hit tokens of
        # each admission of the step, and the cached blocks the step evicted.
        self.cache_hits: dict[str, int] = {}
        self.num_evicted_blocks = 0
        self.cache_recorded = False
        # Async scheduling: req_id -> output tokens still in flight when the step was scheduled
        # (vLLM's placeholders), for requests that had any; None under sync scheduling. A step's
        # make-up (decode or prefill) counts them as output, as vLLM's is_prefill_chunk does.
        self.in_flight_outputs: dict[str, int] | None = None
        # True when the call ran no batch and takes no step: SGLang's overlap loop, whose
        # iterations after its last batch only process that batch's result
        # (tracekit.engine.sglang). EngineRun then counts no step and keeps its clock.
        self.no_batch = False


def make_candidates(running: list[SchedulerRequest]) -> tuple[PreemptionCandidate, ...]:
    """The running queue as the host shows it to a policy, in queue order."""
    return candidates_of(running, "arrival_s")


def candidate_blocks(request: SchedulerRequest) -> tuple[int, int]:
    """``(blocks held, blocks only it holds)`` of a running request.

    With prefix caching the request's blocks are objects with a reference count, and only those
    at 1 return to the free queue when it is preempted (vLLM ``BlockPool.free_blocks``); blocks
    shared with another running request stay held. Without it (a plain count) every block is
    its own.
    """
    blocks = request.kv_blocks
    if not blocks:
        return request.num_blocks, request.num_blocks
    exclusive = 0
    for block in blocks:
        if block.ref_cnt == 1:
            exclusive += 1
    return len(blocks), exclusive


class SchedulerBase:
    """The state and verbs both engine modes share (``VllmScheduler``, ``SglangScheduler``).

    Parameters
    ----------
    config
        Engine configuration.
    host
        Chooses each preemption (or retraction) victim.
    on_decision
        Called with every :class:`DecisionRecord`, in order, as decisions are made.
    """

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self.on_decision = on_decision
        self.policy = config.scheduling_policy
        self.block_pool = BlockPool(config.num_blocks)
        self.waiting = create_request_queue(config.scheduling_policy)
        self.running: list[SchedulerRequest] = []
        # req_id -> request, for every request added and not finished (vLLM ``self.requests``).
        self.requests: dict[str, SchedulerRequest] = {}
        self.num_decisions = 0
        # Evicted-block count of the pool when the last step's output was applied.
        self._evicted_seen = 0

    # ----------------------------------------------------------------------------- queues
    def add_request(self, request: SchedulerRequest) -> None:
        """Queue a newly arrived request (vLLM ``Scheduler.add_request``)."""
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request_id {request.request_id!r}")
        mark_arrived(request, self.config.max_model_len)
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def has_unfinished_requests(self) -> bool:
        """Whether any request is running or waiting."""
        return bool(self.running) or len(self.waiting) > 0

    def finish_requests(
        self, request_ids: Iterable[str], finished_status: str = RequestStatus.ABORTED
    ) -> list[SchedulerRequest]:
        """Finish requests from outside the scheduler (vLLM ``Scheduler.finish_requests``).

        How a client's cancel reaches the engine (vLLM ``EngineCore.abort_requests`` calls this
        with ``FINISHED_ABORTED``): each named request that is still unfinished leaves the
        running or waiting queue (both keep their order), takes ``finished_status`` and gives
        its KV blocks back. Unknown or already finished ids are skipped, as in vLLM.

        Returns the requests finished, in the order named. The caller sets their ``finish_s``.
        """
        valid: list[SchedulerRequest] = []
        for request_id in dict.fromkeys(request_ids):
            request = self.requests.get(request_id)
            if request is not None:
                valid.append(request)
        if not valid:
            return valid
        gone = {r.request_id for r in valid}
        if any(r.status == RequestStatus.RUNNING for r in valid):
            self.running = [r for r in self.running if r.request_id not in gone]
        if any(r.request_id in gone for r in self.waiting):
            # Rebuilt rather than edited: both queue kinds re-add in their own order.
            kept = [r for r in self.waiting if r.request_id not in gone]
            self.waiting = create_request_queue(self.policy)
            for r in kept:
                self.waiting.add_request(r)
        for request in valid:
            self._forget(request)
            request.status = finished_status
            self._release_finished(request)
            del self.requests[request.request_id]
        return valid

    def _forget(self, request: SchedulerRequest) -> None:
        """Drop ``request`` from any holder a mode keeps besides running and waiting."""

    # ----------------------------------------------------------------------------- victims
    def _choose_victim(
        self, requester_id: str, builtin_id: str, step: int, now: float
    ) -> SchedulerRequest:
        """Ask the host for one victim among the running queue and record the decision.

        ``requester_id`` is the request whose allocation failed (``""`` when there is none);
        ``builtin_id`` the victim of the mode's own rule.
        """
        running = self.running
        candidates = make_candidates(running)
        usage = self.block_pool.get_usage()
        context = PreemptionContext(candidates, self.policy, requester_id, usage, now, builtin_id)
        choice = self.host.choose_victim(context)
        victim = next((r for r in running if r.request_id == choice.victim_id), None)
        if victim is None:
            raise RuntimeError(f"host chose {choice.victim_id!r}, which is not running")
        if self.on_decision is not None:
            blocks = tuple(candidate_blocks(r) for r in running)
            freed = blocks[running.index(victim)][1]
            self.on_decision(
                DecisionRecord.of_choice(
                    self.num_decisions,
                    step,
                    now,
                    requester_id,
                    usage,
                    candidates,
                    builtin_id,
                    choice,
                    blocks,
                    freed,
                    self.config.block_size,
                )
            )
        self.num_decisions += 1
        return victim

    def _release_victim(self, victim: SchedulerRequest) -> None:
        """Free all of a preempted request's blocks and reset it for a full recompute.

        Precondition: ``victim`` is RUNNING and the caller has taken it out of ``running``; the
        caller also puts it back in the waiting queue (where is the mode's rule).
        """
        assert victim.status == RequestStatus.RUNNING, "only running requests can be preempted"
        self.block_pool.free(victim.num_blocks)
        victim.num_blocks = 0
        victim.recomputed_tokens += victim.num_computed_tokens
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.PREEMPTED
        victim.num_preemptions += 1

    # ----------------------------------------------------------------------------- outputs
    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[SchedulerRequest]:
        """Apply the fake model output of a step (vLLM ``Scheduler.update_from_output``).

        See :func:`~tracekit.engine.fake_model.apply_fake_outputs`. Finished requests leave the
        running queue, which keeps its order (vLLM ``remove_all``: a new list). Returns them in
        scheduling order.

        Records the step's prefix-cache figures on ``out`` first, unless ``schedule()`` did
        (:meth:`record_cache_figures`).
        """
        if not out.cache_recorded:
            self.record_cache_figures(out)
        finished = apply_fake_outputs(
            out.num_scheduled_tokens, self.requests, self._release_finished, end_s
        )
        if finished:
            self.running = [r for r in self.running if r.status == RequestStatus.RUNNING]
        return finished

    def record_cache_figures(self, out: ScheduledStep) -> None:
        """Put the prefix-cache figures of the step that made ``out`` on it (trace v2).

        Each admission's hit tokens (the scheduler's ``step_cache_hits``, which its
        ``schedule()`` sets afresh) and the cached blocks evicted since the last call (the
        pool's ``num_evicted``); both stay empty / 0 without prefix caching. Synchronous
        scheduling applies a step's output right after scheduling it, so
        :meth:`update_from_output` calls this; a scheduler that schedules ahead (async) calls it
        at the end of its ``schedule()``, before the next step can overwrite the figures.
        """
        hits = getattr(self, "step_cache_hits", None)
        if hits:
            out.cache_hits = hits
        evicted = getattr(self.block_pool, "num_evicted", 0)
        out.num_evicted_blocks = evicted - self._evicted_seen
        self._evicted_seen = evicted
        out.cache_recorded = True

    def _release_finished(self, request: SchedulerRequest) -> None:
        """Return a finished request's blocks to the pool."""
        self.block_pool.free(request.num_blocks)
        request.num_blocks = 0
