"""What a source file imports, for the architecture tests (imports flow one way)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any


def imported_modules(path: Path) -> set[str]:
    """Modules ``path`` imports: import statements at any depth (inside functions too), and
    ``import_module``/``__import__`` calls with a literal name (a dynamic import is still an
    import)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant):
                names.add(str(first.value))
    return names


def run_isolated(script: str, cwd: Path, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh ``python -I`` from ``cwd`` (no user site, no PYTHONPATH, no
    checkout on sys.path: only what is installed imports); ``options`` go to subprocess.run."""
    return subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        **options,
    )
