"""qualify's default load plan: cells around the measured capacity, per-load verdicts.

One small job (120 requests on 300 blocks, two strategies, fractions 0.6, 1.0 and 1.5 plus a
closed loop of four users) checks the layout and the documents; hand-made cell tables check the
verdict wording (overloaded, identical to built-in, go/no-go) against rules worked by hand. The
report's load section is opened in headless Chromium in test_browser_report.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from report_helpers import qualify_exit

from tracekit.cli import cli
from tracekit.qualify.load_verdicts import (
    IDENTICAL,
    OVERLOADED,
    go_no_go,
    relabel_entries,
)

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
ARGS = [
    "--workload", str(SAMPLE), "--limit", "120", "--num-blocks", "300", "--max-model-len", "4608",
    "--strategy", "builtin,bidkv", "--load-fractions", "0.6,1.0,1.5", "--load-concurrency", "4",
    "--jobs", "1",
]  # fmt: skip
LOADS = ["rate-0.6x", "rate-1x", "rate-1.5x", "concurrency-4"]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loads") / "results"
    result = CliRunner().invoke(cli, ["qualify", *ARGS, "--out", str(out)])
    assert result.exit_code == qualify_exit(out), result.output
    assert "capacity: knee" in result.stderr
    return out


def test_one_runs_folder_per_load_cell(results: Path) -> None:
    assert sorted(p.name for p in (results / "runs").iterdir()) == sorted(LOADS)
    for load in LOADS:
        assert sorted(p.name for p in (results / "runs" / load).iterdir()) == sorted(
            f"r{k}" for k in range(10)
        )
    inputs = json.loads((results / "qualify.json").read_text())
    assert [c["label"] for c in inputs["loads"]] == LOADS
    knee = inputs["capacity"]["knee_rps"]
    rates = [c["rate_rps"] for c in inputs["loads"][:3]]
    assert rates == pytest.approx([0.6 * knee, knee, 1.5 * knee])
    assert inputs["loads"][3]["concurrency"] == 4


def test_offered_rates_are_what_the_runs_received(results: Path) -> None:
    cells = pl.read_parquet(results / "cells.parquet")
    assert sorted(cells["load"].unique()) == sorted(LOADS)
    inputs = json.loads((results / "qualify.json").read_text())
    base = cells.filter(pl.col("strategy") == "builtin", pl.col("repeat") == 0)
    manifest = json.loads((results / base["bundle"][0] / "manifest.json").read_text())
    # The recorded workload options carry the cell's rate or client model.
    options = manifest["workload"]["options"]
    load = base["load"][0]
    planned = next(c for c in inputs["loads"] if c["label"] == load)
    if planned["kind"] == "rate":
        assert options["rate_rps"] == pytest.approx(planned["rate_rps"])
    else:
        assert options["client"]["concurrency"] == 4
    # The built-in rule never differs from itself.
    assert cells.filter(pl.col("strategy") == "builtin")["differing_decisions"].sum() == 0


def test_each_load_has_its_verdict_and_a_headline(results: Path) -> None:
    q = json.loads((results / "qualification.json").read_text())
    mine = [e for e in q["effectiveness"]["cells"] if e["strategy"] == "bidkv"]
    # Lightest load first: by offered rate, the closed loop last; never as text (where
    # "rate-1.5x" comes before "rate-1x").
    assert [e["load"] for e in mine] == LOADS
    assert [e["cell"].split("|")[1] for e in mine] == [f"load={x}" for x in LOADS]
    assert all("recomputed_tokens" in e["endpoints"] for e in mine)
    assert [h["load"] for h in q["load_headlines"]] == LOADS
    assert q["matrix"]["loads"] == LOADS
    assert q["matrix"]["strategies"] == ["bidkv", "static-random", "A/A"]
    assert q["headline"]["decision"] in ("go", "no-go")
    # One sentence naming the decision and every load.
    text = q["headline"]["text"]
    assert text.startswith(("GO for bidkv at ", "NO-GO for bidkv at ", "NO-GO (no evidence"))
    assert "at rate-0.6x, rate-1x, rate-1.5x and concurrency-4:" in text and text.endswith(".")
    html = (results / "report.html").read_text()
    assert 'id="go-no-go"' in html and 'id="chart-load-goodput"' in html
    assert "recomputed tokens change [interval]" in html
    # The page's first line is the go/no-go sentence, then the matrix, then the title.
    header = html[html.index("<header>") :]
    assert (
        header.index('id="go-no-go"') < header.index('id="verdict-matrix"') < header.index("<h1>")
    )
    matrix = header[header.index('id="verdict-matrix"') : header.index("</table>")]
    rows = [m.split("</th>")[0] for m in matrix.split("<tr><th>")[2:]]
    assert rows == LOADS
    # The runs table lists the loads in the same order.
    runs = html[html.index('<section id="runs">') :]
    first = [runs.index(f'<td class="">{load}</td>') for load in LOADS]
    assert first == sorted(first)


def _entry(cell: str, strategy: str, label: str = "inconclusive") -> dict:
    verdict = {"harmful": "worse", "beneficial": "better"}.get(label, "undecided")
    stats = {"mean": 4.0, "low": 3.0, "high": 5.0, "unit": "%", "primary": True, "verdict": verdict}
    return {
        "cell": cell, "load": cell, "strategy": strategy, "label": label, "reason": "",
        "endpoints": {"goodput": stats},
    }  # fmt: skip


def _cells(rows: list[tuple[str, str, int, float, int]]) -> pl.DataFrame:
    # (cell, strategy, repeat, slo_attainment, differing_decisions)
    return pl.DataFrame(
        rows,
        schema=["cell", "strategy", "repeat", "slo_attainment", "differing_decisions"],
        orient="row",
    ).with_columns(throughput_rps=pl.lit(1.0), calls=pl.lit(5))


def test_overloaded_and_identical_labels_by_hand() -> None:
    # Cell "hot": built-in attainment 0.4, 0.5, 0.5 -> mean 0.4667 < 0.5: overloaded.
    # Cell "ok": attainment 0.9 each; pe differs in no decision (identical), bidkv in one.
    cells = _cells(
        [("hot", "builtin", r, s, 0) for r, s in enumerate([0.4, 0.5, 0.5])]
        + [("hot", "bidkv", r, 0.5, 3) for r in range(3)]
        + [("ok", "builtin", r, 0.9, 0) for r in range(3)]
        + [("ok", "pe", r, 0.9, 0) for r in range(3)]
        + [("ok", "bidkv", r, 0.9, d) for r, d in enumerate([0, 1, 0])]
    )
    entries = [_entry("hot", "bidkv"), _entry("ok", "pe"), _entry("ok", "bidkv")]
    labels = [e["label"] for e in relabel_entries(entries, cells)]
    assert labels == [OVERLOADED, IDENTICAL, "inconclusive"]
    # A cell exactly at 50% is judged.
    edge = _cells([("c", "builtin", r, 0.5, 0) for r in range(3)])
    assert relabel_entries([_entry("c", "x")], edge)[0]["label"] == "inconclusive"


def test_go_no_go_by_hand() -> None:
    passed = {"status": "passed", "reasons": []}
    failed = {"status": "failed", "reasons": ["no_policy_failure: r0 bidkv: failures 2"]}
    good = [_entry("a", "bidkv", "beneficial"), _entry("b", "bidkv", OVERLOADED)]
    assert go_no_go(passed, good, "bidkv") == {
        "decision": "go",
        "text": "GO for bidkv at a and b: it is beneficial at a (goodput +4.0% [+3.0%, +5.0%] "
        "at a) and harmful at none.",
    }
    assert go_no_go(failed, good, "bidkv")["text"] == (
        "NO-GO for bidkv at a and b: it failed the functional compatibility gate "
        "(no_policy_failure: r0 bidkv: failures 2)."
    )
    bad = [*good, _entry("c", "bidkv", "harmful")]
    assert go_no_go(passed, bad, "bidkv")["text"].startswith(
        "NO-GO for bidkv at a, b and c: it is harmful at c (goodput +4.0%"
    )
    same = [_entry("a", "bidkv", IDENTICAL), _entry("b", "bidkv", "equivalent")]
    assert go_no_go(passed, same, "bidkv")["text"] == (
        "NO-GO (no evidence of benefit) for bidkv at a and b: no load shows a benefit beyond "
        "the margins (equivalent at 1, identical to built-in at 1 of 2 judged)."
    )
    hot = [_entry("a", "bidkv", OVERLOADED)]
    assert "every load is overloaded" in go_no_go(passed, hot, "bidkv")["text"]
    untrusted = {"trusted": False, "false_positives": 1, "judged": 4, "rate": 0.25, "nominal": 0.05}
    assert go_no_go(passed, good, "bidkv", untrusted)["text"] == (
        "NO-GO for bidkv at a and b: the verdicts cannot be trusted, because the A/A control "
        "found 1 false positive(s) in 4 cells (25% > the nominal 5%)."
    )


def test_client_aborts_are_counted_not_failed(tmp_path: Path) -> None:
    # A 1 ms TTFT timeout: no request can produce its first token in time (a step takes
    # longer), so every request is aborted by its client; the gate counts them as completed.
    out = tmp_path / "results"
    args = [
        "qualify", "--workload", str(SAMPLE), "--limit", "30", "--strategy", "builtin,bidkv",
        "--load-plan", "single", "--repeat-by", "seeds", "--ttft-timeout-s", "0.001",
        "--jobs", "1", "--out", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == qualify_exit(out), result.output
    cells = pl.read_parquet(out / "cells.parquet")
    assert cells["aborted"].to_list() == [30] * cells.height
    q = json.loads((out / "qualification.json").read_text())
    check = next(
        c for c in q["functional_compatibility"]["checks"] if c["name"] == "all_requests_completed"
    )
    assert check["passed"] and "aborted by its client" in check["detail"]
    assert ">aborted<" in (out / "report.html").read_text()


def test_bad_load_plan_options_exit_2(tmp_path: Path) -> None:
    base = ["qualify", "--workload", str(SAMPLE), "--limit", "30", "--out", str(tmp_path / "o")]
    closed = CliRunner().invoke(cli, [*base, "--concurrency", "4"])
    assert closed.exit_code == 2 and "--load-plan single" in closed.output
    fractions = CliRunner().invoke(cli, [*base, "--load-fractions", "0.5,-1"])
    assert fractions.exit_code == 2 and "--load-fractions '0.5,-1'" in fractions.output
    assert not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_a_load_plan_writes_the_same_results_with_one_or_two_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.engine.config import make_engine_config
    from tracekit.qualify import QualifyPlan, run_qualify
    from tracekit.qualify.loads import plan_loads
    from tracekit.strategies import parse_strategy_list, resolve_strategy
    from tracekit.workloads import load_workload

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    workload = load_workload(SAMPLE, limit=60)
    config = make_engine_config(num_blocks=300, max_model_len=4608)
    loads = plan_loads(workload, config, fractions=(0.8, 1.2), concurrency=2)
    plan = QualifyPlan(
        workload, config, tuple(parse_strategy_list("builtin,largest-first")),
        resolve_strategy("bidkv"), loads=loads,
    )  # fmt: skip
    one = _files(run_qualify(plan, tmp_path / "results", jobs=1))
    two = _files(run_qualify(plan, tmp_path / "results", jobs=2, overwrite=True))
    assert "runs/concurrency-2/r2/bidkv/decisions.parquet" in one
    assert sorted(one) == sorted(two)
    assert [name for name in one if one[name] != two[name]] == []


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
