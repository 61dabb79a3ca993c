"""A driver process that runs inside a real engine's virtual environment, and its messages.

The real-vLLM and real-SGLang recorders start a driver with that engine's interpreter, write it
one JSON line per scenario on its standard input, and read one JSON message per line from its
standard output: ``hello`` first, then per scenario its records and ``end`` (or ``error``), each
carrying the scenario's index as ``run`` (:mod:`tracekit.real_engine.serve` is the driver's side).

The driver needs ``bidkv`` and ``tracekit`` and nothing else from this environment. Pointing
PYTHONPATH at the project root works for a source checkout but not for an install into
site-packages (it would put this environment's numpy beside the engine's), so its PYTHONPATH is a
temporary folder holding links to the two packages only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["project_packages_folder", "record_runs", "run_driver_process", "run_messages"]


def project_packages_folder(prefix: str) -> Path:
    """A new temporary folder holding links to the ``bidkv`` and ``tracekit`` packages.

    The packages are located without importing them (``bidkv`` is reached only through
    :mod:`tracekit.strategies`).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    for name in ("bidkv", "tracekit"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        source = Path(spec.origin).resolve().parent
        (folder / source.name).symlink_to(source, target_is_directory=True)
    return folder


def run_driver_process(
    python: Path,
    argv: Sequence[str],
    lines: Sequence[str],
    *,
    engine: str,
    env: Mapping[str, str] | None = None,
    error: type[Exception],
    parse: Callable[[str], dict[str, Any]] = json.loads,
) -> Generator[dict[str, Any], None, None]:
    """Run ``python argv`` with ``lines`` on its input; yield its JSON messages as they arrive.

    Parameters
    ----------
    python
        The engine environment's interpreter.
    argv
        The driver's arguments (``["-m", "tracekit.vllm.driver"]``, say).
    lines
        One JSON line per scenario; the driver answers each with ``end`` or ``error``.
    engine
        The engine's name, for messages ("vLLM", "SGLang").
    env
        Extra environment variables; PYTHONPATH is set to the project's packages, followed by
        ``env["PYTHONPATH"]`` when given.
    error
        Raised (with the tail of the driver's standard error) when it exits before answering
        every scenario, or with a non-zero status. Closing the generator early stops the driver.
    parse
        Turns one output line into its message (``json.loads``); a caller that only compares
        some lines' text may skip decoding them, as long as every message keeps its ``kind``.
    """
    path_folder = project_packages_folder(f"bidkv-{engine.lower()}-path-")
    extra = dict(env or {})
    full_env = dict(os.environ)
    full_env.update(extra)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(path_folder), *([extra["PYTHONPATH"]] if extra.get("PYTHONPATH") else [])]
    )
    stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
    process = subprocess.Popen(
        [str(python), *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        encoding="utf-8",
        env=full_env,
        cwd=path_folder,
    )
    assert process.stdin is not None and process.stdout is not None
    # A thread feeds the input, so a driver that answers while reading never blocks on a full pipe.
    writer = threading.Thread(target=_write_lines, args=(process.stdin, lines), daemon=True)
    writer.start()
    answered = 0
    try:
        for line in process.stdout:
            message = parse(line)
            if message.get("kind") in ("end", "error"):
                answered += 1
            yield message
        process.wait()
        if answered < len(lines) or process.returncode != 0:
            raise error(
                f"the {engine} driver ({python}) exited with status {process.returncode} after "
                f"{answered} of {len(lines)} runs; its last output:\n{_tail(stderr)}"
            )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        writer.join(timeout=5)
        process.stdout.close()
        stderr.close()
        for link in path_folder.iterdir():
            link.unlink()
        path_folder.rmdir()


def _write_lines(stream: IO[str], lines: Sequence[str]) -> None:
    try:
        for line in lines:
            stream.write(line)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the driver died; run_driver_process reports it


def _tail(stream: IO[str], limit: int = 4000) -> str:
    stream.seek(0)
    return stream.read()[-limit:]


def run_messages(
    index: int, messages: Iterator[dict[str, Any]], driver: str, error: type[Exception]
) -> Iterator[dict[str, Any]]:
    """Run ``index``'s messages from ``messages``, up to and including its ``end``.

    A message of another run, an ``error`` message or the driver stopping first raises
    ``error`` naming ``driver`` ("the vLLM driver").
    """
    for message in messages:
        if message.get("run") != index:
            raise error(f"{driver} answered out of order: {message}")
        if message.get("kind") == "error":
            raise error(
                f"run {index} failed in {driver}: {message['message']}\n"
                f"{message.get('traceback', '')[-3000:]}"
            )
        yield message
        if message.get("kind") == "end":
            return
    raise error(f"{driver} stopped before finishing run {index}")


def record_runs(
    messages: Generator[dict[str, Any], None, None],
    count: int,
    record_one: Callable[[int, dict[str, Any]], Path],
    *,
    driver: str,
    error: type[Exception],
    protocol: int,
) -> list[Path]:
    """Read a driver's ``hello``, then record each of ``count`` runs from its messages.

    ``record_one(index, hello)`` writes run ``index``'s bundle from the messages that follow.
    The ``hello`` must speak ``protocol``. The driver is then let finish, so that its exit
    status is checked, and is always closed. ``driver`` names it in errors.
    """
    try:
        hello = next(messages)
        if hello.get("kind") != "hello" or hello.get("protocol") != protocol:
            raise error(f"{driver} did not start as expected: {hello}")
        bundles = [record_one(index, hello) for index in range(count)]
        for _ in messages:  # let the driver finish and report its exit status
            pass
    finally:
        messages.close()
    return bundles
