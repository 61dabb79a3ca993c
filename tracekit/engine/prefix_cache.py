"""vLLM's block pool with automatic prefix caching (vLLM 0.32.0 / 0.33.0, one full-attention group).

Sources: ``vllm/v1/core/block_pool.py`` (``BlockPool.get_cached_block``, ``cache_full_blocks``,
``get_new_blocks``, ``_maybe_evict_cached_block``, ``touch``, ``free_blocks``),
``vllm/v1/core/kv_cache_utils.py`` (``FreeKVCacheBlockQueue``, ``get_request_block_hasher``),
``vllm/v1/core/single_type_kv_cache_manager.py`` (``FullAttentionManager.find_longest_cache_hit``,
``get_num_blocks_to_allocate``, ``add_local_computed_blocks``, ``cache_blocks``, ``free``). With
one group the ``UnitaryKVCacheCoordinator`` requires ``hash_block_size == block_size``, so there
is no fine-grained or partial-tail caching; the two releases' rules agree on this path (their
diffs touch lookahead hashes, EAGLE, sliding windows and the null block only).

**The free queue.** vLLM's ``free_blocks`` *prepends* blocks without a hash (LIFO reuse) and
*appends* hashed blocks to the tail (LRU), a block is only ever touched out of the queue if it is
hashed, and a block gains a hash only while a request holds it. So the free queue is always
"every free unhashed block, then the free hashed blocks in the order they were freed", and
``popleft_n`` takes unhashed blocks first. Unhashed free blocks are interchangeable, so this pool
keeps them as a count of anonymous blocks and the hashed ones in an ordered dict.

**Blocks.** A :class:`Block` has a key (``None`` when not cached) and a reference count.
The cached map sends a key to its block, or to its blocks in insertion order when two requests
computed the same block (``BlockHashToBlockMap``, which keeps a lone block unwrapped too: a hit
takes the first); a block is evicted from it only when ``get_new_blocks`` reuses it.

**Keys** stand for vLLM's chained block hashes: equal key exactly when the token prefix through
the block is equal (:mod:`tracekit.engine.content`).
"""

from __future__ import annotations

from collections import OrderedDict
from operator import attrgetter
from typing import final

from tracekit.engine.content import block_segments, content_length
from tracekit.engine.request import SchedulerRequest

__all__ = ["Block", "PrefixCachingBlockPool"]

_REF_CNT = attrgetter("ref_cnt")

#: Blocks per request in a unique key's packing (more than any max_model_len needs).
_UNIQUE_STRIDE = 1 << 40

#: Unique keys made ahead of need (see block_keys).
_UNIQUE_AHEAD = 16

#: A key no block has (the remembered lookup missed nothing: it hit every block it could).
_NO_KEY = object()


# Final: the hot paths tell a block from a set of duplicates by ``type(e) is Block``, which a
# type checker can narrow only for a class with no subclasses.
@final
class Block:
    """One KV block: its key while cached (``None`` otherwise) and its reference count."""

    __slots__ = ("key", "ref_cnt")

    def __init__(self) -> None:
        self.key: object = None
        self.ref_cnt = 0


