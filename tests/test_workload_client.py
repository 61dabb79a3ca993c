"""Client concurrency models: the ClientModel's checks and hand-worked dispatch rules.

See docs/workloads.md, "Concurrency and aborts: ClientModel".
"""

from __future__ import annotations

import doctest
import heapq
import importlib
import math
from collections.abc import Iterator

import pytest

from tracekit.errors import ConfigError
from tracekit.workloads.arrivals import parse_arrivals
from tracekit.workloads.client import ClientModel, closed_loop_arrivals, dispatch_times


def test_defaults_are_an_open_loop_without_limits() -> None:
    model = ClientModel()
    assert not model.closed_loop
    assert model.describe() == {
        "max_concurrency": None,
        "concurrency": None,
        "think_time_s": 0.0,
        "ttft_timeout_s": None,
    }
    assert model.abort_at(3.0) is None


def test_values_are_normalised_and_abort_deadline() -> None:
    model = ClientModel(concurrency=8, think_time_s=1, ttft_timeout_s=30)
    assert model.closed_loop
    assert isinstance(model.think_time_s, float) and isinstance(model.ttft_timeout_s, float)
    assert model.abort_at(2.5) == 32.5


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_concurrency": 0}, "--max-concurrency 0: expected an integer >= 1; fix:"),
        ({"max_concurrency": 2.0}, "--max-concurrency 2.0: expected an integer >= 1"),
        ({"max_concurrency": True}, "--max-concurrency True: expected an integer >= 1"),
        ({"concurrency": -3}, "--concurrency -3: expected an integer >= 1"),
        ({"concurrency": 2, "think_time_s": -1}, "--think-time-s -1: expected a finite number"),
        ({"concurrency": 2, "think_time_s": math.inf}, "--think-time-s inf: expected a finite"),
        ({"ttft_timeout_s": 0}, "--ttft-timeout-s 0: expected a finite number of seconds > 0"),
        ({"ttft_timeout_s": math.nan}, "--ttft-timeout-s nan: expected a finite number"),
        ({"max_concurrency": 4, "concurrency": 4}, "expected no --max-concurrency with --conc"),
        ({"think_time_s": 1.0}, "--think-time-s 1.0: expected a think time only with --conc"),
    ],
)
def test_client_model_errors(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ClientModel(**kwargs)  # type: ignore[arg-type]
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value) and "; fix: " in str(caught.value)


def test_closed_loop_refuses_generated_arrivals() -> None:
    ClientModel(concurrency=2).check_arrivals(parse_arrivals("recorded"))
    ClientModel(max_concurrency=2).check_arrivals(parse_arrivals("poisson", rate=1.0))
    with pytest.raises(ConfigError, match=r"^--arrivals 'poisson': expected recorded with --conc"):
        ClientModel(concurrency=2).check_arrivals(parse_arrivals("poisson", rate=1.0))


# --- --max-concurrency ----------------------------------------------------------------------------


def test_no_cap_returns_the_arrivals_and_reads_no_finish() -> None:
    def never() -> Iterator[float]:
        raise AssertionError("no finish should be read")
        yield 0.0  # pragma: no cover

    assert list(dispatch_times([0.0, 1.0, 2.0], never(), max_concurrency=None)) == [0.0, 1, 2]


def test_max_concurrency_hand_worked() -> None:
    # Two slots. Requests due 0, 0, 0, 1, 9; finishes (in time order) 2, 3, 5, 6.
    # r0, r1 go at once; r2 waits for the 1st finish (2); r3 for the 2nd (3); r4 is due at 9,
    # after the 3rd finish (5), so it goes on time.
    due = [0.0, 0.0, 0.0, 1.0, 9.0]
    sent = list(dispatch_times(due, [2.0, 3.0, 5.0, 6.0], max_concurrency=2))
    assert sent == [0.0, 0.0, 2.0, 3.0, 9.0]
    assert [s - d for s, d in zip(sent, due, strict=True)] == [0.0, 0.0, 2.0, 2.0, 0.0]


def test_max_concurrency_driven_lazily_by_a_fake_engine() -> None:
    # A fake engine: every request takes 2 s from the moment it is sent; next() on the finish
    # iterator "runs the engine" to its next finish. Cap 2, five requests due 0, 0, 0, 0, 1.
    service, in_flight = 2.0, []

    def finishes() -> Iterator[float]:
        while in_flight:
            yield heapq.heappop(in_flight)

    sent = []
    for time in dispatch_times([0.0, 0.0, 0.0, 0.0, 1.0], finishes(), max_concurrency=2):
        sent.append(time)
        heapq.heappush(in_flight, time + service)
    # r0, r1 at 0 (finish 2, 2); r2, r3 at 2 (finish 4, 4); r4, due at 1, waits until 4.
    assert sent == [0.0, 0.0, 2.0, 2.0, 4.0]


# --- --concurrency (closed loop) ----------------------------------------------------------------


def test_closed_loop_hand_worked() -> None:
    # Three users, no think time; finishes 1, 4, 4, 7: request k >= 3 arrives at finish k-3.
    got = list(closed_loop_arrivals(6, [1.0, 4.0, 4.0, 7.0], concurrency=3))
    assert got == [0.0, 0.0, 0.0, 1.0, 4.0, 4.0]


def test_closed_loop_with_think_time_and_a_fake_engine() -> None:
    # Two users, 3 s service, 1 s think: 0, 0 -> finish 3, 3 -> 4, 4 -> finish 7, 7 -> 8, 8.
    service, in_flight = 3.0, []

    def finishes() -> Iterator[float]:
        while in_flight:
            yield heapq.heappop(in_flight)

    arrivals = []
    for time in closed_loop_arrivals(6, finishes(), concurrency=2, think_time_s=1.0):
        arrivals.append(time)
        heapq.heappush(in_flight, time + service)
    assert arrivals == [0.0, 0.0, 4.0, 4.0, 8.0, 8.0]


def test_fewer_requests_than_users_read_no_finish() -> None:
    assert list(closed_loop_arrivals(2, [], concurrency=8)) == [0.0, 0.0]


def test_finish_contract_violations_are_value_errors() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        list(closed_loop_arrivals(4, [3.0, 2.0], concurrency=2))
    with pytest.raises(ValueError, match="finite"):
        list(dispatch_times([0.0, 0.0], [math.nan], max_concurrency=1))
    with pytest.raises(ValueError, match="request 2 needs finish 1, but only 1 finishes came"):
        list(closed_loop_arrivals(3, [1.0], concurrency=1))


def test_closed_loop_option_errors_are_raised_at_call_time() -> None:
    with pytest.raises(ConfigError, match="--concurrency 0"):
        closed_loop_arrivals(3, [], concurrency=0)
    with pytest.raises(ConfigError, match="num_requests 0"):
        closed_loop_arrivals(0, [], concurrency=1)
    with pytest.raises(ConfigError, match="--max-concurrency 0"):
        dispatch_times([0.0], [], max_concurrency=0)


def test_docstring_examples_run() -> None:
    imported = importlib.import_module("tracekit.workloads.client")
    result = doctest.testmod(imported, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
