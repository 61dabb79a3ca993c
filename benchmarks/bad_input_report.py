"""The bad-input suite's report injections: hostile text wherever a string reaches the report.

A qualify results folder is recorded once, its workload named ``workload-zq``, its strategies
``builtin``, ``bidkv`` and ``largest-first``, the policy configured with
``utility_liveness_mode = barrier``. Each case copies it, puts one injection form in one place,
in every table and JSON file that holds it (so the folder stays consistent): a request id (the
most preempted request's), the workload's name, a strategy's name, a policy setting's value.
Then ``tracekit report`` renders it, and the page is held to the page rendered from the same
place holding a plain word instead:

- the same elements and attribute names in the same order (no element or handler added);
- every script block the same, but the JSON data blocks, which must still parse;
- the same style blocks and style attributes, and no link to a ``javascript:``, ``vbscript:``
  or ``data:`` URL that the plain page lacks;
- no bidirectional control and no C0/C1 control character (tab and newlines aside) anywhere
  in the page: each is shown as ``<U+XXXX>``.

A refusal (exit 2, one ``Error:`` line) is a clear answer too. A page that breaks a rule is a
silent accept; damage is any change to the results folder (the page is written beside it).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl
from click.testing import CliRunner

WORKLOAD = "workload-zq"
POLICY_VALUE = "barrier"
STRATEGY = "largest-first"
PLAIN = "plainword"

# Bidirectional controls and other format characters that reorder or hide text.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

#: The injection forms: markup, attribute and script breakouts, CSS, URLs, entities, and
#: Unicode that reorders, hides or breaks lines.
FORMS: tuple[str, ...] = (
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//x.invalid/x.js></SCRIPT>",
    "</script><script>alert(1)</script>",
    "</SCRIPT ><script>alert(1)//",
    "<img src=x onerror=alert(1)>",
    '<img src="x" onerror="alert(1)">',
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "<iframe src=javascript:alert(1)>",
    "<iframe srcdoc='<script>alert(1)</script>'>",
    "<body onload=alert(1)>",
    "<input autofocus onfocus=alert(1)>",
    "<details open ontoggle=alert(1)>",
    "<video><source onerror=alert(1)>",
    "<object data=javascript:alert(1)>",
    "<embed src=javascript:alert(1)>",
    "<a href=javascript:alert(1)>x</a>",
    "<a href='vbscript:msgbox(1)'>x</a>",
    "<a href=data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==>x</a>",
    "<form action=javascript:alert(1)><button>x",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<template><script>alert(1)</script></template>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    "<textarea></textarea><script>alert(1)</script>",
    "<title></title><script>alert(1)</script>",
    "<xmp><script>alert(1)</script></xmp>",
    "<plaintext>",
    "<base href=//x.invalid/>",
    "<meta http-equiv=refresh content='0;url=javascript:alert(1)'>",
    "<link rel=stylesheet href=//x.invalid/x.css>",
    "<style>body{display:none}</style>",
    "</style><style>*{color:red}</style>",
    "x;background:url(javascript:alert(1))",
    "expression(alert(1))",
    "@import 'javascript:alert(1)';",
    '" onmouseover="alert(1)',
    "' onmouseover='alert(1)",
    "` onmouseover=`alert(1)",
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(1)>",
    '";alert(1);//',
    "';alert(1);//",
    "${alert(1)}",
    "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e",
    '{"x": "</script>"}',
    "]]><script>alert(1)</script>",
    "<!--<script>alert(1)</script>-->",
    "--><script>alert(1)</script><!--",
    "<![CDATA[<script>alert(1)</script>]]>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&#60;script&#62;alert(1)&#60;/script&#62;",
    "&#x3C;img src=x onerror=alert(1)&#x3E;",
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "req\u202eexe.txt",
    "req\u202dltr\u202c",
    "\u2066isolate\u2069",
    "\u2067rtl\u2069\u2068fsi\u2069",
    "a\u200fb\u200ec",
    "a\u061cb",
    "zero\u200bwidth\u200c\u200d\ufeff",
    "line\u2028sep\u2029para",
    "nul\x00byte",
    "bell\x07back\x08esc\x1b[31mred",
    "del\x7fc1\x85\x9bcsi",
    "tab\there\r\nnewline",
    "\U0001f4a3<b>bold</b>\U0001f600",
    "e\u0301\u0301\u0301\u0301combining",
    "<" * 300 + "script>" * 10,
    "x" * 5000,
)


#: Where a form goes: a name and the value it replaces (exact, or everywhere it occurs).
PLACES: dict[str, tuple[str | None, bool]] = {
    "request id": (None, True),  # the most preempted request's id, found in the folder
    "workload name": (WORKLOAD, False),
    "strategy name": (STRATEGY, False),
    "policy-config value": (POLICY_VALUE, False),
}


@dataclass(frozen=True)
class Injection:
    """One injection case: a form in a place."""

    form: str
    place: str

    @property
    def name(self) -> str:
        return f"{self.place}: {self.form[:40]!r}"


def injection_cases() -> list[Injection]:
    """Every form in every place."""
    return [Injection(form, place) for form in FORMS for place in PLACES]


def build_results(root: Path, sample: Path) -> Path:
    """The qualify results folder the cases copy (recorded once)."""
    from tracekit.cli import cli

    results = root / "inject-results"
    if (results / "report.html").exists():
        return results
    shutil.copy(sample, root / f"{WORKLOAD}.csv")
    args = ["qualify", "--workload", str(root / f"{WORKLOAD}.csv"), "--limit", "40",
            "--num-blocks", "300", "--max-model-len", "4608", "--strategy",
            f"builtin,bidkv,{STRATEGY}", "--policy-config",
            json.dumps({"utility_liveness_mode": POLICY_VALUE}), "--load-plan", "single",
            "--repeats", "3", "--no-aa-control", "--jobs", "1", "--out", str(results)]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    if result.exit_code not in (0, 1):
        raise RuntimeError(f"the injection fixture failed: {result.output[-500:]}")
    return results


def most_preempted(results: Path) -> str:
    """The request id that the report shows most (the most preempted request)."""
    frames = [pl.read_parquet(f) for f in results.rglob("requests.parquet")]
    frame = pl.concat(frames).group_by("request_id").agg(pl.col("num_preemptions").sum())
    return str(frame.sort(["num_preemptions", "request_id"], descending=[True, False])[0, 0])


# Occurrences that are part of a path (a folder or a file name) stay: the folders keep their
# names, and the tables must still lead to them.
_KEEP = ("/{}", "{}/", "{}.")


def _replaced(target: str, value: str) -> list[tuple[str, str]]:
    """The literal replacements that put ``value`` for ``target`` outside paths, in order."""
    marks = [(form.format(target), f"\ue000{i}\ue001") for i, form in enumerate(_KEEP)]
    return [*marks, (target, value), *((mark, kept) for kept, mark in marks)]


def rewrite(root: Path, target: str, value: str, exact: bool) -> None:
    """Put ``value`` for ``target`` in every string of every table and JSON file below ``root``."""
    steps = _replaced(target, value)
    for file in root.rglob("*.parquet"):
        frame = pl.read_parquet(file)
        text = [name for name, kind in frame.schema.items() if kind == pl.String]
        if not text:
            continue
        if exact:
            changes = [pl.when(pl.col(c) == target).then(pl.lit(value)).otherwise(pl.col(c))
                       .alias(c) for c in text]  # fmt: skip
        else:
            changes = []
            for c in text:
                column = pl.col(c)
                for old, new in steps:
                    column = column.str.replace_all(old, new, literal=True)
                changes.append(column.alias(c))
        frame.with_columns(changes).write_parquet(file)

    def swap(text: str) -> str:
        for old, new in steps:
            text = text.replace(old, new)
        return text

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return (value if item == target else item) if exact else swap(item)
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        return item

    for file in root.rglob("*.json"):
        try:
            document = json.loads(file.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        file.write_text(json.dumps(walk(document)), "utf-8")


class _Page(HTMLParser):
    """What of a page may not change with the text in it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skeleton: list[tuple[str, tuple[str, ...]]] = []
        self.scripts: list[tuple[str, str]] = []
        self.styles: list[str] = []
        self.style_attributes: list[str] = []
        self.urls: list[str] = []
        self._in: tuple[str, str] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skeleton.append((tag, tuple(sorted(name for name, _ in attrs))))
        for name, value in attrs:
            if name == "style" and value is not None:
                self.style_attributes.append(value)
            if name in ("href", "src", "action", "formaction", "data", "srcdoc") and value:
                self.urls.append(value.strip().lower())
        if tag in ("script", "style"):
            kind = dict(attrs).get("type") or ""
            self._in, self._text = (tag, kind), []

    def handle_endtag(self, tag: str) -> None:
        self.skeleton.append((f"/{tag}", ()))
        if self._in is not None and tag == self._in[0]:
            text = "".join(self._text)
            if tag == "script":
                self.scripts.append((self._in[1], text))
            else:
                self.styles.append(text)
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self._text.append(data)


