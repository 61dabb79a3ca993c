"""Code cites the project's own docs, and every cited page, section and file exists.

The original BidKV's behaviour notes (``bidkv-behaviour.md``, ``engines.md``) are not part of the
repository, so code must not cite them: a maintainer could not follow the citation. Code points
at ``docs/<page>.md#<anchor>`` or ``docs/<page>.md, "<Section title>"`` instead. The docs
themselves may still name the external notes as the source of a fact.

Nor is the tracker part of the repository: no code, test, doc or README names an issue by its
number (``issue 14``, ``issues 12 and 14``, ``(#12)``). A public project's tracker is cited by
its own name and a link or a PR/RFC number (``vLLM PR #53723``). A cited path that names one of
the repository's folders (``tracekit/...``, ``engine/fake_model.py``) names a file that exists.
The upstream engines' sources are cited by their own paths (``vllm/v1/...``, ``srt/...``), which
the recorders' folders ``vllm`` and ``sglang`` share, so those two are not resolved here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("bidkv", "tracekit", "benchmarks", "scripts")
# Tests are held to the same rules: no external citation, and the doc sections they cite exist.
CITING_DIRS = (*CODE_DIRS, "tests")

# A citation of the external reference: its file names, "reference §X", or a bare "§X.n".
_EXTERNAL = re.compile(r"bidkv-behaviour|\bengines\.md\b|reference\s+§|§[A-I](?:\.\d+)?\b")
# docs/<page>.md, optionally followed by #anchor or , "Title".
_DOC_CITE = re.compile(r'docs/([A-Za-z0-9_.-]+?\.md)(?:#([A-Za-z0-9_-]+)|, "([^"\n]+)")?')
# A tracker number: "issue 14", "Issue 18's", "issues 12 and 14", "issue-12", "issue" at the end
# of a line and its number on the next (after a comment's "#"), or "#12" standing alone. A number
# after PR, RFC or Standard, or "#N" as the text of a link, cites a public source.
_TRACKER = re.compile(
    r"\bissues?(?:[ \t-]+|[ \t]*\n[ \t#*>]*)#?\d+"
    r"|(?<![\w\"'&/#\[-])(?<!PR )(?<!RFC )(?<!PR\n)(?<!RFC\n)(?<!Standard )#\d+\b"
    r"|\[#\d+\](?!\(https?://)",
    re.IGNORECASE,
)
# A path ending in .py or .md with at least one folder, not inside a URL or a longer path.
_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md))\b")
# Folders the upstream engines' sources share with the recorders (cited as vllm/v1/...).
_UPSTREAM_ROOTS = frozenset({"vllm", "sglang"})
# Where a citation may stand: code, tests, docs, CI and the README (recorded fixtures excepted).
_PROSE_ROOTS = (*CITING_DIRS, "docs", ".ci")
_PROSE_FILES = ("README.md", "pyproject.toml")
_TEXT_SUFFIXES = frozenset({".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg", ""})
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _code_files(dirs: tuple[str, ...] = CODE_DIRS) -> list[Path]:
    files: list[Path] = []
    for name in dirs:
        folder = ROOT / name
        if folder.is_dir():
            files.extend(sorted(folder.rglob("*.py")))
    return files


def _tracked_files() -> list[str]:
    """The repository's files: tracked or new and not ignored (every file when git is missing)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            text=True,
        ).stdout
        tracked = [name for name in listing.split("\0") if name and (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        tracked = []
    if not tracked:
        tracked = [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts
        ]
    return sorted(tracked)


def _prose_files(tracked: list[str]) -> list[str]:
    """The tracked text files that may cite something (recorded test data excluded)."""
    return [
        name
        for name in tracked
        if (name in _PROSE_FILES or name.split("/")[0] in _PROSE_ROOTS)
        and not name.startswith("tests/data/")
        and name != Path(__file__).relative_to(ROOT).as_posix()
        and Path(name).suffix in _TEXT_SUFFIXES
    ]


def _lines(name: str) -> list[str]:
    try:
        return (ROOT / name).read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError):
        return []


def tracker_citations(lines: list[str]) -> list[tuple[int, str]]:
    """The (line number, text) of every tracker number in ``lines`` (one may span two lines)."""
    text = "\n".join(lines)
    return [
        (text.count("\n", 0, match.start()) + 1, " ".join(match.group(0).split()))
        for match in _TRACKER.finditer(text)
    ]


def missing_paths(lines: list[str], tracked: list[str]) -> list[tuple[int, str]]:
    """The (line number, path) of every cited repository path that names no tracked file.

    A path is the repository's when its first folder is one of the repository's folders (other
    than the upstream engines' package names); it resolves when a tracked file is that path or
    ends with it (a module table may name files relative to its package).
    """
    folders = {part for name in tracked for part in name.split("/")[:-1]}
    files = set(tracked)
    missing = []
    for number, line in enumerate(lines, 1):
        for match in _PATH.finditer(line):
            path = match.group(1).removeprefix("./")
            first = path.split("/")[0]
            if first not in folders or first in _UPSTREAM_ROOTS:
                continue
            if path in files or any(name.endswith("/" + path) for name in files):
                continue
            missing.append((number, path))
    return missing


def _title(text: str) -> str:
    """A heading as cited: backticks dropped, whitespace collapsed."""
    return " ".join(text.replace("`", "").split())


def _slug(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _headings(page: Path) -> tuple[set[str], set[str]]:
    """The titles and anchors of a Markdown page's headings (code blocks skipped)."""
    titles: set[str] = set()
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            continue
        titles.add(_title(match.group(2)))
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return titles, anchors


def _citations() -> list[tuple[str, int, str, str | None, str | None]]:
    found = []
    for path in _code_files(CITING_DIRS):
        if path.name == Path(__file__).name:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _DOC_CITE.finditer(line):
                found.append((rel, number, match.group(1), match.group(2), match.group(3)))
    return found


def test_code_does_not_cite_the_external_reference() -> None:
    # Tests included: a comment that explains an expected value must be followable too.
    offenders = [
        f"{path.relative_to(ROOT).as_posix()}:{number}: {line.strip()}"
        for path in _code_files(CITING_DIRS)
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _EXTERNAL.search(line)
    ]
    assert not offenders, "cite docs/<page>.md sections instead:\n" + "\n".join(offenders)


def test_code_cites_docs() -> None:
    # The check below must have something to check.
    assert len(_citations()) >= 50


def test_cited_doc_pages_and_sections_exist() -> None:
    problems = []
    cache: dict[str, tuple[set[str], set[str]]] = {}
    for rel, number, page, anchor, title in _citations():
        path = ROOT / "docs" / page
        if not path.is_file():
            problems.append(f"{rel}:{number}: docs/{page} does not exist")
            continue
        titles, anchors = cache.setdefault(page, _headings(path))
        if anchor is not None and anchor not in anchors:
            problems.append(f"{rel}:{number}: docs/{page} has no heading with anchor #{anchor}")
        if title is not None and _title(title) not in titles:
            problems.append(f'{rel}:{number}: docs/{page} has no heading "{title}"')
    assert not problems, "\n".join(problems)


def test_nothing_cites_a_tracker_number() -> None:
    # The tracker is not in the repository: say what the issue asked for, or cite the doc section.
    offenders = [
        f"{name}:{number}: {text}"
        for name in _prose_files(_tracked_files())
        for number, text in tracker_citations(_lines(name))
    ]
    assert not offenders, "say what is meant instead of a tracker number:\n" + "\n".join(offenders)


def test_cited_repository_paths_exist() -> None:
    tracked = _tracked_files()
    assert len(tracked) > 100, "git ls-files found too few files to check"
    offenders = [
        f"{name}:{number}: {path}"
        for name in _prose_files(tracked)
        for number, path in missing_paths(_lines(name), tracked)
    ]
    assert not offenders, "these cited files are not in the repository:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "text",
    [
        "# Cancelled by the client (issue 14).",
        "issue 12's target",
        "Issue 18, item 7: no traceback",
        "see issues 12 and 14",
        "the fix (#12) keeps it",
        "as in #7, the rows",
        "a [#12] link without a target",
        "so the issue-12 grid is covered",
        "moved onto this executor (issue\n17), the benchmark",
        "    # as the work of issue\n    # 13 measured",
    ],
)
def test_tracker_numbers_are_caught(text: str) -> None:
    assert tracker_citations(text.split("\n")), text


@pytest.mark.parametrize(
    "text",
    [
        "vLLM PR #53723 (``--preemption-victim lcf``)",
        "vLLM RFC #54644",
        "Unicode Technical Standard #39",
        "RFC [#54644](https://github.com/vllm-project/vllm/issues/54644)",
        'mark_rule(color="#444")',
        "## A heading",
        "the issue is that 14 rows",
        "vLLM PR\n#53723 (the lcf rule)",
        "the prefix-caching issue\nof this page",
    ],
)
def test_public_references_are_not_tracker_numbers(text: str) -> None:
    assert not tracker_citations(text.split("\n")), text


def test_missing_paths_are_caught() -> None:
    tracked = ["bidkv/legacy/baselines/base.py", "tracekit/engine/fake_model.py", "docs/engine.md"]
    lines = [
        "loads like bidkv/experiments/vllm/workload.py did",  # 1: the original's module
        "``engine/fake_model.py`` and docs/engine.md",  # exist
        "| `baselines/base.py` | relative to its package |",  # exists under bidkv/legacy
        "vLLM's ``vllm/v1/core/sched/scheduler.py`` and ``srt/managers/scheduler.py``",  # upstream
        "see https://github.com/org/bidkv/blob/main/tracekit/gone.py",  # a URL
        "``tracekit/engine/gone.py`` and docs/missing.md",  # 6: two missing
    ]
    assert missing_paths(lines, tracked) == [
        (1, "bidkv/experiments/vllm/workload.py"),
        (6, "tracekit/engine/gone.py"),
        (6, "docs/missing.md"),
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("The `bidkv` decision", "the-bidkv-decision"),
        ("Effectiveness (per cell and strategy)", "effectiveness-per-cell-and-strategy"),
        ("Conformance: `tracekit diff --conformance`", "conformance-tracekit-diff---conformance"),
    ],
)
def test_slug_follows_github(heading: str, anchor: str) -> None:
    assert _slug(heading) == anchor


def test_checks_catch_bad_citations(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## A rule\n\n```\n# not a heading\n```\n", encoding="utf-8")
    titles, anchors = _headings(page)
    assert titles == {"Page", "A rule"}
    assert anchors == {"page", "a-rule"}
    assert _EXTERNAL.search("(reference §B.4)")
    assert _EXTERNAL.search("a rule (§G.13)")
    assert _EXTERNAL.search("see bidkv-behaviour.md")
    assert not _EXTERNAL.search('(docs/engine.md, "Victim hosts")')
    match = _DOC_CITE.search('see docs/policy.md, "Counters, snapshots, logs".')
    assert match is not None and match.group(3) == "Counters, snapshots, logs"
