"""Manifests record their input as given, with its sha256: never made absolute or resolved.

A recording made from a relative path names that relative path (so results folders do not name
the machine they were made on), one made from an absolute path names it as written, and either
way the file's sha256 identifies its content.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
SMALL = ["--limit", "20", "--num-blocks", "300", "--max-model-len", "4608"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder holding the workload as ``data/w.csv``, made the current folder."""
    (tmp_path / "data").mkdir()
    shutil.copy(SAMPLE, tmp_path / "data" / "w.csv")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _workload(manifest: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(manifest.read_text("utf-8"))["workload"]


def _invoke(*args: str) -> None:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output  # qualify: 1 is a NO-GO


@pytest.mark.parametrize("spelling", ["data/w.csv", "./data/w.csv", "{abs}"])
def test_record_sim_records_the_workload_as_given(here: Path, spelling: str) -> None:
    given = spelling.format(abs=here / "data" / "w.csv")
    _invoke("record", "sim", "--workload", given, *SMALL, "--out", "run")
    workload = _workload(here / "run" / "manifest.json")
    # pathlib drops a leading "./"; nothing else changes, and nothing is resolved.
    assert workload["source"] == os.path.normpath(given)
    assert workload["sha256"] == _digest(here / "data" / "w.csv")


def test_qualify_records_the_workload_as_given_everywhere(here: Path) -> None:
    _invoke("qualify", "--workload", "data/w.csv", *SMALL, "--strategy", "builtin,bidkv",
            "--load-plan", "single", "--repeats", "3", "--jobs", "1", "--out", "q")  # fmt: skip
    digest = _digest(here / "data" / "w.csv")
    manifests = [here / "q" / "qualify.json", *sorted((here / "q").rglob("manifest.json"))]
    assert len(manifests) > 6
    for manifest in manifests:
        workload = _workload(manifest)
        assert (workload["source"], workload["sha256"]) == ("data/w.csv", digest), manifest
    # No file of the results names the folder it was written in.
    for path in (here / "q").rglob("*.json"):
        assert str(here) not in path.read_text("utf-8"), path
