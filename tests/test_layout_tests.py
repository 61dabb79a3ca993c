"""Tests share helpers through helper modules and conftest.py, never by importing a test module."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_another_test_module() -> None:
    offending = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offending += [
                f"{path.name}: {n}" for n in names if n.split(".")[-1].startswith("test_")
            ]
    assert offending == []