def page_parts(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


_CONTROLS = re.compile(f"[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f{_BIDI}]")
_SCHEMES = ("javascript:", "vbscript:", "data:")


def problems(html: str, plain: _Page) -> list[str]:
    """How a page with injected text differs from the plain page in what it may not."""
    found = []
    page = page_parts(html)
    if page.skeleton != plain.skeleton:
        pairs = zip(page.skeleton, plain.skeleton, strict=False)
        at = next((i for i, (a, b) in enumerate(pairs) if a != b), len(plain.skeleton))
        found.append(f"elements differ at #{at}: {page.skeleton[at : at + 2]}")
    if len(page.scripts) != len(plain.scripts):
        found.append(f"{len(page.scripts)} script blocks, plain {len(plain.scripts)}")
    for (kind, text), (_, plain_text) in zip(page.scripts, plain.scripts, strict=False):
        if kind == "application/json":
            try:
                json.loads(text)
            except ValueError as error:
                found.append(f"a JSON data block no longer parses ({error})")
        elif text != plain_text:
            found.append("a script block changed")
    if page.styles != plain.styles or sorted(page.style_attributes) != sorted(
        plain.style_attributes
    ):
        found.append("styles changed")
    added = [u for u in page.urls if u.startswith(_SCHEMES) and u not in plain.urls]
    if added:
        found.append(f"a link to {added[0][:40]!r}")
    control = _CONTROLS.search(html)
    if control:
        found.append(f"a raw U+{ord(control.group()):04X} in the page")
    return found


@dataclass
class InjectionOutcome:
    """What an injection case did."""

    case: Injection
    category: str
    exit_code: int | None
    damage: list[str]
    detail: str


_PLAIN: dict[str, _Page] = {}


def _render(results: Path, page: Path) -> Any:
    from tracekit.cli import cli

    return CliRunner().invoke(cli, ["report", str(results), "--out", str(page)])


def _placed(results: Path, case_place: str, value: str, folder: Path) -> Path:
    copy = folder / "results"
    shutil.copytree(results, copy)
    target, exact = PLACES[case_place]
    rewrite(copy, most_preempted(results) if target is None else target, value, exact)
    return copy


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run_injection(case: Injection, results: Path, work: Path) -> InjectionOutcome:
    """Render the report with ``case``'s form in its place, and hold it to the plain page."""
    if case.place not in _PLAIN:
        folder = Path(tempfile.mkdtemp(prefix="plain-", dir=work))
        copy = _placed(results, case.place, PLAIN, folder)
        result = _render(copy, folder / "page" / "r.html")
        if result.exit_code != 0:
            raise RuntimeError(f"the plain report failed: {result.output[-500:]}")
        _PLAIN[case.place] = page_parts((folder / "page" / "r.html").read_text("utf-8"))
        shutil.rmtree(folder, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix="inject-", dir=work))
    try:
        copy = _placed(results, case.place, case.form, folder)
        before = _snapshot(copy)
        page = folder / "page" / "r.html"
        result = _render(copy, page)
        damage = [] if _snapshot(copy) == before else ["the results folder changed"]
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            return InjectionOutcome(case, "traceback", None, damage, repr(result.exception))
        lines = [line for line in result.output.splitlines() if line.strip()]
        if result.exit_code == 2:
            ok = lines and lines[-1].startswith("Error: ") and not page.exists()
            return InjectionOutcome(case, "clear" if ok else "unclear", 2, damage,
                                    lines[-1] if lines else "")  # fmt: skip
        if result.exit_code != 0:
            return InjectionOutcome(case, "wrong-exit", result.exit_code, damage, result.output)
        found = problems(page.read_text("utf-8"), _PLAIN[case.place])
        return InjectionOutcome(case, "silent" if found else "clear", 0, damage, "; ".join(found))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_injections(
    cases: list[Injection], results: Path, work: Path,
    progress: Callable[[int, int], None] | None = None,
) -> list[InjectionOutcome]:  # fmt: skip
    """Run ``cases``; the outcome of each, in order."""
    outcomes = []
    for i, case in enumerate(cases):
        outcomes.append(run_injection(case, results, work))
        if progress is not None:
            progress(i + 1, len(cases))
    return outcomes