class PrefixCachingBlockPool:
    """The usable KV blocks with vLLM's prefix cache.

    Parameters
    ----------
    num_blocks
        All blocks including the null block; ``num_blocks - 1`` are usable.
    block_size
        Tokens per block (also the hash block size).
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"num_blocks must be at least 2 (one is the null block); found {num_blocks}"
            )
        self.num_usable_blocks = num_blocks - 1
        self.block_size = block_size
        #: Free usable blocks, keyed or not (vLLM ``get_num_free_blocks``); kept up to date.
        self.num_free_blocks = num_blocks - 1
        # Free blocks without a key, at the head of vLLM's free queue.
        self._free_unhashed: list[Block] = [Block() for _ in range(num_blocks - 1)]
        # Free blocks with a key, in free-queue order (head first).
        self._free_hashed: OrderedDict[Block, None] = OrderedDict()
        # key -> the block cached under it, or (duplicates) its blocks first inserted first.
        self._cached: dict[object, Block | dict[Block, None]] = {}
        # (parent key, segments) -> interned key of a content block.
        self._content_keys: dict[tuple[object, tuple[tuple[int, int, int], ...]], int] = {}
        #: Cached blocks evicted (reused) so far.
        self.num_evicted = 0
        #: Bumped whenever blocks' reference counts drop or a hit is touched (``free_blocks``,
        #: ``touch``): a remembered count of evictable hit blocks is stale once it moves.
        self.ref_epoch = 0
        # The last lookup (the head of the waiting queue is looked up every step until it fits):
        # its request, block cap, hit, each hit block's position, the first key it missed, and
        # the position to walk again from (``_memo_dirty``; None when clean). Evicting a hit
        # block dirties the hit from that block on (the blocks before it are still cached and
        # still the first of their keys); caching the missing key dirties it from its end.
        self._memo_request: SchedulerRequest | None = None
        self._memo_max = -1
        self._memo_hit: list[Block] = []
        self._memo_pos: dict[Block, int] = {}
        self._memo_next: object = None
        self._memo_dirty: int | None = None

    # ----------------------------------------------------------------------------- counts
    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_usable_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks that carry a key (held or free)."""
        return sum(1 if type(e) is Block else len(e) for e in self._cached.values())

    def cached_block(self, key: object) -> Block | None:
        """The block a hit on ``key`` takes (the first cached under it), or None."""
        entry = self._cached.get(key)
        if entry is None or type(entry) is Block:
            return entry
        return next(iter(entry))

    def get_usage(self) -> float:
        """Fraction of usable blocks in use, computed exactly as vLLM's ``get_usage``."""
        return 1.0 - (self.num_free_blocks / self.num_usable_blocks)

    # ----------------------------------------------------------------------------- keys
    def block_keys(self, request: SchedulerRequest, num_blocks: int) -> list[object]:
        """The request's keys of its first ``num_blocks`` full blocks, computed as needed.

        Precondition: those blocks are full (``num_blocks * block_size <= num_tokens``).
        """
        keys = request.block_hashes
        done = len(keys)
        if done >= num_blocks:
            return keys
        content_ids = request.content_ids
        # (No content, the usual case: every block is unique to the request.)
        num_content = 0
        if content_ids:
            block_size = self.block_size
            chunk = request.content_block_tokens
            limit = content_length(request.num_prompt_tokens, content_ids, chunk)
            # Blocks wholly inside the content region come first (block j ends at
            # (j+1)*block_size).
            num_content = min(num_blocks, limit // block_size)
        if done < num_content:
            interned = self._content_keys
            parent = keys[-1] if keys else None
            # A block never straddles two content ids when they are whole blocks (Mooncake: 512).
            aligned = chunk % block_size == 0
            for j in range(done, num_content):
                start = j * block_size
                if aligned:
                    segments: tuple[tuple[int, int, int], ...] = (
                        (content_ids[start // chunk], start % chunk, block_size),
                    )
                else:
                    segments = block_segments(content_ids, chunk, start, start + block_size)
                entry = (parent, segments)
                key = interned.get(entry)
                if key is None:
                    key = interned[entry] = len(interned)
                keys.append(key)
                parent = key
            done = num_content
        if done < num_blocks:
            # A block holding a token unique to the request equals only itself: its key is the
            # pair (request index, block index), packed into a negative int (content keys are
            # >= 0), which hashes and compares faster than a tuple. Such keys depend on nothing
            # else, so the next _UNIQUE_AHEAD are made too (a decoding request fills one block
            # at a time; readers index the keys they need, never past the blocks filled).
            base = -1 - request.index * _UNIQUE_STRIDE
            keys.extend(range(base - done, base - num_blocks - _UNIQUE_AHEAD, -1))
        return keys

    # ----------------------------------------------------------------------------- lookups
    def find_longest_cache_hit(self, request: SchedulerRequest) -> list[Block]:
        """The cached blocks of the request's longest hit (vLLM ``get_computed_blocks``).

        Full blocks only, capped at ``num_tokens - 1`` tokens (the last token is recomputed to
        get logits); the run stops at the first miss.
        """
        max_blocks = (request.num_prompt_tokens + request.num_output_tokens - 1) // self.block_size
        if max_blocks <= 0 or not self._cached:
            return []
        if request is self._memo_request and max_blocks == self._memo_max:
            hit = self._memo_hit
            start = self._memo_dirty
            if start is None:
                return hit
            keys = self.block_keys(request, max_blocks)
            pos = self._memo_pos
            for block in hit[start:]:
                del pos[block]
            hit = hit[:start]
        else:
            keys = self.block_keys(request, max_blocks)
            hit = []
            pos = {}
            start = 0
        cached = self._cached
        for j in range(start, max_blocks):
            entry = cached.get(keys[j])
            if entry is None:
                break
            # Duplicates: the first cached.
            block = entry if type(entry) is Block else next(iter(entry))
            hit.append(block)
            pos[block] = j
        self._memo_request = request
        self._memo_max = max_blocks
        self._memo_hit = hit
        self._memo_pos = pos
        self._memo_next = keys[len(hit)] if len(hit) < max_blocks else _NO_KEY
        self._memo_dirty = None
        return hit

    def forget_lookup(self) -> None:
        """Drop the remembered lookup (its request was admitted)."""
        self._memo_request = None

    @staticmethod
    def num_evictable(blocks: list[Block]) -> int:
        """Hit blocks that sit in the free queue (``ref_cnt == 0``): they count as allocations."""
        return list(map(_REF_CNT, blocks)).count(0)

    # ----------------------------------------------------------------------------- allocation
    def touch(self, blocks: list[Block]) -> None:
        """Take a hit's blocks out of the free queue if free, and reference them."""
        self.ref_epoch += 1
        free_hashed = self._free_hashed
        for block in blocks:
            if block.ref_cnt == 0:
                del free_hashed[block]
                self.num_free_blocks -= 1
            block.ref_cnt += 1

    @property
    def num_unhashed_free(self) -> int:
        """Free blocks that hold no cached key: taking them evicts nothing."""
        return len(self._free_unhashed)

    def get_new_blocks(self, num: int, into: list[Block]) -> None:
        """Pop ``num`` blocks from the head of the free queue onto ``into``.

        A reused cached block loses its key (``_maybe_evict_cached_block``).
        """
        if num > self.num_free_blocks:
            raise RuntimeError(f"allocating {num} blocks with only {self.num_free_blocks} free")
        self.num_free_blocks -= num
        unhashed = self._free_unhashed
        if num == 1 and unhashed:
            # The running scan's usual case: one block, from the unhashed head of the queue.
            block = unhashed.pop()
            block.ref_cnt = 1
            into.append(block)
            return
        take = len(unhashed)
        if take > num:
            take = num
        for _ in range(take):
            block = unhashed.pop()
            block.ref_cnt = 1
            into.append(block)
        rest = num - take
        if rest:
            popleft = self._free_hashed.popitem
            cached = self._cached
            # (The remembered lookup's hit blocks; usually none: the head hit nothing.)
            memo_pos = self._memo_pos
            for _ in range(rest):
                block, _ = popleft(last=False)
                if memo_pos:
                    at = memo_pos.get(block)
                    if at is not None and (self._memo_dirty is None or at < self._memo_dirty):
                        self._memo_dirty = at
                key = block.key
                entry = cached[key]
                if type(entry) is Block:  # the block itself: the key's only block
                    del cached[key]
                else:
                    del entry[block]
                    if not entry:
                        del cached[key]
                block.key = None
                block.ref_cnt = 1
                into.append(block)
            self.num_evicted += rest

    def cache_full_blocks(self, request: SchedulerRequest, num_tokens: int) -> None:
        """Key the request's blocks that are full within its first ``num_tokens`` tokens.

        vLLM ``SingleTypeKVCacheManager.cache_blocks`` / ``BlockPool.cache_full_blocks``: blocks
        from ``num_cached_blocks`` on; a block already cached under the same key is not added
        twice; duplicates of a key (two requests computed the same block) are both kept.
        """
        num_full = num_tokens // self.block_size
        start = request.num_cached_blocks
        if start >= num_full:
            return
        keys = request.block_hashes
        if len(keys) < num_full:
            keys = self.block_keys(request, num_full)
        cached = self._cached
        memo_next = self._memo_next
        blocks = request.kv_blocks
        # (Indexing both lists beats zipping two slices, most of all for the running scan's
        # one block.)
        for j in range(start, num_full):
            block = blocks[j]
            key = keys[j]
            if block.key == key:
                continue
            block.key = key
            if key == memo_next:
                end = len(self._memo_hit)
                if self._memo_dirty is None or end < self._memo_dirty:
                    self._memo_dirty = end
            entry = cached.get(key)
            if entry is None:
                cached[key] = block
            elif type(entry) is Block:
                cached[key] = {entry: None, block: None}
            else:
                entry[block] = None
        request.num_cached_blocks = num_full

    def free_blocks(self, blocks: list[Block]) -> None:
        """Release a request's blocks in reverse order (vLLM ``free``, ``free_blocks``).

        A block whose count drops to 0 goes to the head of the free queue without a key, or to
        its tail (in the reversed order: the request's last block is evicted first) with one.
        """
        self.ref_epoch += 1
        free_hashed = self._free_hashed
        unhashed = self._free_unhashed
        freed = 0
        for block in reversed(blocks):
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                freed += 1
                if block.key is None:
                    unhashed.append(block)
                else:
                    free_hashed[block] = None
        self.num_free_blocks += freed

    def check(self, held: list[list[Block]]) -> None:
        """Check reference counts and queue membership against the blocks requests hold."""
        counts: dict[Block, int] = {}
        for blocks in held:
            for b in blocks:
                counts[b] = counts.get(b, 0) + 1
        for b, n in counts.items():
            assert b.ref_cnt == n, (b.ref_cnt, n)
            assert b not in self._free_hashed
        for b in self._free_hashed:
            assert b.ref_cnt == 0 and b.key is not None
        for b in self._free_unhashed:
            assert b.ref_cnt == 0 and b.key is None
        assert self.num_free_blocks == len(self._free_unhashed) + len(self._free_hashed)
        assert len(counts) + self.num_free_blocks == self.num_usable_blocks, (
            len(counts),
            self.num_free_blocks,
            self.num_usable_blocks,
        )
        for key, entry in self._cached.items():
            for b in [entry] if type(entry) is Block else entry:
                assert b.key == key
