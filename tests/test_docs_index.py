"""docs/index.md maps the layout: every package of ``bidkv`` and ``tracekit`` has its line."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout_block() -> str:
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    match = re.search(r"^```\n(.*?)^```", text, re.S | re.M)
    assert match is not None, "docs/index.md has no layout block"
    return match.group(1)


def _packages() -> list[Path]:
    return sorted(
        init.parent.relative_to(ROOT)
        for top in ("bidkv", "tracekit")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts and init.parent != ROOT / top
    )


def test_every_package_has_a_line_in_the_map() -> None:
    block = _layout_block()
    # A package is named by its folder, "name/", at any depth ("adapters/vllm_hust/").
    missing = [p.as_posix() for p in _packages() if not re.search(rf"\b{p.name}/", block)]
    assert missing == []


def test_the_map_names_no_package_that_is_gone() -> None:
    block = _layout_block()
    named = set(re.findall(r"^\s{2}([a-z_]+)/", block, re.M))
    existing = {p.parts[1] for p in _packages()}
    assert named <= existing, sorted(named - existing)
