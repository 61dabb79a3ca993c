"""What every tracekit command shares: help options and library errors turned into exits."""

from __future__ import annotations

import errno
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from tracekit.errors import TracekitError

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

# The exit statuses of every command (docs/guarantees.md, "Exit codes": the one table).
EXIT_DONE = 0
"""Done: valid, equivalent, every run complete."""
EXIT_FAILED = 1
"""A finding: a check ran and failed (validate invalid, diff different, a NO-GO, a run failed)."""
EXIT_BAD_INPUT = 2
"""Bad input: a missing or unreadable path, a bad option value, configuration or workload."""
EXIT_TRUNCATED = 3
"""A truncated recording (``validate``): what was flushed is readable."""
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C or SIGTERM; nothing half-written is left under a final name."""


#: What exit status 1 (a finding) means, for each command that has one; every other command
#: exits 0, 2 or 130 only. The one list: ``tracekit --help`` is made from it, and the one table
#: of exit codes (docs/guarantees.md, "Exit codes") is checked against it
#: (tests/test_exit_codes_documented.py).
FINDINGS: dict[str, str] = {
    "accuracy": "a metric outside --target and the repeats' noise floor",
    "diff": "the recordings differ, or a diff --conformance check failed",
    "experiment traces": "--mode verify: a regenerated trace's hash changed",
    "fidelity": "the two recordings' steps differ",
    "manifest validate": "a rule of the manifest is broken",
    "outputs": "a never-preempted request's output differs",
    "qualify": "a NO-GO",
    "sweep": "a run failed",
    "validate": "an invariant is broken",
}
#: The commands that exit 3 (a truncated recording: what was flushed is readable).
TRUNCATED = ("validate",)


def exit_status_help() -> str:
    """The exit statuses, as ``tracekit --help`` states them (from :data:`FINDINGS`)."""
    findings = ", ".join("qualify NO-GO" if name == "qualify" else name for name in FINDINGS)
    return (
        f"Exit status of every command (docs/guarantees.md, Exit codes): {EXIT_DONE} done; "
        f"{EXIT_FAILED} a finding ({findings}); {EXIT_BAD_INPUT} bad input (one Error: line "
        f"naming the file or option); {EXIT_TRUNCATED} a truncated recording "
        f"({', '.join(TRUNCATED)}); {EXIT_INTERRUPTED} interrupted (Ctrl-C or SIGTERM)."
    )


class LibraryError(click.ClickException):
    """A library error shown as one line, with the command's chosen exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def library_errors(exit_code: int = EXIT_BAD_INPUT) -> Iterator[None]:
    """Turn a ``TracekitError`` into a one-line error and exit with ``exit_code``.

    Every command exits with 2 on bad input (a ``TracekitError``); 1 is kept for a check that
    ran and failed, which commands report through their result's ``exit_code``.
    """
    try:
        yield
    except TracekitError as error:
        # An error that carries its own status (a recording stopped by a signal: 130) keeps it.
        raise LibraryError(str(error), getattr(error, "exit_code", exit_code)) from error


