"""Client arrival models: hand-worked sequences, vLLM bench's rule, seeds, errors.

See docs/workloads.md, "Arrivals: apply_arrivals(workload, kind, *, rate=None, seed=0)".
"""

from __future__ import annotations

import doctest
import importlib
import itertools
import math
import statistics
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_frame_not_equal

from tracekit.errors import ConfigError
from tracekit.workloads import Workload, workload_schema
from tracekit.workloads.arrivals import (
    ArrivalKind,
    apply_arrivals,
    arrival_times,
    parse_arrivals,
    standard_gamma,
    uniform_sequence,
)
from tracekit.workloads.seeded import Stream, uniform


def make_workload(prompts: list[int], arrivals: list[float] | None = None) -> Workload:
    """A small in-memory workload: one request per prompt length, arriving 1 s apart."""
    n = len(prompts)
    frame = pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_s": arrivals if arrivals is not None else [float(i) for i in range(n)],
            "prompt_tokens": prompts,
            "output_tokens": [10] * n,
            "max_tokens": [10] * n,
            "priority": [0] * n,
        },
        schema=workload_schema(),
    )
    return Workload("w", Path("w.csv"), "0" * 64, "csv", {"seed": 1}, frame)


def test_constant_rate_two_is_one_gap_apart_starting_after_one_gap() -> None:
    # vllm bench: delays 1/R each, cumulated, so request i is due at (i + 1) / R.
    assert arrival_times(5, parse_arrivals("constant", rate=2.0)) == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert arrival_times(3, parse_arrivals("gamma:inf", rate=4.0)) == [0.25, 0.5, 0.75]


def test_infinite_rate_sends_everything_at_zero() -> None:
    for kind in ("poisson", "constant", "gamma:0.5"):
        assert arrival_times(4, parse_arrivals(kind, rate=math.inf)) == [0.0] * 4
    assert parse_arrivals("poisson", rate="inf").describe()["rate"] == "inf"


@pytest.mark.parametrize("kind", ["poisson", "gamma:0.3", "gamma:1", "gamma:4"])
def test_last_arrival_is_n_over_rate_and_first_is_after_a_gap(kind: str) -> None:
    times = arrival_times(50, parse_arrivals(kind, rate=5.0, seed=11))
    assert times[-1] == 10.0  # N / R exactly: vllm bench rescales to target_total_delay_s
    assert times[0] > 0.0  # the first request waits one gap
    assert times == sorted(times)


def test_poisson_is_gamma_one_draw_for_draw() -> None:
    assert arrival_times(30, parse_arrivals("poisson", rate=3.0, seed=5)) == arrival_times(
        30, parse_arrivals("gamma:1", rate=3.0, seed=5)
    )


def test_first_arrival_hand_worked_from_the_draws() -> None:
    # Poisson: gap_i = -ln(1 - u_i); arrivals = cumsum * (N/R) / sum.
    draws = uniform_sequence(9, Stream.ARRIVALS)
    gaps = [-math.log(1.0 - next(draws)) for _ in range(3)]
    expected = [gaps[0], gaps[0] + gaps[1], sum(gaps)]
    expected = [t * (3 / 2.0) / sum(gaps) for t in expected]
    got = arrival_times(3, parse_arrivals("poisson", rate=2.0, seed=9))
    assert got == pytest.approx(expected, rel=1e-12)
    assert got[-1] == 1.5


def test_uniform_sequence_matches_the_polars_rule() -> None:
    frame = pl.DataFrame({"i": range(200)}).select(u=uniform(17, Stream.ARRIVALS))
    draws = uniform_sequence(17, Stream.ARRIVALS)
    assert [next(draws) for _ in range(200)] == frame["u"].to_list()


@pytest.mark.parametrize("shape", [1.0, 0.25, 0.5, 2.0, 7.5])
def test_standard_gamma_has_the_gamma_mean_and_variance(shape: float) -> None:
    draws = standard_gamma(shape, 20_000, seed=3)
    assert all(d >= 0 for d in draws)
    # Mean shape, variance shape; standard errors are about 0.7% and 1.5-3% at 20k draws.
    assert statistics.fmean(draws) == pytest.approx(shape, rel=0.04)
    assert statistics.pvariance(draws) == pytest.approx(shape, rel=0.1)


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_rescaled_gaps_keep_the_vllm_mean_and_variance(burstiness: float) -> None:
    rate = 2.0
    times = arrival_times(20_000, parse_arrivals(f"gamma:{burstiness}", rate=rate, seed=8))
    gaps = [times[0]] + [b - a for a, b in itertools.pairwise(times)]
    # gamma(shape=b, scale=1/(R b)): mean 1/R, variance 1/(R^2 b); b = 1 is the exponential.
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=1e-9)
    assert statistics.pvariance(gaps) == pytest.approx(1 / (rate**2 * burstiness), rel=0.1)


def test_first_draws_do_not_depend_on_how_many() -> None:
    assert standard_gamma(0.5, 10, 4) == standard_gamma(0.5, 100, 4)[:10]


