"""SGLang mode: SGLang 0.5.23's scheduling loop over request counts, with victims from a host.

Each rule below names the SGLang 0.5.23 file and function it follows (paths under
``sglang/srt/``); the SGLang mode section of ``docs/engine.md`` lists them with the fixtures
that check them.
With ``block_size`` 1 (SGLang's default ``--page-size 1``) the decisions equal those of SGLang's
real objects step for step (``tests/test_engine_sglang_fixtures.py``); larger pages are an
approximation (pages are counted, page-alignment overheads are not).

One step (``managers/scheduler.py`` ``Scheduler.get_next_batch_to_run``):

- **Merge.** The previous prefill batch joins the running batch at its end, without finished
  requests and without a request part-way through a chunked prefill. ``batch_is_full`` is
  cleared when a batch shrank (a request finished, a chunk continues) or when the running batch
  was empty (the merged batch is a new ``ScheduleBatch``).
- **Prefill first** (``Scheduler._get_new_batch_prefill_raw``): nothing is admitted while
  ``batch_is_full`` (unless a chunked prefill continues). Under ``--enable-priority-scheduling``
  the waiting queue is sorted by ``(priority * sign, entry time)`` (``schedule_policy.py``
  ``SchedulePolicy._sort_by_priority_and_fcfs``). A fresh ``PrefillAdder``
  (``schedule_policy.py``) reserves, for each running request, ``min(max_new - outputs, 4096) *
  new_token_ratio`` (``_get_running_request_total_token_offset``); the continuing chunk first
  (``add_chunked_req``); then waiting requests in order (``add_one_req``): one is admitted when
  ``extend + min(max_new - outputs, 4096) + 1 < available + evictable - reserved``
  (``mem_cache/prefill_budget.py`` ``PrefillBudget.check_prefill``), and then reserves its
  extend, one page and its **whole** ``min(max_new, 4096)`` (``PrefillBudget.reserve``); a
  request longer than what is left of ``--chunked-prefill-size`` is cut there and reserves no
  output. Admission stops at the first refusal, when the budgets run out (``budget_state``), or
  when the batch would exceed ``--max-running-requests`` (which then sets ``batch_is_full``, as
  a refusal for memory does when anything runs).
- **Otherwise decode** (``Scheduler.update_running_batch``): when the pool cannot give every
  running request one token (``schedule_batch.py`` ``ScheduleBatch.check_decode_mem``, after
  evicting the radix tree), ``ScheduleBatch.retract_decode`` sorts the batch by
  ``_get_decode_retraction_order`` (``(outputs, -prompt)`` descending, or
  ``(-priority, outputs, -prompt)`` under ``--retraction-policy priority``; a stable sort) and
  retracts from the end, at least one request and until the step fits, keeping at least one.
  Each pop is a victim decision of the host (``builtin_victim_id`` is SGLang's pop). A victim
  frees all its KV (``schedule_batch.py`` ``release_req`` -> ``release_kv_cache`` without
  inserting into the tree, then ``evict_from_tree_cache`` of ``kept * 20`` tokens) and goes to
  the **tail** of the waiting queue with a new entry time (``Scheduler._add_request_to_queue``);
  the kept requests stay in the sorted order (``filter_batch(keep_indices=...)``);
  ``new_token_ratio`` becomes ``min(1, (sum(outputs) + 20 * kept) / (sum(max_new) + 1))`` over
  the kept requests (``scheduler_components/new_token_ratio_tracker.py``
  ``estimate_new_token_ratio_after_retract``). A decode step without retraction decays the ratio
  by ``(0.7 - 0.098) / 600`` down to 0.098 (``NewTokenRatioTracker.decay_step``); it returns to
  0.7 when the scheduler falls idle (``Scheduler.on_idle``).
- ``max_new`` is ``min(max_tokens, min(context, pool) - prompt - 2, pool - prompt - 2)``
  (``Scheduler.init_req_max_new_tokens``, ``max_new_tokens_for_memory``), which also caps the
  output; a prompt of ``min(context, pool) - 6`` tokens or more is refused on arrival
  (``validate_input_length``; ``EngineConfig.max_prompt_tokens``).

The radix cache (``radix_cache=True``, SGLang's default; ``mem_cache/unified_radix_cache.py``)
is a token trie over the requests' token content (:mod:`tracekit.engine.content`: Mooncake
``hash_ids`` make shared prefixes), see :class:`RadixTree`; each admission's hit is the step's
``cache_hits`` (the trace's radix hits).

SGLang's defaults also shape the loop (docs/engine.md, "Overlap scheduling in SGLang mode",
"ignore_eos in SGLang mode", "Priority scheduling in SGLang mode"):

- **Overlap** (``overlap_schedule``, ``Scheduler.event_loop_overlap``): a batch's result is
  processed after the next batch was formed; a request its result in flight ends by length
  leaves the decode batch (``_reqs_finishing_inflight``); an iteration that forms no batch
  applies the result in flight and takes no step.
- **ignore_eos**: such a request runs to ``max_new``, reserves its whole remaining output while
  running (``_get_running_request_total_token_offset``), and with the tree disabled is admitted
  by ``add_one_req_ignore_eos`` (a drain check over the batch).
- **Priority** (``--enable-priority-scheduling``): the waiting queue sorted by priority in
  SGLang's direction (larger values first unless ``--schedule-low-priority-values-first``),
  retraction in the same direction under ``--retraction-policy priority``, and preemption of
  less important running requests at admission when the batch is full
  (``PrefillAdder.preempt_to_schedule``, above ``--priority-scheduling-preemption-threshold``).

Not modelled: mixed chunked prefill, HiCache, LoRA, speculative decoding, page sizes above 1
exactly (and the radix cache with them), SGLang's one-token prefill of a refused prompt.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterable

from tracekit.engine.base import DecisionCallback, ScheduledStep, SchedulerBase
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import VictimHost
from tracekit.engine.request import FINISHED_STATUSES, RequestStatus, SchedulerRequest

__all__ = [
    "CLIP_MAX_NEW_TOKENS",
    "IGNORE_EOS_RESERVE_TOKENS",
    "INIT_NEW_TOKEN_RATIO",
    "MIN_NEW_TOKEN_RATIO",
    "NEW_TOKEN_RATIO_DECAY_STEPS",
    "RETRACT_DECODE_STEPS",
    "RadixTree",
    "SglangScheduler",
    "SglangWaitingQueue",
    "retraction_order",
]

#: ``SGLANG_INIT_NEW_TOKEN_RATIO`` default (times ``--schedule-conservativeness`` 1.0).
INIT_NEW_TOKEN_RATIO = 0.7
#: ``init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` (0.14).
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` default.
NEW_TOKEN_RATIO_DECAY_STEPS = 600
#: ``SGLANG_RETRACT_DECODE_STEPS`` default: decode steps a kept request is assumed to still run.
RETRACT_DECODE_STEPS = 20
#: ``schedule_policy.py`` ``IGNORE_EOS_RESERVE_TOKENS``: tokens per request kept free when an
#: ``ignore_eos`` request is admitted through ``add_one_req_ignore_eos``.
IGNORE_EOS_RESERVE_TOKENS = 1
#: ``CLIP_MAX_NEW_TOKENS``: cap on the reserved output tokens of one request.
CLIP_MAX_NEW_TOKENS = 4096

#: ``schedule_policy.py``: how often, and for how many waiting requests, the tree's LRU times
#: of waiting prefixes are refreshed (``SGLANG_ENABLE_WAITING_PREFIX_REFRESH``, on by default).
WAITING_PREFIX_REFRESH_INTERVAL = 32
WAITING_QUEUE_PREFIX_MATCH_MAX = 128

# PrefillAdder verdicts (schedule_policy.py AddReqResult).
_CONTINUE, _NO_TOKEN, _OTHER = 0, 1, 2


def retraction_order(
    running: list[SchedulerRequest], policy: str = "length", *, low_first: bool = True
) -> list[SchedulerRequest]:
    """SGLang's ``_get_decode_retraction_order``: most to least preferred to keep.

    ``(outputs, -prompt)`` descending (``"length"``), or ``(priority * -sign, outputs,
    -prompt)`` descending (``"priority"``), where ``sign`` is 1 with
    ``--schedule-low-priority-values-first`` (``low_first``: smaller values are kept first)
    and -1 without it (SGLang's default: larger values are kept first). Python's sort is
    stable under ``reverse=True``, as SGLang's is, so ties keep the batch order. Returns a new
    list; the last element is the first victim.
    """
    if policy == "priority":
        sign = -1 if low_first else 1
        return sorted(
            running,
            key=lambda r: (r.priority * sign, r.num_output_tokens, -r.num_prompt_tokens),
            reverse=True,
        )
    return sorted(running, key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens), reverse=True)


class SglangWaitingQueue(list[SchedulerRequest]):
    """SGLang's waiting queue: a list; arrivals and retracted requests join its tail.

    ``entry`` stamps every addition (``Scheduler._add_request_to_queue`` sets
    ``wait_queue_entry_time``), the second key of the priority sort.
    """

    __slots__ = ("counter", "entry", "sorted_by")

    def __init__(self) -> None:
        super().__init__()
        self.entry: dict[str, int] = {}
        self.counter = 0
        # The sign the queue is sorted by, or None once a request was appended since. Removing
        # requests keeps it sorted; the keys are unique (entry stamps), so sorting a sorted
        # queue again changes nothing and can be skipped.
        self.sorted_by: int | None = None

    def add_request(self, request: SchedulerRequest) -> None:
        """Append ``request`` with a new entry stamp."""
        self.counter += 1
        self.entry[request.request_id] = self.counter
        self.append(request)
        self.sorted_by = None

    def sort_by_priority(self, sign: int = 1) -> None:
        """``SchedulePolicy._sort_by_priority_and_fcfs``: by ``(priority * sign, entry)``.

        ``sign`` 1: lower values first (``--schedule-low-priority-values-first``); -1: higher
        values first (SGLang's default).
        """
        if self.sorted_by == sign:
            return
        entry = self.entry
        self.sort(key=lambda r: (r.priority * sign, entry[r.request_id]))
        self.sorted_by = sign


class _Node:
    __slots__ = ("access", "children", "created", "key", "lock", "parent")

    def __init__(self, key: array[int], parent: _Node | None, now: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.lock = 0
        # UnifiedTreeNode.__init__: last_access_time = get_and_increase_time_counter().
        self.access: float = now
        self.created = now


class RadixTree:
    """A token trie with SGLang's radix-cache accounting (page size 1).

    Follows ``mem_cache/unified_cache/unified_tree_core.py`` in what scheduling reads:
    ``_match_prefix_helper`` (longest cached prefix; a partial node is split; the matched node
    gets a new time and its ancestors slightly older ones, ``_match_post_processor``),
    ``insert`` (each walked node is touched with a new time, ``_touch_node``; a partial node is
    split, ``_split_node``; the rest becomes a new leaf), lock references that protect a path
    (``acquire_component_lock``), ``evictable_size`` (cached tokens no request locks) and
    device eviction (``components/full.py``: a heap of unlocked leaves by last access time; a
    parent whose last child went is pushed next). Times come from one counter, as SGLang's
    ``get_and_increase_time_counter``.
    """

    def __init__(self) -> None:
        self.clock = 0
        self.root = _Node(array("q"), None, self._tick())
        self.root.lock = 1
        self.evictable = 0
        self.protected = 0
        # The current leaves (root excluded), kept as the tree changes so that an eviction does
        # not walk the whole tree to find them. A dict: insertion-ordered, hence deterministic.
        self.leaves: dict[_Node, None] = {}

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def match(self, key: array[int], n: int) -> tuple[int, _Node]:
        """Length of the longest cached prefix of ``key[:n]`` and its last node (touches the path).

        The length ``n`` is given apart so that callers pass a request's whole cached key
        without slicing it.
        """
        matched, node = self._descend(key, n, touch=False)
        now: float = self._tick()
        update: _Node | None = node
        while update is not None:
            update.access = now
            now -= 0.00001
            update = update.parent
        return matched, node

    def _descend(
        self, key: array[int], n: int, *, touch: bool, start: _Node | None = None
    ) -> tuple[int, _Node]:
        """Walk the cached prefix of ``key[:n]``, splitting the node it ends inside.

        With ``touch`` each node entered is stamped with the clock on the way down (an insert);
        a match stamps the whole path afterwards instead. ``start``: see :meth:`_walk`.
        """
        matched, node, inside, length = self._walk(key, n, touch, start)
        if inside is not None:
            return matched + length, self._split(inside, length)
        return matched, node

    def peek(self, key: array[int], n: int) -> tuple[int, _Node, bool]:
        """What :meth:`match` would find, without touching or splitting anything.

        ``(matched, node, inside)``: the cached prefix length, the last node entered whole, and
        whether the match ends inside a node (which :meth:`match` would split).
        """
        matched, node, inside, length = self._walk(key, n, False)
        return matched + length, node, inside is not None

    def _walk(
        self, key: array[int], n: int, touch: bool, start: _Node | None = None
    ) -> tuple[int, _Node, _Node | None, int]:
        """The walk :meth:`_descend` and :meth:`peek` share; it splits nothing.

        ``(matched, node, inside, length)``: the tokens of the nodes entered whole, the last of
        them, and the node the prefix ends inside with the ``length`` tokens it matches there
        (``None`` and 0 when it ends at a node boundary). ``touch`` stamps each node entered.

        ``start``: a node known to end on ``key``'s path (a request's locked node, whose path
        it matched or published). The nodes down to it are entered whole without comparing
        their tokens, stamped in the same order; the comparison starts below it. Ignored when
        it ends past ``n``.
        """
        node = self.root
        matched = 0
        if start is not None:
            path = []
            depth = 0
            up = start
            while up is not node:
                path.append(up)
                depth += len(up.key)
                up = up.parent  # type: ignore[assignment]
            if depth <= n:
                if touch:
                    for entered in reversed(path):
                        entered.access = self._tick()
                node, matched = start, depth
        while matched < n:
            child = node.children.get(key[matched])
            if child is None:
                break
            if touch:
                child.access = self._tick()
            length = _common(child.key, key, matched, n)
            if length < len(child.key):
                return matched, node, child, length
            matched += length
            node = child
        return matched, node, None, 0

    def evictable_if_locked(self, node: _Node) -> int:
        """:attr:`evictable` as it would be with the path to ``node`` locked (nothing changes)."""
        evictable = self.evictable
        while node is not self.root:
            if node.lock == 0:
                evictable -= len(node.key)
            node = node.parent  # type: ignore[assignment]
        return evictable

    def _split(self, child: _Node, length: int) -> _Node:
        """Split ``child`` after ``length`` tokens; returns the new upper node."""
        parent = child.parent
        assert parent is not None
        upper = _Node(child.key[:length], parent, self._tick())
        upper.lock = child.lock
        parent.children[child.key[0]] = upper
        child.key = child.key[length:]
        child.parent = upper
        upper.children[child.key[0]] = child
        child.access = self._tick()
        return upper

    def insert(self, key: array[int], n: int, start: _Node | None = None) -> tuple[int, _Node]:
        """Publish ``key[:n]``: how many leading tokens were already cached, and its last node.

        ``start``: a node on ``key``'s path to walk from (:meth:`_walk`); the same result.
        """
        matched, node = self._descend(key, n, touch=True, start=start)
        if matched < n:
            new = _Node(key[matched:n], node, self._tick())
            node.children[key[matched]] = new
            self.leaves.pop(node, None)  # (a split's upper node is never a leaf)
            self.leaves[new] = None
            self.evictable += n - matched
            return matched, new
        return matched, node

    def lock(self, node: _Node) -> None:
        """Protect the path from ``node`` to the root (``inc_lock_ref``)."""
        while node is not self.root:
            if node.lock == 0:
                self.evictable -= len(node.key)
                self.protected += len(node.key)
            node.lock += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: _Node) -> None:
        """Undo :meth:`lock` (``dec_lock_ref``)."""
        while node is not self.root:
            node.lock -= 1
            if node.lock == 0:
                self.evictable += len(node.key)
                self.protected -= len(node.key)
            node = node.parent  # type: ignore[assignment]

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` (or all that can be): LRU unlocked leaves first."""
        if num_tokens <= 0:
            return 0
        # The keys are unique (creation times are), so the heap's order does not depend on the
        # order of the leaves.
        heap = [(n.access, n.created, n) for n in self.leaves if n.lock == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[0]]
            del self.leaves[node]
            freed += len(node.key)
            self.evictable -= len(node.key)
            if parent is not self.root and not parent.children:
                self.leaves[parent] = None
                if parent.lock == 0:
                    heapq.heappush(heap, (parent.access, parent.created, parent))
        return freed


def _common(a: array[int], key: array[int], start: int, end: int) -> int:
    """Length of the common prefix of ``a`` and ``key[start:end]``."""
    n = min(len(a), end - start)
    # Usually the whole node matches: one comparison of machine integers in C (keys are
    # int64 arrays: slicing and comparing them is a copy and a memcmp, ten times cheaper than
    # tuples of int objects for prompts of hundreds of tokens).
    if key[start : start + n] == (a if n == len(a) else a[:n]):
        return n
    # They differ: bisect for the first difference, each probe one slice comparison in C
    # (the first ``low`` tokens agree, the first ``high`` do not).
    low, high = 0, n
    while high - low > 1:
        mid = (low + high) // 2
        if key[start : start + mid] == a[:mid]:
            low = mid
        else:
            high = mid
    return low


class _Launched:
    """A batch and what its result applies: SGLang's ``result_queue`` entry (a batch copy).

    ``reqs``: its requests in batch order (the copy's ``reqs``); ``no_sample``: the request
    whose prefill the batch leaves part-way (a middle chunk, whose result adds no token:
    ``inflight_middle_chunks``); ``ends``: with the radix cache, each prefilled request's
    tokens in KV after the batch (``extend_end``, up to which an unfinished prefill is
    checkpointed into the tree).
    """

    __slots__ = ("end_s", "ends", "no_sample", "out", "prefill", "reqs")

    def __init__(
        self,
        out: ScheduledStep,
        reqs: list[SchedulerRequest],
        prefill: bool,
        no_sample: SchedulerRequest | None,
        ends: dict[str, int] | None,
    ) -> None:
        self.out = out
        self.reqs = reqs
        self.prefill = prefill
        self.no_sample = no_sample
        self.ends = ends
        self.end_s = 0.0


class SglangScheduler(SchedulerBase):
    """SGLang 0.5.23's scheduling over request counts, with retraction victims chosen by a host.

    Parameters
    ----------
    config
        Engine configuration (``mode`` ``"sglang"``; ``block_size`` is SGLang's page size).
    host
        Chooses each retraction victim.
    on_decision
        Called with every :class:`DecisionRecord`, in order.

    Notes
    -----
    With ``overlap_schedule`` (SGLang's default) :meth:`schedule` runs iterations of
    ``Scheduler.event_loop_overlap``: the batch it returns is launched and its result applied
    by the :meth:`update_from_output` of the *next* step, after that step was scheduled; an
    iteration that forms no batch applies the result in flight and takes no step (the returned
    step is then ``no_batch``). ``late_outputs`` tells :class:`~tracekit.engine.EngineRun` so.
    """

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        super().__init__(config, host, on_decision)
        # The host's context: SGLang's victim rule reads priorities only under
        # --retraction-policy priority.
        self.policy = config.victim_scheduling_policy
        self.waiting: SglangWaitingQueue = SglangWaitingQueue()  # type: ignore[assignment]
        # A request part-way through a chunked prefill: neither waiting nor decoding.
        self.chunked: SchedulerRequest | None = None
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self._ratio_decay = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / (
            NEW_TOKEN_RATIO_DECAY_STEPS
        )
        self.batch_is_full = False
        self._reset_full = False
        self._idle = False
        self._idle_after = -1
        self._refresh_calls = 0
        chunk = config.chunked_prefill_size
        self.chunk_size: int | None = (
            config.max_num_batched_tokens if chunk is None else (chunk or None)
        )
        self.kv_tokens = self.block_pool.num_usable_blocks * config.block_size
        # Page size 1: every decode needs exactly one free block per request (and the tree is
        # evicted only for a shortfall).
        self._unit_pages = config.block_size == 1
        # Priority options (Scheduler.__init__, init_schedule_policy): the sort direction
        # (SchedulePolicy.priority_sign) and preemption at admission.
        self._priority = bool(config.enable_priority_scheduling)
        self._sign = 1 if config.schedule_low_priority_values_first else -1
        self._preemption = self._priority and not config.disable_priority_preemption
        self._threshold = config.priority_scheduling_preemption_threshold
        # SGLang's clipped max_new_tokens per request (init_req_max_new_tokens).
        self.max_new: dict[str, int] = {}
        # Req.full_untruncated_fill_ids length and prefix_len as the last round left them
        # (init_next_round_input, reset_for_retract): what preempt_to_schedule reads.
        self._fill: dict[str, int] = {}
        self._prefix: dict[str, int] = {}
        self.radix: RadixTree | None = RadixTree() if config.radix_cache else None
        # Radix bookkeeping per request: token ids (prompt, then one SAMPLED_TOKEN per output
        # so far; built once, lengthened as outputs grow), the locked node, tokens owned by the
        # tree.
        self._tokens: dict[str, array[int]] = {}
        self._node: dict[str, _Node] = {}
        self._shared: dict[str, int] = {}
        self._evicted = 0  # tokens evicted from the tree so far
        self._evicted_reported = 0
        # event_loop_overlap: the batch whose result is not processed yet, the one schedule()
        # just formed, requests taken out of the decode batch because that result ends them
        # (_reqs_finishing_inflight), results applied by no-batch iterations, whether finished
        # requests still sit in SGLang's running batch (filtered at the next iteration), and
        # when the outputs last applied were produced.
        self.overlap = bool(config.overlap_schedule)
        self.late_outputs = self.overlap
        self._in_flight: _Launched | None = None
        self._launching: _Launched | None = None
        self._finishing: list[SchedulerRequest] = []
        self._pending: list[SchedulerRequest] = []
        self._unfiltered = False
        self._ends: dict[str, int] | None = None
        # The waiting head's cached prefix that the last refused admissions found (calm leaps).
        self._refused_prefix = 0
        self._batch_reqs: list[SchedulerRequest] = []
        self.outputs_end_s = 0.0
        # Records of the last schedule() (for comparisons and the trace): retraction events
        # (victims, kept order), requests preempted at admission, why admission stopped, the
        # tokens already in KV (radix hit or earlier chunks) of each request prefilled, before
        # the step, and each admission's radix hit (the trace's cache hits).
        self.last_retractions: list[tuple[list[str], list[str]]] = []
        self.last_preempted: list[str] = []
        self.last_admission_stop: str | None = None
        self.last_cached: dict[str, int] = {}
        self.step_cache_hits: dict[str, int] = {}

    # ----------------------------------------------------------------------------- queues
    def add_request(self, request: SchedulerRequest) -> None:
        """Queue a new request; clip its ``max_new`` and stop as SGLang does.

        An ``ignore_eos`` request ignores its end of sequence: it stops at ``max_new``.
        """
        super().add_request(request)
        prompt = request.num_prompt_tokens
        # init_req_max_new_tokens: the longest request (min(context, pool) - 1) less the
        # prompt and one, then the empty pool less the prompt, a page and one.
        max_req_len = min(self.config.max_model_len, self.kv_tokens) - 1
        limit = min(max_req_len - prompt - 1, self.kv_tokens - prompt - self.config.block_size - 1)
        max_new = max(0, min(request.max_tokens, limit))
        self.max_new[request.request_id] = max_new
        if request.ignore_eos or max_new <= request.target_output_tokens:
            request.stop_output_tokens = max_new
            request.stop_status = RequestStatus.FINISHED_LENGTH_CAPPED
        else:
            request.stop_output_tokens = request.target_output_tokens
            request.stop_status = RequestStatus.FINISHED_STOPPED

    def has_unfinished_requests(self) -> bool:
        """Whether the loop is not idle: anything running, chunked, waiting or in flight."""
        return (
            bool(self.running)
            or self.chunked is not None
            or len(self.waiting) > 0
            or self._in_flight is not None
            or self._unfiltered
        )

    def _forget(self, request: SchedulerRequest) -> None:
        """An aborted request part-way through its chunked prefill stops being the chunk."""
        if self.chunked is request:
            self.chunked = None

    def finish_requests(
        self, request_ids: Iterable[str], finished_status: str = RequestStatus.ABORTED
    ) -> list[SchedulerRequest]:
        """Finish requests from outside (a client's cancel), keeping SGLang's queue and tree.

        As :meth:`SchedulerBase.finish_requests`, but the waiting queue stays SGLang's list
        (order and entry stamps), and with the radix cache an aborted holder's own KV is freed
        without a tree insert and its path unlocked (``release_kv_cache(checkpoint=False)``).
        """
        valid = [self.requests[r] for r in dict.fromkeys(request_ids) if r in self.requests]
        if not valid:
            return valid
        gone = {r.request_id for r in valid}
        self.running = [r for r in self.running if r.request_id not in gone]
        self._finishing = [r for r in self._finishing if r.request_id not in gone]
        if any(r.request_id in gone for r in self.waiting):
            self.waiting[:] = [r for r in self.waiting if r.request_id not in gone]
        for request in valid:
            self._forget(request)
            request.status = finished_status
            self.block_pool.free(request.num_blocks)
            request.num_blocks = 0
            self._release_tree(request)
            self._drop(request.request_id)
            del self.requests[request.request_id]
        return valid

    def _drop(self, request_id: str) -> None:
        """Forget a finished request's per-request bookkeeping."""
        self.max_new.pop(request_id, None)
        self._tokens.pop(request_id, None)
        self._fill.pop(request_id, None)
        self._prefix.pop(request_id, None)

    # ----------------------------------------------------------------------------- schedule
    def schedule(self, step: int, now: float) -> ScheduledStep:
        """One step: a prefill batch if anything can be admitted, else a decode batch.

        Under overlap scheduling, the iterations of ``event_loop_overlap`` until one forms a
        batch; see the class notes.
        """
        out = ScheduledStep(step, now)
        if self.last_retractions:
            self.last_retractions = []
        if self.last_preempted:
            self.last_preempted = []
        self.last_admission_stop = None
        if self.last_cached:
            self.last_cached = {}
        if self.step_cache_hits:
            self.step_cache_hits = {}
        if not self.overlap:
            # event_loop_normal. Scheduler.on_idle ran if an iteration found nothing to run
            # between the last step and this one (a step apart: an idle iteration).
            if self._idle:
                if step > self._idle_after + 1:
                    self.new_token_ratio = INIT_NEW_TOKEN_RATIO
                self._idle = False
            self._iteration(out, step, now)
            self._launching = self._launch(out)
            return out
        quiet = 0
        while True:
            if self._iteration(out, step, now):
                self._launching = self._launch(out)
                self._record_cache(out)
                return out
            # No batch: process the last batch's result (pop_and_process; last_batch becomes
            # None), or, with none, Scheduler.on_idle. Such an iteration takes no step; after
            # two in a row, or once the loop is idle, nothing runs before the next arrival.
            quiet += 1
            if self._in_flight is not None:
                self._pending += self._process(self._in_flight)
                self._in_flight = None
            else:
                self._on_idle()
            if quiet >= 2 or not self.has_unfinished_requests():
                out.no_batch = True
                self._launching = None
                self._record_cache(out)
                return out

    def _iteration(self, out: ScheduledStep, step: int, now: float) -> bool:
        """``get_next_batch_to_run``: a prefill batch if one forms, else a decode batch."""
        if self._reset_full:
            # The last batch shrank when merged, or the running batch did when filtered.
            self.batch_is_full = False
            self._reset_full = False
        self._unfiltered = False
        chunked = self.chunked
        if (
            chunked is not None
            and self.radix is not None
            and chunked.num_computed_tokens > self._shared.get(chunked.request_id, 0)
        ):
            # get_next_batch_to_run -> stash_chunked_request: checkpoint the chunks so far.
            self._checkpoint(chunked)
        if self._preemption:
            # _get_new_batch_prefill_raw: reset batch_is_full to try preemption.
            self.batch_is_full = False
        if self.running and self.chunked is None and (self.batch_is_full or not self.waiting):
            # _get_new_batch_prefill_raw would return at once: no admission attempt.
            return self._schedule_decode(out, step, now)
        if self._schedule_prefill(out, now):
            return True
        return self._schedule_decode(out, step, now)

    def _on_idle(self) -> None:
        """``Scheduler.on_idle`` (with no last batch): the ratio restarts when fully idle."""
        if not self.running and not self._unfiltered and self.chunked is None:
            self.new_token_ratio = INIT_NEW_TOKEN_RATIO

    def _launch(self, out: ScheduledStep) -> _Launched:
        """What the result of the step ``out`` applies (see :class:`_Launched`)."""
        if out.num_prefill_tokens > 0:
            chunked = self.chunked
            reqs = self._batch_reqs
            return _Launched(out, reqs, True, chunked, self._ends)
        # A decode batch is the running batch as it is now (later steps edit that list).
        return _Launched(out, self.running[:], False, None, None)

    def _free_tokens(self) -> int:
        return self.block_pool.num_free_blocks * self.config.block_size

    def _evictable(self) -> int:
        return 0 if self.radix is None else self.radix.evictable

    def _offset(self, request: SchedulerRequest, ratio: float) -> float:
        """``PrefillAdder._get_running_request_total_token_offset`` (ratio 1 for ignore_eos)."""
        left = self.max_new[request.request_id] - request.num_output_tokens
        return _reserved_output(left, request.ignore_eos, ratio)

    def _output_to_reserve(self, request: SchedulerRequest) -> int:
        """The outputs a waiting request must find room for to be admitted (``add_one_req``)."""
        left = self.max_new[request.request_id] - request.num_output_tokens
        return min(max(left, 0), CLIP_MAX_NEW_TOKENS)

    def _schedule_prefill(self, out: ScheduledStep, now: float) -> bool:
        """``_get_new_batch_prefill_raw`` with a fresh ``PrefillAdder``."""
        config = self.config
        if not self.running:
            self.batch_is_full = False
        chunked = self.chunked
        waiting = self.waiting
        self._ends = None
        if (self.batch_is_full or not waiting) and chunked is None:
            return False
        if (
            config.max_num_seqs - len(self.running) <= 0
            and chunked is None
            and not self._preemption
        ):
            self.batch_is_full = True
            return False
        # SchedulePolicy.calc_priority matches no waiting request here: UnifiedRadixCache's
        # tree core does not support fast matching (supports_fast_match_prefix is False).
        radix = self.radix
        if self._priority:
            waiting.sort_by_priority(self._sign)
        if radix is not None and waiting:
            self._touch_waiting_prefixes(radix)
        ratio = self.new_token_ratio
        max_new = self.max_new
        # PrefillBudget: offsets against available + evictable (read live: locks change it).
        total_offset = _total_reserved(self.running, max_new, ratio)
        current_offset = 0.0
        rem_input = config.max_num_batched_tokens
        rem_chunk = self.chunk_size
        free = self._free_tokens()
        batch: list[tuple[SchedulerRequest, int]] = []
        new_chunked: SchedulerRequest | None = None
        continues = False
        preempted: list[SchedulerRequest] = []
        # add_one_req_ignore_eos's (tokens left, tokens occupied), sorted; None until first used.
        states: list[tuple[float, int]] | None = None

        def reserve(extend: int, reserved_output: int) -> None:
            nonlocal total_offset, current_offset, rem_input, rem_chunk
            total_offset += extend + 1 + reserved_output
            current_offset += extend + 1
            rem_input -= extend
            if rem_chunk is not None:
                rem_chunk -= extend

        def budget_state() -> int:
            pool = free + (radix.evictable if radix is not None else 0)
            if pool - total_offset <= 0 or pool - current_offset <= 0:
                return _NO_TOKEN
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                return _OTHER
            return _CONTINUE

        def preempt_to_schedule(request: SchedulerRequest) -> bool:
            """``PrefillAdder.preempt_to_schedule``: free less important running requests."""
            nonlocal total_offset, free
            sign = self._sign
            entry = waiting.entry
            # Before init_next_round_input: the fill and prefix of the request's last round.
            rid = request.request_id
            need = (
                self._fill.get(rid, 0)
                - self._prefix.get(rid, 0)
                + min(max_new[rid], CLIP_MAX_NEW_TOKENS)
                - (free + self._evictable() - total_offset)
            )
            # Least important first; among equals the latest entry into the waiting queue.
            order = sorted(self.running, key=lambda r: (r.priority * -sign, -entry[r.request_id]))
            chosen: list[SchedulerRequest] = []
            for r in order:
                if (request.priority - r.priority) * -sign > self._threshold:
                    chosen.append(r)
                    need -= self._offset(r, ratio)
                    if need <= 0:
                        break
                else:
                    break
            if not chosen or need > 0:
                return False
            # Released in running-batch order (release_req, then kept * 20 tokens evicted).
            gone = set(chosen)
            running = self.running
            released = 0
            for r in running:
                if r in gone:
                    total_offset -= self._offset(r, ratio)
                    released += 1
                    self._release_victim(r)
                    self._release_tree(r)
                    self._prefix[r.request_id] = 0
                    if radix is not None:
                        self._evict_to_free((len(running) - released) * RETRACT_DECODE_STEPS)
                    preempted.append(r)
            self.running = [r for r in running if r not in gone]
            free = self._free_tokens()
            return True

        if chunked is not None:
            # add_chunked_req: what is left of the chunk budget, or a whole chunk.
            assert rem_chunk is not None
            pool = free + self._evictable()
            rem = min(rem_chunk, int(pool - total_offset))
            if rem <= 0:
                rem = rem_chunk
            cand = chunked.num_tokens - chunked.num_computed_tokens
            n = min(cand, rem)
            continues = cand > rem
            reserve(
                n,
                0 if continues else min(max_new[chunked.request_id], CLIP_MAX_NEW_TOKENS),
            )
            batch.append((chunked, n))
        stop: str | None = None
        for request in waiting:
            if budget_state() == _OTHER:
                stop = "budget"
                break
            if len(batch) >= config.max_num_seqs - len(self.running):
                self.batch_is_full = True
            # (Once set it stays set: every later request of this pass must preempt too.)
            if self.batch_is_full and (not self._preemption or not preempt_to_schedule(request)):
                stop = "batch_full"
                break
            rid = request.request_id
            prefix = 0
            node = None
            if radix is not None:
                # Req.init_next_round_input: at most input - 1 tokens match
                # (_compute_max_prefix_len), so at least one is computed.
                prefix, node = radix.match(self._token_ids(request), request.num_tokens - 1)
                # The adder pins the match while it checks (PrefillAdder._lock_node).
                radix.lock(node)
            self._fill[rid] = request.num_tokens
            self._prefix[rid] = prefix
            remaining = self._output_to_reserve(request)
            cand = request.num_tokens - prefix
            pool = free + self._evictable()
            result = _CONTINUE
            extend = cand
            is_chunked = False
            if request.ignore_eos and radix is None:
                # add_one_req_ignore_eos (a disabled tree): the whole output of every
                # ignore_eos request reserved, checked against how the batch drains.
                paged = cand + 1
                rem_current = pool - current_offset
                rem_total = pool - total_offset
                if not paged <= min(rem_current, rem_total):
                    result = _NO_TOKEN
                else:
                    if states is None:
                        states = []
                        for r in (request, *self.running, *(b for b, _ in batch)):
                            _add_state(states, r, max_new[r.request_id], ratio, False)
                        states.sort(key=_left)
                    else:
                        _add_state(states, request, max_new[rid], ratio, True)
                    if not _drains(states, rem_current - paged):
                        result = _NO_TOKEN
                    elif rem_chunk is not None and cand > rem_chunk:
                        if rem_chunk <= 0:
                            result = _OTHER
                        else:
                            extend = rem_chunk
                            is_chunked = True
            elif not cand + remaining + 1 < pool - total_offset:
                result = _NO_TOKEN
            elif rem_chunk is None and batch and cand >= rem_input:
                result = _OTHER
            elif rem_chunk is not None and cand > rem_chunk:
                extend = rem_chunk
                is_chunked = True
                if extend <= 0:
                    result = _OTHER
            if result != _CONTINUE:
                if radix is not None and node is not None:
                    radix.unlock(node)
                if result == _NO_TOKEN:
                    self.batch_is_full = bool(batch) or bool(self.running)
                stop = "no_token" if result == _NO_TOKEN else "other"
                break
            # Commit: the lock stays (req.lock) until the request releases its KV.
            if radix is not None and node is not None:
                self._node[rid] = node
                self._shared[rid] = prefix
            reserve(extend, 0 if is_chunked else min(max_new[rid], CLIP_MAX_NEW_TOKENS))
            batch.append((request, extend))
            request.num_computed_tokens = prefix
            if is_chunked:
                new_chunked = request
            result = budget_state()
            if result != _CONTINUE:
                if result == _NO_TOKEN:
                    self.batch_is_full = True
                stop = "no_token" if result == _NO_TOKEN else "other"
                break
        self.last_admission_stop = stop
        if not batch:
            # Preemption already released these requests; they go back even though the
            # request they made room for was not admitted.
            self._requeue_preempted(preempted, out)
            return False
        # The loop admits from the head of the queue and stops at the first refusal: the
        # admitted waiting requests are its first len(batch) (less the continuing chunk).
        del waiting[: len(batch) - (chunked is not None)]
        self._requeue_preempted(preempted, out)
        running = self.running
        # A chunk continues: the batch shrinks when merged; an empty running batch is replaced.
        self._reset_full = not running or continues or new_chunked is not None
        self.chunked = chunked if continues else new_chunked
        pool_blocks = self.block_pool
        block_size = config.block_size
        hits = self.step_cache_hits
        ends: dict[str, int] | None = {} if radix is not None else None
        for request, n in batch:
            rid = request.request_id
            cached = request.num_computed_tokens
            self.last_cached[rid] = cached
            if request is not chunked:
                hits[rid] = cached  # an admission: its radix hit
            computed = cached + n
            need = self._blocks_needed(request, computed)
            if radix is not None:
                self._evict_to_free(need * block_size)
                ends[rid] = computed  # type: ignore[index]
            pool_blocks.allocate(need)
            request.num_blocks += need
            request.num_computed_tokens = computed
            request.status = RequestStatus.RUNNING
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now
            out.num_scheduled_tokens[rid] = n
            out.num_prefill_tokens += n
            out.kv_tokens_read += computed
            if request is not self.chunked:
                running.append(request)
        self._ends = ends
        self._batch_reqs = [request for request, _ in batch]
        return True

    def _requeue_preempted(self, preempted: list[SchedulerRequest], out: ScheduledStep) -> None:
        """``_add_request_to_queue`` for the requests preempted at admission, in order."""
        if not preempted:
            return
        for request in preempted:
            self.waiting.add_request(request)
            self.last_preempted.append(request.request_id)
        out.num_preemptions += len(preempted)

    def _schedule_decode(self, out: ScheduledStep, step: int, now: float) -> bool:
        """``update_running_batch``: retract until the step fits, or decay the ratio.

        Under overlap, requests whose result in flight ends them by length leave the batch
        first (``_reqs_finishing_inflight``); if the rest does not fit, no decode runs this
        iteration (that result frees their KV). Returns whether a decode batch formed.
        """
        running = self.running
        if not running:
            return False
        pool = self.block_pool
        shrank = False
        in_flight = self._in_flight
        if in_flight is not None:
            finishing = self._finishing_inflight(running, in_flight)
            if finishing:
                shrank = True
                self._finishing.extend(finishing)
                gone = set(finishing)
                self.running = running = [r for r in running if r not in gone]
                if not running:
                    self.batch_is_full = False
                    return False
                if not self._decode_fits(running):
                    # The queued result frees the finishing requests' KV at the end of this
                    # step; decode the rest next step instead of retracting them.
                    self.batch_is_full = False
                    return False
        if self._unit_pages and len(running) <= pool.num_free_blocks:
            # The hot path (page size 1, no retraction): one token of KV per request.
            ratio = self.new_token_ratio - self._ratio_decay
            self.new_token_ratio = ratio if ratio > MIN_NEW_TOKEN_RATIO else MIN_NEW_TOKEN_RATIO
            pool.num_free_blocks -= len(running)
            scheduled = out.num_scheduled_tokens
            read = 0
            for request in running:
                computed = request.num_computed_tokens + 1
                request.num_blocks += 1
                request.num_computed_tokens = computed
                scheduled[request.request_id] = 1
                read += computed
            out.num_decode_tokens = len(running)
            out.kv_tokens_read = read
            if shrank:
                self.batch_is_full = False
            return True
        if not self._decode_fits(self.running):
            self._retract(step, now)
            out.num_preemptions += sum(len(v) for v, _ in self.last_retractions)
            running = self.running
            self.new_token_ratio = min(
                1.0,
                (sum(r.num_output_tokens for r in running) + RETRACT_DECODE_STEPS * len(running))
                / (sum(self.max_new[r.request_id] for r in running) + 1),
            )
            self.batch_is_full = False
        else:
            self.new_token_ratio = max(
                self.new_token_ratio - self._ratio_decay, MIN_NEW_TOKEN_RATIO
            )
            if shrank:
                self.batch_is_full = False
        for request in self.running:
            computed = request.num_computed_tokens + 1
            need = self._blocks_needed(request, computed)
            if need > 0:
                pool.allocate(need)
                request.num_blocks += need
            request.num_computed_tokens = computed
            out.num_scheduled_tokens[request.request_id] = 1
            out.num_decode_tokens += 1
            out.kv_tokens_read += computed
        return True

    # ----------------------------------------------------------------------------- calm leaps
    def calm_decodes(self, limit: int | None = None) -> int:
        """How many next steps (at most ``limit``) are calm decodes, as the scheduler sees it.

        A calm decode is a step that the hot path of :meth:`_schedule_decode` takes and whose
        result finishes nothing: every running request gets its token from the free pool
        (page size 1), no chunked prefill, under overlap the batch in flight is the running
        batch decoding, and no admission is made: nothing waits, the batch is full without
        priority preemption, or (priority preemption, the batch not full) the head of the
        waiting queue is refused for memory (:meth:`_refused_admissions`). Such
        steps differ only in counters, so :meth:`apply_calm_decodes` applies any number of
        them at once. 0 when the next step is not calm. Arrivals and client cancels are the
        engine's to bound (:meth:`tracekit.engine.EngineRun.run_to_end`).
        """
        if not self.may_leap():
            return 0
        running = self.running
        attempts = bool(self.waiting) and (not self.batch_is_full or self._preemption)
        # Step i (from 0) finishes a request when its outputs reach the stop count: under
        # overlap the batch in flight's result, then the request leaves the batch a step early
        # (_reqs_finishing_inflight), which the same bound keeps clear of.
        left = 1 << 62
        for r in running:
            if r.num_output_tokens < 1:
                return 0  # (a first token is still to come: its time is set by a result)
            if r.stop_output_tokens - r.num_output_tokens < left:
                left = r.stop_output_tokens - r.num_output_tokens
        # Each step takes a token per request from the pool, the radix tree evicting cached
        # tokens when it runs short (check_decode_mem).
        room = self.block_pool.num_free_blocks + (0 if self.radix is None else self.radix.evictable)
        bound = min(left - 1, room // len(running))
        if limit is not None:
            bound = min(bound, limit)
        if attempts and bound > 0:
            bound = self._refused_admissions(bound)
        return bound

    def may_leap(self) -> bool:
        """Whether the next step can be a calm decode at all (:meth:`calm_decodes` is then asked).

        The cheap part of the test, asked before every step: no event is under way (a chunk,
        results to apply, requests finishing or unfiltered, a reset, an idle loop, a batch
        being launched, evictions unreported), no admission can be made, and under overlap
        the batch in flight is the running batch decoding.
        """
        running = self.running
        if (
            not running
            or not self._unit_pages
            or self.chunked is not None
            or self._pending
            or self._finishing
            or self._unfiltered
            or self._reset_full
            or self._idle
            or self._launching is not None
            or self._evicted != self._evicted_reported
        ):
            return False
        if (
            self.waiting
            and (not self.batch_is_full or self._preemption)
            and not (self._preemption and len(running) < self.config.max_num_seqs)
        ):
            return False
        if self.overlap:
            in_flight = self._in_flight
            # (Requests compare by identity: one list comparison in C.)
            return not (in_flight is None or in_flight.prefill or in_flight.reqs != running)
        return self._in_flight is None

    def _refused_admissions(self, bound: int) -> int:
        """How many of the next ``bound`` calm steps refuse the waiting head for memory.

        Under priority preemption every step tries to admit (``batch_is_full`` is reset). With
        the batch not full and nothing chunked, ``PrefillAdder`` checks the head alone:
        ``extend + remaining + 1 < available + evictable - reserved``, where the running
        requests reserve ``min(max_new - outputs, 4096) * new_token_ratio`` each. Step i sees
        ``i`` more outputs per request, ``i`` more tokens per request taken from the pool and
        the ratio decayed ``i`` times; the sums are made as :meth:`_schedule_prefill` makes
        them, so the verdict is the same to the last bit. With the radix cache the head's
        cached prefix and the evictable tokens once its path is locked are read without
        touching the tree (:meth:`RadixTree.peek`; they stay the same while only decodes run),
        and the steps' own touches are made by :meth:`apply_calm_decodes`. The queue is sorted
        first, as that step would sort it.
        """
        waiting = self.waiting
        if self._priority:
            waiting.sort_by_priority(self._sign)
        head = waiting[0]
        radix = self.radix
        prefix = evictable = 0
        if radix is not None:
            prefix, node, inside = radix.peek(self._token_ids(head), head.num_tokens - 1)
            if inside:
                return 0  # (the match would split a node: a step of its own)
            evictable = radix.evictable_if_locked(node)
        elif head.ignore_eos:
            return 0  # (add_one_req_ignore_eos: a drain check, not this one)
        self._refused_prefix = prefix
        max_new = self.max_new
        need = head.num_tokens - prefix + self._output_to_reserve(head) + 1
        running = self.running
        n = len(running)
        free = self._free_tokens()
        ratio = self.new_token_ratio
        decay, floor = self._ratio_decay, MIN_NEW_TOKEN_RATIO
        for i in range(bound):
            total_offset = _total_reserved(running, max_new, ratio, i)
            pool = free - n * i + evictable
            if need < pool - total_offset:
                return i  # (step i admits: it is not calm)
            ratio -= decay
            if ratio <= floor:
                ratio = floor
        return bound

    def _touch_waiting_prefixes(self, radix: RadixTree) -> None:
        """``SchedulePolicy._touch_waiting_prefixes``, once per admission attempt.

        Every 32nd call it refreshes the LRU times of the first 128 waiting requests' cached
        paths, head last (``touch_waiting_prefix``).
        """
        if self._refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0:
            for request in reversed(self.waiting[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                radix.match(self._token_ids(request), request.num_tokens)
        self._refresh_calls += 1

    def _touch_as_refused(self) -> None:
        """The radix tree's side of one refused admission attempt.

        The attempt refreshes the waiting prefixes every 32nd call and matches the head
        (touching its path; the prefix it finds is the one the attempt records, which an
        eviction since the leap began may have shortened); its lock is released at the refusal
        (no net change).
        """
        radix = self.radix
        assert radix is not None
        self._touch_waiting_prefixes(radix)
        head = self.waiting[0]
        self._refused_prefix = radix.match(self._token_ids(head), head.num_tokens - 1)[0]

    def apply_calm_decodes(
        self,
        num_steps: int,
        last: ScheduledStep,
        last_end_s: float,
        before_last_end_s: float | None,
    ) -> list[int] | None:
        """Apply ``num_steps`` calm decodes (at most :meth:`calm_decodes`) as the steps would.

        Each running request computes and holds ``num_steps`` more tokens and gains as many
        outputs (under overlap, the last step's result stays in flight, and the one before it
        is applied in its place); ``new_token_ratio`` decays once a step. ``last`` is the
        last step as scheduled (ending at ``last_end_s``; ``before_last_end_s`` is when the
        step before it ended; ``None`` for a leap of one step, whose step before it is the
        one in flight). Returns the cached tokens each step evicted from the radix tree, or
        ``None`` when none had to.
        """
        self.last_admission_stop = None
        running = self.running
        n = len(running)
        pool = self.block_pool
        evicted: list[int] | None = None
        # Under priority preemption each step first tried the waiting head and was refused.
        refused = bool(self.waiting) and self._preemption
        touches = refused and self.radix is not None
        if not touches and pool.num_free_blocks >= n * num_steps:
            pool.num_free_blocks -= n * num_steps
        else:
            # Step by step: the refused attempt's touches of the tree, then, when the pool is
            # short, the decode's eviction of the least recently used cached tokens
            # (_decode_fits), which those touches order.
            evicted = []
            for _ in range(num_steps):
                if touches:
                    self._touch_as_refused()
                before = self._evicted
                if pool.num_free_blocks < n:
                    self._evict_to_free(n)
                pool.num_free_blocks -= n
                evicted.append(self._evicted - before)
            self._evicted_reported = self._evicted
        decay, floor = self._ratio_decay, MIN_NEW_TOKEN_RATIO
        ratio = self.new_token_ratio
        for _ in range(num_steps):
            # (The same subtractions as step by step: the ratio is compared later.)
            ratio -= decay
            if ratio <= floor:
                ratio = floor
        self.new_token_ratio = ratio
        if self._preemption:
            self.batch_is_full = False  # (reset by every step's admission attempt)
        if refused:
            # Each step refused the waiting head for memory (_refused_admissions): as the
            # last attempt left it.
            head = self.waiting[0]
            self._fill[head.request_id] = head.num_tokens
            self._prefix[head.request_id] = self._refused_prefix
            self.batch_is_full = True
            self.last_admission_stop = "no_token"
            self._ends = None
        if self.overlap:
            in_flight = self._in_flight
            assert in_flight is not None
            launched = _Launched(last, running[:], False, None, None)
            launched.end_s = last_end_s
            self._in_flight = launched
            self.outputs_end_s = in_flight.end_s if before_last_end_s is None else before_last_end_s
        else:
            self.outputs_end_s = last_end_s
        for request in running:
            request.num_computed_tokens += num_steps
            request.num_blocks += num_steps
            request.num_output_tokens += num_steps
        if self.last_retractions:
            self.last_retractions = []
        if self.last_preempted:
            self.last_preempted = []
        if self.last_cached:
            self.last_cached = {}
        if self.step_cache_hits:
            self.step_cache_hits = {}
        return evicted

    def _finishing_inflight(
        self, running: list[SchedulerRequest], in_flight: _Launched
    ) -> list[SchedulerRequest]:
        """``Scheduler._reqs_finishing_inflight``: the result in flight commits their last token.

        Running requests of the batch in flight whose next output reaches ``max_new``
        (``Req.next_output_finishes_by_length``), in batch order.
        """
        launched = in_flight.out.num_scheduled_tokens
        max_new = self.max_new
        # (A request stops no later than max_new: the stop count filters first, cheaply.)
        return [
            r
            for r in running
            if r.num_output_tokens + 1 >= r.stop_output_tokens
            and r.num_output_tokens + 1 >= max_new[r.request_id]
            and r.request_id in launched
        ]

    def _blocks_needed(self, request: SchedulerRequest, computed: int) -> int:
        """Blocks to allocate so that ``computed`` tokens are in KV.

        The tree holds the request's first ``shared`` tokens (radix cache); the request holds
        the rest in ``num_blocks``.
        """
        block_size = self.config.block_size
        shared = self._shared.get(request.request_id, 0)
        return -(-computed // block_size) - -(-shared // block_size) - request.num_blocks

    def _decode_need(self, requests: list[SchedulerRequest]) -> int:
        """``new_tokens_required_next_decode``: a page for each request at a page boundary."""
        block_size = self.config.block_size
        if block_size == 1:
            return len(requests)  # (every token starts a page)
        return sum(1 for r in requests if r.num_computed_tokens % block_size == 0)

    def _decode_fits(self, requests: list[SchedulerRequest]) -> bool:
        """``check_decode_mem``: evict the tree for the step, then compare with the free pool."""
        need = self._decode_need(requests)
        if self.radix is not None:
            self._evict_to_free(need * self.config.block_size)
        return self.block_pool.num_free_blocks >= need

    def _retract(self, step: int, now: float) -> None:
        """``retract_decode`` with each pop decided by the host."""
        order = retraction_order(
            self.running, self.config.retraction_policy, low_first=self._sign > 0
        )
        victims: list[str] = []
        first = True
        while first or not self._decode_fits(order):
            if len(order) == 1:
                break
            first = False
            builtin = order[-1]
            victim = self._choose_victim("", builtin.request_id, step, now)
            order.remove(victim)
            self.running.remove(victim)
            self._release_victim(victim)
            self._release_tree(victim)
            self._prefix[victim.request_id] = 0  # reset_for_retract
            if self.radix is not None:
                # release_req -> evict_from_tree_cache: make kept * 20 tokens free at once
                # (evict_to_free_tokens evicts only the shortfall).
                self._evict_to_free(len(order) * RETRACT_DECODE_STEPS)
            victims.append(victim.request_id)
        if len(order) <= 1 and not self._decode_fits(order):
            # retract_decode would abort this last request (FINISH_ABORT, "Out of memory even
            # after retracting all other requests"). It cannot happen here: add_request clips
            # prompt + max_new to the pool less a page and one token, and while a request
            # decodes nothing else holds KV that eviction cannot free (a chunked prefill runs
            # before any decode; a victim gives back all of its own). So it is not modelled;
            # reaching it means an accounting error.
            raise RuntimeError(
                "SGLang mode: the last running request cannot decode even alone, which the "
                "clipped max_new rules out (retract_decode's out-of-memory abort); an engine "
                "accounting error"
            )
        self.running = order
        for rid in victims:
            self.waiting.add_request(self.requests[rid])
        self.last_retractions.append((victims, [r.request_id for r in order]))

    # ----------------------------------------------------------------------------- radix
    def _token_ids(self, request: SchedulerRequest) -> array[int]:
        """At least the request's prompt and output tokens, as the recorder's driver builds them.

        Cached per request and lengthened in place only when outputs grew, so that the tree is
        handed the same array with a length instead of a fresh slice at every match and
        checkpoint (the tree keeps copies: slices).
        """
        rid = request.request_id
        ids = self._tokens.get(rid)
        if ids is None:
            ids = _prompt_token_ids(
                request.index,
                request.num_prompt_tokens,
                request.content_ids,
                request.content_block_tokens,
            )
        want = request.num_prompt_tokens + request.num_output_tokens
        if len(ids) < want:
            ids.extend(_SAMPLED * (want - len(ids)))
        self._tokens[rid] = ids
        return ids

    def _checkpoint(self, request: SchedulerRequest, up_to: int | None = None) -> None:
        """``UnifiedRadixCache.checkpoint_into_tree``: publish the computed tokens, move the lock.

        ``up_to``: the tokens to publish (``extend_end`` of an unfinished prefill); default
        what the request holds and knows (``owned_kv_len``: its KV, at most prompt plus
        outputs). The request's own tokens move into the tree; those the tree already held
        (computed twice) go back to the pool. When the key runs past the prompt, the prompt is
        inserted again so that the leaf splits at the prompt boundary (outputs can go without
        it).
        """
        radix = self.radix
        assert radix is not None
        rid = request.request_id
        length = min(request.num_computed_tokens, request.num_tokens)
        if up_to is not None:
            length = min(length, up_to)
        if not length:
            return
        key = self._token_ids(request)
        # (The path to the node it holds locked is its own: the walk starts there.)
        old = self._node.get(rid)
        already, node = radix.insert(key, length, old)
        duplicate = max(already - self._shared.get(rid, 0), 0)
        if duplicate:
            self.block_pool.free(duplicate)
        # What is left of its own tokens up to ``length`` now belongs to the tree; what it
        # holds past ``length`` (a decode in flight under overlap) stays its own.
        shared = -(-length // self.config.block_size)
        own = -(-request.num_computed_tokens // self.config.block_size) - shared
        request.num_blocks = max(own, 0)
        prompt = request.num_prompt_tokens
        if 0 < prompt < length:
            radix.insert(key, prompt, old)
        radix.lock(node)
        if old is not None:
            radix.unlock(old)
        self._node[rid] = node
        self._shared[rid] = length

    def _release_finished(self, request: SchedulerRequest) -> None:
        """Return a finished request's KV (radix cache: later, in batch order, to the tree)."""
        if self.radix is None:
            super()._release_finished(request)

    def _release_tree(self, request: SchedulerRequest) -> None:
        """Unlock a released request's path (its tree tokens become evictable)."""
        if self.radix is None:
            return
        node = self._node.pop(request.request_id, None)
        if node is not None:
            self.radix.unlock(node)
        self._shared.pop(request.request_id, None)

    def _evict_to_free(self, num_tokens: int) -> None:
        """``evict_to_free_tokens``: evict until ``num_tokens`` are free (or the tree is empty)."""
        assert self.radix is not None
        shortfall = num_tokens - self._free_tokens()
        if shortfall > 0:
            freed = self.radix.evict(shortfall)
            if freed:
                self.block_pool.free(freed)
                self._evicted += freed

    def _record_cache(self, out: ScheduledStep) -> None:
        """The step's radix hits (each admission's) and tree tokens evicted (trace v2)."""
        if self.step_cache_hits:
            out.cache_hits = self.step_cache_hits
        out.num_evicted_blocks = self._evicted - self._evicted_reported
        self._evicted_reported = self._evicted
        out.cache_recorded = True

    def record_cache_figures(self, out: ScheduledStep) -> None:
        """See :meth:`SchedulerBase.record_cache_figures`: radix hits and tree evictions."""
        self._record_cache(out)

    # ----------------------------------------------------------------------------- outputs
    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[SchedulerRequest]:
        """Apply outputs; finished requests shrink the batch (``batch_is_full`` clears).

        Normal loop: the outputs of ``out``. Overlap: ``out`` is launched and the outputs
        applied are those of the batch before it (``event_loop_overlap``'s ``pop_and_process``
        after the next batch was scheduled), plus those applied by no-batch iterations since;
        :attr:`outputs_end_s` is when they were produced.

        With the radix cache, the tree then sees the batch in order, as
        ``process_batch_result_prefill`` / ``_decode`` do: a finished request is published and
        released (``release_kv_cache(checkpoint=True)``), an unfinished prefilled one is
        checkpointed; a request part-way through a chunked prefill waits for the next step.
        """
        if not out.cache_recorded:
            self._record_cache(out)
        if not self.overlap:
            launched = self._launching or self._launch(out)
            self._launching = None
            launched.end_s = end_s
            self.outputs_end_s = end_s
            finished = self._process(launched)
            if not self.running and self.chunked is None and not self.waiting:
                # Scheduler.on_idle runs when a loop iteration finds no batch: fully idle, the
                # ratio starts again. That happens unless a request arrives for the very next
                # step.
                self._idle = True
                self._idle_after = out.step
            return finished
        finished = self._pending
        self._pending = []
        if out.no_batch:
            return finished
        current = self._launching
        assert current is not None and current.out is out
        self._launching = None
        current.end_s = end_s
        done, self._in_flight = self._in_flight, current
        if done is not None:
            finished += self._process(done)
        return finished

    def _process(self, launched: _Launched) -> list[SchedulerRequest]:
        """``process_batch_result`` of one batch: fake outputs, finishes, the tree's updates.

        Requests since finished or retracted (overlap: after the batch launched) are skipped,
        as is a middle chunk; every other one samples a token.
        """
        end_s = launched.end_s
        self.outputs_end_s = end_s
        requests = self.requests
        no_sample = launched.no_sample
        running_status = RequestStatus.RUNNING
        finished: list[SchedulerRequest] = []
        # With the radix cache, the requests the tree sees, in batch order: after a prefill
        # every one processed (checkpointed or published), after a decode the finished ones.
        processed: list[SchedulerRequest] | None = (
            [] if self.radix is not None and launched.prefill else None
        )
        for request in launched.reqs:
            # (A finished request has its final status; a retracted one waits again.)
            if request.status != running_status or request is no_sample:
                continue
            if processed is not None:
                processed.append(request)
            output = request.num_output_tokens + 1
            request.num_output_tokens = output
            if output == 1:
                request.first_token_s = end_s
            if output < request.stop_output_tokens:
                continue
            request.status = request.stop_status
            request.finish_s = end_s
            self._release_finished(request)
            del requests[request.request_id]
            finished.append(request)
        if finished:
            before = len(self.running)
            self.running = [r for r in self.running if r.status == running_status]
            if len(self.running) < before:
                # Finished requests leave SGLang's running batch at the next filter (until
                # then, under overlap, the loop is not idle).
                self._reset_full = True
                self._unfiltered = self.overlap
            if self._finishing:
                self._finishing = [r for r in self._finishing if r.status == running_status]
        if self.radix is not None and (processed or finished):
            ends = launched.ends if launched.prefill else None
            for request in finished if processed is None else processed:
                if request.status in FINISHED_STATUSES:
                    self._checkpoint(request)
                    # (Anything it held past what the tree keeps goes back to the pool.)
                    self.block_pool.free(request.num_blocks)
                    request.num_blocks = 0
                    self._release_tree(request)
                elif ends is not None:
                    self._checkpoint(request, ends[request.request_id])
        for request in finished:
            self._drop(request.request_id)
        return finished

    def check_consistency(self) -> None:
        """Check block accounting and queue membership; raise ``AssertionError`` if broken."""
        holders = list(self.running) + list(self._finishing)
        if self.chunked is not None:
            holders.append(self.chunked)
        held = sum(r.num_blocks for r in holders)
        tree = 0 if self.radix is None else self.radix.evictable + self.radix.protected
        assert held + tree == self.block_pool.num_used_blocks, "block accounting drifted"
        if self.radix is not None:
            leaves, stack = set(), [self.radix.root]
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                if not node.children and node is not self.radix.root:
                    leaves.add(node)
            assert leaves == set(self.radix.leaves), "radix leaf index drifted"
        for r in self.waiting:
            assert r.num_blocks == 0 and r.num_computed_tokens == 0, r
        assert len(holders) + len(self.waiting) == len(self.requests)


def _reserved_output(left: int, ignore_eos: bool, ratio: float) -> float:
    """What a running request with ``left`` outputs to go reserves at an admission attempt.

    ``min(left, 4096) * new_token_ratio``, or all of it for ``ignore_eos``
    (``PrefillAdder._get_running_request_total_token_offset``).
    """
    return (left if left < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS) * (
        1.0 if ignore_eos else ratio
    )


def _total_reserved(
    running: list[SchedulerRequest], max_new: dict[str, int], ratio: float, ahead: int = 0
) -> float:
    """The running batch's :func:`_reserved_output`, summed in batch order (``PrefillAdder``).

    ``ahead``: as it will be that many decodes from now (each request one output further).
    Added one by one from 0.0 as SGLang's ``sum`` of a list of floats does on Python 3.11,
    where its fixtures were recorded; the formula is inlined (a call per request, at every
    admission attempt, was a third of the time of the SGLang mode on a 32-request batch).
    """
    total = 0.0
    for r in running:
        left = max_new[r.request_id] - r.num_output_tokens - ahead
        total += (left if left < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS) * (
            1.0 if r.ignore_eos else ratio
        )
    return total


def _drains(states: list[tuple[float, int]], free_now: float) -> bool:
    """``add_one_req_ignore_eos``'s check: the batch drains without running out of tokens.

    The requests by tokens left (ascending): when the i-th finishes, every request still
    running has taken as many tokens as it has; what is free then (``free_now``, plus what the
    finished ones occupied, less that) must stay above ``IGNORE_EOS_RESERVE_TOKENS`` per
    request still running.
    """
    freed = 0
    size = len(states)
    for i, (left, occupied) in enumerate(states):
        running = size - i
        if free_now + freed - left * running <= IGNORE_EOS_RESERVE_TOKENS * running:
            return False
        freed += occupied
    return True


def _left(state: tuple[float, int]) -> float:
    return state[0]


def _add_state(
    states: list[tuple[float, int]],
    request: SchedulerRequest,
    max_new: int,
    ratio: float,
    insert_sort: bool,
) -> None:
    """``add_one_req_ignore_eos``'s ``add_req_state``: (tokens left, tokens occupied).

    Tokens left are ``max_new * ratio - outputs`` (ratio 1 for ``ignore_eos``); a request with
    none left is not counted. With ``insert_sort`` it goes before the first entry with as many
    tokens left or more, else before the last entry (SGLang's loop leaves its index at the
    last position when no entry stops it).
    """
    left = max_new * (1.0 if request.ignore_eos else ratio) - request.num_output_tokens
    if left <= 0:
        return
    entry = (left, request.num_prompt_tokens + request.num_output_tokens)
    if not insert_sort:
        states.append(entry)
        return
    i = 0
    for i in range(len(states)):
        if left <= states[i][0]:
            break
    states.insert(i, entry)


# The recorder driver's token ids (tracekit/sglang/driver.py prompt_token_ids), so that the radix
# tree here keys on the same content: Mooncake block h holds _HASH_BASE + h * 512 (+ j in the
# driver); request i's own tokens _UNIQUE_BASE + i * 2**24 (+ position in the driver); every
# output token is SAMPLED_TOKEN.
SAMPLED_TOKEN = 5
_SAMPLED = array("q", [SAMPLED_TOKEN])
_HASH_BASE = 1 << 33
_UNIQUE_BASE = 1 << 45


def _prompt_token_ids(
    index: int, prompt_tokens: int, content_ids: tuple[int, ...], block_tokens: int
) -> array[int]:
    """The prompt's token ids as the tree compares them (int64, built in C, not token by token).

    The driver gives every token its own id (block ``h``'s ``j``-th token, request ``i``'s
    token at a position). Here a content block is one token repeated, and so is a request's own
    part. The tree matches the same: it only ever compares tokens at equal positions (every key
    starts at the root), and at one position two requests' tokens agree exactly when the
    driver's do (the same block, blocks being cut at the same positions in every request, or
    the same request).
    """
    ids: array[int] = array("q")
    for h in content_ids:
        if len(ids) >= prompt_tokens:
            break
        ids.extend(array("q", [_HASH_BASE + int(h) * block_tokens]) * block_tokens)
    del ids[prompt_tokens:]
    ids.extend(array("q", [_UNIQUE_BASE + index * (1 << 24)]) * (prompt_tokens - len(ids)))
    return ids
