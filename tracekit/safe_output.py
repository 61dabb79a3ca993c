"""Safe output: every file and folder a command writes appears whole under its name, or not at all.

The one implementation of the rules of docs/guarantees.md, "Safe output", for every command:

- **Staging.** An output is written beside its final name, as the hidden ``.<name>.partial-<pid>``
  (a folder or a file), and renamed into place only once it is complete. Any error, Ctrl-C or
  SIGTERM removes the staging copy; a SIGKILL (or a power cut) leaves it, and the next command
  writing the same output removes it once its process is gone (:func:`remove_stale_staging`).
- **No damage.** An output is never a symbolic link, never holds an input or lies inside one,
  never lies inside a trace bundle, and is never the current folder or above it. An existing
  output is replaced only with ``overwrite``, only if it carries the mark of the command that
  wrote it (a marker file such as ``.tracekit-qualify``, a bundle's manifest, a file's own
  header) and holds nothing else, and only once the new one is complete.
- **Clean-up never guesses.** A leftover is removed only if its name is exactly a staging name
  (``.<name>.partial-<pid>``, the pid in ASCII digits without a leading zero), it is a real
  folder or file (never a symbolic link, never followed), it belongs to this user, and its
  process is gone (:func:`pid_alive`). Anything else is left alone.

Standard library only (and the toolkit's error root), so that every layer may use it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_MANIFEST",
    "STAGING_INFIX",
    "Mark",
    "OutputRefused",
    "check_folder_output",
    "check_new_file",
    "discard",
    "is_trace_bundle",
    "made_once",
    "make_marked_folder",
    "make_staging",
    "marker_files",
    "pid_alive",
    "publish_folder",
    "remove_stale_staging",
    "remove_staging_below",
    "replacing",
    "staged_file",
    "staged_folder",
    "staging_copy",
    "staging_path",
    "staging_pid",
    "write_bytes",
    "write_files",
    "write_json",
    "write_marker",
    "write_text",
]

STAGING_INFIX = ".partial-"
# A staging name's pid: ASCII digits, no leading zero (str(os.getpid()) never makes one).
_PID = r"([1-9][0-9]*)"
# What a trace bundle's manifest says it is (docs/trace-format.md); the writer uses the same.
BUNDLE_MANIFEST = "manifest.json"
BUNDLE_FORMAT = "tracekit.trace"
MARKER_VERSION = 1


class OutputRefused(ConfigError):
    """An output path that writing (or replacing) could damage the user's data."""


