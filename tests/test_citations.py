"""Code cites the project's own docs, and every cited page and section exists.

The original BidKV's behaviour notes (``bidkv-behaviour.md``, ``engines.md``) are not part of the
repository, so code must not cite them: a maintainer could not follow the citation. Code points
at ``docs/<page>.md#<anchor>`` or ``docs/<page>.md, "<Section title>"`` instead. The docs
themselves may still name the external notes as the source of a fact.
"""

from __future__ import annotations

import re
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
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _code_files(dirs: tuple[str, ...] = CODE_DIRS) -> list[Path]:
    files: list[Path] = []
    for name in dirs:
        folder = ROOT / name
        if folder.is_dir():
            files.extend(sorted(folder.rglob("*.py")))
    return files


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