def option_given(name: str) -> bool:
    """Whether the running command's parameter ``name`` was given, not left at its default.

    Its deprecated spelling (:func:`tracekit.cli.params.deprecated_alias`) counts too.
    """
    ctx = click.get_current_context()
    unset = (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    return any(ctx.get_parameter_source(key) not in unset for key in (name, f"deprecated_{name}"))


def ignored_option(option: str, needed: str, current: str) -> LibraryError:
    """The one-line refusal (exit 2) of ``option``, given where ``current`` would ignore it.

    ``needed`` is the setting under which it applies (``--objective slo``). An option the run
    would not read is refused rather than recorded as if it had changed something.
    """
    return LibraryError(
        f"{option} applies with {needed} only ({current} would ignore it); pass {needed}, or "
        f"drop {option}",
        EXIT_BAD_INPUT,
    )


trace_argument = click.argument(
    "trace", type=click.Path(exists=False, file_okay=False, path_type=Path)
)


def check_out_path(path: Path, option: str = "--out", *, folder: bool = True) -> None:
    """Refuse an output path that cannot be created, with one line naming ``option`` and path.

    ``folder`` says whether the command writes a folder (a bundle, a results folder) or a file.
    The path may exist (commands decide whether to replace it) or be missing with missing parents
    (commands create them); it must not be the wrong kind, sit under a file, or sit in a folder
    that cannot be written (an unnamed file is made in it, :func:`_probe_writable`); nothing
    else is created here.
    """
    kind, other = ("folder", "file") if folder else ("file", "folder")
    if path.is_symlink():
        raise LibraryError(
            f"{option} {path}: is a symbolic link (to {os.readlink(path)}); outputs are "
            f"renamed into place, never written through a link: pass the real {kind} path",
            2,
        )
    if path.exists() and path.is_dir() != folder:
        raise LibraryError(f"{option} {path}: is a {other}, not a {kind}; pass a {kind} path", 2)
    ancestor = path.parent if path.exists() else path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise LibraryError(
            f"{option} {path}: {ancestor} is a file, so nothing can be created under it; "
            f"pass a {kind} path under a folder",
            2,
        )
    # A real probe, not os.access: root passes os.access on a read-only mount, /proc or /sys,
    # and the command would then fail mid-run with a traceback.
    try:
        _probe_writable(ancestor)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise LibraryError(
            f"{option} {path}: cannot write in {ancestor} ({reason.lower()}); "
            "pass a path in a folder you can write",
            2,
        ) from error


def _probe_writable(folder: Path) -> None:
    """Raise ``OSError`` unless an entry can be created in ``folder``; leave nothing, ever.

    An unnamed file (``O_TMPFILE``, Linux) has no name to leave behind, whatever stops the
    process; a hidden folder (made and removed at once) was left by a stop that came between
    the two. Where ``O_TMPFILE`` is not supported (another system, a file system without it),
    the folder as before.
    """
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            os.close(os.open(folder, flag | os.O_WRONLY, 0o600))
            return
        except OSError as error:
            # EISDIR or EOPNOTSUPP: a kernel or file system without it; try the folder.
            if error.errno not in (errno.EISDIR, errno.EOPNOTSUPP, errno.EINVAL):
                raise
    os.rmdir(tempfile.mkdtemp(prefix=".tracekit-probe-", dir=folder))


def out_option(*, folder: bool = True, **kwargs: Any) -> Callable[[F], F]:
    """``--out`` checked by :func:`check_out_path` before the command runs (every command)."""

    def check(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        if value is not None:
            check_out_path(value, "--out", folder=folder)
        return value

    kwargs.setdefault("type", click.Path(path_type=Path))
    return click.option("--out", callback=check, **kwargs)


def overwrite_option(what: str) -> Callable[[F], F]:
    """``--overwrite``: replace an existing ``--out``, but only ``what`` (the command's own).

    One meaning everywhere (docs/guarantees.md, "Existing files"): the command replaces only an
    output it wrote, recognised by its mark, and only once the new one is complete.
    """
    return click.option(
        "--overwrite",
        is_flag=True,
        help=f"Replace an existing --out, only if it is {what} (once the new one is complete).",
    )


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Make SIGTERM stop a command as Ctrl-C does (its clean-up runs; exit status 130).

    Only in the main thread and only where SIGTERM has its default action (a command that
    handles it itself, such as ``record sim``, installs its own handler inside).
    """
    main = threading.current_thread() is threading.main_thread()
    install = main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def handle(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

    if install:
        signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fix_for(param: click.Parameter) -> str:
    """What to pass instead of a bad value of ``param``: the last line of a usage error."""
    option = isinstance(param, click.Option)
    name = param.opts[0] if option else param.human_readable_name
    kind = param.type
    if isinstance(kind, click.Choice):
        return f"pass {name} with one of: {', '.join(map(str, kind.choices))}"
    if isinstance(kind, click.IntRange | click.FloatRange):
        low, high = kind.min, kind.max
        bounds = " and ".join(
            part
            for part in (
                None if low is None else f"{'>' if kind.min_open else '>='} {low}",
                None if high is None else f"{'<' if kind.max_open else '<='} {high}",
            )
            if part
        )
        number = "a whole number" if isinstance(kind, click.IntRange) else "a number"
        return f"pass {name} with {number} {bounds}"
    if kind is click.INT:
        return f"pass {name} with a whole number, e.g. 5"
    if kind is click.FLOAT:
        return f"pass {name} with a number, e.g. 0.5"
    metavar = param.make_metavar(click.get_current_context()) if option else ""
    return f"pass {name} {metavar}".rstrip()


class FixHintGroup(click.Group):
    """A group whose usage errors end with the fix: what to pass instead of the bad value.

    click prints a usage error as three lines (usage, "Try ... --help", the error); the error,
    the last line, gets "; pass ..." unless its message already says what to pass.
    """

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; a bad parameter's error gets the fix appended.

        Ctrl-C and SIGTERM exit with status 130 and one line (click's own ``Aborted!`` exited
        1, the status of a finding).
        """
        try:
            with _sigterm_interrupts():
                return super().invoke(ctx)
        except KeyboardInterrupt as stop:
            click.echo(f"Error: {str(stop) or 'interrupted by Ctrl-C'}", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except click.BadParameter as error:
            if error.param is not None and "pass " not in error.message.lower():
                fix = _fix_for(error.param)
                if isinstance(error, click.MissingParameter):
                    error.message = f"{fix[0].upper()}{fix[1:]}."
                else:
                    error.message = f"{error.message.rstrip('.')}; {fix}"
            raise


def leaf_commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` that is not a group, with its full name (``"record sim"``).

    In the group's registration order; the checks over every command (tests, benchmarks) walk
    the tree with it.
    """
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command
