"""Wall-clock timestamps that reproducible runs can pin.

Manifests record when a run was made. Setting ``SOURCE_DATE_EPOCH`` (the reproducible-builds
convention) pins that time, so re-running the same inputs gives byte-identical manifests.
"""

from __future__ import annotations

import datetime as dt
import os

__all__ = ["utc_now_iso"]


def utc_now_iso() -> str:
    """The current UTC time in ISO-8601, or ``SOURCE_DATE_EPOCH`` when it is set."""
    pinned = os.environ.get("SOURCE_DATE_EPOCH")
    if pinned:
        moment = dt.datetime.fromtimestamp(int(pinned), tz=dt.timezone.utc)
    else:
        moment = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return moment.isoformat()
