"""The driver's side of the line protocol, for every driver in a real engine's environment.

Standard library only: it runs inside the engine's environment, where only ``bidkv`` and
``tracekit`` of this project are reachable. A driver reads one scenario per JSON line (standard
input, or a file) and answers on the original standard output, one JSON message per line:
``hello`` once, then per scenario the records it emits and its ``end``, or an ``error`` with the
traceback (:mod:`tracekit.real_engine.process` is the recorder's side). Everything else that
writes to standard output (the engine's logging, a policy's prints) goes to standard error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

__all__ = ["Emit", "check_protocol", "protocol_channel", "serve_scenarios"]

Emit = Callable[[dict[str, Any]], None]


def check_protocol(message: Mapping[str, Any], protocol: int) -> None:
    """``ValueError`` unless a scenario message speaks ``protocol``."""
    if message.get("protocol") != protocol:
        raise ValueError(
            f"protocol {message.get('protocol')!r} is not {protocol}: the driver and "
            "the recorder come from different versions of tracekit"
        )


@contextlib.contextmanager
def protocol_channel(buffering: int) -> Iterator[TextIO]:
    """The original standard output for messages; everything else that writes to it -> stderr."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=buffering)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield channel
    finally:
        channel.close()


def serve_scenarios(
    scenarios: str | None,
    open_backend: Callable[[], tuple[Any, dict[str, Any]]],
    run_one: Callable[[Any, dict[str, Any], Emit], dict[str, Any]],
    *,
    protocol: int,
    buffering: int = 1 << 16,
    json_default: Callable[[Any], Any] | None = None,
    check: Callable[[Any], object] | None = None,
) -> int:
    """Serve the scenarios of a driver; return its exit status.

    Parameters
    ----------
    scenarios
        A JSON-lines file of scenarios; None reads standard input.
    open_backend
        Imports the engine (with ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` set, unless
        they are): ``(backend, versions)``, the versions going into ``hello`` with
        ``protocol``, the Python version and the time ``open_backend`` took (``import_s``).
    run_one
        ``run_one(backend, scenario, emit)`` runs one scenario (its message, of ``protocol``),
        emitting its records, and returns its ``end`` message. An exception becomes an ``error``
        message with the traceback, and the next scenario runs.
    protocol
        The protocol version ``hello`` announces and every scenario must carry.
    buffering
        The channel's buffer size (1: line-buffered); it is flushed after each scenario.
    json_default
        ``json.dumps``'s ``default`` for the messages.
    check
        Instead of reading scenarios: call ``check(backend)`` after ``hello`` and stop.
    """
    # No hub access, whoever started the driver (the recorders set these too).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with protocol_channel(buffering) as channel:

        def emit(message: dict[str, Any]) -> None:
            channel.write(json.dumps(message, separators=(",", ":"), default=json_default) + "\n")

        started = time.perf_counter()
        backend, versions = open_backend()
        emit(
            {
                "kind": "hello",
                "protocol": protocol,
                **versions,
                "python": sys.version.split()[0],
                "import_s": time.perf_counter() - started,
            }
        )
        channel.flush()
        if check is not None:
            check(backend)
            return 0
        source = open(scenarios, encoding="utf-8") if scenarios else sys.stdin  # noqa: SIM115
        with source:
            for line in source:
                if not line.strip():
                    continue
                run = -1
                try:
                    message = json.loads(line)
                    run = int(message.get("run", -1))
                    check_protocol(message, protocol)
                    emit(run_one(backend, message, emit))
                except Exception as exc:
                    emit(
                        {
                            "kind": "error",
                            "run": run,
                            "message": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc(),
                        }
                    )
                channel.flush()
    return 0
