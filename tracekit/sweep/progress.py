"""Sweep progress: counts, an estimate of the time left, and a renderer for stderr.

:class:`ProgressCounter` turns executor events into :class:`ProgressSnapshot` values and hands
each one to a callback. :class:`StderrProgress` is the callback the command line uses: on a
terminal it redraws one line, elsewhere (a log file, a cluster job) it prints a line at most
every ``interval_s`` seconds, and it always prints failed runs and the final counts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TextIO

__all__ = [
    "ProgressCallback",
    "ProgressCounter",
    "ProgressSnapshot",
    "StderrProgress",
    "format_duration",
    "render_progress",
]

Event = Literal["start", "started", "finished", "stopping", "end"]


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """The state of a sweep at one event.

    Attributes
    ----------
    event
        ``start``, ``started`` (a run was handed to a worker), ``finished``, ``stopping`` (a
        first Ctrl-C: running runs finish, nothing new starts) or ``end``.
    total
        Runs in the matrix.
    skipped
        Runs already complete in the sweep folder (from an earlier, interrupted sweep).
    done, failed, running
        Runs completed, failed and in flight in this sweep.
    elapsed_s
        Seconds since this sweep started.
    eta_s
        Estimated seconds left (``None`` until a run finished; 0 once nothing is left).
    run, error
        The run the event is about (its folder) and, for a failed run, its error.
    """

    event: Event
    total: int
    skipped: int
    done: int
    failed: int
    running: int
    elapsed_s: float
    eta_s: float | None
    run: str | None = None
    error: str | None = None

    @property
    def pending(self) -> int:
        """Runs not started yet."""
        return self.total - self.skipped - self.done - self.failed - self.running


ProgressCallback = Callable[[ProgressSnapshot], None]


class ProgressCounter:
    """Counts runs and estimates the time left from this sweep's throughput.

    Parameters
    ----------
    total, skipped
        Runs in the matrix, and those already complete before this sweep started.
    callback
        Receives a snapshot at every event (nothing is reported when ``None``).
    """

    def __init__(self, total: int, skipped: int, callback: ProgressCallback | None) -> None:
        self.total = total
        self.skipped = skipped
        self.done = 0
        self.failed = 0
        self.running = 0
        self.callback = callback
        self._start = time.monotonic()

    def eta_s(self) -> float | None:
        """Runs left divided by this sweep's completion rate so far (runs per second)."""
        finished = self.done + self.failed
        left = self.total - self.skipped - finished
        if left <= 0:
            return 0.0
        if finished == 0:
            return None
        return left * (time.monotonic() - self._start) / finished

    def emit(self, event: Event, run: str | None = None, error: str | None = None) -> None:
        """Report ``event`` to the callback."""
        if self.callback is None:
            return
        self.callback(
            ProgressSnapshot(
                event=event,
                total=self.total,
                skipped=self.skipped,
                done=self.done,
                failed=self.failed,
                running=self.running,
                elapsed_s=time.monotonic() - self._start,
                eta_s=self.eta_s(),
                run=run,
                error=error,
            )
        )

    def started(self, run: str) -> None:
        """A run was handed to a worker."""
        self.running += 1
        self.emit("started", run)

    def requeued(self, run: str) -> None:
        """A run in flight will be retried (its worker died under another run)."""
        self.running -= 1

    def finished(self, run: str, ok: bool, error: str | None = None) -> None:
        """A run ended."""
        self.running -= 1
        if ok:
            self.done += 1
        else:
            self.failed += 1
        self.emit("finished", run, error)


def format_duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h07m``; ``?`` for an unknown duration."""
    if seconds is None:
        return "?"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def render_progress(snapshot: ProgressSnapshot) -> str:
    """One status line: ``sweep 12/45: 10 done, 2 skipped, 1 failed, 2 running, ~1m20s left``."""
    s = snapshot
    finished = s.done + s.skipped + s.failed
    parts = [f"{s.done} done"]
    if s.skipped:
        parts.append(f"{s.skipped} skipped")
    parts += [f"{s.failed} failed", f"{s.running} running"]
    if s.event == "end":
        tail = f"in {format_duration(s.elapsed_s)}"
    elif s.eta_s is None:
        tail = "estimating time left"
    else:
        tail = f"~{format_duration(s.eta_s)} left"
    return f"sweep {finished}/{s.total} runs: {', '.join(parts)}, {tail}"


class StderrProgress:
    """Show sweep progress on stderr (or ``stream``).

    Parameters
    ----------
    stream
        Where to write (default: ``sys.stderr``).
    interactive
        Redraw one line (a terminal); default: whether ``stream`` is a terminal.
    interval_s
        Least seconds between two progress lines (default 0.2 on a terminal, 10 elsewhere).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interactive: bool | None = None,
        interval_s: float | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        default = 0.2 if self.interactive else 10.0
        self.interval_s = default if interval_s is None else interval_s
        self._last = -float("inf")
        self._drawn = False

    def _line(self, text: str) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self._drawn = False

    def __call__(self, snapshot: ProgressSnapshot) -> None:
        """Render ``snapshot``."""
        now = time.monotonic()
        if snapshot.event == "finished" and snapshot.error is not None:
            self._line(f"FAILED {snapshot.run}: {snapshot.error}")
        elif snapshot.event == "stopping":
            self._line(
                f"stopping: waiting for {snapshot.running} running run(s) to finish; press "
                "Ctrl-C again to abort them (a re-run resumes)"
            )
        status = render_progress(snapshot)
        if snapshot.event in ("start", "end"):
            self._line(status)
            self._last = now
        elif now - self._last >= self.interval_s:
            if self.interactive:
                self.stream.write(("\r\x1b[K" if self._drawn else "") + status)
                self._drawn = True
            else:
                self._line(status)
            self._last = now
        self.stream.flush()
