"""No two public classes in ``bidkv/`` and ``tracekit/`` share a name.

A public class is a module-level ``class X`` (``X`` not starting with ``_``, in any module), a
module-level alias ``X = Y`` of a class, or a name ``bidkv`` publishes for a class under another
name (``bidkv.RequestState`` is ``BaselineCandidate``). One name, one class: a reader who meets
``LegacyHost`` or ``Bundle`` should not have to ask which one (docs/index.md, the code map).
The classes are read from the source (``ast``), so every module counts, including those whose
third-party imports are missing here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import bidkv

ROOT = Path(__file__).resolve().parent.parent

# Names that may belong to two classes: only aliases the original BidKV's public API requires
# (``bidkv.__all__``, which its README's examples use; tests/test_core_components.py), each with
# why. None today: ``bidkv.RequestState`` (the original's name of ``BaselineCandidate``) was the
# one such name, and tracekit's engine request is now ``SchedulerRequest``.
ALLOWED: dict[str, str] = {}


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run at import: the body and the branches of top-level if/try blocks."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _module_level(node.body) + _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _module_level(node.body) + _module_level(node.orelse)
            for handler in node.handlers:
                out += _module_level(handler.body)
    return out


def public_classes(roots: list[Path]) -> dict[str, list[str]]:
    """Class name -> where each class of that name is defined or aliased (``path:line``)."""
    found: dict[str, list[str]] = defaultdict(list)
    aliases: list[tuple[str, str, str]] = []  # (alias, target's last name, where)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(root.parent).as_posix()
            for node in _module_level(ast.parse(path.read_text("utf-8")).body):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    found[node.name].append(f"{where}:{node.lineno}")
                elif (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Name | ast.Attribute)
                ):
                    name = node.targets[0].id
                    target = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
                    if name[:1].isupper() and not name.isupper() and name != target:
                        aliases.append((name, target, f"{where}:{node.lineno}"))
    for name, target, where in aliases:
        if target in found:  # an alias of a class (not of a constant or a function)
            found[name].append(f"{where} (alias of {target})")
    return found


def collisions(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """The names that two or more classes share."""
    return {name: places for name, places in found.items() if len(places) > 1}


def _bidkv_published_aliases() -> dict[str, str]:
    """Names ``bidkv`` publishes for a class whose own name differs (loaded on use)."""
    out = {}
    for name in bidkv.__all__:
        value = getattr(bidkv, name)
        if isinstance(value, type) and value.__name__ != name:
            out[name] = f"bidkv.{name} (alias of {value.__module__}.{value.__qualname__})"
    return out


def test_no_two_public_classes_share_a_name() -> None:
    found = public_classes([ROOT / "bidkv", ROOT / "tracekit"])
    for name, where in _bidkv_published_aliases().items():
        found[name].append(where)
    assert "BaselineCandidate" in found and "RequestState" in found  # the reader sees both
    shared = {name: places for name, places in collisions(found).items() if name not in ALLOWED}
    assert shared == {}


def test_allowed_names_are_the_original_bidkv_names_and_still_shared() -> None:
    found = public_classes([ROOT / "bidkv", ROOT / "tracekit"])
    for name, where in _bidkv_published_aliases().items():
        found[name].append(where)
    for name in ALLOWED:
        assert name in bidkv.__all__, name
        assert len(found.get(name, [])) > 1, f"{name} is no longer shared: drop it from ALLOWED"


def test_the_check_finds_a_shared_name(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("class Bundle:\n    pass\n\nclass _Private:\n    pass\n")
    (package / "sub" / "b.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    pass\n"
        "else:\n    class Bundle:\n        pass\n"
    )
    (package / "c.py").write_text(
        "from pkg.a import Bundle as Base\nclass Host:\n    pass\n"
        "LegacyHost = Host\nLIMIT = Base\nSame = Same\n"
    )
    (package / "d.py").write_text("class LegacyHost:\n    pass\n\ndef f():\n    class Host: ...\n")
    found = public_classes([package])
    assert collisions(found) == {
        "Bundle": ["pkg/a.py:1", "pkg/sub/b.py:5"],
        "LegacyHost": ["pkg/d.py:1", "pkg/c.py:4 (alias of Host)"],
    }
