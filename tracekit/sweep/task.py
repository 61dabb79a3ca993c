"""One run as a task that any executor can hand to a worker, and its bundle on disk.

A task records one run with its *recorder*: :func:`record_sim_run` (a closed-loop run of
:func:`tracekit.recording.sim.record_sim`; sweeps, ``qualify`` and closed-mode replay) or
another module-level function such as the experiment matrix's
:func:`tracekit.experiment.record.record_experiment_run`. Recorders write into a hidden
``.<name>.partial-<pid>`` sibling and rename it into place only once the run completed. A worker
that shares the output folder (local processes) records in place; a worker that may not (a Ray
node) records into a temporary folder and returns the files, which the driver publishes with the
same hidden-sibling-and-rename rule (:func:`publish_files`). Either way, a run's folder exists
only when its bundle is complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tracekit import safe_output
from tracekit.recording.sim import SimRun, record_sim
from tracekit.trace.bundle import Bundle
from tracekit.trace.writer import bundle_mark

__all__ = [
    "BundleState",
    "Recorder",
    "SweepTask",
    "TaskOutcome",
    "bundle_state",
    "execute_detached",
    "execute_task",
    "publish_files",
    "publish_sidecar",
    "record_sim_run",
    "existing_folders",
    "remove_partials",
]

BundleState = Literal["missing", "incomplete", "complete"]
EPOCH = "SOURCE_DATE_EPOCH"
# Scratch folders of detached runs: <tmp>/tracekit-sweep-<pid>-<random>.
SCRATCH_PREFIX = "tracekit-sweep-"

#: ``(run, bundle folder, sidecar file or None, run id, overwrite)``: records one run. It must be
#: a module-level function (tasks are pickled to worker processes and Ray nodes).
Recorder = Callable[[Any, Path, Path | None, str, bool], None]


def record_sim_run(
    run: SimRun, out: Path, sidecar: Path | None, run_id: str, overwrite: bool
) -> None:
    """The default :data:`Recorder`: a closed-loop run of the embedded engine (no sidecar)."""
    record_sim(run, out, run_id=run_id, overwrite=overwrite)


@dataclass(frozen=True, slots=True)
class SweepTask:
    """What a worker needs to record one run.

    Attributes
    ----------
    index
        The run's position in the plan.
    path
        Its bundle folder, relative to the output folder.
    run, run_id
        The run (a :class:`~tracekit.recording.sim.SimRun` or what ``recorder`` takes; it has a
        ``workload`` field) and its id.
    overwrite
        The folder holds an incomplete bundle: replace it once the new run completed.
    source_date_epoch
        The driver's ``SOURCE_DATE_EPOCH`` (pins ``created_at`` in every worker alike).
    recorder
        Records the run (:func:`record_sim_run` by default).
    sidecar
        A file the recorder also writes, outside the bundle, relative to the output folder
        (the experiment matrix's client send times); ``None``: none.
    """

    index: int
    path: str
    run: Any
    run_id: str
    overwrite: bool = False
    source_date_epoch: str | None = None
    recorder: Recorder = record_sim_run
    sidecar: str | None = None


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How a task ended.

    Attributes
    ----------
    index
        The run's position in the plan.
    status
        ``done`` or ``failed``.
    duration_s
        Wall time of the run in its worker.
    error, traceback
        One-line error and the full traceback of a failed run.
    files
        A detached run's bundle: relative file name -> bytes (``None`` when recorded in place).
    sidecar
        A detached run's sidecar file (see :class:`SweepTask`), if it has one.
    """

    index: int
    status: Literal["done", "failed"]
    duration_s: float
    error: str | None = None
    traceback: str | None = None
    files: dict[str, bytes] | None = None
    sidecar: bytes | None = None


@contextlib.contextmanager
def _pinned_epoch(value: str | None) -> Iterator[None]:
    saved = os.environ.get(EPOCH)
    if value is not None:
        os.environ[EPOCH] = value
    try:
        yield
    finally:
        if value is not None:
            if saved is None:
                os.environ.pop(EPOCH, None)
            else:
                os.environ[EPOCH] = saved


def _failed(task: SweepTask, start: float, exc: BaseException) -> TaskOutcome:
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    return TaskOutcome(
        task.index, "failed", time.perf_counter() - start, message, traceback.format_exc()
    )


def _record(task: SweepTask, out: Path, sidecar: Path | None, *, overwrite: bool) -> None:
    with _pinned_epoch(task.source_date_epoch):
        task.recorder(task.run, out, sidecar, task.run_id, overwrite)


def execute_task(task: SweepTask, root: str | Path) -> TaskOutcome:
    """Record ``task`` into its folder below ``root``; a failure is returned, not raised.

    Parameters
    ----------
    task
        The run to record.
    root
        The output folder.

    Returns
    -------
    TaskOutcome
        ``done``, or ``failed`` with the error (``KeyboardInterrupt`` still propagates, after
        the partial bundle was removed).
    """
    start = time.perf_counter()
    try:
        sidecar = Path(root) / task.sidecar if task.sidecar else None
        _record(task, Path(root) / task.path, sidecar, overwrite=task.overwrite)
    except (Exception, SystemExit) as exc:
        return _failed(task, start, exc)
    return TaskOutcome(task.index, "done", time.perf_counter() - start)


def execute_detached(task: SweepTask, workload: object | None = None) -> TaskOutcome:
    """Record ``task`` into a temporary folder and return its files (for remote workers).

    Parameters
    ----------
    task
        The run to record.
    workload
        The run's workload when it was shipped separately (``task.run.workload`` is then a
        placeholder), so that a cluster stores each workload once.

    Returns
    -------
    TaskOutcome
        With ``files`` set when the run completed.
    """
    start = time.perf_counter()
    if workload is not None:
        task = _with_workload(task, workload)
    _remove_orphan_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    try:
        bundle = scratch / "bundle"
        sidecar = scratch / "sidecar" if task.sidecar else None
        _record(task, bundle, sidecar, overwrite=False)
        files = {
            p.relative_to(bundle).as_posix(): p.read_bytes()
            for p in sorted(bundle.rglob("*"))
            if p.is_file()
        }
        extra = sidecar.read_bytes() if sidecar is not None else None
    except (Exception, SystemExit) as exc:
        return _failed(task, start, exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return TaskOutcome(task.index, "done", time.perf_counter() - start, files=files, sidecar=extra)


def _remove_orphan_scratch() -> None:
    """Delete scratch folders whose process is gone (a task killed before its cleanup ran)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = folder.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if pid.isascii() and pid.isdigit() and not safe_output.pid_alive(int(pid)):
            safe_output.discard(folder)


def _with_workload(task: SweepTask, workload: object) -> SweepTask:
    return dataclasses.replace(task, run=dataclasses.replace(task.run, workload=workload))


def publish_files(dest: Path, files: Mapping[str, bytes]) -> None:
    """Write a returned bundle to ``dest`` atomically (hidden sibling, then a rename).

    An existing folder at ``dest`` (an incomplete bundle) is replaced only after the new one
    is fully written.
    """
    mark = bundle_mark("tracekit sweep")
    with safe_output.staging_copy(dest) as staging:
        for name, data in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    safe_output.publish_folder(staging, dest, mark=mark, overwrite=True)


def publish_sidecar(dest: Path, data: bytes) -> None:
    """Write a returned sidecar file to ``dest`` atomically (hidden sibling, then a rename)."""
    safe_output.write_bytes(dest, data)


def bundle_state(folder: Path) -> tuple[BundleState, str | None]:
    """Whether ``folder`` holds a complete bundle (:attr:`Bundle.complete`), and its run id."""
    bundle = Bundle.peek(folder)
    if bundle is None:
        return "missing", None
    run_id = bundle.manifest.get("run_id")
    state: BundleState = "complete" if bundle.complete else "incomplete"
    return state, str(run_id) if run_id is not None else None


def remove_partials(root: Path, keep: Collection[Path] | None = None) -> list[Path]:
    """Delete unfinished hidden bundle folders below ``root`` and the empty folders left over.

    Only call it while no worker writes below ``root`` (the sweep folder's lock is held and
    every worker has stopped): every staging folder below it is then a leftover
    (:func:`tracekit.safe_output.remove_staging_below`). The empty folders removed are those
    that held a removed partial folder and, when ``keep`` is given, those not in ``keep`` (the
    folders that existed before the execution): a user's own empty folder is never removed.

    Returns
    -------
    list of Path
        The partial folders removed.
    """
    if not root.is_dir():
        return []
    removed = safe_output.remove_staging_below(root)
    candidates = {
        parent for partial in removed for parent in partial.parents if root in parent.parents
    }
    if keep is not None:
        candidates |= {p for p in (root, *root.rglob("*")) if p.is_dir() and p not in keep}
    # Deepest first, so that a parent emptied by its children's removal goes too.
    for folder in sorted(candidates, key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            folder.rmdir()
    return removed


def existing_folders(root: Path) -> frozenset[Path]:
    """``root`` and every folder below it, as they are now (the ``keep`` of remove_partials)."""
    if not root.is_dir():
        return frozenset()
    return frozenset(p for p in (root, *root.rglob("*")) if p.is_dir())
