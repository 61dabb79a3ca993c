"""The test tiers (docs/testing.md): which tier a test is in, and the guard that keeps it honest.

Three tiers, chosen with pytest's ``-m``:

- **fast** (``pytest``, the default: ``-m "not live and not e2e"`` in ``pyproject.toml``): every
  test that needs nothing outside the project's environment and takes no more than a few
  seconds; it runs on every core (pytest-xdist).
- **live** (``pytest -m live``): the test starts a real engine or browser, software outside the
  project's environment: vLLM, SGLang, Chromium. A test is in it when its file is named
  ``test_*_live.py``, or it carries one of :data:`LIVE_MARKERS`.
- **e2e** (``pytest -m e2e``): whole jobs at a size that takes many seconds (the README's job,
  the Quick start, a wheel build, Ray), and tests that signal or kill real processes. A test is in
  it when it carries one of :data:`E2E_MARKERS`.

CI runs all three. :func:`guard_engine_starts` makes the live rule a check: a test outside the
live tier that starts a program of an engine's environment (``~/.cache/bidkv/...`` or one named
by ``$BIDKV_VLLM_VENV``, ``$BIDKV_VLLM_VENV_EXTRA``, ``$BIDKV_SGLANG_VENV``) or a Chromium, in
its own process (fixtures included), fails and is told to add the marker. A ``tracekit`` run in
a subprocess that starts an engine itself is out of its sight.

``tests/conftest.py`` imports the hooks below; ``tests/test_tiers.py`` checks them.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

#: Markers that put a test in the live tier (``live`` itself, and what needs which engine).
LIVE_MARKERS = ("live", "vllm", "sglang", "browser")
#: Markers that put a test in the e2e tier (``slow``: the older name).
E2E_MARKERS = ("e2e", "slow")
#: Test files whose every test is in the live tier.
LIVE_FILE_SUFFIX = "_live.py"
#: Browser executables (as tests/test_browser_report.py looks them up).
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
#: Test files that share a session-level resource and so must run on one xdist worker (each
#: file otherwise goes to whichever worker is free: ``--dist loadfile``): file name -> group.
SAME_WORKER = {
    # One vLLM driver process per environment for both (vllm_helpers.shared_driver_streams).
    "test_vllm_prefix_live.py": "vllm-scheduler-streams",
    "test_vllm_async_live.py": "vllm-scheduler-streams",
}
#: A fast-tier test over this many CPU seconds (its process and the children it waited for) is
#: listed at the end of the run as one to move to the e2e tier.
FAST_CPU_BUDGET_S = 5.0


def tier_of(item: pytest.Item) -> str:
    """``"live"``, ``"e2e"`` or ``"fast"``: the tier the rules above give ``item``."""
    if item.path.name.endswith(LIVE_FILE_SUFFIX) or any(
        item.get_closest_marker(m) for m in LIVE_MARKERS
    ):
        return "live"
    if any(item.get_closest_marker(m) for m in E2E_MARKERS):
        return "e2e"
    return "fast"


def engine_roots() -> list[Path]:
    """Folders whose programs are engines: the engine environments' homes and named ones."""
    roots = [Path.home() / ".cache" / "bidkv"]
    for variable in ("BIDKV_VLLM_VENV", "BIDKV_SGLANG_VENV"):
        if os.environ.get(variable):
            roots.append(Path(os.environ[variable]))
    extra = os.environ.get("BIDKV_VLLM_VENV_EXTRA", "")
    roots += [Path(p) for p in extra.split(os.pathsep) if p]
    return [Path(os.path.abspath(r.expanduser())) for r in roots]


