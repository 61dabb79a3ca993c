"""The one safe-output module (``tracekit.safe_output``), against hostile leftovers.

Every command that writes stages its output beside the final name and renames it into place;
this is the module's own test, once and thoroughly: the pid check, the staging names it
recognises, the clean-up of leftovers (huge pids, live processes' pids, non-numeric suffixes,
files where folders are expected, links, dangling links, another user's folder, unlistable
parents), and the refusals of a staged folder or file (links, inputs, bundles, the current
folder, unwritable parents, outputs that appear while a command runs).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracekit import safe_output
from tracekit.safe_output import Mark, OutputRefused, staging_path

HUGE = 99999999999999999999  # the audit's stale folder: beyond what os.kill can take
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _gone(k: int = 0) -> int:
    """A pid no process has: above the system's pid_max (a just-reaped pid may be reused by
    another process on a busy machine)."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 2**22
    return pid_max + 1 + k


@pytest.fixture
def sleeper() -> Iterator[int]:
    """The pid of a running process (not this one)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def _tree(folder: Path) -> dict[str, str]:
    """Every entry below ``folder`` (links not followed): file bytes, 'dir' or 'link->target'."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[key] = f"link->{os.readlink(path)}"
        elif path.is_dir():
            found[key] = "dir"
        else:
            found[key] = path.read_bytes().decode("latin-1")
    return found


ANY = Mark("tracekit test", lambda folder: None)
MARKED = safe_output.marker_files("tracekit test", ".tracekit-test", ("data.txt",))


# ------------------------------------------------------------------------------ pid check
def test_pid_alive_answers_for_every_pid_without_raising(sleeper: int) -> None:
    assert safe_output.pid_alive(os.getpid())
    assert safe_output.pid_alive(sleeper)
    assert safe_output.pid_alive(1)  # init: alive, and another user's when not root
    assert not safe_output.pid_alive(_dead_pid())
    for impossible in (0, -1, -(2**70), HUGE, 2**31, 2**63, 2**64 + 5, 10**300):
        assert not safe_output.pid_alive(impossible), impossible


@pytest.mark.parametrize(
    ("name", "pid"),
    [
        (".run.partial-123", 123),
        (f".run.partial-{HUGE}", HUGE),
        (".run.partial-abc", None),
        (".run.partial-12x", None),
        (".run.partial-+12", None),
        (".run.partial- 12", None),
        (".run.partial-012", None),  # str(os.getpid()) never has a leading zero
        (".run.partial-0", None),
        (".run.partial--5", None),
        (".run.partial-\u0661\u0662", None),  # Arabic-Indic digits: int() would read them
        (".run.partial-", None),
        (".run.partial-12.old", None),
        (".run.partial-12/", None),
        ("run.partial-12", None),  # not hidden
        (".runx.partial-12", None),
        (".ru.partial-12", None),
    ],
)
def test_only_exact_staging_names_are_recognised(name: str, pid: int | None) -> None:
    assert safe_output.staging_pid(name, "run") == pid


def test_a_name_with_regex_characters_matches_only_itself() -> None:
    assert safe_output.staging_pid(".a.b.partial-7", "a.b") == 7
    assert safe_output.staging_pid(".aXb.partial-7", "a.b") is None
    assert safe_output.staging_pid(".a+b.partial-7", "a+b") == 7
    assert safe_output.staging_pid(".aab.partial-7", "a+b") is None


