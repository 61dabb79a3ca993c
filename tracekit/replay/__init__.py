"""``tracekit replay``: recorded decisions replayed through other strategies.

Open mode (:func:`replay_open`) rebuilds each recorded decision's exact context and passes it to
each strategy through the typed host controller, one fresh policy per run, and summarises how the
strategies' choices differ from the recorded ones and from each other. Closed mode
(:mod:`tracekit.replay.closed_mode`) re-simulates the recorded runs. See ``docs/replay.md``.

Open-mode modules: ``contexts`` (decisions and candidates streamed in chunks, typed contexts
rebuilt), ``plain`` (the reference path through the controller), ``rules`` and ``fast`` (the
production strategies evaluated in columns, with one ordered pass for the stateful ones),
``table`` (the ``replay_decisions`` rows and their writer), ``summary`` (per-strategy
summaries), ``runs`` (one run at a time, threads and worker processes) and ``open_mode`` (the
public function and its outputs).
"""

from tracekit.replay.closed_mode import ClosedReplay, replay_closed
from tracekit.replay.open_mode import (
    DEFAULT_CHUNK_ROWS,
    OUTPUT_FILES,
    OpenReplayResult,
    replay_open,
)
from tracekit.replay.plain import Failure
from tracekit.replay.summary import render_summary, summarize

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "ClosedReplay",
    "OUTPUT_FILES",
    "Failure",
    "OpenReplayResult",
    "render_summary",
    "replay_closed",
    "replay_open",
    "summarize",
]
