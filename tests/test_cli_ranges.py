"""Every numeric option has a range, checked before any work; wrong types are refused.

The cases an audit found: ``record sim --limit 10**20`` raised an OverflowError in the workload
loader, ``--clock steps --step-s 1e-30`` one in the trace writer's flush (leaving a staging
folder), ``oracle --ttft-s/--tpot-s`` took 0, -1 and NaN, ``capacity --tolerance inf`` and
``qualify --load-fractions 1e30`` ran, ``--load-fractions 1,1`` failed only after the capacity
search and 29 runs, and ``--retraction-policy`` was ignored in vLLM mode.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import tracekit.qualify.loads
import tracekit.recording.sim
from tracekit.capacity.search import find_capacity
from tracekit.cli import cli
from tracekit.cli.common import leaf_commands
from tracekit.cli.options import slo_target
from tracekit.cli.params import Count, Number
from tracekit.engine.config import ENGINE_RANGES, EngineConfig, make_engine_config
from tracekit.errors import ConfigError, TracekitError
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def test_every_numeric_option_has_a_range_and_refuses_nan() -> None:
    """A new option typed ``int`` or ``float`` (unbounded, NaN accepted) fails here."""
    loose = []
    for name, command in leaf_commands(cli):
        for param in command.params:
            kind = param.type
            if isinstance(kind, Count):
                ok = kind.min is not None and kind.max is not None
            elif isinstance(kind, Number):
                ok = kind.max is not None
            elif isinstance(kind, click.types.IntParamType | click.types.FloatParamType):
                # The SLO targets keep click's float and check a finite number > 0 themselves.
                ok = kind is click.FLOAT and param.callback is slo_target
            else:
                continue
            if not ok:
                loose.append(f"{name} {param.opts[0]}")
    assert loose == []


def _invoke(*args: object):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, [str(a) for a in args])


def _refused(result, option: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    last = result.output.splitlines()[-1]
    assert last.startswith("Error: ") and option in last, result.output
    assert "Traceback" not in result.output


def _nothing_written(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--limit", str(10**20)], "--limit"),
        (["--clock", "steps", "--step-s", "1e-30"], "--step-s"),
        (["--num-blocks", str(2**62)], "--num-blocks"),
        (["--block-size", "0"], "--block-size"),
        (["--rate-scale", "inf"], "--rate-scale"),
        (["--arrivals", "poisson", "--rate", "nan"], "--rate"),
        (["--arrivals", "poisson", "--rate", "1e300"], "--rate"),
        (["--watermark", "1"], "--watermark"),
        (["--window", "0:1e300"], "--window"),
        (["--order", "shuffled:99999999999999999999999"], "--order"),
        (["--arrivals", "gamma:1e308", "--rate", "1"], "--arrivals"),
        (["--seed", str(2**64)], "--seed"),
        # Wrong types are refused, never rounded.
        (["--limit", "1.5"], "--limit"),
        (["--max-num-seqs", "2.0"], "--max-num-seqs"),
        (["--seed", "1e3"], "--seed"),
        (["--step-s", "fast"], "--step-s"),
        # SGLang-mode options in vLLM mode would be ignored.
        (["--retraction-policy", "priority"], "--retraction-policy"),
        (["--chunked-prefill-size", "64"], "--chunked-prefill-size"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_record_sim_refuses_out_of_range_values_before_any_work(
    tmp_path: Path, args: list[str], option: str
) -> None:
    out = tmp_path / "out"
    result = _invoke("record", "sim", "--workload", SAMPLE, "--limit", "20", *args, "--out", out)
    _refused(result, option)
    _nothing_written(tmp_path)


def test_the_library_refuses_what_overflowed() -> None:
    with pytest.raises(TracekitError, match="limit"):
        load_workload(SAMPLE, limit=10**20)
    with pytest.raises(ConfigError, match="step_s must be a number of seconds from 1e-06"):
        make_engine_config(clock="steps", step_s=1e-30)
    with pytest.raises(ValueError, match="read in SGLang mode only"):
        EngineConfig(retraction_policy="priority")
    with pytest.raises(ValueError, match="num_blocks must be an integer from 2 to"):
        EngineConfig(num_blocks=ENGINE_RANGES["num_blocks"][1] + 1)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
@pytest.mark.parametrize("option", ["--slo-ttft-s", "--slo-tpot-s", "--ttft-s", "--tpot-s"])
def test_oracle_slo_targets_are_finite_and_positive(
    tmp_path: Path, write_bundle, option: str, value: str
) -> None:  # type: ignore[no-untyped-def]
    bundle = write_bundle(tmp_path / "b")
    out = tmp_path / "out"
    result = _invoke("oracle", bundle, "--objective", "slo", option, value, "--out", out)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {option}: expected a finite number > 0")
    assert not out.exists()


def test_the_old_oracle_spelling_warns_and_means_the_same(tmp_path: Path, write_bundle) -> None:  # type: ignore[no-untyped-def]
    """--ttft-s is --slo-ttft-s (the dialect of qualify and capacity), with a warning."""
    # The command imports the oracle when it runs: replaced where it lives.
    from tracekit.oracle import job

    seen = {}

    def fake(trace, out, specs, settings, **kwargs):  # type: ignore[no-untyped-def]
        seen["settings"] = settings
        raise ConfigError("stop here")

    bundle = write_bundle(tmp_path / "b")
    original = job.run_oracle
    job.run_oracle = fake  # type: ignore[assignment]
    try:
        slo = ["--objective", "slo"]
        old = _invoke("oracle", bundle, *slo, "--ttft-s", "3.5", "--out", tmp_path / "o")
        assert "warning: --ttft-s is deprecated; use --slo-ttft-s" in old.output
        assert seen["settings"].ttft_s == 3.5
        both = _invoke(
            "oracle", bundle, *slo, "--ttft-s", "3.5", "--slo-ttft-s", "1", "--out", tmp_path / "o"
        )
        assert both.exit_code == 2 and "contradicts --slo-ttft-s" in both.output
        assert "--ttft-s" not in _invoke("oracle", "--help").output
    finally:
        job.run_oracle = original  # type: ignore[assignment]


def test_capacity_refuses_an_infinite_tolerance(tmp_path: Path) -> None:
    result = _invoke("capacity", "--workload", SAMPLE, "--limit", "20", "--tolerance", "inf")
    _refused(result, "--tolerance")
    workload = load_workload(SAMPLE, limit=20)
    for tolerance in (math.inf, 1.0, 0.0, math.nan):
        with pytest.raises(ConfigError, match="--tolerance"):
            find_capacity(workload, make_engine_config(), tolerance=tolerance)


@pytest.mark.parametrize(
    ("fractions", "words"),
    [
        ("1e30", "<= 100"),
        ("1,1", "1 is given twice"),
        ("0.5,nan", "> 0"),
        # An empty item was skipped silently.
        ("0.6,,0.9", "comma-separated numbers"),
        ("0.6,0.9,", "comma-separated numbers"),
    ],
)
def test_qualify_refuses_bad_load_fractions_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fractions: str, words: str
) -> None:
    def no_work(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the capacity search ran")

    # The command imports these when it runs: patched where they live.
    monkeypatch.setattr(tracekit.qualify.loads, "plan_loads", no_work)
    monkeypatch.setattr(tracekit.recording.sim, "load_run_workload", no_work)
    out = tmp_path / "out"
    result = _invoke("qualify", "--workload", SAMPLE, "--load-fractions", fractions, "--out", out)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: --load-fractions ") and words in result.output
    _nothing_written(tmp_path)


def test_rate_inf_is_vllms_every_request_at_once_and_says_so(tmp_path: Path) -> None:
    """vLLM bench's --request-rate inf is a documented value, not a slip: taken, and said."""
    import polars as pl

    out = tmp_path / "out"
    result = _invoke("record", "sim", "--workload", SAMPLE, "--limit", "5", "--arrivals",
                     "poisson", "--rate", "inf", "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "note: --rate inf sends every request at time 0" in result.output
    assert pl.read_parquet(out / "requests.parquet")["arrival_s"].to_list() == [0.0] * 5


@pytest.mark.parametrize("rates", ["1,,2", "1,2,", ","])
def test_experiment_rates_refuse_an_empty_item(rates: str) -> None:
    # '1,,2' ran rates 1 and 2, skipping the empty item silently.
    result = _invoke("experiment", "traces", "--rates", rates, "--out", "never")
    assert result.exit_code == 2 and "--rates" in result.output, result.output
