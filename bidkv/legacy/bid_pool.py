"""Thread-safe store of the live bids, one list per request.

Producers (framework adapters) call :meth:`BidPoolManager.submit_bids`; the scheduler takes an
immutable :meth:`BidPoolManager.get_pool_snapshot`. Every read and write of the state, the switches
included, happens under one lock, so a snapshot never sees half of a submission and no bid
survives a kill switch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from bidkv.legacy.bids import BidPool, CompressionBid

__all__ = ["BidPoolManager"]

logger = logging.getLogger(__name__)


class BidPoolManager:
    """Holds each active request's current bids.

    Parameters
    ----------
    enabled : bool, optional
        Feature gate; while off, submissions are dropped and reads return nothing.
    kill_switch : bool, optional
        Emergency off; overrides ``enabled``.

    Notes
    -----
    Removal (:meth:`remove_by_request`, :meth:`invalidate`, :meth:`invalidate_all`) works whether
    or not the manager is active, so cleanup is never lost.
    """

    def __init__(self, *, enabled: bool = False, kill_switch: bool = False) -> None:
        self._lock = threading.Lock()
        self._enabled = enabled
        self._kill_switch = kill_switch
        # request_id -> that request's bids, in submission order
        self._bids_by_request: dict[str, list[CompressionBid]] = {}
        # bid_id -> bid, for O(1) lookup
        self._bid_index: dict[str, CompressionBid] = {}

    # -- switches -----------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """Whether bids are stored and served: enabled and no kill switch."""
        with self._lock:
            return self._active_locked()

    def _active_locked(self) -> bool:
        return self._enabled and not self._kill_switch

    def _clear_locked(self) -> int:
        count = len(self._bid_index)
        self._bids_by_request.clear()
        self._bid_index.clear()
        return count

    def enable(self) -> None:
        """Turn the feature on; also clears the kill switch."""
        with self._lock:
            self._enabled = True
            self._kill_switch = False
        logger.info("BidPoolManager: enabled")

    def disable(self) -> None:
        """Turn the feature off and drop every stored bid."""
        with self._lock:
            self._enabled = False
            self._clear_locked()
        logger.info("BidPoolManager: disabled, bids cleared")

    def activate_kill_switch(self) -> None:
        """Set the kill switch and drop every stored bid."""
        with self._lock:
            self._kill_switch = True
            self._clear_locked()
        logger.warning("BidPoolManager: kill switch activated, bids cleared")

    # -- writes -------------------------------------------------------------------------------

    def submit_bids(self, request_id: str, bids: Iterable[CompressionBid]) -> None:
        """Replace one request's bids; ignored while inactive.

        Parameters
        ----------
        request_id : str
            The request the bids belong to.
        bids : iterable of CompressionBid
            Its new bids; an empty iterable leaves the request tracked with no bids.
        """
        new_bids = list(bids)
        with self._lock:
            # Checked under the lock so a concurrent kill switch cannot be undone by this write.
            if not self._active_locked():
                return
            for old in self._bids_by_request.get(request_id, ()):
                self._bid_index.pop(old.bid_id, None)
            self._bids_by_request[request_id] = new_bids
            for bid in new_bids:
                self._bid_index[bid.bid_id] = bid
        logger.debug("BidPoolManager: request %s now has %d bids", request_id, len(new_bids))

    def remove_by_request(self, request_id: str) -> int:
        """Drop one request's bids.

        Parameters
        ----------
        request_id : str
            The request to drop; unknown ids are ignored.

        Returns
        -------
        int
            Number of bids dropped.
        """
        with self._lock:
            removed = self._bids_by_request.pop(request_id, [])
            for bid in removed:
                self._bid_index.pop(bid.bid_id, None)
        return len(removed)

    def invalidate(self, request_id: str) -> None:
        """Drop one request's bids (same as :meth:`remove_by_request`, without the count).

        Parameters
        ----------
        request_id : str
            The request to drop; unknown ids are ignored.
        """
        self.remove_by_request(request_id)

    def invalidate_all(self) -> None:
        """Drop every stored bid."""
        with self._lock:
            count = self._clear_locked()
        logger.debug("BidPoolManager: invalidated %d bids", count)

    # -- reads --------------------------------------------------------------------------------

    def get_pool_snapshot(self) -> BidPool:
        """Return an immutable snapshot of every stored bid.

        Returns
        -------
        BidPool
            Bids sorted by ``tokens_freed`` descending; ties keep submission order (requests in
            first-submission order, then each request's own order). While inactive:
            ``BidPool(snapshot_time_ns=0, bids=())``.
        """
        with self._lock:
            if not self._active_locked():
                return BidPool(snapshot_time_ns=0, bids=())
            bids = [bid for own in self._bids_by_request.values() for bid in own]
            taken_at = time.monotonic_ns()
        bids.sort(key=lambda bid: -bid.tokens_freed)
        return BidPool(snapshot_time_ns=taken_at, bids=tuple(bids))

    def get_bid(self, bid_id: str) -> CompressionBid | None:
        """Look a bid up by id.

        Parameters
        ----------
        bid_id : str
            The bid to find.

        Returns
        -------
        CompressionBid or None
            The bid, or ``None`` if unknown or while inactive.
        """
        with self._lock:
            if not self._active_locked():
                return None
            return self._bid_index.get(bid_id)

    def get_bids_for_request(self, request_id: str) -> list[CompressionBid]:
        """Return a copy of one request's bids.

        Parameters
        ----------
        request_id : str
            The request to look up.

        Returns
        -------
        list of CompressionBid
            Its bids in submission order; empty if unknown or while inactive.
        """
        with self._lock:
            if not self._active_locked():
                return []
            return list(self._bids_by_request.get(request_id, ()))

    @property
    def active_request_count(self) -> int:
        """Number of requests with stored bids."""
        with self._lock:
            return len(self._bids_by_request)

    @property
    def total_bid_count(self) -> int:
        """Number of stored bids."""
        with self._lock:
            return sum(len(own) for own in self._bids_by_request.values())

    def get_stats(self) -> dict[str, object]:
        """Return the switches and counts, read together under the lock.

        Returns
        -------
        dict
            Keys ``enabled``, ``kill_switch``, ``is_active``, ``active_requests``, ``total_bids``.
        """
        with self._lock:
            return {
                "enabled": self._enabled,
                "kill_switch": self._kill_switch,
                "is_active": self._active_locked(),
                "active_requests": len(self._bids_by_request),
                "total_bids": sum(len(own) for own in self._bids_by_request.values()),
            }
