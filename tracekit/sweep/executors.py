"""Executors: where recorded runs execute (this process, local processes, or Ray).

The one pool for recorded runs: sweeps, ``qualify``, the experiment matrix, the oracle and
closed-mode replay hand their runs to these executors (through
:func:`tracekit.sweep.execute.execute_runs`). Open-mode replay keeps its own ordered pool over
decision chunks, which are not runs (``docs/sweep.md``, "One executor for every job").
Every executor takes the same :class:`~tracekit.sweep.task.SweepTask` list and reports each
start and each :class:`~tracekit.sweep.task.TaskOutcome` to a :class:`Listener`; the records are
the same whichever executor ran them (a run is deterministic, and ``created_at`` is pinned with
``SOURCE_DATE_EPOCH`` when the driver sets it).

Stopping: executors poll ``stop()`` and, once it is true, start nothing new but let the running
runs finish (a first Ctrl-C). A ``KeyboardInterrupt`` raised inside :meth:`Executor.run` (a
second Ctrl-C) ends the running runs at once: worker processes are terminated and Ray tasks
cancelled. Their unfinished bundles are hidden ``.partial`` folders that the caller removes.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib.util
import logging
import multiprocessing
import os
import signal
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Protocol

from tracekit.errors import ConfigError
from tracekit.sweep.task import (
    SweepTask,
    TaskOutcome,
    execute_detached,
    execute_task,
    publish_files,
    publish_sidecar,
)

__all__ = [
    "Executor",
    "Listener",
    "ProcessExecutor",
    "RayExecutor",
    "SerialExecutor",
    "default_jobs",
    "make_executor",
]

RAY_MISSING = '--ray needs Ray, which is not installed; pip install ".[ray]" in the checkout'
# How often a waiting executor looks at stop() (seconds).
POLL_S = 0.1
# How long cancelled Ray tasks get to remove their scratch folders before they are killed.
CANCEL_GRACE_S = 5.0
WORKER_DIED = (
    "the worker process died while running this run (os._exit, a crash or the out-of-memory "
    "killer); it was the only run in flight, so it is the cause"
)


# The exit code of a worker that found itself re-running the driver's script while it started.
BOOTSTRAP_EXIT = 87
NO_MAIN_GUARD = (
    "the worker processes re-ran the script that started this job (spawned workers import the "
    "main module, and it calls run_sweep, qualify or the matrix again at import): put that call "
    'under  if __name__ == "__main__":  in the script, or pass jobs=1'
)


def bootstrapping() -> bool:
    """Whether this process is a spawned worker still importing the driver's main module."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def refuse_in_bootstrap() -> None:
    """Exit a worker that re-runs the driver's unguarded script (see :data:`NO_MAIN_GUARD`).

    The driver recognises :data:`BOOTSTRAP_EXIT` and explains; without this, the worker would
    take the sweep's lock or start its own pool, and the driver would blame a crash or another
    sweep.
    """
    if bootstrapping():
        raise SystemExit(BOOTSTRAP_EXIT)


class Listener(Protocol):
    """Receives what executors report."""

    def started(self, index: int) -> None:
        """Run ``index`` was handed to a worker."""

    def requeued(self, index: int) -> None:
        """Run ``index`` will be retried alone (another run in flight killed its worker)."""

    def finished(self, outcome: TaskOutcome) -> None:
        """A run ended (its bundle is in place when ``outcome.status == "done"``)."""


Stop = Callable[[], bool]


class Executor(Protocol):
    """Runs sweep tasks."""

    name: str
    workers: int

    def run(self, tasks: Sequence[SweepTask], root: Path, listener: Listener, stop: Stop) -> None:
        """Run ``tasks`` into the sweep folder ``root``; see the module docstring."""


