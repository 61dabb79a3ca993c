"""``ignore_eos``: a request that ignores its end of sequence runs to its ``max_tokens``.

Per request (the workload's optional ``ignore_eos`` column, ``EngineRequest.ignore_eos``) and as
the client option ``--ignore-eos`` (``vllm bench serve --ignore-eos``; SGLang's
``bench_serving`` sends it unless ``--disable-ignore-eos``).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.engine import BuiltinHost, EngineRequest, run_engine
from tracekit.errors import WorkloadError
from tracekit.trace.bundle import open_trace
from tracekit.trace.validate import validate_trace
from tracekit.workloads import (
    IGNORE_EOS,
    apply_cancels,
    apply_ignore_eos,
    apply_max_tokens,
    load_workload,
)
from tracekit.workloads.load_spec import LoadSpec, apply_load
from tracekit.workloads.model import Workload

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "traces" / "sglang-fixtures" / "workloads" / "ignore-eos.csv"


def test_every_request_runs_to_its_cap() -> None:
    workload = load_workload(TABLE)
    sent = apply_ignore_eos(workload)
    frame = sent.frame
    assert frame[IGNORE_EOS].all()
    assert frame["output_tokens"].to_list() == workload.frame["max_tokens"].to_list()
    shorter = (workload.frame["output_tokens"] < workload.frame["max_tokens"]).sum()
    assert sent.options["num_lengthened"] == shorter > 0
    assert [r.ignore_eos for r in sent.iter_requests()] == [True] * workload.num_requests


def test_a_row_that_ignores_eos_but_stops_early_is_refused() -> None:
    frame = apply_ignore_eos(load_workload(TABLE)).frame
    bad = frame.with_columns(
        output_tokens=pl.when(pl.col("request_id") == "eos-000")
        .then(pl.lit(1, dtype=pl.Int64))
        .otherwise(pl.col("output_tokens"))
    )
    with pytest.raises(WorkloadError, match=r"request 'eos-000'.*output_tokens.*max_tokens"):
        Workload("w", TABLE, "0", "csv", {}, bad)


def test_a_new_client_cap_lengthens_ignore_eos_requests_to_it() -> None:
    sent = apply_max_tokens(apply_ignore_eos(load_workload(TABLE)), 500)
    assert (sent.frame["output_tokens"] == 500).all()
    # The optional columns keep the table's order when a cancel is added afterwards.
    cancelled = apply_cancels(sent, {"eos-001": 2.0})
    assert cancelled.frame.columns[-2:] == ["cancel_after_s", IGNORE_EOS]


def test_load_spec_ignore_eos() -> None:
    sent = apply_load(load_workload(TABLE), LoadSpec(ignore_eos=True))
    assert sent.options["ignore_eos"] is True and sent.frame[IGNORE_EOS].all()


def test_the_engine_runs_an_ignore_eos_request_to_max_tokens() -> None:
    requests = [
        EngineRequest("eos", 0.0, 10, 3, 8),
        EngineRequest("ignore", 0.0, 10, 3, 8, ignore_eos=True),
    ]
    for mode in ("vllm", "sglang"):
        result = run_engine(requests, _config(mode), BuiltinHost())
        got = {r.request_id: (r.num_output_tokens, r.status) for r in result.requests}
        assert got == {
            "eos": (3, "finished_stopped"),
            "ignore": (8, "finished_length_capped"),
        }, mode


def _config(mode: str):
    from tracekit.engine import EngineConfig

    return EngineConfig(mode=mode, num_blocks=101, block_size=1, max_model_len=100, clock="steps")


def test_record_sim_ignore_eos(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["record", "sim", "--workload", str(TABLE), "--ignore-eos", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    requests = pl.read_parquet(out / "requests.parquet")
    assert (requests["output_tokens"] == requests["max_tokens"]).all()
    assert (requests["target_output_tokens"] == requests["max_tokens"]).all()


@pytest.mark.parametrize("mode", ["vllm", "sglang"])
def test_the_trace_carries_each_request_s_ignore_eos(tmp_path: Path, mode: str) -> None:
    """requests.ignore_eos (trace schema v3): what each request ran with, per request."""
    from tracekit.engine.config import EngineConfig
    from tracekit.recording.sim import SimRun, record_sim
    from tracekit.strategies import resolve_strategy

    flags = [True, False, True, False, False, True]
    workload = load_workload(TABLE, limit=6)
    frame = workload.frame.with_columns(
        output_tokens=pl.when(pl.Series(flags))
        .then(pl.col("max_tokens"))
        .otherwise(pl.col("output_tokens")),
        **{IGNORE_EOS: pl.Series(flags)},
    )
    mixed = Workload("mixed", TABLE, "0", "csv", {}, frame)
    config = EngineConfig(mode=mode, clock="steps")
    out = record_sim(SimRun(mixed, config, resolve_strategy("builtin"), "typed"), tmp_path / "run")
    requests = pl.read_parquet(out / "requests.parquet").sort("input_index")
    assert requests["ignore_eos"].to_list() == flags
    assert validate_trace(out).exit_code == 0
    # The CLI's --ignore-eos: every request.
    every = tmp_path / "every"
    args = ["record", "sim", "--workload", str(TABLE), "--limit", "6", "--ignore-eos"]
    result = CliRunner().invoke(cli, [*args, "--engine-mode", mode, "--out", str(every)])
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(every / "requests.parquet")["ignore_eos"].all()


def test_a_v2_bundle_reads_with_ignore_eos_null_and_must_not_carry_it(tmp_path: Path) -> None:
    """Bundles written before the column (schema v2: the committed SGLang fixtures) validate
    strictly against v2 and read with requests.ignore_eos null (not recorded)."""
    import shutil

    fixture = ROOT / "tests" / "data" / "sglang-0.5.23" / "ignore-eos-all-noradix"
    assert json.loads((fixture / "manifest.json").read_text())["schema_version"] == 2
    assert validate_trace(fixture).exit_code == 0
    requests = open_trace(fixture).scan("requests").collect()
    assert requests.height > 0 and requests["ignore_eos"].null_count() == requests.height
    bad = tmp_path / "v2"
    shutil.copytree(fixture, bad)
    path = bad / "requests.parquet"
    pl.read_parquet(path).with_columns(ignore_eos=pl.lit(True)).write_parquet(path)
    report = validate_trace(bad)
    assert report.exit_code == 2
    (problem,) = report.bundles[0].problems
    assert "'ignore_eos' are not in table 'requests' of trace schema v2" in problem
