"""The paged KV cache as a block counter, with vLLM's reserved null block.

vLLM's ``BlockPool`` (``vllm/v1/core/block_pool.py``) takes block 0 out of the free queue at
start-up as the *null block*, so only ``num_blocks - 1`` blocks can hold KV, and
``BlockPool.get_usage`` divides by ``num_gpu_blocks - 1``. With prefix caching off (how the engine
is modelled) only the number of free blocks decides anything, so this pool is a counter.
"""

from __future__ import annotations

__all__ = ["BlockPool", "cdiv"]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers (vLLM ``vllm.utils.math_utils.cdiv``)."""
    return -(-a // b)


class BlockPool:
    """Counts free KV blocks.

    Parameters
    ----------
    num_blocks
        All blocks including the null block; ``num_blocks - 1`` are usable.
    """

    __slots__ = ("num_free_blocks", "num_usable_blocks")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"num_blocks must be at least 2 (one is the null block); found {num_blocks}"
            )
        self.num_usable_blocks = num_blocks - 1
        self.num_free_blocks = num_blocks - 1

    @property
    def num_used_blocks(self) -> int:
        """Blocks currently held by requests."""
        return self.num_usable_blocks - self.num_free_blocks

    @property
    def num_unhashed_free(self) -> int:
        """Free blocks that hold no cached key (all of them: this pool caches nothing)."""
        return self.num_free_blocks

    def allocate(self, num: int) -> None:
        """Take ``num`` free blocks; the caller has checked that they are free."""
        if num > self.num_free_blocks:
            raise RuntimeError(f"allocating {num} blocks with only {self.num_free_blocks} free")
        self.num_free_blocks -= num

    def free(self, num: int) -> None:
        """Return ``num`` blocks to the pool."""
        self.num_free_blocks += num
        if self.num_free_blocks > self.num_usable_blocks:
            raise RuntimeError("freed more KV blocks than were allocated")

    def get_usage(self) -> float:
        """Fraction of usable blocks in use, computed exactly as vLLM's ``get_usage``."""
        return 1.0 - (self.num_free_blocks / self.num_usable_blocks)