def default_jobs() -> int:
    """The number of cores this process may use."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def make_executor(jobs: int | None = None, ray_address: str | None = None) -> Executor:
    """The executor for ``--jobs`` and ``--ray``.

    Parameters
    ----------
    jobs
        Local worker processes (default: the number of cores); 1 runs in this process. With
        ``ray_address``, the most runs in flight at once (default: the cluster's CPUs).
    ray_address
        ``auto`` (a running cluster found from this machine), ``local`` (start a private local
        instance), or a cluster address (``host:port``, ``ray://host:port``).

    Returns
    -------
    Executor
        A :class:`RayExecutor`, :class:`SerialExecutor` or :class:`ProcessExecutor`.
    """
    refuse_in_bootstrap()
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ConfigError(f"--jobs {jobs!r}: must be an integer >= 1; pass --jobs 2, for example")
    if ray_address is not None:
        if not ray_address.strip():
            raise ConfigError("--ray: empty address; pass auto, local or host:port")
        if importlib.util.find_spec("ray") is None:
            raise ConfigError(RAY_MISSING)
        return RayExecutor(ray_address.strip(), jobs)
    jobs = jobs or default_jobs()
    return SerialExecutor() if jobs == 1 else ProcessExecutor(jobs)


class SerialExecutor:
    """Runs every task in this process, one after the other (``--jobs 1``)."""

    name = "serial"
    workers = 1

    def run(self, tasks: Sequence[SweepTask], root: Path, listener: Listener, stop: Stop) -> None:
        """Run ``tasks`` in order until done or ``stop()``."""
        for task in tasks:
            if stop():
                return
            listener.started(task.index)
            listener.finished(execute_task(task, root))


# prctl(2) option: the signal this process gets when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Make this worker exit when the driver ``parent`` dies (a SIGKILL leaves no clean-up).

    On Linux the kernel sends SIGKILL at the parent's death (``PR_SET_PDEATHSIG``); elsewhere
    :func:`_run_task` checks the parent between runs. Either way a killed driver's workers do
    not finish their runs into the sweep folder.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the driver died before the line above took effect
        os._exit(1)


def _init_worker(parent: int | None = None) -> None:
    # Ctrl-C reaches the whole process group: only the driver decides what it means. The
    # worker was started with SIGINT blocked (see _starting_workers), so a Ctrl-C during its
    # start-up stays pending until it is ignored here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if parent is not None:
        _die_with_parent(parent)


def _run_task(task: SweepTask, root: Path, parent: int) -> TaskOutcome:
    """:func:`execute_task` in a worker, unless the driver ``parent`` is gone (then exit)."""
    if os.getppid() != parent:
        os._exit(1)
    return execute_task(task, root)


@contextlib.contextmanager
def _starting_workers() -> Iterator[None]:
    """Around ``submit()``, which may start worker processes.

    SIGINT is blocked in this thread, so the workers inherit the mask (a Ctrl-C to the
    process group reaches the driver only). A stop handled meanwhile (SIGINT taken by another
    thread, or SIGTERM) is only noted by the Python handlers, and raised again once the
    workers are started: raised in the middle of a start it leaves the new worker reading a
    truncated start-up pickle, which prints "EOFError: Ran out of input" after the command's
    one-line message.
    """
    noted: list[int] = []
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(signum)):  # a Python handler, the CLI's or Python's
                previous[signum] = signal.signal(signum, lambda number, _: noted.append(number))
    mask = (
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        if hasattr(signal, "pthread_sigmask")
        else None
    )
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted:
            signal.raise_signal(noted[0])


class ProcessExecutor:
    """Runs tasks in local worker processes (``concurrent.futures``, ``spawn`` context).

    At most ``workers`` tasks are in flight, so a run is never queued behind a broken pool. If a
    worker process dies (``BrokenProcessPool``), the runs that were in flight are retried one at a
    time in a fresh pool: a run that kills its worker while alone fails, the others complete.
    """

    name = "processes"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def _pool(self, count: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=max(1, min(self.workers, count)),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )

    def run(self, tasks: Sequence[SweepTask], root: Path, listener: Listener, stop: Stop) -> None:
        """Run ``tasks`` until done or ``stop()``; see the class docstring."""
        refuse_in_bootstrap()
        queue = deque(tasks)
        suspects: deque[SweepTask] = deque()
        inflight: dict[Future[TaskOutcome], SweepTask] = {}
        pool = self._pool(len(queue)) if queue else None
        spawned: dict[int, Any] = {}  # every worker process, to read their exit codes
        try:
            while True:
                if stop():
                    queue.clear()
                    suspects.clear()
                while pool is not None and len(inflight) < self.workers:
                    if suspects and inflight:
                        break
                    source = suspects if suspects else queue
                    if not source:
                        break
                    task = source.popleft()
                    # Counted as running before it is submitted: a Ctrl-C handled during
                    # submit() (another thread may take the signal while SIGINT is blocked
                    # here) must not report one running run fewer than the workers hold.
                    listener.started(task.index)
                    with _starting_workers():
                        inflight[pool.submit(_run_task, task, root, os.getpid())] = task
                    spawned.update((getattr(pool, "_processes", None) or {}).items())
                    if source is suspects:
                        break
                if not inflight:
                    return
                done, _ = wait(inflight, timeout=POLL_S, return_when=FIRST_COMPLETED)
                if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                    wait(inflight)
                    _check_bootstrap(spawned.values())
                    broken = self._collect(inflight, listener)
                    for task in broken:
                        if len(broken) == 1:
                            listener.finished(TaskOutcome(task.index, "failed", 0.0, WORKER_DIED))
                        else:
                            listener.requeued(task.index)
                            suspects.append(task)
                    inflight.clear()
                    assert pool is not None
                    pool.shutdown(wait=True)
                    pool = self._pool(len(queue) + len(suspects))
                    continue
                for future in done:
                    listener.finished(_future_outcome(future, inflight.pop(future)))
        except KeyboardInterrupt:
            _terminate(pool)
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _collect(
        inflight: dict[Future[TaskOutcome], SweepTask], listener: Listener
    ) -> list[SweepTask]:
        """Report the in-flight runs that finished; return those the broken pool took down."""
        broken = []
        for future, task in inflight.items():
            error = future.exception()
            if isinstance(error, BrokenProcessPool):
                broken.append(task)
            else:
                listener.finished(_future_outcome(future, task))
        return broken


def _check_bootstrap(processes: Any) -> None:
    """Raise :data:`NO_MAIN_GUARD` if a broken pool's worker exited with :data:`BOOTSTRAP_EXIT`."""
    for process in processes:
        process.join(timeout=5)
        if process.exitcode == BOOTSTRAP_EXIT:
            raise ConfigError(NO_MAIN_GUARD)


def _future_outcome(future: Future[TaskOutcome], task: SweepTask) -> TaskOutcome:
    """The task's outcome; an error of the pool itself (say, pickling) fails that run only."""
    error = future.exception()
    if error is None:
        return future.result()
    message = " ".join(f"{type(error).__name__}: {error}".split())
    return TaskOutcome(task.index, "failed", 0.0, message)


def _terminate(pool: ProcessPoolExecutor | None) -> None:
    """End a pool's worker processes now (their partial bundles are left to the caller)."""
    if pool is None:
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=10)
    pool.shutdown(wait=False, cancel_futures=True)


def import_ray() -> Any:
    """Import Ray, or explain in one line how to install it."""
    try:
        with warnings.catch_warnings():
            # Ray's own imports may warn about their dependencies; that is not the sweep's news.
            warnings.simplefilter("ignore")
            import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


class RayExecutor:
    """Runs tasks as Ray tasks on an existing cluster (or a private local instance).

    Each task records into a temporary folder on its node and returns the bundle's files, which
    this driver publishes atomically below the sweep folder, so nodes need no shared file system;
    each distinct workload is stored once in the object store. Workers need the same ``bidkv``
    installation (and any ``module:Object`` strategy) as the driver.
    """

    name = "ray"

    def __init__(self, address: str, jobs: int | None = None) -> None:
        self.address = address
        self.jobs = jobs
        self.workers = jobs or 0

    def _connect(self, ray: Any) -> bool:
        if ray.is_initialized():
            return False
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        try:
            if self.address == "local":
                ray.init(address="local", num_cpus=self.jobs, **options)
            else:
                ray.init(address=self.address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            message = " ".join(str(exc).split())[:300]
            raise ConfigError(
                f"--ray {self.address}: cannot connect ({type(exc).__name__}: {message}); start "
                "a cluster with 'ray start --head' or pass its address (or 'local')"
            ) from None
        return True

    def run(self, tasks: Sequence[SweepTask], root: Path, listener: Listener, stop: Stop) -> None:
        """Run ``tasks`` on the cluster until done or ``stop()``."""
        if not tasks:
            return
        ray = import_ray()
        owned = self._connect(ray)
        inflight: dict[Any, SweepTask] = {}
        try:
            remote = ray.remote(num_cpus=1, max_retries=1)(execute_detached)
            cpus = int(ray.cluster_resources().get("CPU", 1))
            self.workers = self.jobs or max(1, cpus)
            shipped: dict[int, Any] = {}
            queue = deque(tasks)
            while True:
                if stop():
                    queue.clear()
                while queue and len(inflight) < self.workers:
                    task = queue.popleft()
                    key = id(task.run.workload)
                    if key not in shipped:
                        shipped[key] = ray.put(task.run.workload)
                    light = dataclasses.replace(
                        task, run=dataclasses.replace(task.run, workload=None)
                    )
                    inflight[remote.remote(light, shipped[key])] = task
                    listener.started(task.index)
                if not inflight:
                    return
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    task = inflight.pop(ref)
                    listener.finished(self._outcome(ray, ref, task, root))
        except KeyboardInterrupt:
            _cancel(ray, list(inflight))
            raise
        finally:
            if owned:
                ray.shutdown()

    @staticmethod
    def _outcome(ray: Any, ref: Any, task: SweepTask, root: Path) -> TaskOutcome:
        try:
            outcome: TaskOutcome = ray.get(ref)
        except Exception as exc:  # a lost node or a worker crash: Ray's errors vary
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            return TaskOutcome(task.index, "failed", 0.0, message)
        if outcome.sidecar is not None and task.sidecar:
            # Before the bundle: a complete bundle implies its sidecar is in place.
            publish_sidecar(root / task.sidecar, outcome.sidecar)
        if outcome.files is not None:
            publish_files(root / task.path, outcome.files)
        return dataclasses.replace(outcome, files=None, sidecar=None)


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Cancel running Ray tasks: interrupt them (they clean up), then kill the stragglers."""
    for ref in refs:
        ray.cancel(ref)
    _, stuck = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
    for ref in stuck:
        ray.cancel(ref, force=True)
