"""Client request order and output-length caps, against hand-worked tables.

See docs/workloads.md, "Request order: apply_order(workload, order)" and
docs/workloads.md, "Output lengths: apply_max_tokens(workload, max_tokens)".
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

from tracekit.errors import ConfigError
from tracekit.workloads import Workload, workload_schema
from tracekit.workloads.arrivals import apply_arrivals
from tracekit.workloads.order import OrderKind, apply_order, parse_order
from tracekit.workloads.output_lengths import apply_max_tokens


def make_workload(
    prompts: list[int],
    arrivals: list[float],
    outputs: list[int] | None = None,
    *,
    prefix: bool = False,
) -> Workload:
    n = len(prompts)
    outputs = outputs if outputs is not None else [10 + i for i in range(n)]
    columns = {
        "request_id": [f"r{i}" for i in range(n)],
        "arrival_s": arrivals,
        "prompt_tokens": prompts,
        "output_tokens": outputs,
        "max_tokens": [max(o, 50) for o in outputs],
        "priority": list(range(n)),
    }
    if prefix:
        columns["prefix_hash_ids"] = [[i] for i in range(n)]
    frame = pl.DataFrame(columns, schema=workload_schema(prefix_hash_ids=prefix))
    return Workload("w", Path("w.csv"), "0" * 64, "csv", {}, frame)


def ids_times(workload: Workload) -> list[tuple[str, float, int]]:
    frame = workload.frame
    return list(zip(frame["request_id"], frame["arrival_s"], frame["prompt_tokens"], strict=True))


def test_ascending_keeps_the_arrival_times_and_moves_the_requests() -> None:
    workload = make_workload([30, 10, 20], [0.0, 1.0, 5.0])
    out = apply_order(workload, "ascending")
    assert ids_times(out) == [("r1", 0.0, 10), ("r2", 1.0, 20), ("r0", 5.0, 30)]
    # Requests move whole: output length, cap and priority follow the id.
    assert out.frame["output_tokens"].to_list() == [11, 12, 10]
    assert out.frame["priority"].to_list() == [1, 2, 0]
    assert out.options == {"order": {"kind": "ascending", "seed": None}}


def test_descending_and_ties_are_stable_both_ways() -> None:
    workload = make_workload([20, 10, 20, 10], [0.0, 0.5, 0.5, 2.0])
    up = apply_order(workload, "ascending")
    assert ids_times(up) == [("r1", 0.0, 10), ("r3", 0.5, 10), ("r0", 0.5, 20), ("r2", 2.0, 20)]
    down = apply_order(workload, "descending")
    assert ids_times(down) == [
        ("r0", 0.0, 20),
        ("r2", 0.5, 20),
        ("r1", 0.5, 10),
        ("r3", 2.0, 10),
    ]


def test_recorded_changes_nothing_but_the_record() -> None:
    workload = make_workload([30, 10, 20], [0.0, 1.0, 5.0])
    out = apply_order(workload, "recorded")
    assert_frame_equal(out.frame, workload.frame)
    assert out.options["order"] == {"kind": "recorded", "seed": None}


def test_shuffled_is_a_seeded_permutation_on_the_same_times() -> None:
    prompts = list(range(1, 41))
    times = [0.25 * i for i in range(40)]
    workload = make_workload(prompts, times, prefix=True)
    one = apply_order(workload, "shuffled:3")
    again = apply_order(workload, "shuffled:3")
    other = apply_order(workload, "shuffled:4")
    assert one.frame.write_ipc(None).getvalue() == again.frame.write_ipc(None).getvalue()
    assert one.frame["arrival_s"].to_list() == times
    assert sorted(one.frame["prompt_tokens"]) == prompts
    assert one.frame["prompt_tokens"].to_list() != prompts
    assert one.frame["prompt_tokens"].to_list() != other.frame["prompt_tokens"].to_list()
    # prefix hashes travel with their request
    assert_series_equal(
        one.frame.select(pl.col("prefix_hash_ids").list.first() + 1)["prefix_hash_ids"],
        one.frame["prompt_tokens"].alias("prefix_hash_ids"),
        check_dtypes=False,
    )
    assert one.options["order"] == {"kind": "shuffled", "seed": 3}


def test_order_then_arrivals_equals_arrivals_then_order() -> None:
    workload = make_workload([30, 10, 20, 5], [0.0, 1.0, 5.0, 6.0])
    a = apply_arrivals(apply_order(workload, "ascending"), "constant", rate=2.0)
    b = apply_order(apply_arrivals(workload, "constant", rate=2.0), "ascending")
    assert_frame_equal(a.frame, b.frame)
    assert ids_times(a) == [("r3", 0.5, 5), ("r1", 1.0, 10), ("r2", 1.5, 20), ("r0", 2.0, 30)]


def test_parse_order() -> None:
    assert parse_order(" Descending ").kind is OrderKind.DESCENDING
    assert parse_order("SHUFFLED:-2").seed == -2


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("ascnding", "--order 'ascnding': expected one of recorded, ascending, descending, "
         "shuffled:<seed> (did you mean 'ascending'?); fix: pass --order ascending"),
        ("shuffled", "(did you mean 'shuffled:<seed>'?)"),
        ("shuffled:x", "--order shuffled:<seed> 'x': expected an integer seed"),
        ("random", "expected one of recorded"),
        ("ascending:1", "--order 'ascending:1'"),
    ],
)  # fmt: skip
def test_order_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_order(text)
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value) and "fix:" in str(caught.value)


# --- output lengths -----------------------------------------------------------------------------


def test_max_tokens_rule_caps_real_lengths_and_sets_the_cap() -> None:
    workload = make_workload([8, 8, 8], [0.0, 1.0, 2.0], outputs=[5, 300, 4000])
    out = apply_max_tokens(workload, 2048)
    assert out.frame["output_tokens"].to_list() == [5, 300, 2048]
    assert out.frame["max_tokens"].to_list() == [2048, 2048, 2048]
    assert out.options == {"client_max_tokens": 2048, "num_capped": 1}
    assert_frame_equal(
        out.frame.drop("output_tokens", "max_tokens"),
        workload.frame.drop("output_tokens", "max_tokens"),
    )


def test_max_tokens_rule_replaces_recorded_caps_even_when_larger() -> None:
    workload = make_workload([8, 8], [0.0, 1.0], outputs=[5, 60])  # caps 50 and 60
    out = apply_max_tokens(workload, 100)
    assert out.frame["max_tokens"].to_list() == [100, 100]
    assert out.frame["output_tokens"].to_list() == [5, 60]
    assert out.options["num_capped"] == 0


def test_max_tokens_none_keeps_the_column() -> None:
    workload = make_workload([8, 8], [0.0, 1.0], outputs=[5, 60])
    out = apply_max_tokens(workload, None)
    assert_frame_equal(out.frame, workload.frame)
    assert out.options == {"client_max_tokens": None, "num_capped": 0}


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "2048"])
def test_max_tokens_errors(bad: object) -> None:
    workload = make_workload([8], [0.0])
    with pytest.raises(ConfigError, match=r"^--max-tokens .*: expected an integer >= 1; fix: "):
        apply_max_tokens(workload, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("module", ["order", "output_lengths"])
def test_docstring_examples_run(module: str) -> None:
    imported = importlib.import_module(f"tracekit.workloads.{module}")
    result = doctest.testmod(imported, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
