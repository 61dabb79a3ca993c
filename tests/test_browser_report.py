"""The HTML report in a real browser: headless Chromium, offline, over the DevTools protocol.

The page is opened from a file:// URL with networking disabled. The test asserts that every chart
drew its marks, that the console stayed free of errors, that the page attempted no network
request, and that the script planted in a request id (and in the workload name) did not run. A
full-page screenshot is kept in the test's temporary folder (its path is printed).

The browser is Debian's ``chromium`` (CI installs it); without it the test is skipped. It is
driven over ``--remote-debugging-pipe`` with the standard library only: no driver package.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import itertools
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_helpers import EVIL_ID, EVIL_WORKLOAD, qualify_exit, shared_results

from tracekit.qualify import write_report

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 60.0
NO_CHROMIUM = "chromium is not installed (CI installs Debian's chromium package)"


def find_chromium() -> str | None:
    """``$TRACEKIT_CHROMIUM`` or the first Chromium on PATH."""
    explicit = os.environ.get("TRACEKIT_CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


# CI sets BIDKV_REQUIRE_CHROMIUM=1 after installing Chromium: there a missing browser fails.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        find_chromium() is None and not os.environ.get("BIDKV_REQUIRE_CHROMIUM"), reason=NO_CHROMIUM
    ),
]


class DevTools:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

    Chromium reads NUL-terminated JSON commands on fd 3 and writes responses and events on fd 4.
    """

    def __init__(self, executable: str, profile: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Move the child's ends above 9 so that they cannot collide with fds 3 and 4.
        low = (to_child_r, from_child_w)
        to_child_r, from_child_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in low)
        for fd in low:
            os.close(fd)
        args = [
            executable,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        self.log_path = profile.parent / f"{profile.name}.log"
        self._log = self.log_path.open("wb")
        # Bash puts the pipe ends on fds 3 and 4, where Chromium expects them.
        script = f'exec "$@" 3<&{to_child_r} 4>&{from_child_w} {to_child_r}<&- {from_child_w}>&-'
        self.process = subprocess.Popen(
            ["/bin/bash", "-c", script, "bash", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(to_child_r, from_child_w),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._lock.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        self._replies[message["id"]] = message
                        self._lock.notify_all()
                else:
                    self._events.put(message)

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its result (raises on a protocol error)."""
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        try:
            os.write(self._to_child, json.dumps(command).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"the browser has exited; its log:\n{self.log_tail()}") from None
        deadline = time.monotonic() + TIMEOUT_S
        with self._lock:
            while self._next_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise TimeoutError(f"no reply to {method}; browser log:\n{self.log_tail()}")
                self._lock.wait(left)
            reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    def log_tail(self) -> str:
        """The end of the browser's stderr."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def events(self) -> list[dict[str, Any]]:
        """Every event received so far."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """Ask the browser to quit, then make sure the process is gone."""
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()


@contextlib.contextmanager
def browser() -> Iterator[DevTools]:
    """A fresh headless Chromium with its own throw-away profile."""
    executable = find_chromium()
    if executable is None:
        pytest.skip(NO_CHROMIUM)
    with tempfile.TemporaryDirectory(prefix="tracekit-chromium-") as profile:
        tools = DevTools(executable, Path(profile))
        try:
            yield tools
        finally:
            tools.close()


# Counts, per chart container, the SVG/canvas content vega drew for data marks.
CHART_STATE = """
(() => Array.from(document.querySelectorAll("div.chart")).map(el => ({
  id: el.id,
  svg: el.querySelectorAll("svg").length,
  canvas: el.querySelectorAll("canvas").length,
  marks: el.querySelectorAll("g.role-mark > path, g.role-mark > line, g.role-mark > rect, "
                             + "g.role-mark > text, g.role-mark > g").length,
  text: el.textContent.slice(0, 200),
})))()
"""


def _evaluate(tools: DevTools, session: str, expression: str) -> Any:
    result = tools.send(
        "Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True
    )
    if "exceptionDetails" in result:
        raise RuntimeError(f"evaluation failed: {result['exceptionDetails']}")
    return result["result"].get("value")


def open_page(tools: DevTools, url: str) -> tuple[str, list[dict[str, Any]]]:
    """Open ``url`` offline in a new tab, wait for every chart; return the session and events."""
    target = tools.send("Target.createTarget", url="about:blank")["targetId"]
    session = tools.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        tools.send(f"{domain}.enable", session)
    tools.send(
        "Network.emulateNetworkConditions",
        session,
        offline=True,
        latency=0,
        downloadThroughput=-1,
        uploadThroughput=-1,
    )
    tools.send("Emulation.setDeviceMetricsOverride", session, width=1280, height=900,
               deviceScaleFactor=1, mobile=False)  # fmt: skip
    tools.send("Page.navigate", session, url=url)
    deadline = time.monotonic() + TIMEOUT_S
    ready = (
        "(() => { const s = window.__reportCharts;"
        " return !!s && s.done + s.failed === s.total; })()"
    )
    while not _evaluate(tools, session, ready):
        if time.monotonic() > deadline:
            raise TimeoutError("the charts did not finish rendering")
        time.sleep(0.2)
    time.sleep(0.5)  # let late console messages arrive
    return session, tools.events()


def screenshot(tools: DevTools, session: str, out: Path, width: int = 1280) -> Path:
    """A full-page PNG screenshot."""
    metrics = tools.send("Page.getLayoutMetrics", session)
    height = int(metrics["cssContentSize"]["height"])
    tools.send("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
               deviceScaleFactor=1, mobile=False)  # fmt: skip
    data = tools.send("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
    out.write_bytes(base64.b64decode(data["data"]))
    return out


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            errors.append(json.dumps(params.get("exceptionDetails"))[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(json.dumps(params.get("args"))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            errors.append(json.dumps(params["entry"])[:500])
    return errors


def _requests(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["params"]["request"]["url"]
        for e in events
        if e.get("method") == "Network.requestWillBeSent"
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = shared_results(tmp_path_factory)
    return write_report(results, tmp_path_factory.mktemp("browser") / "report.html")


def test_report_renders_offline_without_errors_or_injection(report: Path, tmp_path: Path) -> None:
    with browser() as tools:
        session, events = open_page(tools, report.resolve().as_uri())
        charts = _evaluate(tools, session, CHART_STATE)
        title = _evaluate(tools, session, "document.title")
        flag = _evaluate(tools, session, "window.__xss === undefined ? null : window.__xss")
        text = _evaluate(tools, session, "document.body.innerText")
        shot = screenshot(tools, session, tmp_path / "report.png")
    print(f"screenshot: {shot}")

    assert len(charts) >= 8, charts
    for chart in charts:
        assert chart["svg"] + chart["canvas"] >= 1, chart
        assert chart["marks"] > 0, chart
    assert _console_errors(events) == []
    attempted = [u for u in _requests(events) if not u.startswith(("file:", "data:"))]
    assert attempted == []
    assert flag is None
    assert "XSS" not in title
    assert EVIL_ID in text  # the planted payloads show as text
    assert EVIL_WORKLOAD in text
    assert shot.stat().st_size > 10_000


# Per table header cell: the box of its text and the box of the cell (no header text overflows).
HEADER_BOXES = """
(() => Array.from(document.querySelectorAll("table")).map(table => ({
  caption: table.caption ? table.caption.textContent : "",
  cells: Array.from(table.querySelectorAll("thead th")).map(th => {
    const range = document.createRange();
    range.selectNodeContents(th);
    const text = range.getBoundingClientRect(), cell = th.getBoundingClientRect();
    return { name: th.textContent, left: text.left, right: text.right,
             top: text.top, bottom: text.bottom,
             cellLeft: cell.left, cellRight: cell.right };
  }),
})))()
"""


def _overlaps(tables: list[dict[str, Any]]) -> list[str]:
    """Header texts that leave their cell or cover a neighbour's text."""
    found = []
    for table in tables:
        cells = table["cells"]
        for cell in cells:
            if cell["right"] > cell["cellRight"] + 0.5 or cell["left"] < cell["cellLeft"] - 0.5:
                found.append(f"{table['caption']}: {cell['name']} leaves its cell")
        for a, b in itertools.pairwise(cells):
            same_line = a["top"] < b["bottom"] and b["top"] < a["bottom"]
            if same_line and a["right"] > b["left"] + 0.5:
                found.append(f"{table['caption']}: {a['name']} covers {b['name']}")
    return found


@pytest.mark.parametrize("width", [1280, 760])
def test_table_headers_do_not_overlap(report: Path, tmp_path: Path, width: int) -> None:
    with browser() as tools:
        session, _ = open_page(tools, report.resolve().as_uri())
        tools.send("Emulation.setDeviceMetricsOverride", session, width=width, height=900,
                   deviceScaleFactor=1, mobile=False)  # fmt: skip
        time.sleep(0.3)
        tables = _evaluate(tools, session, HEADER_BOXES)
        shot = screenshot(tools, session, tmp_path / f"report-{width}.png", width)
    print(f"screenshot: {shot}")
    captions = {t["caption"] for t in tables}
    assert {"legacy candidates", "typed candidates"} <= captions  # the tables of item 15
    assert _overlaps(tables) == []


@pytest.fixture(scope="module")
def load_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A qualify results folder with the default load plan, kept small.

    The plan is docs/qualify.md, "The default plan: one cell per load level".
    """
    from click.testing import CliRunner

    from tracekit.cli import cli

    sample = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023"
    out = tmp_path_factory.mktemp("load-browser") / "results"
    args = [
        "qualify", "--workload", str(sample / "azure_conv_sample.csv"), "--limit", "120",
        "--num-blocks", "300", "--max-model-len", "4608", "--strategy", "builtin,bidkv",
        "--load-fractions", "0.6,1.0", "--load-concurrency", "4", "--jobs", "1",
        "--out", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == qualify_exit(out), result.output
    return out / "report.html"


def test_load_section_renders_offline(load_report: Path, tmp_path: Path) -> None:
    with browser() as tools:
        session, events = open_page(tools, load_report.resolve().as_uri())
        charts = _evaluate(tools, session, CHART_STATE)
        text = _evaluate(tools, session, "document.body.innerText")
        shot = screenshot(tools, session, tmp_path / "load.png")
    print(f"screenshot: {shot}")
    load_charts = [c for c in charts if c["id"].startswith("chart-load-")]
    assert {c["id"] for c in load_charts} == {"chart-load-goodput", "chart-load-queue"}
    for chart in load_charts:
        assert chart["svg"] + chart["canvas"] >= 1 and chart["marks"] > 0, chart
    assert _console_errors(events) == []
    assert "Load levels" in text and "GO" in text