# ------------------------------------------------------------------------------ clean-up
def test_stale_staging_is_removed_and_every_hostile_leftover_is_left_alone(
    tmp_path: Path, sleeper: int
) -> None:
    dead = _gone()
    user = tmp_path / "user"  # what links point at: must never be touched
    (user / "inner").mkdir(parents=True)
    (user / "precious.txt").write_text("mine\n")
    stale_dir = tmp_path / f".run.partial-{dead}"
    (stale_dir / "tables").mkdir(parents=True)
    (stale_dir / "tables" / "part-0.parquet").write_bytes(b"x" * 100)
    huge = tmp_path / f".run.partial-{HUGE}"
    huge.mkdir()
    stale_file = tmp_path / f".run.partial-{dead + 1}"
    stale_file.write_text("a staging file of a file output\n")
    keep = {
        tmp_path / f".run.partial-{sleeper}": "live process",
        tmp_path / f".run.partial-{os.getpid()}": "this process",
        tmp_path / ".run.partial-abc": "non-numeric",
        tmp_path / ".run.partial-0123": "leading zero",
        tmp_path / ".other.partial-1": "another output's",
        tmp_path / "run.partial-1": "not hidden",
    }
    for folder in keep:
        folder.mkdir()
    link = tmp_path / f".run.partial-{dead + 3}"
    link.symlink_to(user, target_is_directory=True)
    dangling = tmp_path / f".run.partial-{dead + 4}"
    dangling.symlink_to(tmp_path / "nowhere")
    fifo = tmp_path / f".run.partial-{dead + 5}"
    os.mkfifo(fifo)
    before_user = _tree(user)

    removed = safe_output.remove_stale_staging(tmp_path / "run")

    assert sorted(removed) == sorted([stale_dir, huge, stale_file])
    for path in (stale_dir, huge, stale_file):
        assert not os.path.lexists(path)
    for path in keep:
        assert path.is_dir(), keep[path]
    assert link.is_symlink() and dangling.is_symlink() and fifo.exists()
    assert _tree(user) == before_user
    # Nothing left to remove: a second pass is a no-op.
    assert safe_output.remove_stale_staging(tmp_path / "run") == []


@pytest.mark.skipif(not IS_ROOT, reason="making another user's folder needs root (chown)")
def test_another_users_staging_folder_is_left_alone(tmp_path: Path) -> None:
    theirs = tmp_path / f".run.partial-{_gone()}"
    theirs.mkdir()
    (theirs / "their.txt").write_text("theirs\n")
    os.chown(theirs, 65534, 65534)
    assert safe_output.remove_stale_staging(tmp_path / "run") == []
    assert (theirs / "their.txt").read_text() == "theirs\n"