# ------------------------------------------------------------------------------ pids and names
def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` may be running (on this machine): True unless surely gone.

    This process counts as running. A pid no process can have (zero, negative, or beyond what
    the system can represent) is gone. A process of another user counts as running, and so does
    any answer the system will not give: the caller then keeps what that process may own.
    """
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there: never probe.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, ValueError):
        return False  # beyond pid_t: no process can have it
    except OSError:
        return True  # EPERM (another user's), or unknowable
    return True


def staging_path(final: str | os.PathLike[str], pid: int | None = None) -> Path:
    """The hidden staging name of ``final``: ``.<name>.partial-<pid>`` beside it."""
    final = Path(final)
    return final.with_name(f".{final.name}{STAGING_INFIX}{os.getpid() if pid is None else pid}")


def staging_pid(entry: str, final_name: str) -> int | None:
    """The pid in ``entry`` if it is exactly a staging name of ``final_name``, else None."""
    match = re.fullmatch(rf"\.{re.escape(final_name)}{re.escape(STAGING_INFIX)}{_PID}", entry)
    if match is None:
        return None
    try:
        return int(match.group(1))
    except ValueError:  # more digits than int() reads: no process has such a pid
        return 0


def _ours(path: Path) -> bool:
    """A real folder or regular file (a link is never followed) that belongs to this user."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return False
    return not hasattr(os, "geteuid") or info.st_uid == os.geteuid()


# A folder that fills again while it is removed (a stopped worker process still flushing its
# last files into it) is tried again this many times, this far apart (seconds).
_REMOVE_TRIES = 30
_REMOVE_PAUSE_S = 0.1


def _remove(path: Path) -> bool:
    """Delete a real folder or file (never following a link); False if it could not be."""
    for _ in range(_REMOVE_TRIES):
        try:
            if stat.S_ISDIR(path.lstat().st_mode):
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno != errno.ENOTEMPTY:
                return False
            time.sleep(_REMOVE_PAUSE_S)  # something is still writing into it
            continue
        return True
    return False


def remove_stale_staging(final: str | os.PathLike[str]) -> list[Path]:
    """Remove the staging copies of ``final`` whose process is gone; return those removed.

    Only exact staging names (:func:`staging_pid`) that are real folders or files of this user
    and whose process is gone (:func:`pid_alive`) are removed. Links, other users' entries, a
    running process's staging and everything else are left alone; a folder that cannot be
    listed or an entry that cannot be removed is skipped, never an error.
    """
    final = Path(final)
    removed: list[Path] = []
    try:
        entries = sorted(final.parent.iterdir()) if final.name else []
    except OSError:
        return removed
    for entry in entries:
        pid = staging_pid(entry.name, final.name)
        if pid is None or pid_alive(pid) or not _ours(entry):
            continue
        if _remove(entry):
            removed.append(entry)
    return removed


def remove_staging_below(root: str | os.PathLike[str]) -> list[Path]:
    """Remove every staging folder below ``root``, whatever its process (a sweep's clean-up).

    Only for a caller that knows no other process writes below ``root`` (a sweep holding its
    folder's lock after its workers stopped). Entries are removed only if their name is a
    staging name of a sibling name, they are real folders of this user, and they are not links;
    links are never followed.
    """
    root = Path(root)
    pattern = re.compile(rf"\..+{re.escape(STAGING_INFIX)}{_PID}")
    removed: list[Path] = []

    def walk(folder: Path) -> None:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            return
        for entry in entries:
            try:
                info = entry.lstat()
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                continue
            if pattern.fullmatch(entry.name) and _ours(entry):
                if _remove(entry):
                    removed.append(entry)
            else:
                walk(entry)

    if _is_real_dir(root):
        walk(root)
    return removed


def _holds_no_files(folder: Path) -> bool:
    """A real folder with nothing but (real) folders below it: nothing in it can be damaged.

    A stale staging copy (a killed process's, :func:`_stale_staging`) counts as nothing: the
    next write removes it, and it must not make the folder look like the user's.
    """
    if not _is_real_dir(folder):
        return False
    try:
        return all(_holds_no_files(e) or _stale_staging(e) for e in folder.iterdir())
    except OSError:
        return False


_ANY_STAGING = re.compile(rf"\..+{re.escape(STAGING_INFIX)}{_PID}")


def _stale_staging(entry: Path) -> bool:
    """A staging name of a sibling (``.<name>.partial-<pid>``) of this user, its process gone."""
    match = _ANY_STAGING.fullmatch(entry.name)
    if match is None or not _ours(entry):
        return False
    try:
        pid = int(match.group(1))
    except ValueError:  # more digits than int() reads: no process has such a pid
        return True
    return not pid_alive(pid)


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


# ------------------------------------------------------------------------------ marks
@dataclass(frozen=True, slots=True)
class Mark:
    """How a command recognises an output it wrote, and so may replace or resume.

    Attributes
    ----------
    command
        The command, as the user types it (``tracekit replay``); named in every refusal.
    check
        Given the existing output, ``None`` if the command wrote it, else why not (one phrase).
    """

    command: str
    check: Callable[[Path], str | None]


def marker_files(
    command: str, marker: str, names: Collection[str] | None = None, *, what: str = "folder"
) -> Mark:
    """The mark of a folder that holds the marker file ``marker`` and (if given) only ``names``.

    ``marker`` is written by :func:`write_marker` into the staging folder, so it is there
    exactly when the command completed the folder. ``what`` names such a folder in refusals.
    """

    def check(folder: Path) -> str | None:
        if not _is_real_dir(folder) or not (folder / marker).is_file():
            return f"not a {what} written by {command} (no {marker} file)"
        if names is None:
            return None
        allowed = {marker, *names}
        try:
            others = sorted(p.name for p in folder.iterdir() if p.name not in allowed)
        except OSError as error:
            return f"cannot be listed ({(error.strerror or str(error)).lower()})"
        if others:
            return f"holds files {command} did not write ({', '.join(others[:3])})"
        return None

    return Mark(command, check)


def write_marker(folder: str | os.PathLike[str], marker: str, command: str) -> None:
    """Write ``command``'s marker file ``marker`` into ``folder`` (see :func:`marker_files`)."""
    write_json(Path(folder) / marker, {"version": MARKER_VERSION, "written_by": command})


def make_marked_folder(
    final: str | os.PathLike[str], marker: str, command: str, *, option: str = "--out"
) -> None:
    """Make ``final`` a folder that holds ``command``'s marker, whatever stops the process.

    For the folders written in place (a sweep, an experiment matrix), checked first with
    :func:`check_folder_output` (``resume``). A new folder is made as a staging folder with the
    marker in it, renamed into place: a folder made first and marked after was left, by a kill
    between the two, unmarked and holding the marker's staging file, which every later run
    refused as not its own. An existing folder (empty, or already marked) gets the marker if it
    lacks it, a killed process's staging copy of it removed first.
    """
    final = Path(final)
    if _is_real_dir(final):
        if not (final / marker).is_file():
            remove_stale_staging(final / marker)
            write_marker(final, marker, command)
        return
    with staging_copy(final, option=option) as staging:
        write_marker(staging, marker, command)
        try:
            _rename_noreplace(staging, final)
        except FileExistsError:
            raise OutputRefused(
                f"{option} {final}: appeared while this command started; it is left alone"
            ) from None
        except OSError as error:
            raise _os_error(final, option, error) from None


def is_trace_bundle(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a trace bundle's manifest (complete or not)."""
    try:
        manifest = json.loads((Path(folder) / BUNDLE_MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == BUNDLE_FORMAT


def _bundle_above(path: Path) -> Path | None:
    """The trace bundle that ``path`` is, or lies in (paths resolved), if any."""
    for folder in (path, *path.parents):
        if is_trace_bundle(folder):
            return folder
    return None


# ------------------------------------------------------------------------------ checks
def _within(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies below it (both resolved)."""
    return path == folder or folder in path.parents


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _check_place(
    final: Path, option: str, inputs: Sequence[str | os.PathLike[str]], *, in_place: bool = False
) -> None:
    """Refusals common to files and folders: a link, an input, a bundle, the current folder.

    ``in_place``: the output is written into, never renamed or replaced (a sweep folder), so
    it may be the current folder.
    """
    if final.is_symlink():
        target = os.readlink(final)
        raise OutputRefused(
            f"{option} {final}: is a symbolic link (to {target}); outputs are renamed into "
            "place, never written through a link: pass the real path"
        )
    resolved = _resolved(final)
    if not in_place and (final.name in ("", ".", "..") or _within(_resolved(Path.cwd()), resolved)):
        raise OutputRefused(
            f"{option} {final}: is the current folder or above it; choose a new path"
        )
    for source in inputs:
        if source is None:
            continue
        where = _resolved(Path(source))
        if _within(where, resolved):
            raise OutputRefused(f"{option} {final}: holds the input {source}; choose a new path")
        if _within(resolved, where):
            raise OutputRefused(
                f"{option} {final}: lies inside the input {source}; write outside it"
            )
    bundle = _bundle_above(resolved.parent) if resolved.parent != resolved else None
    if bundle is not None:
        raise OutputRefused(
            f"{option} {final}: lies inside the trace bundle {bundle}; write outside it"
        )


def check_folder_output(
    final: str | os.PathLike[str],
    *,
    mark: Mark,
    overwrite: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
    option: str = "--out",
    resume: bool = False,
) -> bool:
    """Refuse a folder output that writing (or replacing) could damage; True if it exists.

    Refused: a symbolic link; ``.``, the current folder or above it; a folder that holds an
    input or lies inside one, or lies inside (or is) a trace bundle; a path whose parent is a
    file; an existing entry without ``overwrite`` (or ``resume``); and with them, an existing
    folder that does not carry ``mark``. With ``resume`` (a folder written in place, never
    replaced) a folder holding no file (folders only) may be used too, and so may the current
    folder.

    Raises
    ------
    OutputRefused
        In one line naming ``option``, the path and what to do.
    """
    final = Path(final)
    _check_place(final, option, inputs, in_place=resume)
    if is_trace_bundle(final) and mark.check(final) is not None:
        raise OutputRefused(
            f"{option} {final}: is a trace bundle; {mark.command} does not write into one, "
            "choose a new path"
        )
    if not os.path.lexists(final):
        return False
    if resume:
        if _holds_no_files(final):
            return True
        reason = mark.check(final)
        if reason is not None:
            raise OutputRefused(f"{option} {final}: {reason}; it is left alone, choose a new path")
        return True
    if not overwrite:
        raise OutputRefused(
            f"{option} {final}: already exists; choose a new path, or pass --overwrite to "
            f"replace what {mark.command} wrote there"
        )
    reason = mark.check(final)
    if reason is not None:
        raise OutputRefused(f"--overwrite {final}: {reason}; it is left alone, choose a new path")
    return True


def check_new_file(
    final: str | os.PathLike[str],
    *,
    mark: Mark | None,
    overwrite: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
    option: str = "--out",
) -> bool:
    """Refuse a file output that writing could damage; True if it exists and will be replaced.

    The file form of :func:`check_folder_output`. An existing file is replaced only with
    ``overwrite``, only if it is a regular file, and (when ``mark`` is given) only if ``mark``
    recognises it as the command's own.
    """
    final = Path(final)
    _check_place(final, option, inputs)
    if not os.path.lexists(final):
        return False
    if not stat.S_ISREG(final.lstat().st_mode):
        raise OutputRefused(f"{option} {final}: exists and is not a file; choose a new path")
    command = mark.command if mark is not None else "this command"
    if not overwrite:
        raise OutputRefused(
            f"{option} {final}: already exists; choose a new path, or pass --overwrite to "
            f"replace what {command} wrote there"
        )
    reason = mark.check(final) if mark is not None else None
    if reason is not None:
        raise OutputRefused(f"--overwrite {final}: {reason}; it is left alone, choose a new path")
    return True


# ------------------------------------------------------------------------------ folders
def _os_error(final: Path, option: str, error: OSError) -> OutputRefused:
    reason = (error.strerror or type(error).__name__).lower()
    where = error.filename or final
    return OutputRefused(
        f"{option} {final}: cannot write {where} ({reason}); pass a path you can write"
    )


def make_staging(
    final: str | os.PathLike[str],
    *,
    folder: bool = True,
    option: str = "--out",
    created: list[Path] | None = None,
) -> Path:
    """Create this process's staging folder (or reserve its file name) for ``final``.

    Stale staging copies of ``final`` are removed first. A leftover under this process's own
    staging name (a pid reused after a kill) is removed if it is a real folder or file of this
    user; anything else there (a link, another user's) is refused, never touched.

    ``created`` receives the staging path once the name is this process's to create, before
    the folder exists: a stop (Ctrl-C, SIGTERM) handled just after the folder was made, before
    the caller holds the returned path, still leaves the caller the path to remove
    (:func:`staging_copy` does this).
    """
    final = Path(final)
    remove_stale_staging(final)
    staging = staging_path(final)
    if os.path.lexists(staging) and (not _ours(staging) or not _remove(staging)):
        raise OutputRefused(
            f"{option} {final}: {staging} exists and is not a staging copy this process can "
            "remove; remove it or choose a new path"
        )
    if created is not None:
        created.append(staging)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        if folder:
            staging.mkdir()
    except OSError as error:
        raise _os_error(final, option, error) from None
    return staging


@contextlib.contextmanager
def staging_copy(
    final: str | os.PathLike[str], *, folder: bool = True, option: str = "--out"
) -> Iterator[Path]:
    """:func:`make_staging` as a block: on any exception the staging copy is removed.

    A stop handled at any instant, even between the folder's creation and the return of
    :func:`make_staging`, leaves nothing behind (a SIGTERM that came just as the folder
    appeared used to leave it, since the caller's clean-up had not begun).
    """
    created: list[Path] = []
    try:
        yield make_staging(final, folder=folder, option=option, created=created)
    except BaseException:
        for path in created:
            discard(path)
        raise


def discard(staging: str | os.PathLike[str]) -> None:
    """Remove a staging copy (folder or file); never follows a link, never raises."""
    staging = Path(staging)
    if os.path.lexists(staging) and not stat.S_ISLNK(staging.lstat().st_mode):
        _remove(staging)


def _rename_noreplace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, failing with FileExistsError if ``target`` exists.

    Linux's renameat2(RENAME_NOREPLACE) makes the check and the rename one step; elsewhere (or
    on a file system without it) the check comes just before the rename.
    """
    if _renameat2(source, target, 1):
        return
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    os.rename(source, target)


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one step (renameat2(RENAME_EXCHANGE)); False if unsupported."""
    return _renameat2(a, b, 2)


def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """renameat2 with ``flags``; False where it is unavailable (then nothing was done)."""
    call = _RENAMEAT2[0]
    if call is None:
        return False
    at_fdcwd = -100
    result = call(at_fdcwd, os.fsencode(source), at_fdcwd, os.fsencode(target), flags)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(target))


def _load_renameat2() -> list[Any]:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):
        return [None]
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    return [call]


_RENAMEAT2 = _load_renameat2() if os.name == "posix" else [None]


def publish_folder(
    staging: str | os.PathLike[str],
    final: str | os.PathLike[str],
    *,
    mark: Mark,
    overwrite: bool = False,
    option: str = "--out",
) -> Path:
    """Rename the complete ``staging`` folder to ``final``; replace an old one only if allowed.

    An existing ``final`` is replaced only with ``overwrite`` and if ``mark`` still recognises
    it (it is checked again: it may have changed while the command ran); the two folders are
    swapped in one step where the system allows it, and the old one is then removed. On any
    failure ``staging`` is removed and ``final`` is left as it was.
    """
    staging, final = Path(staging), Path(final)
    try:
        try:
            _rename_noreplace(staging, final)
            return final
        except FileExistsError:
            pass
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise _os_error(final, option, error) from None
        # Something is there now: replace it only if it is still the command's own output.
        check_folder_output(final, mark=mark, overwrite=overwrite, option=option)
        try:
            if not _exchange(staging, final):
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                discard(old)
                os.rename(final, old)
                os.rename(staging, final)
                staging = old
        except OSError as error:
            raise _os_error(final, option, error) from None
        discard(staging)  # now the old output
        return final
    except BaseException:
        discard(staging)
        raise


@contextlib.contextmanager
def staged_folder(
    final: str | os.PathLike[str],
    *,
    mark: Mark,
    overwrite: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
    marker: str | None = None,
    option: str = "--out",
) -> Iterator[Path]:
    """Write a new folder ``final`` through a staging folder: yields the folder to write in.

    ``final`` is checked first (:func:`check_folder_output`); on leaving the block normally the
    folder (with ``marker`` written into it, if given) is renamed into place
    (:func:`publish_folder`); on any exception, Ctrl-C included, it is removed.
    """
    final = Path(final)
    check_folder_output(final, mark=mark, overwrite=overwrite, inputs=inputs, option=option)
    with staging_copy(final, option=option) as staging:
        yield staging
        if marker is not None:
            write_marker(staging, marker, mark.command)
    publish_folder(staging, final, mark=mark, overwrite=overwrite, option=option)


@contextlib.contextmanager
def made_once(final: str | os.PathLike[str], *, done: str) -> Iterator[Path]:
    """Make the cache folder ``final`` through a staging folder: yields the folder to fill.

    For a folder any number of processes may make at once (a model under the user's cache):
    the first complete one to be renamed into place wins; a later one finding ``final`` there
    with its file ``done`` is discarded. On any exception the staging folder is removed.
    """
    final = Path(final)
    with staging_copy(final) as staging:
        yield staging
        try:
            _rename_noreplace(staging, final)
        except OSError:
            if not (final / done).is_file():
                raise
            discard(staging)  # another process made it first


# ------------------------------------------------------------------------------ files
def _write_staged(path: Path, data: bytes | str) -> Path:
    staging = staging_path(path)
    if os.path.lexists(staging) and (not _ours(staging) or not _remove(staging)):
        raise OutputRefused(f"{path}: {staging} is in the way and is not a staging copy")
    try:
        with open(staging, "xb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    except BaseException:
        discard(staging)
        raise
    return staging


def write_files(files: Mapping[Path, bytes | str], *, cleanup: bool = False) -> None:
    """Write files so that a failure leaves no partial file and replaces nothing.

    Every file is first written in full to its staging name (text as UTF-8); only when all are
    written are they renamed into place. If anything fails, the staging files are removed and
    the existing files are left as they were. Folders are created as needed. ``cleanup`` also
    removes stale staging copies of each file first (for a command's own outputs).
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if cleanup:
                remove_stale_staging(path)
            staged.append((_write_staged(path, data), path))
        for staging, path in staged:
            os.replace(staging, path)
    finally:
        for staging, _ in staged:
            discard(staging)


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield the staging name of ``path`` to write; rename it over ``path`` on success.

    For a file the command owns (a manifest, a summary it rewrites): any existing ``path`` is
    replaced. On any exception the staging file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    staging = staging_path(path)
    if os.path.lexists(staging) and (not _ours(staging) or not _remove(staging)):
        raise OutputRefused(f"{path}: {staging} is in the way and is not a staging copy")
    try:
        yield staging
        os.replace(staging, path)
    finally:
        discard(staging)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through its staging file and a rename (replaces ``path``)."""
    write_files({Path(path): data})


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through its staging file and a rename."""
    write_files({Path(path): text})


def write_json(path: str | os.PathLike[str], payload: Any) -> None:
    """Write ``payload`` as sorted, indented JSON (and a newline) through a rename."""
    write_text(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def staged_file(
    final: str | os.PathLike[str],
    *,
    mark: Mark | None,
    overwrite: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
    option: str = "--out",
) -> Iterator[Path]:
    """Write a new file ``final`` through its staging name: yields the path to write.

    ``final`` is checked first (:func:`check_new_file`). On leaving the block normally the
    file is renamed into place (without ``overwrite``, never over a file that appeared
    meanwhile); on any exception it is removed.
    """
    final = Path(final)
    check_new_file(final, mark=mark, overwrite=overwrite, inputs=inputs, option=option)
    created: list[Path] = []
    try:
        staging = make_staging(final, folder=False, option=option, created=created)
        yield staging
        if not os.path.lexists(staging):
            raise OutputRefused(f"{option} {final}: nothing was written")
        try:
            if overwrite and os.path.lexists(final):
                check_new_file(final, mark=mark, overwrite=True, option=option)
                os.replace(staging, final)
            else:
                _rename_noreplace(staging, final)
        except FileExistsError:
            raise OutputRefused(
                f"{option} {final}: appeared while this command ran; it is left alone"
            ) from None
        except OSError as error:
            raise _os_error(final, option, error) from None
    finally:
        for path in created:
            discard(path)
