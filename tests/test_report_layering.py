"""tracekit.report renders finished inputs only; tracekit.qualify reads, computes and calls it."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from report_helpers import copy_results, shared_results

import tracekit.report
from tracekit.qualify import QUALIFICATION_NAME, load_results, report_inputs, write_report
from tracekit.qualify.verdicts import qualification_from_results
from tracekit.report import render_page

REPORT_PACKAGE = Path(tracekit.report.__file__).parent


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[str]:
    """Modules a file imports when it runs (``if TYPE_CHECKING:`` blocks are left out)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_report_imports_nothing_of_tracekit_but_itself() -> None:
    # No results reader, trace reader, statistics or verdict: imports go qualify -> report only.
    # The one exception is the standard-library-only leaf that writes files safely.
    files = sorted(REPORT_PACKAGE.rglob("*.py"))
    assert files
    imports = {
        (path.name, module)
        for path in files
        for module in _runtime_imports(ast.parse(path.read_text("utf-8")))
    }
    offending = {
        f"{name}: {module}"
        for name, module in imports
        if (module == "tracekit" or module.startswith("tracekit."))
        and not module.startswith("tracekit.report")
        and module != "tracekit.safe_output"
    }
    assert not offending


def test_the_scan_sees_imports_in_functions_but_not_type_checking_blocks() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tracekit.qualify import Results\n"
        "def f():\n    import tracekit.trace.bundle\n"
    )
    assert _runtime_imports(tree) == ["typing", "tracekit.trace.bundle"]


def test_render_page_needs_only_the_finished_inputs(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    source = shared_results(tmp_path_factory)
    expected = write_report(source, tmp_path / "expected" / "report.html").read_bytes()
    copy = copy_results(source, tmp_path / "results")
    results = load_results(copy)
    view = report_inputs(results, qualification_from_results(results))
    # The page is laid out after the folder is gone: nothing is read while rendering.
    shutil.rmtree(copy)
    out = render_page(view, tmp_path / "page" / "report.html")
    assert out.read_bytes() == expected
    assert not (out.parent / QUALIFICATION_NAME).exists()  # the verdicts are qualify's to write
