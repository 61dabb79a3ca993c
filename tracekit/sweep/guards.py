"""Guards of a running sweep: one sweep per folder, and what Ctrl-C means.

``sweep_lock`` holds ``<folder>/.sweep.lock`` (pid and host) for the sweep's duration; a lock
whose process is gone is taken over. ``interrupt_guard`` turns a first Ctrl-C into a request to
stop (running runs finish, nothing new starts) and lets a second one abort.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tracekit import safe_output
from tracekit.errors import ConfigError

__all__ = ["LOCK_FILE", "interrupt_guard", "sweep_lock"]

LOCK_FILE = ".sweep.lock"
# An unreadable lock younger than this is being written, not stale (seconds).
FRESH_S = 10.0


@contextlib.contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """Hold ``out/.sweep.lock`` so that two sweeps never write one folder."""
    lock = out / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        if not _create_lock(lock, me):
            holder = _holder(lock)
            if holder is not None:
                raise ConfigError(
                    f"{out}: another sweep ({holder}) is writing this folder; wait for it, or "
                    f"delete {lock} if that sweep is gone"
                ) from None
            lock.unlink(missing_ok=True)
            continue
        break
    else:  # pragma: no cover - the lock reappeared between unlink and create
        raise ConfigError(f"{out}: cannot take {lock}; another sweep started at the same time")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _create_lock(lock: Path, me: dict[str, object]) -> bool:
    """Create ``lock`` holding ``me`` in one step; False if it exists.

    The lock was created empty and written after: a stop (Ctrl-C, SIGTERM, even SIGKILL)
    between the two left an empty lock, which the next sweep took for one that is starting
    and refused. Now the content is written to this process's staging file, linked to the
    lock's name (which fails if it exists), then removed; a killed process's staging file is
    removed by the next sweep. Where hard links are not supported, the lock is created
    exclusively and written, and removed on a stop.
    """
    safe_output.remove_stale_staging(lock)
    staging = safe_output.staging_path(lock)
    try:
        staging.write_text(json.dumps(me), "utf-8")
        try:
            os.link(staging, lock)
            return True
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links
            pass
    finally:
        staging.unlink(missing_ok=True)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(me, file)
    except BaseException:
        lock.unlink(missing_ok=True)
        raise
    return True


def _holder(lock: Path) -> str | None:
    """Who holds ``lock`` if that process is alive (or on another host), else ``None``."""
    try:
        info = json.loads(lock.read_text("utf-8"))
        pid, host = int(info["pid"]), str(info["host"])
    except (OSError, ValueError, KeyError, TypeError):
        # Unreadable: a sweep that has just created the lock may still be writing it.
        try:
            fresh = time.time() - lock.stat().st_mtime < FRESH_S
        except OSError:
            return None
        return "a sweep that is starting" if fresh else None
    if host != socket.gethostname():
        return f"pid {pid} on {host}"
    return f"pid {pid}" if safe_output.pid_alive(pid) else None


@contextlib.contextmanager
def interrupt_guard(on_first: Callable[[], None]) -> Iterator[Callable[[], bool]]:
    """Make a first Ctrl-C a request to stop (yielded as ``requested()``) and a second abort.

    Outside the main thread, or when SIGINT is ignored, Ctrl-C keeps its usual meaning.
    """
    state = {"requested": False}

    def handle(signum: int, frame: object) -> None:
        if state["requested"]:
            raise KeyboardInterrupt
        state["requested"] = True
        on_first()

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    # None: a handler installed outside Python, which cannot be restored; leave it alone.
    install = main and previous is not None and previous is not signal.SIG_IGN
    if install:
        signal.signal(signal.SIGINT, handle)
    try:
        yield lambda: state["requested"]
    finally:
        if install:
            signal.signal(signal.SIGINT, previous)
