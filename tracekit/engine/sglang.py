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
  the waiting queue is sorted by ``(priority, entry time)`` (``schedule_policy.py``
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
- ``max_new`` is ``min(max_tokens, context - prompt, pool - prompt - 2)``
  (``Scheduler.handle_generate_request`` -> ``init_req_max_new_tokens``), which also caps the
  output.

The radix cache (``radix_cache=True``; ``mem_cache/unified_radix_cache.py``) is a token trie over
the requests' token content (:mod:`tracekit.engine.content`: Mooncake ``hash_ids`` make shared
prefixes), see :class:`RadixTree`. Not modelled: mixed chunked prefill, overlap scheduling,
priority preemption at admission, ``ignore_eos`` requests, HiCache, page sizes above 1 exactly.
"""

from __future__ import annotations

import heapq

from tracekit.engine.base import DecisionCallback, ScheduledStep, SchedulerBase
from tracekit.engine.config import EngineConfig
from tracekit.engine.fake_model import apply_fake_outputs
from tracekit.engine.hosts import VictimHost
from tracekit.engine.request import FINISHED_STATUSES, RequestState, RequestStatus

__all__ = [
    "CLIP_MAX_NEW_TOKENS",
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
#: ``CLIP_MAX_NEW_TOKENS``: cap on the reserved output tokens of one request.
CLIP_MAX_NEW_TOKENS = 4096

#: ``schedule_policy.py``: how often, and for how many waiting requests, the tree's LRU times
#: of waiting prefixes are refreshed (``SGLANG_ENABLE_WAITING_PREFIX_REFRESH``, on by default).
WAITING_PREFIX_REFRESH_INTERVAL = 32
WAITING_QUEUE_PREFIX_MATCH_MAX = 128

# PrefillAdder verdicts (schedule_policy.py AddReqResult).
_CONTINUE, _NO_TOKEN, _OTHER = 0, 1, 2


def retraction_order(running: list[RequestState], policy: str = "length") -> list[RequestState]:
    """SGLang's ``_get_decode_retraction_order``: most to least preferred to keep.

    ``(outputs, -prompt)`` descending (``"length"``), or ``(-priority, outputs, -prompt)``
    descending (``"priority"``: lower values are kept first). Python's sort is stable under
    ``reverse=True``, as SGLang's is, so ties keep the batch order. Returns a new list; the last
    element is the first victim.
    """
    if policy == "priority":
        return sorted(
            running,
            key=lambda r: (-r.priority, r.num_output_tokens, -r.num_prompt_tokens),
            reverse=True,
        )
    return sorted(running, key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens), reverse=True)


class SglangWaitingQueue(list[RequestState]):
    """SGLang's waiting queue: a list; arrivals and retracted requests join its tail.

    ``entry`` stamps every addition (``Scheduler._add_request_to_queue`` sets
    ``wait_queue_entry_time``), the second key of the priority sort.
    """

    __slots__ = ("counter", "entry")

    def __init__(self) -> None:
        super().__init__()
        self.entry: dict[str, int] = {}
        self.counter = 0

    def add_request(self, request: RequestState) -> None:
        """Append ``request`` with a new entry stamp."""
        self.counter += 1
        self.entry[request.request_id] = self.counter
        self.append(request)

    def sort_by_priority(self) -> None:
        """``SchedulePolicy._sort_by_priority_and_fcfs`` (lower values first)."""
        entry = self.entry
        self.sort(key=lambda r: (r.priority, entry[r.request_id]))


class _Node:
    __slots__ = ("access", "children", "created", "key", "lock", "parent")

    def __init__(self, key: tuple[int, ...], parent: _Node | None, now: int) -> None:
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
        self.root = _Node((), None, self._tick())
        self.root.lock = 1
        self.evictable = 0
        self.protected = 0
        # The current leaves (root excluded), kept as the tree changes so that an eviction does
        # not walk the whole tree to find them. A dict: insertion-ordered, hence deterministic.
        self.leaves: dict[_Node, None] = {}

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def match(self, key: tuple[int, ...], n: int) -> tuple[int, _Node]:
        """Length of the longest cached prefix of ``key[:n]`` and its last node (touches the path).

        The length ``n`` is given apart so that callers pass a request's whole cached key
        without slicing it.
        """
        node = self.root
        matched = 0
        while matched < n:
            child = node.children.get(key[matched])
            if child is None:
                break
            length = _common(child.key, key, matched, n)
            matched += length
            if length < len(child.key):
                node = self._split(child, length)
                break
            node = child
        now: float = self._tick()
        update: _Node | None = node
        while update is not None:
            update.access = now
            now -= 0.00001
            update = update.parent
        return matched, node

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

    def insert(self, key: tuple[int, ...], n: int) -> tuple[int, _Node]:
        """Publish ``key[:n]``: how many leading tokens were already cached, and its last node."""
        node = self.root
        matched = 0
        while matched < n:
            child = node.children.get(key[matched])
            if child is None:
                break
            child.access = self._tick()
            length = _common(child.key, key, matched, n)
            matched += length
            if length < len(child.key):
                node = self._split(child, length)
                break
            node = child
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


def _common(a: tuple[int, ...], key: tuple[int, ...], start: int, end: int) -> int:
    """Length of the common prefix of ``a`` and ``key[start:end]``."""
    n = min(len(a), end - start)
    # Usually the whole node matches: one comparison in C.
    if key[start : start + n] == (a if n == len(a) else a[:n]):
        return n
    i = 0
    while i < n and a[i] == key[start + i]:
        i += 1
    return i


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
    """

    def __init__(
        self,
        config: EngineConfig,
        host: VictimHost,
        on_decision: DecisionCallback | None = None,
    ) -> None:
        super().__init__(config, host, on_decision)
        self.waiting: SglangWaitingQueue = SglangWaitingQueue()  # type: ignore[assignment]
        # A request part-way through a chunked prefill: neither waiting nor decoding.
        self.chunked: RequestState | None = None
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
        # SGLang's clipped max_new_tokens per request (init_req_max_new_tokens).
        self.max_new: dict[str, int] = {}
        self.radix: RadixTree | None = RadixTree() if config.radix_cache else None
        # Radix bookkeeping per request: token ids (prompt, then one SAMPLED_TOKEN per output
        # so far; built once, lengthened as outputs grow), the locked node, tokens owned by the
        # tree.
        self._tokens: dict[str, tuple[int, ...]] = {}
        self._node: dict[str, _Node] = {}
        self._shared: dict[str, int] = {}
        # Retraction events of the last schedule() (for comparisons): (victims, kept order).
        self.last_retractions: list[tuple[list[str], list[str]]] = []
        self.last_admission_stop: str | None = None
        # Tokens already in KV (radix hit or earlier chunks) of each request prefilled in the
        # last schedule(), before the step.
        self.last_cached: dict[str, int] = {}

    # ----------------------------------------------------------------------------- queues
    def add_request(self, request: RequestState) -> None:
        """Queue a new request; clip its ``max_new`` and stop as SGLang does."""
        super().add_request(request)
        prompt = request.num_prompt_tokens
        limit = min(self.config.max_model_len - prompt, self.kv_tokens - prompt - 2)
        max_new = max(0, min(request.max_tokens, limit))
        self.max_new[request.request_id] = max_new
        if max_new <= request.target_output_tokens:
            request.stop_output_tokens = max_new
            request.stop_status = RequestStatus.FINISHED_LENGTH_CAPPED
        else:
            request.stop_output_tokens = request.target_output_tokens
            request.stop_status = RequestStatus.FINISHED_STOPPED

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
        if self.last_retractions:
            self.last_retractions = []
        self.last_admission_stop = None
        if self.last_cached:
            self.last_cached = {}
        if self._idle:
            if step > self._idle_after + 1:
                self.new_token_ratio = INIT_NEW_TOKEN_RATIO
            self._idle = False
        if self._reset_full:
            self.batch_is_full = False
            self._reset_full = False
        chunked = self.chunked
        if (
            chunked is not None
            and self.radix is not None
            and chunked.num_computed_tokens > self._shared.get(chunked.request_id, 0)
        ):
            # get_next_batch_to_run -> stash_chunked_request: checkpoint the chunks so far.
            self._checkpoint(chunked)
        if self.running and self.chunked is None and (self.batch_is_full or not self.waiting):
            # _get_new_batch_prefill_raw would return at once: no admission attempt.
            self._schedule_decode(out, step, now)
        elif not self._schedule_prefill(out, now):
            self._schedule_decode(out, step, now)
        return out

    def _free_tokens(self) -> int:
        return self.block_pool.num_free_blocks * self.config.block_size

    def _evictable(self) -> int:
        return 0 if self.radix is None else self.radix.evictable

    def _schedule_prefill(self, out: ScheduledStep, now: float) -> bool:
        """``_get_new_batch_prefill_raw`` with a fresh ``PrefillAdder``."""
        config = self.config
        running = self.running
        if not running:
            self.batch_is_full = False
        chunked = self.chunked
        waiting = self.waiting
        if (self.batch_is_full or not waiting) and chunked is None:
            return False
        slots = config.max_num_seqs - len(running)
        if slots <= 0 and chunked is None:
            self.batch_is_full = True
            return False
        # SchedulePolicy.calc_priority matches no waiting request here: UnifiedRadixCache's
        # tree core does not support fast matching (supports_fast_match_prefix is False).
        radix = self.radix
        if config.scheduling_policy == "priority":
            waiting.sort_by_priority()
        if radix is not None and waiting:
            # SchedulePolicy._touch_waiting_prefixes: every 32nd call, refresh the LRU times of
            # the first 128 waiting requests' cached paths, head last (touch_waiting_prefix).
            if self._refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0:
                for request in reversed(waiting[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                    radix.match(self._token_ids(request), request.num_tokens)
            self._refresh_calls += 1
        ratio = self.new_token_ratio
        max_new = self.max_new
        # PrefillBudget: offsets against available + evictable (read live: locks change it).
        total_offset = 0.0
        for r in running:
            left = max_new[r.request_id] - r.num_output_tokens
            total_offset += min(left, CLIP_MAX_NEW_TOKENS) * ratio
        current_offset = 0.0
        rem_input = config.max_num_batched_tokens
        rem_chunk = self.chunk_size
        free = self._free_tokens()
        batch: list[tuple[RequestState, int]] = []
        new_chunked: RequestState | None = None
        continues = False

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
            if len(batch) >= slots:
                self.batch_is_full = True
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
            remaining = min(max(max_new[rid] - request.num_output_tokens, 0), CLIP_MAX_NEW_TOKENS)
            cand = request.num_tokens - prefix
            total = cand + remaining + 1
            pool = free + self._evictable()
            result = _CONTINUE
            extend = cand
            is_chunked = False
            if not total < pool - total_offset:
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
                    self.batch_is_full = bool(batch) or bool(running)
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
            return False
        # The loop admits from the head of the queue and stops at the first refusal: the
        # admitted waiting requests are its first len(batch) (less the continuing chunk).
        del waiting[: len(batch) - (chunked is not None)]
        # A chunk continues: the batch shrinks when merged; an empty running batch is replaced.
        self._reset_full = not running or continues or new_chunked is not None
        self.chunked = chunked if continues else new_chunked
        pool_blocks = self.block_pool
        block_size = config.block_size
        for request, n in batch:
            self.last_cached[request.request_id] = request.num_computed_tokens
            computed = request.num_computed_tokens + n
            need = self._blocks_needed(request, computed)
            if radix is not None:
                self._evict_to_free(need * block_size)
            pool_blocks.allocate(need)
            request.num_blocks += need
            request.num_computed_tokens = computed
            request.status = RequestStatus.RUNNING
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now
            out.num_scheduled_tokens[request.request_id] = n
            out.num_prefill_tokens += n
            out.kv_tokens_read += computed
            if request is not self.chunked:
                running.append(request)
        return True

    def _schedule_decode(self, out: ScheduledStep, step: int, now: float) -> None:
        """``update_running_batch``: retract until the step fits, or decay the ratio."""
        running = self.running
        if not running:
            return
        pool = self.block_pool
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
            return
        if not self._decode_fits(self.running):
            self._retract(step, now)
            out.num_preemptions = sum(len(v) for v, _ in self.last_retractions)
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

    def _blocks_needed(self, request: RequestState, computed: int) -> int:
        """Blocks to allocate so that ``computed`` tokens are in KV.

        The tree holds the request's first ``shared`` tokens (radix cache); the request holds
        the rest in ``num_blocks``.
        """
        block_size = self.config.block_size
        shared = self._shared.get(request.request_id, 0)
        return -(-computed // block_size) - -(-shared // block_size) - request.num_blocks

    def _decode_need(self, requests: list[RequestState]) -> int:
        """``new_tokens_required_next_decode``: a page for each request at a page boundary."""
        block_size = self.config.block_size
        return sum(1 for r in requests if r.num_computed_tokens % block_size == 0)

    def _decode_fits(self, requests: list[RequestState]) -> bool:
        """``check_decode_mem``: evict the tree for the step, then compare with the free pool."""
        need = self._decode_need(requests)
        if self.radix is not None:
            self._evict_to_free(need * self.config.block_size)
        return self.block_pool.num_free_blocks >= need

    def _retract(self, step: int, now: float) -> None:
        """``retract_decode`` with each pop decided by the host."""
        order = retraction_order(self.running, self.config.retraction_policy)
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
            if self.radix is not None:
                # release_req -> evict_from_tree_cache: make kept * 20 tokens free at once
                # (evict_to_free_tokens evicts only the shortfall).
                self._evict_to_free(len(order) * RETRACT_DECODE_STEPS)
            victims.append(victim.request_id)
        if len(order) <= 1 and not self._decode_fits(order):
            raise RuntimeError(
                "SGLang would abort the last running request: even alone it cannot decode "
                "(retract_decode's out-of-memory abort is not modelled)"
            )
        self.running = order
        for rid in victims:
            self.waiting.add_request(self.requests[rid])
        self.last_retractions.append((victims, [r.request_id for r in order]))

    # ----------------------------------------------------------------------------- radix
    def _token_ids(self, request: RequestState) -> tuple[int, ...]:
        """At least the request's prompt and output tokens, as the recorder's driver builds them.

        Cached per request and lengthened only when outputs grew, so that the tree is handed
        the same tuple with a length instead of a fresh slice at every match and checkpoint.
        """
        rid = request.request_id
        ids = self._tokens.get(rid)
        if ids is None:
            ids = tuple(
                _prompt_token_ids(
                    request.index,
                    request.num_prompt_tokens,
                    request.content_ids,
                    request.content_block_tokens,
                )
            )
        want = request.num_prompt_tokens + request.num_output_tokens
        if len(ids) < want:
            ids += (SAMPLED_TOKEN,) * (want - len(ids))
        self._tokens[rid] = ids
        return ids

    def _checkpoint(self, request: RequestState) -> None:
        """``UnifiedRadixCache.checkpoint_into_tree``: publish the computed tokens, move the lock.

        The request's own tokens move into the tree; those the tree already held (computed
        twice) go back to the pool. When the key runs past the prompt, the prompt is inserted
        again so that the leaf splits at the prompt boundary (outputs can go without it).
        """
        radix = self.radix
        assert radix is not None
        rid = request.request_id
        # (The computed tokens never run past the known ones; min() keeps that explicit.)
        length = min(request.num_computed_tokens, request.num_tokens)
        if not length:
            return
        key = self._token_ids(request)
        already, node = radix.insert(key, length)
        duplicate = max(already - self._shared.get(rid, 0), 0)
        if duplicate:
            self.block_pool.free(duplicate)
        request.num_blocks = 0  # what is left of its own tokens now belongs to the tree
        prompt = request.num_prompt_tokens
        if 0 < prompt < length:
            radix.insert(key, prompt)
        old = self._node.get(rid)
        radix.lock(node)
        if old is not None:
            radix.unlock(old)
        self._node[rid] = node
        self._shared[rid] = length

    def _release_finished(self, request: RequestState) -> None:
        """Return a finished request's KV (radix cache: later, in batch order, to the tree)."""
        if self.radix is None:
            super()._release_finished(request)

    def _release_tree(self, request: RequestState) -> None:
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

    # ----------------------------------------------------------------------------- outputs
    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[RequestState]:
        """Apply outputs; finished requests shrink the batch (``batch_is_full`` clears).

        With the radix cache, the tree then sees the batch in order, as
        ``process_batch_result_prefill`` / ``_decode`` do: a finished request is published and
        released (``release_kv_cache(checkpoint=True)``), an unfinished prefilled one is
        checkpointed; a request part-way through a chunked prefill waits for the next step.
        """
        batch = None
        prefill = out.num_prefill_tokens > 0
        if self.radix is not None and prefill:
            requests = self.requests
            batch = [requests[rid] for rid in out.num_scheduled_tokens]
        finished = apply_fake_outputs(
            out.num_scheduled_tokens, self.requests, self._release_finished, end_s
        )
        if finished:
            running = RequestStatus.RUNNING
            self.running = [r for r in self.running if r.status == running]
        if batch is not None:
            for request in batch:
                if request is self.chunked:
                    continue
                self._checkpoint(request)
                if request.status in FINISHED_STATUSES:
                    self._release_tree(request)
        elif self.radix is not None:
            # A decode step: finished requests, in batch order, publish and release.
            for request in finished:
                self._checkpoint(request)
                self._release_tree(request)
        if finished:
            self._reset_full = True
            for request in finished:
                self.max_new.pop(request.request_id, None)
                self._tokens.pop(request.request_id, None)
        if not self.running and self.chunked is None and not self.waiting:
            # Scheduler.on_idle runs when a loop iteration finds no batch: fully idle, the
            # ratio starts again. That happens unless a request arrives for the very next step.
            self._idle = True
            self._idle_after = out.step
        return finished

    def check_consistency(self) -> None:
        """Check block accounting and queue membership; raise ``AssertionError`` if broken."""
        holders = list(self.running) + ([self.chunked] if self.chunked is not None else [])
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


# The recorder driver's token ids (tracekit/sglang/driver.py prompt_token_ids), so that the radix
# tree here keys on the same content: Mooncake block h holds _HASH_BASE + h * 512 + j; request i's
# own tokens _UNIQUE_BASE + i * 2**24 + position; every output token is SAMPLED_TOKEN.
SAMPLED_TOKEN = 5
_HASH_BASE = 1 << 33
_UNIQUE_BASE = 1 << 45


def _prompt_token_ids(
    index: int, prompt_tokens: int, content_ids: tuple[int, ...], block_tokens: int
) -> list[int]:
    ids: list[int] = []
    for h in content_ids:
        if len(ids) >= prompt_tokens:
            break
        start = _HASH_BASE + int(h) * block_tokens
        ids.extend(range(start, start + block_tokens))
    del ids[prompt_tokens:]
    own = _UNIQUE_BASE + index * (1 << 24)
    ids.extend(range(own + len(ids), own + prompt_tokens))
    return ids