def test_same_seed_same_bytes_other_seed_other_times() -> None:
    workload = make_workload([5, 6, 7, 8, 9, 10])
    one = apply_arrivals(workload, "gamma:0.5", rate=3.0, seed=2)
    two = apply_arrivals(workload, "gamma:0.5", rate=3.0, seed=2)
    other = apply_arrivals(workload, "gamma:0.5", rate=3.0, seed=3)
    assert one.frame.write_ipc(None).getvalue() == two.frame.write_ipc(None).getvalue()
    assert_frame_not_equal(one.frame, other.frame)


def test_apply_keeps_rows_and_records_the_model() -> None:
    workload = make_workload([5, 6, 7, 8])
    out = apply_arrivals(workload, "constant", rate=2.0)
    assert out.frame["arrival_s"].to_list() == [0.5, 1.0, 1.5, 2.0]
    assert out.frame["request_id"].to_list() == ["r0", "r1", "r2", "r3"]
    assert_frame_equal(
        out.frame.drop("arrival_s"), workload.frame.drop("arrival_s"), check_exact=True
    )
    assert out.options == {
        "seed": 1,
        "arrivals": {"kind": "constant", "rate": 2.0, "burstiness": "inf", "seed": 0},
    }
    assert workload.options == {"seed": 1}  # the input is untouched


def test_recorded_keeps_times_and_records_the_option() -> None:
    workload = make_workload([5, 6], arrivals=[0.0, 3.5])
    out = apply_arrivals(workload, "recorded")
    assert_frame_equal(out.frame, workload.frame, check_exact=True)
    assert out.options["arrivals"] == {
        "kind": "recorded",
        "rate": None,
        "burstiness": None,
        "seed": 0,
    }


def test_parse_is_case_insensitive() -> None:
    assert parse_arrivals(" Poisson ", rate=1).kind is ArrivalKind.POISSON
    assert parse_arrivals("GAMMA:2", rate=1).burstiness == 2.0


@pytest.mark.parametrize(
    ("text", "rate", "needle"),
    [
        ("posson", 1.0, "--arrivals 'posson': expected one of recorded, poisson, gamma:<burstiness>"
         ", constant (did you mean 'poisson'?); fix: pass --arrivals poisson"),
        ("constnt", 1.0, "(did you mean 'constant'?)"),
        ("gamma", 1.0, "(did you mean 'gamma:<burstiness>'?)"),
        ("zipf", 1.0, "expected one of recorded"),
        ("poisson:2", 1.0, "--arrivals 'poisson:2'"),
        ("gamma:0", 1.0, "--arrivals gamma:<burstiness> '0': expected a number > 0"),
        ("gamma:-1", 1.0, "expected a number > 0"),
        ("gamma:nan", 1.0, "expected a number > 0"),
        ("gamma:x", 1.0, "expected a number > 0"),
        ("poisson", 0,
         "--rate 0: expected a number > 0 and <= 1e+06 (inf allowed); fix: pass --rate R"),
        ("poisson", -2.0, "--rate -2.0: expected a number > 0"),
        ("poisson", math.nan, "--rate nan: expected a number > 0"),
        ("poisson", True, "--rate True: expected a number > 0"),
        ("constant", None, "--rate None: expected a request rate for --arrivals constant"),
        ("recorded", 2.0, "--rate 2.0: expected no rate with --arrivals recorded"),
    ],
)  # fmt: skip
def test_errors_are_one_line_and_name_option_and_fix(text: str, rate: object, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_arrivals(text, rate=rate)  # type: ignore[arg-type]
    message = str(caught.value)
    assert needle in message
    assert "\n" not in message and "fix:" in message


def test_bad_seed_and_too_low_rate() -> None:
    with pytest.raises(ConfigError, match="--seed '1': expected an integer seed"):
        parse_arrivals("poisson", rate=1.0, seed="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"--rate 1e-08: expected a rate at which 2 requests"):
        apply_arrivals(make_workload([5, 6]), "poisson", rate=1e-8)


@pytest.mark.parametrize("module", ["arrivals", "_options"])
def test_docstring_examples_run(module: str) -> None:
    imported = importlib.import_module(f"tracekit.workloads.{module}")
    result = doctest.testmod(imported, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0


@pytest.mark.parametrize(("burstiness", "rate"), [(0.5, 3.0), (1.0, 0.7), (2.5, 10.0)])
def test_vllm_get_request_steps_replayed_on_our_draws(burstiness: float, rate: float) -> None:
    # vllm/benchmarks/serve.py get_request, without ramp-up: theta = 1/(rate*b), gaps
    # ~ gamma(b, theta), cumulative sum, then rescale by (N/rate)/last. Same draws, same times.
    n = 40
    theta = 1.0 / (rate * burstiness)
    delays = [g * theta for g in standard_gamma(burstiness, n, 6)]
    for i in range(1, n):
        delays[i] += delays[i - 1]
    factor = (n / rate) / delays[-1]
    expected = [d * factor for d in delays]
    got = arrival_times(n, parse_arrivals(f"gamma:{burstiness}", rate=rate, seed=6))
    assert got == pytest.approx(expected, rel=1e-12)
