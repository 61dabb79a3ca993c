"""The bad-input suite's stops: SIGINT, SIGTERM and SIGKILL at three stages of every long command.

Each check runs a command that writes (``record sim``, closed and open ``replay``, ``oracle``,
``qualify``, ``sweep``, ``capacity --out``, ``experiment run``) in a process of
its own, from the case folder and with relative paths, and stops it at one stage:

- ``output``: as soon as anything new appears in the case folder (its staging folder, or its
  folder for the commands that write in place);
- ``started``: at its first progress line on stderr;
- ``late``: a second after that.

What must hold, for SIGINT and SIGTERM: exit status 130, one ``Error:`` line, last, saying
what stopped it (``SIGTERM`` for SIGTERM; ``Ctrl-C`` or ``SIGINT`` for SIGINT), no traceback,
and nothing left but what the command documents (``record sim``'s named partial folder, the
complete runs of the commands that write in place). For SIGKILL: nothing left but the
command's staging or in-place folder. Then, for all three: the same command run again exits
as a complete run does (``experiment run`` with ``--resume``), leaves nothing but its output,
and that output is byte-identical to the output of an uninterrupted run (files that record
wall times, ``sweep.json`` and ``matrix.json``, aside). A stop that comes once the output is
published (while the command prints its summary) may leave it, complete: byte-identical to an
uninterrupted run's (the next run then needs ``--overwrite``); one during the interpreter's
exit ends the process by the signal itself, its output complete. A command that finished
before a ``late`` stop reached it is stopped again sooner (a quarter of the delay at a time,
down to 0.05 s, then at its first progress line), and one that finishes even before that is
counted as silent, not hidden.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from click.testing import CliRunner

#: created_at and the like pinned, so that two runs write the same bytes.
EPOCH = "1700000000"
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
STAGES = ("output", "started", "late")


@dataclass(frozen=True)
class StopCommand:
    """A command that writes, as a stop check runs it.

    Attributes
    ----------
    name
        The command (``record sim``).
    args
        Its command line, relative to the case folder (the output is ``out``).
    inputs
        Fixtures copied into the case folder.
    out
        The output's name in the case folder.
    in_place
        It writes its folder in place (``sweep``, ``experiment run``): that folder may stay.
    keeps_on_stop
        Name patterns a SIGINT/SIGTERM may leave (``record sim``'s partial folder).
    rerun_extra
        Added to the command line of the run after the stop (``--resume``).
    exits
        Exit statuses of a complete run (``qualify``: 1 is a NO-GO).
    volatile
        Output files that record wall times, left out of the byte comparison.
    late_s
        Seconds after the first progress line that the ``late`` stop comes.
    """

    name: str
    args: tuple[str, ...]
    inputs: tuple[str, ...]
    out: str = "out"
    in_place: bool = False
    keeps_on_stop: tuple[str, ...] = ()
    rerun_extra: tuple[str, ...] = ()
    exits: frozenset[int] = frozenset({0})
    volatile: tuple[str, ...] = ()
    late_s: float = 1.0


SMALL = ("--num-blocks", "300", "--max-model-len", "4608")
COMMANDS: tuple[StopCommand, ...] = (
    StopCommand("record sim", ("record", "sim", "--workload", "w.csv", "--out", "out"),
                ("w.csv",), keeps_on_stop=(".out.partial-*",)),
    StopCommand("replay --mode closed", ("replay", "typed200", "--strategy", "all", "--mode",
                                         "closed", "--jobs", "1", "--out", "out"), ("typed200",)),
    StopCommand("replay", ("replay", "typed", "--strategy", "all", "--jobs", "1", "--reference",
                           "--out", "out"), ("typed",), late_s=0.2),
    StopCommand("oracle", ("oracle", "typed", "--jobs", "1", "--out", "out"), ("typed",)),
    StopCommand("qualify", ("qualify", "--workload", "w.csv", "--limit", "30", *SMALL,
                            "--strategy", "builtin,bidkv", "--load-plan", "single", "--repeats",
                            "3", "--jobs", "1", "--out", "out"), ("w.csv",),
                exits=frozenset({0, 1})),
    StopCommand("sweep", ("sweep", "big.toml", "--jobs", "1", "--out", "out"),
                ("w.csv", "big.toml"), in_place=True, volatile=("sweep.json",)),
    StopCommand("capacity", ("capacity", "--workload", "w.csv", "--limit", "150", "--out",
                             "out.json"), ("w.csv",), out="out.json"),
    StopCommand("experiment run", ("experiment", "run", "--runs", "1", "--num-requests", "600",
                                   "--rates", "2,3.8", "--strategies", "preempt-evict,bidkv",
                                   "--jobs", "1", "--out", "out"), (),
                in_place=True, rerun_extra=("--resume",), volatile=("matrix.json",)),
)  # fmt: skip
#: A sweep of 8 runs of 200 requests: long enough to stop in the middle.
BIG_MATRIX = (
    'strategies = ["builtin", "bidkv", "pe", "lcf"]\nrate_scale = [1.0, 2.0]\n\n'
    '[[workloads]]\npath = "w.csv"\nlimit = 200\n\n'
    "[[engines]]\nnum_blocks = 300\nmax_model_len = 4608\n"
)


@dataclass(frozen=True)
class Stop:
    """One stop check: a command, a signal and a stage."""

    command: StopCommand
    signal: str
    stage: str

    @property
    def name(self) -> str:
        return f"{self.signal} at {self.stage}"


def stop_cases() -> list[Stop]:
    """Every command x signal x stage (72 checks)."""
    return [Stop(c, name, stage) for c in COMMANDS for name in SIGNALS for stage in STAGES]


#: The detail of a check whose command finished before the stop could reach it.
NOT_REACHED = "the command finished before the stop reached it"


@dataclass
class StopOutcome:
    """What a stop check found."""

    stop: Stop
    category: str
    exit_code: int | None
    damage: list[str]
    detail: str
    seconds: float


def prepare(command: StopCommand, fixtures: Path, case: Path) -> None:
    """Copy the command's inputs into ``case`` (``typed200`` is recorded on first use)."""
    for name in command.inputs:
        source = fixtures / name
        if name == "typed200" and not (source / "manifest.json").exists():
            # A longer recording, whose closed replay a stop can interrupt mid-way.
            result = _run_here(
                [
                    "record",
                    "sim",
                    "--workload",
                    str(fixtures / "w.csv"),
                    *SMALL,
                    "--limit",
                    "200",
                    "--strategy",
                    "bidkv",
                    "--out",
                    str(source),
                ]
            )
            if result.exit_code != 0:
                raise RuntimeError(f"typed200: {result.output[-500:]}")
        if name == "big.toml":
            (case / name).write_text(BIG_MATRIX, "utf-8")
        elif source.is_dir():
            shutil.copytree(source, case / name)
        else:
            shutil.copy(source, case / name)


def _digest(path: Path, volatile: tuple[str, ...]) -> dict[str, str]:
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    found = {}
    for file in sorted(path.rglob("*")):
        if file.is_file() and file.name not in volatile:
            found[str(file.relative_to(path))] = hashlib.sha256(file.read_bytes()).hexdigest()
    return found


@contextmanager
def _in(folder: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _run_here(args: list[str]) -> Any:
    """The command in this process (from the current folder), as the rerun makes it."""
    from tracekit.cli import cli

    return CliRunner().invoke(cli, args, env={"SOURCE_DATE_EPOCH": EPOCH})


_REFERENCES: dict[str, dict[str, str]] = {}


def reference(command: StopCommand, fixtures: Path, work: Path) -> dict[str, str]:
    """The output digest of an uninterrupted run (once per command)."""
    if command.name not in _REFERENCES:
        folder = Path(tempfile.mkdtemp(prefix="reference-", dir=work))
        prepare(command, fixtures, folder)
        with _in(folder):
            result = _run_here(list(command.args))
        if result.exit_code not in command.exits:
            raise RuntimeError(f"reference {command.name} failed: {result.output[-500:]}")
        _REFERENCES[command.name] = _digest(folder / command.out, command.volatile)
        shutil.rmtree(folder, ignore_errors=True)
    return _REFERENCES[command.name]


def _launch(
    args: list[str], case: Path
) -> tuple[subprocess.Popen[str], list[str], threading.Event, list[threading.Thread]]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-m", "tracekit", *args], cwd=case, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        # As a terminal runs a command: Ctrl-C's default action (a background shell starts
        # its jobs with SIGINT ignored, and Python then never turns it into KeyboardInterrupt).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    lines: list[str] = []
    first = threading.Event()

    def read(stream: Any) -> None:
        for line in stream:
            lines.append(line)
            if stream is process.stderr and line.strip():
                first.set()

    readers = [
        threading.Thread(target=read, args=(stream,), daemon=True)
        for stream in (process.stdout, process.stderr)
    ]
    for reader in readers:
        reader.start()
    return process, lines, first, readers


def _drain(process: subprocess.Popen[str], readers: list[threading.Thread]) -> None:
    """Let the readers finish and close the pipes (no file is left for the collector)."""
    for reader in readers:
        reader.join(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _wait_for_stage(
    stop: Stop, process: subprocess.Popen[str], first: threading.Event, case: Path,
    before: set[str], timeout: float,
) -> bool:  # fmt: skip
    """Wait until ``stop.stage``; False when the command ended first."""
    deadline = time.monotonic() + timeout
    if stop.stage == "output":
        while not (set(os.listdir(case)) - before):
            if process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return process.poll() is None
    while not first.wait(0.01):
        if process.poll() is not None or time.monotonic() > deadline:
            return False
    if stop.stage == "late":
        time.sleep(stop.command.late_s)
    return process.poll() is None


def run_stop(stop: Stop, fixtures: Path, work: Path, timeout: float = 300.0) -> StopOutcome:
    """Run one stop check in a fresh case folder and say what it found."""
    command = stop.command
    expected = reference(command, fixtures, work)
    case = Path(tempfile.mkdtemp(prefix="stop-", dir=work))
    started = time.perf_counter()
    try:
        prepare(command, fixtures, case)
        inputs = _digest(case, ())
        before = set(os.listdir(case))
        process, lines, first, readers = _launch(list(command.args), case)
        reached = _wait_for_stage(stop, process, first, case, before, timeout)
        if reached:
            os.kill(process.pid, SIGNALS[stop.signal])
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            _drain(process, readers)
            return StopOutcome(stop, "traceback", None, [], "hung after the stop", 0.0)
        _drain(process, readers)
        output = "".join(lines)
        code = process.returncode

        def outcome(category: str, damage: list[str], detail: str) -> StopOutcome:
            return StopOutcome(stop, category, code, damage, detail,
                               time.perf_counter() - started)  # fmt: skip

        if not reached or code in command.exits:
            return outcome("silent", [], NOT_REACHED)
        # A stop during the interpreter's exit, once the output is complete, ends the process
        # by the signal itself (128 + n in a shell): no handler runs any more, nothing to undo.
        exited_by_signal = code == -SIGNALS[stop.signal] and stop.signal != "SIGKILL"
        if exited_by_signal and _digest(case / command.out, command.volatile) == expected:
            return outcome("clear", [], "stopped during the exit, its output complete")
        if "Traceback (most recent call last)" in output:
            return outcome("traceback", [], _last(output))
        left = sorted(set(os.listdir(case)) - before)
        # A stop that came after the output was published (the command was printing its
        # summary) leaves it complete: the same bytes as an uninterrupted run's.
        published = not command.in_place and command.out in left
        if published:
            left.remove(command.out)
            if _digest(case / command.out, command.volatile) != expected:
                return outcome("traceback", [f"{command.out} incomplete under its final name"],
                               _last(output))  # fmt: skip
        allowed = [f".{command.out}.partial-*"]
        if command.in_place:
            allowed.append(command.out)
        if stop.signal != "SIGKILL":
            allowed = list(command.keeps_on_stop) + ([command.out] if command.in_place else [])
        extra = [name for name in left if not any(fnmatch.fnmatch(name, p) for p in allowed)]
        damage = [f"left {name}" for name in extra]
        if stop.signal == "SIGKILL":
            if code != -signal.SIGKILL:
                return outcome("wrong-exit", damage, f"exit {code} after SIGKILL")
        else:
            errors = [line for line in output.splitlines() if line.startswith("Error: ")]
            last = [line for line in output.splitlines() if line.strip()][-1:]
            said = ("SIGTERM",) if stop.signal == "SIGTERM" else ("Ctrl-C", "SIGINT")
            if code != 130:
                return outcome("wrong-exit", damage, f"exit {code}: {_last(output)}")
            if len(errors) != 1 or last != errors or not any(w in errors[0] for w in said):
                return outcome("unclear", damage, f"{len(errors)} Error: lines: {_last(output)}")
        # The next run: it cleans what the stop left and writes what an uninterrupted run does.
        with _in(case):
            again = _run_here(
                [*command.args, *command.rerun_extra, *(["--overwrite"] if published else [])]
            )
        if again.exception is not None and not isinstance(again.exception, SystemExit):
            return outcome("traceback", damage, f"the rerun: {again.exception!r}")
        if again.exit_code not in command.exits:
            damage.append(f"the rerun exited {again.exit_code}: {_last(again.output)}")
        remaining = sorted(set(os.listdir(case)) - before)
        if remaining != [command.out]:
            damage.append(f"after the rerun: {remaining}")
        elif _digest(case / command.out, command.volatile) != expected:
            damage.append("the rerun's output differs from an uninterrupted run's")
        if {k: v for k, v in _digest(case, ()).items() if k in inputs} != inputs:
            damage.append("an input changed")
        return outcome("clear", damage, _last(output))
    finally:
        shutil.rmtree(case, ignore_errors=True)


def _last(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run_stop_reached(stop: Stop, fixtures: Path, work: Path, timeout: float = 300.0) -> StopOutcome:
    """:func:`run_stop`; a ``late`` stop that the command outran is tried again sooner.

    The delay after the first progress line is cut to a quarter at a time while it is above
    0.05 s, then to none (the ``started`` moment), so that the check stops a running command
    instead of counting a finished one: how long a command runs depends on the machine. Only a
    command that finishes before its first progress line is reported as not reached
    (``silent``).
    """
    outcome = run_stop(stop, fixtures, work, timeout)
    delay = stop.command.late_s
    while outcome.detail == NOT_REACHED and stop.stage == "late" and delay > 0:
        delay = delay / 4 if delay > 0.05 else 0.0
        sooner = replace(stop, command=replace(stop.command, late_s=delay))
        outcome = run_stop(sooner, fixtures, work, timeout)
        outcome = replace(
            outcome,
            stop=stop,
            detail=f"{outcome.detail} (stopped {delay:g} s after its first progress line)",
        )
    return outcome


def run_stops(
    stops: list[Stop], fixtures: Path, work: Path,
    progress: Callable[[int, int], None] | None = None,
) -> list[StopOutcome]:  # fmt: skip
    """Run ``stops``; the outcome of each, in order."""
    outcomes = []
    for i, stop in enumerate(stops):
        outcomes.append(run_stop_reached(stop, fixtures, work))
        if progress is not None:
            progress(i + 1, len(stops))
    return outcomes
