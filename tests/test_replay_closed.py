"""Closed-mode replay: the recorded workload re-simulated once per strategy."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.engine.config import make_engine_config
from tracekit.errors import ConfigError, TraceSchemaError
from tracekit.recording.sim import SimRun, record_sim
from tracekit.replay.closed_mode import replay_closed
from tracekit.strategies import parse_strategy_list, resolve_strategy
from tracekit.trace import open_trace
from tracekit.trace.validate import validate_trace
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 120 requests on 300 blocks: KV pressure, so strategies differ (see test_record_sim.py).
    out = tmp_path_factory.mktemp("closed") / "recorded"
    workload = load_workload(SAMPLE, limit=120)
    config = make_engine_config(num_blocks=300, max_model_len=4608, clock="cost-model")
    record_sim(SimRun(workload, config, resolve_strategy("builtin"), "typed"), out)
    return out


def test_resimulating_the_recorded_strategy_reproduces_the_run(
    recorded: Path, tmp_path: Path
) -> None:
    result = replay_closed(recorded, parse_strategy_list("builtin"), tmp_path / "out")
    rows = result.summary.sort("strategy", descending=True)
    assert rows["strategy"].to_list() == ["recorded", "builtin"]
    # The engine is deterministic: same workload, configuration and strategy, same run.
    assert rows["run_id"].n_unique() == 1
    assert result.summary["throughput_rps_change_pct"].to_list() == [0.0, 0.0]
    again = tmp_path / "out" / "bundles" / rows["run_id"][0] / "builtin"
    for table in ("decisions", "candidates", "requests", "steps"):
        assert_frame_equal(
            pl.read_parquet(recorded / f"{table}.parquet"),
            pl.read_parquet(again / f"{table}.parquet"),
        )


def test_counterfactual_strategies_are_full_bundles_with_metrics(
    recorded: Path, tmp_path: Path
) -> None:
    result = replay_closed(recorded, parse_strategy_list("bidkv,largest-first"), tmp_path / "out")
    summary = result.summary
    assert summary["strategy"].to_list() == ["recorded", "bidkv", "largest-first"]
    assert summary["all_finished"].to_list() == [True, True, True]
    for bundle in summary.filter(pl.col("strategy") != "recorded")["bundle"]:
        assert validate_trace(bundle).status == "ok"
    # Changes are relative to the recorded run, computed from the same metric columns.
    recorded_row = summary.row(0, named=True)
    for row in summary.iter_rows(named=True):
        expected = 100 * (row["preemptions"] / recorded_row["preemptions"] - 1)
        assert row["preemptions_change_pct"] == pytest.approx(expected)
    on_disk = json.loads((tmp_path / "out" / "closed_summary.json").read_text())
    assert [r["strategy"] for r in on_disk] == ["recorded", "bidkv", "largest-first"]
    # largest-first frees the most KV per preemption, so it needs no more preemptions.
    changes = dict(zip(summary["strategy"], summary["preemptions"], strict=True))
    assert changes["largest-first"] <= changes["recorded"]


def test_existing_output_is_refused(recorded: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        replay_closed(recorded, parse_strategy_list("builtin"), tmp_path / "out")


class Explodes:
    """A legacy selector that fails: the legacy host has no failure isolation."""

    def pick_victim(self, running, policy, *, kv_utilization=None, now_s=None):
        raise RuntimeError("boom")


def test_a_failing_run_leaves_no_output(recorded: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = resolve_strategy("test_replay_closed:Explodes")
    with pytest.raises(RuntimeError, match="boom"):
        replay_closed(recorded, [spec], tmp_path / "out", host_path="legacy")
    assert list(tmp_path.iterdir()) == []


def test_runs_without_requests_cannot_be_resimulated(tmp_path: Path) -> None:
    from trace_helpers import write_bundle

    bundle = write_bundle(tmp_path / "b", requests=[])
    with pytest.raises(TraceSchemaError, match="no requests table rows"):
        replay_closed(bundle, parse_strategy_list("builtin"), tmp_path / "out")
    assert open_trace(bundle)


def test_two_jobs_resimulate_the_same_runs(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    specs = parse_strategy_list("builtin,largest-first")
    one = replay_closed(recorded, specs, tmp_path / "one", jobs=1)
    two = replay_closed(recorded, specs, tmp_path / "two", jobs=2)
    assert_frame_equal(one.summary.drop("bundle"), two.summary.drop("bundle"))
    files = sorted(p.relative_to(one.out) for p in (one.out / "bundles").rglob("*") if p.is_file())
    assert len(files) > 8
    for name in files:
        assert (one.out / name).read_bytes() == (two.out / name).read_bytes(), name


def _broken_copy(recorded: Path, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "broken"
    shutil.copytree(recorded, copy)
    return copy


@pytest.mark.parametrize("damage", ["truncated", "no-columns", "seed-nan"])
def test_a_damaged_recording_is_refused_in_one_line(
    recorded: Path, tmp_path: Path, damage: str
) -> None:
    """No polars traceback: one line naming the file, and no output.

    See docs/guarantees.md, "Bad input: one line, no traceback".
    """
    from click.testing import CliRunner

    from tracekit.cli import cli

    bundle = _broken_copy(recorded, tmp_path)
    requests = bundle / "requests.parquet"
    if damage == "truncated":
        requests.write_bytes(requests.read_bytes()[:300])
        expected = "requests.parquet: not a readable Parquet file"
    elif damage == "no-columns":
        pl.DataFrame({"x": [1]}).write_parquet(requests)
        # The replay command's table check names every missing column of the schema.
        expected = "requests.parquet: missing column(s) 'run_id', 'request_id', 'input_index'"
    else:
        manifest = json.loads((bundle / "manifest.json").read_text("utf-8"))
        text = json.dumps({**manifest, "seed": float("nan")})  # NaN, as json.dumps writes it
        (bundle / "manifest.json").write_text(text, "utf-8")
        expected = "field 'seed' is nan, expected an integer"
    out = tmp_path / "out"
    args = ["replay", str(bundle), "--mode", "closed", "--strategy", "builtin", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and not isinstance(result.exception, AssertionError)
    assert expected in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken"]


def test_a_change_of_the_last_bit_shows_as_zero() -> None:
    """The summary once printed ``-1.1102e-14`` where 0 is meant."""
    from tracekit.replay.closed_mode import _relative_change

    frame = pl.DataFrame({"m": [0.1 + 0.2, 0.3, 0.33], "_recorded_m": [0.3, 0.3, 0.3]})
    assert 100.0 * (frame["m"][0] / 0.3 - 1.0) != 0.0  # the naive change is not 0
    changes = frame.select(_relative_change("m"))["m_change_pct"].to_list()
    assert changes[:2] == [0.0, 0.0] and str(changes[0]) == "0.0"
    assert changes[2] == pytest.approx(10.0)


def test_the_command_prints_a_plain_table_with_signed_changes(
    recorded: Path, tmp_path: Path
) -> None:
    """Closed replay printed polars' table (shape line, dtype row, -1.1102e-14 for 0)."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    out = tmp_path / "out"
    args = ["replay", str(recorded), "--mode", "closed", "--strategy", "builtin,lcf",
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "run", "strategy", "throughput_rps", "e2e_p95_s", "preemptions", "throughput", "e2e_p95"
    ]  # fmt: skip
    assert lines[-1] == f"wrote {out}"
    rows = {line.split()[1]: line.split() for line in lines[1:-1]}
    assert sorted(rows) == ["builtin", "lcf", "recorded"]
    # builtin re-run on its own recording: both changes are exactly zero.
    assert rows["builtin"][-2:] == ["+0.00%", "+0.00%"]
    summary = pl.read_parquet(out / "closed_summary.parquet").filter(pl.col("strategy") == "lcf")
    expected = [
        f"{summary[column].item():+.2f}%"
        for column in ("throughput_rps_change_pct", "e2e_p95_s_change_pct")
    ]
    assert rows["lcf"][-2:] == expected
    assert "shape:" not in result.stdout and "f64" not in result.stdout