def engine_program(args: Any, executable: Any = None) -> str | None:
    """The engine or browser that ``subprocess.Popen(args, executable=...)`` would start, or None.

    The program is ``executable``, else the first word of ``args``; a bare name is looked up
    on PATH. Symbolic links are not followed (a venv's ``python`` links to the system's).
    """
    program = executable
    if program is None:
        if isinstance(args, (str, bytes, os.PathLike)):
            text = os.fsdecode(args)
            program = text.split()[0] if text.split() else ""
        else:
            sequence = list(args)
            program = sequence[0] if sequence else ""
    text = os.fsdecode(program)
    if not text:
        return None
    if os.sep not in text:
        found = shutil.which(text)
        if Path(text).name in BROWSERS:
            return text
        if found is None:
            return None
        text = found
    path = Path(os.path.abspath(text))
    if path.name in BROWSERS:
        return str(path)
    if path.is_relative_to(os.path.abspath(sys.prefix)):
        return None  # this environment's own programs (wherever it lives) are no engine
    for root in engine_roots():
        if path.is_relative_to(root):
            return str(path)
    return None


class EngineStartError(RuntimeError):
    """A test outside the live tier started an engine."""


_POPEN_INIT = subprocess.Popen.__init__


def _guarded_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    program = engine_program(args, kwargs.get("executable"))
    if program is not None:
        raise EngineStartError(
            f"this test starts {program}, a real engine or browser, but is not in the live "
            "tier: mark it @pytest.mark.live (or name its file test_*_live.py); docs/testing.md"
        )
    _POPEN_INIT(self, args, *rest, **kwargs)


def guard_engine_starts(item: pytest.Item) -> Generator[None, None, None]:
    """Around one phase of ``item``: outside the live tier, starting an engine raises."""
    if tier_of(item) == "live":
        yield
        return
    subprocess.Popen.__init__ = _guarded_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = _POPEN_INIT  # type: ignore[method-assign]


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# ------------------------------------------------------------------------------------ hooks
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier (before ``-m`` deselects), heaviest tiers first.

    Running the live and e2e tests first lets the fast ones fill the other workers' time
    instead of a long test starting last (when all tiers run in one session).
    """
    order = {"live": 0, "e2e": 1, "fast": 2}
    for item in items:
        tier = tier_of(item)
        if tier != "fast" and not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=lambda item: order[tier_of(item)])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """The engine guard over the setup (fixtures start engines too) and the CPU clock."""
    item.stash[_CPU_START] = _cpu_s()
    yield from guard_engine_starts(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """The engine guard over the test itself."""
    yield from guard_engine_starts(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """The engine guard over the teardown; the test's CPU time goes into its report."""
    try:
        yield from guard_engine_starts(item)
    finally:
        start = item.stash.get(_CPU_START, None)
        if start is not None:
            item.user_properties.append(("cpu_s", _cpu_s() - start))
            item.user_properties.append(("tier", tier_of(item)))


_CPU_START = pytest.StashKey[float]()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, except that the files of one :data:`SAME_WORKER` group go together."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(Path(file).name, file)

    return SharedFileScheduling(config, log)


def _over_budget(reports: Iterable[Any]) -> list[tuple[float, str]]:
    found = []
    for report in reports:
        if report.when != "teardown":
            continue
        props = dict(report.user_properties)
        if props.get("tier") == "fast" and props.get("cpu_s", 0.0) > FAST_CPU_BUDGET_S:
            found.append((props["cpu_s"], report.nodeid))
    return sorted(found, reverse=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """List the fast-tier tests over :data:`FAST_CPU_BUDGET_S` (candidates for the e2e tier)."""
    reports = [r for key in ("passed", "failed", "skipped", "") for r in
               terminalreporter.stats.get(key, []) if hasattr(r, "user_properties")]  # fmt: skip
    slow = _over_budget(reports)
    if slow:
        terminalreporter.section("fast-tier tests over the CPU budget")
        terminalreporter.write_line(
            f"these took more than {FAST_CPU_BUDGET_S:g} s of CPU: mark them e2e if they must "
            "stay this size (docs/testing.md)"
        )
        for cpu, nodeid in slow:
            terminalreporter.write_line(f"{cpu:7.1f} s  {nodeid}")