def test_clean_up_never_raises_where_nothing_can_be_listed_or_removed(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    # The parent is a file, or missing: nothing to list, nothing removed, no error.
    assert safe_output.remove_stale_staging(blocker / "run") == []
    assert safe_output.remove_stale_staging(tmp_path / "missing" / "run") == []
    assert safe_output.remove_staging_below(blocker) == []
    if not IS_ROOT:
        locked = tmp_path / "locked"
        stale = locked / f".run.partial-{_gone()}"
        (stale / "sub").mkdir(parents=True)
        (stale / "sub" / "f").write_text("x")
        (stale / "sub").chmod(0o500)  # its file cannot be removed
        try:
            assert safe_output.remove_stale_staging(locked / "run") == []
        finally:
            (stale / "sub").chmod(0o700)


def test_staging_below_a_sweep_folder_goes_whatever_its_pid_but_links_are_not_followed(
    tmp_path: Path, sleeper: int
) -> None:
    root = tmp_path / "sweep"
    outside = tmp_path / "outside"
    (outside / f".run.partial-{_gone()}").mkdir(parents=True)
    (root / "runs" / "a").mkdir(parents=True)
    live = root / "runs" / "a" / f".r0.partial-{sleeper}"
    live.mkdir()
    (root / "runs" / "a" / "r1").mkdir()
    (root / "runs" / "a" / "r1" / "manifest.json").write_text("{}")
    (root / "runs" / "a" / ".notes.partial-draft").mkdir()
    (root / "runs" / "a" / f".staged.partial-{sleeper}").write_text("a file")
    (root / "runs" / "linked").symlink_to(outside, target_is_directory=True)
    removed = safe_output.remove_staging_below(root)
    assert removed == [live]
    assert (root / "runs" / "a" / ".notes.partial-draft").is_dir()
    assert (root / "runs" / "a" / f".staged.partial-{sleeper}").is_file()
    assert len(list(outside.iterdir())) == 1


# ------------------------------------------------------------------------------ folders
def test_a_staged_folder_appears_whole_with_its_marker(tmp_path: Path) -> None:
    final = tmp_path / "deep" / "out"
    with safe_output.staged_folder(final, mark=MARKED, marker=".tracekit-test") as staging:
        assert staging == staging_path(final) and staging.is_dir()
        assert not final.exists()
        (staging / "data.txt").write_text("1")
    assert sorted(p.name for p in final.iterdir()) == [".tracekit-test", "data.txt"]
    marker = json.loads((final / ".tracekit-test").read_text())
    assert marker == {"version": 1, "written_by": "tracekit test"}
    assert sorted(p.name for p in final.parent.iterdir()) == ["out"]


@pytest.mark.parametrize("stop", [RuntimeError("boom"), KeyboardInterrupt(), SystemExit(3)])
def test_any_stop_inside_leaves_nothing(tmp_path: Path, stop: BaseException) -> None:
    final = tmp_path / "out"
    with pytest.raises(type(stop)), safe_output.staged_folder(final, mark=ANY) as staging:
        (staging / "half.txt").write_text("half")
        raise stop
    assert list(tmp_path.iterdir()) == []


def _stop_as_staging_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a stop arrive just as a staging folder is made: after the mkdir, before its return.

    That is where a SIGTERM that came as the folder appeared is handled (Python runs a
    signal's handler after the system call returns), before the caller's clean-up has begun.
    """
    mkdir = Path.mkdir

    def stopped(self: Path, *args: object, **kwargs: object) -> None:
        mkdir(self, *args, **kwargs)  # type: ignore[arg-type]
        if safe_output.STAGING_INFIX in self.name:
            raise KeyboardInterrupt("stopped by SIGTERM")

    monkeypatch.setattr(Path, "mkdir", stopped)


def test_a_stop_as_the_staging_folder_appears_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.sweep.task import publish_files
    from tracekit.trace.writer import BundleWriter

    _stop_as_staging_appears(monkeypatch)
    writers = {
        "staged_folder": lambda out: safe_output.staged_folder(out, mark=ANY).__enter__(),
        "staging_copy": lambda out: safe_output.staging_copy(out).__enter__(),
        "publish_files": lambda out: publish_files(out, {"manifest.json": b"{}"}),
        "BundleWriter": lambda out: BundleWriter(out, {"run_id": "r"}),
    }
    for name, write in writers.items():
        with pytest.raises(KeyboardInterrupt):
            write(tmp_path / name)
        assert list(tmp_path.iterdir()) == [], name


def test_a_folder_still_being_written_is_removed_once_the_writer_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stopped worker process may flush its last files into a staging folder while the command
    # removes it: rmtree then fails with "directory not empty" (here, its first three tries), and
    # the folder used to stay for good.
    staging = tmp_path / ".out.partial-1"
    (staging / "bundles").mkdir(parents=True)
    (staging / "bundles" / "part.tmp").write_bytes(b"x")
    rmtree = shutil.rmtree
    calls: list[Path] = []

    def busy(path: Path, *args: object, **kwargs: object) -> None:
        calls.append(path)
        if len(calls) <= 3:
            raise OSError(errno.ENOTEMPTY, "Directory not empty", str(path))
        rmtree(path)

    monkeypatch.setattr(shutil, "rmtree", busy)
    monkeypatch.setattr(safe_output, "_REMOVE_PAUSE_S", 0.01)
    safe_output.discard(staging)
    assert list(tmp_path.iterdir()) == [] and len(calls) == 4
    # Any other failure (a folder this user may not remove) is not waited on.
    (staging / "x").mkdir(parents=True)
    calls.clear()
    monkeypatch.setattr(
        shutil,
        "rmtree",
        lambda path, *a, **k: (
            calls.append(path)
            or (_ for _ in ()).throw(PermissionError(errno.EACCES, "Permission denied", str(path)))
        ),
    )
    safe_output.discard(staging)
    assert len(calls) == 1 and staging.is_dir()


def test_an_existing_folder_is_replaced_only_with_overwrite_and_only_if_marked(
    tmp_path: Path,
) -> None:
    final = tmp_path / "out"
    final.mkdir()
    (final / "notes.txt").write_text("mine\n")
    for overwrite in (False, True):
        with (
            pytest.raises(OutputRefused, match="already exists" if not overwrite else r"no \.trac"),
            safe_output.staged_folder(final, mark=MARKED, overwrite=overwrite),
        ):
            pytest.fail("the block must not run")
    assert _tree(final) == {"notes.txt": "mine\n"}
    # Marked, but holding a file the command did not write: still left alone.
    (final / ".tracekit-test").write_text("{}")
    with (
        pytest.raises(OutputRefused, match=r"did not write \(notes\.txt\)"),
        safe_output.staged_folder(final, mark=MARKED, overwrite=True),
    ):
        pytest.fail("the block must not run")
    # Its own output is replaced, once the new one is complete.
    (final / "notes.txt").unlink()
    (final / "data.txt").write_text("old")
    with safe_output.staged_folder(
        final, mark=MARKED, overwrite=True, marker=".tracekit-test"
    ) as staging:
        assert (final / "data.txt").read_text() == "old"  # still there while the new one runs
        (staging / "data.txt").write_text("new")
    assert (final / "data.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .old- or staging left


@pytest.mark.parametrize("kind", ["dangling", "to a folder", "to a file"])
def test_a_link_at_the_output_is_refused_and_kept(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "to a folder":
        target.mkdir()
        (target / "data.txt").write_text("theirs")
    elif kind == "to a file":
        target.write_text("theirs")
    link = tmp_path / "out"
    link.symlink_to(target)
    before = _tree(tmp_path)
    for overwrite in (False, True):
        with (
            pytest.raises(OutputRefused, match="is a symbolic link"),
            safe_output.staged_folder(link, mark=ANY, overwrite=overwrite),
        ):
            pytest.fail("the block must not run")
        with pytest.raises(OutputRefused, match="is a symbolic link"):
            safe_output.check_new_file(link, mark=None, overwrite=overwrite)
    assert _tree(tmp_path) == before


def test_a_link_that_appears_while_the_command_runs_is_not_written_through(
    tmp_path: Path,
) -> None:
    final = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with (
        pytest.raises(OutputRefused, match="is a symbolic link"),
        safe_output.staged_folder(final, mark=ANY, overwrite=True) as staging,
    ):
        (staging / "data.txt").write_text("new")
        final.symlink_to(elsewhere, target_is_directory=True)
    assert final.is_symlink() and list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out"]


def test_a_folder_that_appears_while_the_command_runs_is_not_replaced(tmp_path: Path) -> None:
    final = tmp_path / "out"
    with (
        pytest.raises(OutputRefused, match="already exists"),
        safe_output.staged_folder(final, mark=ANY) as staging,
    ):
        (staging / "data.txt").write_text("new")
        final.mkdir()  # empty: a plain rename(2) would silently replace it
    assert final.is_dir() and list(final.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_leftover_under_this_processs_own_staging_name(tmp_path: Path) -> None:
    final = tmp_path / "out"
    own = staging_path(final)
    own.mkdir()
    (own / "old.txt").write_text("from a killed process whose pid this one reuses")
    with safe_output.staged_folder(final, mark=ANY) as staging:
        assert list(staging.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # A link under that name is not a staging copy: refused, and its target kept.
    user = tmp_path / "user"
    user.mkdir()
    (user / "precious.txt").write_text("mine")
    own2 = staging_path(tmp_path / "second")
    own2.symlink_to(user, target_is_directory=True)
    with (
        pytest.raises(OutputRefused, match="not a staging copy"),
        safe_output.staged_folder(tmp_path / "second", mark=ANY),
    ):
        pytest.fail("the block must not run")
    assert (user / "precious.txt").read_text() == "mine" and own2.is_symlink()


def _bundle(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"format": "tracekit.trace"}))
    return folder


@pytest.mark.parametrize(
    "where",
    ["inside a bundle", "is a bundle", "holds an input", "inside an input", "cwd", "above cwd"],
)
def test_outputs_that_would_damage_the_users_data_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    bundle = _bundle(tmp_path / "runs" / "typed")
    data = tmp_path / "data"
    data.mkdir()
    workload = data / "w.csv"
    workload.write_text("request_id\n")
    here = tmp_path / "work" / "here"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    final, message = {
        "inside a bundle": (bundle / "nested", "lies inside the trace bundle"),
        "is a bundle": (bundle, "is a trace bundle"),
        "holds an input": (data, "holds the input"),
        "inside an input": (data / "w.csv" / "x", "lies inside the input"),
        "cwd": (Path("."), "current folder"),
        "above cwd": (tmp_path / "work", "current folder"),
    }[where]
    before = _tree(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(OutputRefused, match=message):
            safe_output.check_folder_output(
                final, mark=MARKED, overwrite=overwrite, inputs=[workload]
            )
        # A file: into the bundle, over its own manifest, or at the same places.
        file, file_message = {
            "inside a bundle": (bundle / "f.json", message),
            "is a bundle": (bundle / "manifest.json", "lies inside the trace bundle"),
        }.get(where, (final, message))
        with pytest.raises(OutputRefused, match=file_message):
            safe_output.check_new_file(file, mark=None, overwrite=overwrite, inputs=[workload])
    assert _tree(tmp_path) == before


def test_a_path_under_a_file_or_in_an_unwritable_folder_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with (
        pytest.raises(OutputRefused, match=r"--out .*a-file"),
        safe_output.staged_folder(blocker / "out", mark=ANY),
    ):
        pytest.fail("the block must not run")
    unwritable = [Path("/proc")] if sys.platform == "linux" else []
    if not IS_ROOT:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        unwritable.append(locked)
    for folder in unwritable:
        with (
            pytest.raises(OutputRefused, match="cannot write"),
            safe_output.staged_folder(folder / "out", mark=ANY),
        ):
            pytest.fail("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a-file", *(["locked"] if not IS_ROOT else [])]
    )


def test_a_file_where_the_folder_is_expected_is_refused(tmp_path: Path) -> None:
    final = tmp_path / "out"
    final.write_text("a file")
    with pytest.raises(OutputRefused, match="already exists"):
        safe_output.check_folder_output(final, mark=ANY)
    with pytest.raises(OutputRefused, match=r"no \.tracekit-test"):
        safe_output.check_folder_output(final, mark=MARKED, overwrite=True)
    with pytest.raises(OutputRefused, match="not empty"):
        safe_output.check_folder_output(final, mark=Mark("t", lambda f: "not empty"), resume=True)
    assert final.read_text() == "a file"


def test_resume_takes_a_new_an_empty_or_a_marked_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = safe_output.marker_files("tracekit test", ".tracekit-test")  # any other files too
    assert safe_output.check_folder_output(tmp_path / "new", mark=mark, resume=True) is False
    empty = tmp_path / "empty"
    empty.mkdir()
    assert safe_output.check_folder_output(empty, mark=mark, resume=True) is True
    (empty / "notes.txt").write_text("x")
    with pytest.raises(OutputRefused, match="left alone"):
        safe_output.check_folder_output(empty, mark=mark, resume=True)
    # A folder written in place (never renamed) may be the current folder.
    monkeypatch.chdir(tmp_path / "empty")
    (empty / ".tracekit-test").write_text("{}")
    assert safe_output.check_folder_output(Path("."), mark=mark, resume=True) is True


# ------------------------------------------------------------------------------ files
def test_a_staged_file_is_refused_replaced_or_left_as_the_rules_say(tmp_path: Path) -> None:
    mark = Mark("tracekit test", lambda p: None if p.read_text() == "ours" else "not ours")
    final = tmp_path / "f.json"
    with safe_output.staged_file(final, mark=mark) as staging:
        staging.write_text("ours")
    assert final.read_text() == "ours"
    with (
        pytest.raises(OutputRefused, match="already exists"),
        safe_output.staged_file(final, mark=mark),
    ):
        pytest.fail("the block must not run")
    with safe_output.staged_file(final, mark=mark, overwrite=True) as staging:
        staging.write_text("ours")
    final.write_text("the user's")
    with (
        pytest.raises(OutputRefused, match="not ours"),
        safe_output.staged_file(final, mark=mark, overwrite=True),
    ):
        pytest.fail("the block must not run")
    assert final.read_text() == "the user's"
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(OutputRefused, match="not a file"):
        safe_output.check_new_file(folder, mark=None, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "f.json"]


def test_a_file_that_appears_or_a_failure_while_writing_leaves_it_as_it_was(
    tmp_path: Path,
) -> None:
    final = tmp_path / "f.txt"
    with (
        pytest.raises(OutputRefused, match="appeared"),
        safe_output.staged_file(final, mark=None) as staging,
    ):
        staging.write_text("new")
        final.write_text("someone else's")
    assert final.read_text() == "someone else's"
    with (
        pytest.raises(RuntimeError),
        safe_output.staged_file(tmp_path / "g.txt", mark=None) as staging,
    ):
        staging.write_text("half")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_write_files_writes_all_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "b.txt").write_text("old b")
    calls = {"n": 0}
    real = os.replace

    def failing_second(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # both are staged before the first rename: fail before any
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(safe_output.os, "replace", failing_second)
    with pytest.raises(OSError, match="No space"):
        safe_output.write_files({tmp_path / "a.txt": "new a", tmp_path / "b.txt": b"new b"})
    monkeypatch.setattr(safe_output.os, "replace", real)
    assert _tree(tmp_path) == {"a.txt": "old a", "b.txt": "old b"}
    safe_output.write_files({tmp_path / "a.txt": "new a", tmp_path / "sub" / "b.txt": b"new b"})
    assert _tree(tmp_path) == {
        "a.txt": "new a", "b.txt": "old b", "sub": "dir", "sub/b.txt": "new b",
    }  # fmt: skip


def test_a_cache_folder_is_made_once_and_a_crashed_makers_copy_goes(tmp_path: Path) -> None:
    final = tmp_path / "model"
    stale = staging_path(final, _gone())
    stale.mkdir()
    (stale / "half").write_text("a maker killed halfway")
    with pytest.raises(RuntimeError), safe_output.made_once(final, done="weights") as staging:
        (staging / "weights").write_text("half")
        raise RuntimeError
    assert _tree(tmp_path) == {}  # the crashed maker's copy and the failed one are both gone
    with safe_output.made_once(final, done="weights") as staging:
        (staging / "weights").write_text("first")
        # Another process completes the folder meanwhile: the first complete one stays.
        final.mkdir()
        (final / "weights").write_text("second")
    assert _tree(tmp_path) == {"model": "dir", "model/weights": "second"}
    # A folder there without the file that says it is complete is an error, not a success.
    (final / "weights").unlink()
    with pytest.raises(OSError), safe_output.made_once(final, done="weights") as staging:
        (staging / "weights").write_text("third")
    assert _tree(tmp_path) == {"model": "dir"}


def test_the_tiny_models_config_is_rewritten_through_a_staging_file(tmp_path: Path) -> None:
    from tracekit.recording.tiny_model import TINY_MODEL_CONFIG, write_tiny_model

    stale = staging_path(tmp_path / "config.json", _gone())
    stale.write_text("{")
    (tmp_path / "config.json").write_text("{}")  # an older config: replaced
    assert write_tiny_model(tmp_path) == tmp_path
    assert _tree(tmp_path) == {
        "config.json": json.dumps(TINY_MODEL_CONFIG, indent=1, sort_keys=True)
    }


def test_the_module_imports_the_standard_library_and_the_error_root_only() -> None:
    script = (
        "import sys, tracekit.safe_output\n"
        "tops = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(m for m in tops if m not in sys.stdlib_module_names "
        "and m not in ('tracekit', 'bidkv', '__main__') and not m.startswith('_')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('tracekit')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    others, own = result.stdout.splitlines()
    assert others == "[]"  # bidkv: the package's version only (standard library itself)
    assert own == "['tracekit', 'tracekit.errors', 'tracekit.safe_output']"


def test_a_bundle_the_writer_makes_is_what_the_module_calls_a_bundle(tmp_path: Path) -> None:
    from trace_helpers import write_bundle

    from tracekit.trace.bundle import open_trace

    write_bundle(tmp_path / "b")
    assert safe_output.is_trace_bundle(tmp_path / "b")
    assert open_trace(tmp_path / "b").bundles[0].path == tmp_path / "b"
    assert not safe_output.is_trace_bundle(tmp_path)


def test_a_folder_written_in_place_is_made_with_its_marker_in_one_step(tmp_path: Path) -> None:
    """A kill between making a sweep's (or an experiment's) folder and marking it left the
    folder unmarked, holding the marker's staging file: every later run refused it as not its
    own (found by the bad-input suite's stops, benchmarks/bad_input_stops.py)."""
    mark = safe_output.marker_files("tracekit sweep", ".tracekit-sweep")
    # What such a kill left: a folder holding a dead process's staging copy of the marker.
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "..tracekit-sweep.partial-99999999999999999999").write_text("{")
    assert safe_output.check_folder_output(killed, mark=mark, resume=True)
    safe_output.make_marked_folder(killed, ".tracekit-sweep", "tracekit sweep")
    assert sorted(p.name for p in killed.iterdir()) == [".tracekit-sweep"]
    # A new folder appears with its marker, nothing else beside it.
    new = tmp_path / "new"
    safe_output.make_marked_folder(new, ".tracekit-sweep", "tracekit sweep")
    assert sorted(p.name for p in new.iterdir()) == [".tracekit-sweep"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed", "new"]
    # A live process's staging copy is someone at work: the folder is not taken.
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / f"..tracekit-sweep.partial-{os.getpid()}").write_text("{")
    with pytest.raises(OutputRefused):
        safe_output.check_folder_output(busy, mark=mark, resume=True)
