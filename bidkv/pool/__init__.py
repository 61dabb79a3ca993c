"""Bid storage: the thread-safe :class:`BidPoolManager`."""

from bidkv.pool.manager import BidPoolManager

__all__ = ["BidPoolManager"]
