"""`tracekit report` on a damaged results folder: one line, exit 2, and no file written or replaced.

A truncated, empty or unreadable ``cells.parquet`` once crashed ``report`` with a traceback
(docs/guarantees.md, "Bad input: one line, no traceback"). The page and ``qualification.json``
are written to temporary files and renamed into place, so a failure leaves no partial file and
keeps an existing report (docs/report.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from report_helpers import copy_results, shared_results

import tracekit.qualify.reporting as reporting
from tracekit.cli import cli
from tracekit.errors import TracekitError
from tracekit.qualify import QUALIFICATION_NAME, ResultsError, load_results, write_report

OLD_PAGE = "<p>an earlier report</p>\n"
OLD_JSON = '{"earlier": true}\n'


@pytest.fixture
def results(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    root = copy_results(shared_results(tmp_path_factory), tmp_path / "results")
    (root / "report.html").write_text(OLD_PAGE)
    (root / QUALIFICATION_NAME).write_text(OLD_JSON)
    return root


def _assert_untouched(root: Path) -> None:
    assert (root / "report.html").read_text() == OLD_PAGE
    assert (root / QUALIFICATION_NAME).read_text() == OLD_JSON
    leftovers = sorted(p.name for p in root.iterdir() if p.name.startswith("."))
    assert leftovers == []


def _run_report(root: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["report", str(root)])
    assert not isinstance(result.exception, (AssertionError, TypeError)), result.exception
    return result.exit_code, result.output


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a parquet file\n" * 10)


@pytest.mark.parametrize("damage", [_truncate, _empty, _garbage], ids=lambda f: f.__name__[1:])
def test_damaged_cells_parquet_is_one_line_exit_2_and_no_output(
    results: Path, damage: object
) -> None:
    damage(results / "cells.parquet")  # type: ignore[operator]
    with pytest.raises(ResultsError, match=r"cells\.parquet"):
        load_results(results)
    code, output = _run_report(results)
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert "cells.parquet" in lines[0]
    assert "re-run tracekit qualify" in lines[0]  # the fix
    assert "Traceback" not in output
    _assert_untouched(results)


def test_cells_parquet_without_rows_is_one_line_exit_2(results: Path) -> None:
    cells = pl.read_parquet(results / "cells.parquet")
    cells.clear().write_parquet(results / "cells.parquet")
    code, output = _run_report(results)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    assert "cells.parquet" in output and "no rows" in output
    _assert_untouched(results)


def test_unreadable_cells_parquet_is_a_results_error(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod 000 does not stop root (the tests may run as root): fail the read itself.
    def denied(*args: object, **kwargs: object) -> pl.DataFrame:
        raise PermissionError(13, "Permission denied", str(results / "cells.parquet"))

    monkeypatch.setattr(pl, "read_parquet", denied)
    with pytest.raises(ResultsError, match=r"cells\.parquet.*Permission denied"):
        load_results(results)
    code, output = _run_report(results)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    _assert_untouched(results)


def test_damaged_replay_table_is_a_results_error(results: Path) -> None:
    _truncate(results / "replay" / "summary.parquet")
    with pytest.raises(ResultsError, match=r"replay/summary\.parquet"):
        load_results(results)
    code, output = _run_report(results)
    assert code == 2, output
    _assert_untouched(results)


def test_results_error_is_the_project_error_type() -> None:
    assert issubclass(ResultsError, TracekitError)


def test_a_failure_while_writing_keeps_the_earlier_report(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(qualification: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reporting, "dumps_qualification", broken)
    with pytest.raises(OSError, match="No space left"):
        write_report(results)
    _assert_untouched(results)


def test_a_successful_report_replaces_the_earlier_one_and_leaves_no_temporary_file(
    results: Path,
) -> None:
    out = write_report(results)
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert (results / QUALIFICATION_NAME).read_text().startswith("{")
    assert sorted(p.name for p in results.iterdir() if p.name.startswith(".")) == []


def test_an_out_that_cannot_be_created_is_one_line_exit_2(results: Path, tmp_path: Path) -> None:
    # An output path that cannot be a folder: a file where a folder is needed.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    out = blocker / "report.html"
    with pytest.raises(TracekitError, match="a-file"):
        write_report(results, out)
    result = CliRunner().invoke(cli, ["report", str(results), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0], result.output
    assert blocker.read_text() == "not a folder\n"
    _assert_untouched(results)


@pytest.mark.parametrize("name", ["qualify.json", "diff/diff.json", "conformance.json"])
def test_binary_json_input_is_one_line_exit_2(results: Path, name: str) -> None:
    (results / name).write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(ResultsError, match=re.escape(name)):
        load_results(results)
    code, output = _run_report(results)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    _assert_untouched(results)


def test_unreadable_qualify_json_is_one_line_exit_2(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "qualify.json":
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(ResultsError, match=r"qualify\.json.*Permission denied"):
        load_results(results)


def test_deeply_nested_qualify_json_is_one_line_exit_2(results: Path) -> None:
    (results / "qualify.json").write_text("[" * 200_000 + "]" * 200_000)
    code, output = _run_report(results)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1 and "qualify.json" in output, output
    _assert_untouched(results)