def test_a_shared_prefix_run_with_prefix_caching_is_reproduced(tmp_path: Path) -> None:
    """The shared prefix is re-derived from the recorded options, so the builtin re-run hits
    the cache exactly as the recorded run did (without the content it would hit nothing)."""
    from tracekit.recording.sim import load_run_workload

    workload = load_run_workload(
        SAMPLE, limit=120, shared_prefix_tokens=512, prefix_groups=4, prefix_seed=3
    )
    config = make_engine_config(
        num_blocks=300, max_model_len=4608, clock="cost-model", enable_prefix_caching=True
    )
    recorded = record_sim(
        SimRun(workload, config, resolve_strategy("builtin"), "typed"), tmp_path / "rec"
    )
    hits = pl.read_parquet(recorded / "steps.parquet")["cache_hit_tokens"].sum()
    assert hits > 0
    result = replay_closed(recorded, parse_strategy_list("builtin"), tmp_path / "out")
    rows = result.summary.sort("strategy", descending=True)
    again = tmp_path / "out" / "bundles" / rows["run_id"][0] / "builtin"
    for table in ("decisions", "candidates", "requests", "steps"):
        assert_frame_equal(
            pl.read_parquet(recorded / f"{table}.parquet"),
            pl.read_parquet(again / f"{table}.parquet"),
        )
