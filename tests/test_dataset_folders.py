"""inspect, query and report read qualify and sweep folders as the datasets they are.

``inspect`` on a qualify results folder failed: the candidate's typed run of repeat 0 is kept
twice (``runs/r0/<candidate>`` and ``diff/typed``), and a repeated run id was an error. A run
recorded again is now read once and listed as a copy; a repeated run id with other contents is
still refused. ``report`` on a sweep said NO-GO because a sweep has no diff: it now says it
draws no GO/NO-GO, and what it compares.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from sweep_helpers import SMOKE
from trace_helpers import write_bundle

from tracekit.cli import cli
from tracekit.errors import TraceSchemaError
from tracekit.qualify import write_report
from tracekit.sweep import run_sweep
from tracekit.trace import open_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def invoke(*args: object):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def qualified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qualify") / "results"
    args = ["qualify", "--workload", SAMPLE, "--limit", "60", "--num-blocks", "300",
            "--max-model-len", "4608", "--strategy", "builtin,bidkv", "--load-plan", "single",
            "--jobs", "1", "--out", out]  # fmt: skip
    result = invoke(*args)
    assert result.exit_code in (0, 1), result.output  # GO or NO-GO
    return out


def test_inspect_and_query_read_a_qualify_folder(qualified: Path) -> None:
    bundles = sorted(p.parent for p in qualified.rglob("manifest.json"))
    result = invoke("inspect", qualified, "--json")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output)
    # Every bundle but the diff's typed run, which is the reference repeat's bidkv run recorded
    # again (docs/qualify.md: the repeat whose built-in run made the most victim decisions).
    assert len(runs) == len(bundles) - 1
    (copied,) = [r for r in runs if "copies" in r]
    repeat = json.loads((qualified / "qualify.json").read_text())["reference"]["repeat"]
    assert {copied["path"], *copied["copies"]} == {
        str(qualified / "diff" / "typed"),
        str(qualified / "runs" / f"r{repeat}" / "bidkv"),
    }
    query = invoke("query", qualified, "select count(*) n, count(distinct run_id) r from runs",
                   "--format", "csv")  # fmt: skip
    assert query.exit_code == 0, query.output
    assert query.output.splitlines()[1] == f"{len(runs)},{len(runs)}"


def test_a_repeated_run_id_with_other_contents_is_still_refused(tmp_path: Path) -> None:
    first = write_bundle(tmp_path / "data" / "a")
    same = tmp_path / "data" / "b"
    shutil.copytree(first, same)
    manifest = json.loads((same / "manifest.json").read_text("utf-8"))
    manifest["created_at"] = "2027-01-01T00:00:00+00:00"
    (same / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    dataset = open_trace(tmp_path / "data")
    assert [b.path for b in dataset] == [first] and dataset.copies == ((same, first),)
    # Same run id, another run: a different seed, or different rows.
    manifest["seed"] = 7
    (same / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(TraceSchemaError, match=r"repeats the run in .*, with other contents"):
        open_trace(tmp_path / "data")
    manifest["seed"] = 0
    (same / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    open_trace(tmp_path / "data")
    steps = pl.read_parquet(same / "steps.parquet")
    pl.concat([steps, steps]).write_parquet(same / "steps.parquet")
    with pytest.raises(TraceSchemaError, match="with other contents"):
        open_trace(tmp_path / "data")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "smoke"
    run_sweep(SMOKE, out, jobs=1)
    return out


def test_the_report_of_a_sweep_draws_no_go_no_go(sweep: Path, tmp_path: Path) -> None:
    page = write_report(sweep, tmp_path / "report.html").read_text("utf-8")
    qualification = json.loads((tmp_path / "qualification.json").read_text("utf-8"))
    headline = qualification["headline"]
    assert headline["decision"] == "none"
    assert headline["text"].startswith("No GO/NO-GO from a sweep: a sweep runs no legacy-versus")
    assert "bidkv is " in headline["text"] and "of 4 cells" in headline["text"]
    assert qualification["functional_compatibility"]["status"] == "not-run"
    assert "NO-GO:" not in page and 'class="headline warn"' in page
    for command in (["inspect", sweep], ["query", sweep, "select count(*) from runs"]):
        assert invoke(*command).exit_code == 0
