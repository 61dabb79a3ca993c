"""The optional ``cancel_after_s`` column: recorded client cancels.

See docs/workloads.md, "Recorded cancels: apply_cancels(workload, cancels)".
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.errors import ConfigError, WorkloadError
from tracekit.workloads import (
    CANCEL_AFTER_S,
    IGNORE_EOS,
    OPTIONAL_SCHEMA,
    PREFIX_HASH_IDS,
    Workload,
    WorkloadRequest,
    apply_arrivals,
    apply_order,
    workload_schema,
)
from tracekit.workloads.cancels import apply_cancels
from tracekit.workloads.model import assemble_workload


def make_workload(*, prefix: bool = False, cancel: list[float | None] | None = None) -> Workload:
    columns: dict[str, list[object]] = {
        "request_id": ["r0", "r1", "r2"],
        "arrival_s": [0.0, 1.0, 2.0],
        "prompt_tokens": [30, 10, 20],
        "output_tokens": [5, 6, 7],
        "max_tokens": [5, 6, 7],
        "priority": [0, 0, 0],
    }
    if prefix:
        columns[PREFIX_HASH_IDS] = [[1], [2], [3]]
    if cancel is not None:
        columns[CANCEL_AFTER_S] = cancel  # type: ignore[assignment]
    schema = workload_schema(prefix_hash_ids=prefix, cancel_after_s=cancel is not None)
    return Workload("w", Path("w.csv"), "0" * 64, "csv", {}, pl.DataFrame(columns, schema=schema))


def test_schema_orders_the_optional_columns() -> None:
    assert OPTIONAL_SCHEMA.names() == [PREFIX_HASH_IDS, CANCEL_AFTER_S, IGNORE_EOS]
    assert workload_schema(cancel_after_s=True).names()[-1] == CANCEL_AFTER_S
    assert workload_schema(prefix_hash_ids=True, cancel_after_s=True).names()[-2:] == [
        PREFIX_HASH_IDS,
        CANCEL_AFTER_S,
    ]
    assert CANCEL_AFTER_S not in workload_schema()


def test_iter_requests_carries_the_cancel() -> None:
    workload = make_workload(prefix=True, cancel=[None, 2.5, None])
    requests = list(workload.iter_requests())
    assert requests[1] == WorkloadRequest("r1", 1.0, 10, 6, 6, 0, (2,), 2.5)
    assert requests[0].cancel_after_s is None
    assert next(make_workload().iter_requests()).cancel_after_s is None


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_cancel_values_are_workload_errors(bad: float) -> None:
    with pytest.raises(WorkloadError) as caught:
        make_workload(cancel=[None, bad, 1.0])
    assert "request 'r1', field 'cancel_after_s': expected a finite number of seconds > 0" in str(
        caught.value
    )


def test_a_cancel_column_in_the_wrong_place_or_type_is_refused() -> None:
    frame = make_workload(prefix=True).frame.with_columns(pl.lit(1.0).alias(CANCEL_AFTER_S))
    swapped = frame.select([*frame.columns[:6], CANCEL_AFTER_S, PREFIX_HASH_IDS])
    with pytest.raises(WorkloadError, match="expected workload columns"):
        Workload("w", Path("w.csv"), "0" * 64, "csv", {}, swapped)
    integer = frame.with_columns(pl.col(CANCEL_AFTER_S).cast(pl.Int64))
    with pytest.raises(WorkloadError, match="expected workload columns"):
        Workload("w", Path("w.csv"), "0" * 64, "csv", {}, integer)


def test_assemble_keeps_the_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x\n")
    frame = make_workload(cancel=[1.0, None, 3.0]).frame.reverse()
    workload = assemble_workload(path, format="csv", frame=frame, options={})
    assert workload.frame[CANCEL_AFTER_S].to_list() == [1.0, None, 3.0]


def test_apply_cancels_by_id_and_remove() -> None:
    workload = make_workload(prefix=True)
    out = apply_cancels(workload, {"r1": 2.5, "r2": 4})
    assert out.frame.columns[-2:] == [PREFIX_HASH_IDS, CANCEL_AFTER_S]
    assert out.frame[CANCEL_AFTER_S].to_list() == [None, 2.5, 4.0]
    assert out.options == {"num_cancels": 2}
    back = apply_cancels(out, None)
    assert_frame_equal(back.frame, workload.frame)
    assert back.options == {"num_cancels": 0}


def test_cancels_travel_with_requests_and_survive_generated_arrivals() -> None:
    workload = apply_cancels(make_workload(), {"r0": 9.0})
    ordered = apply_arrivals(apply_order(workload, "ascending"), "constant", rate=1.0)
    assert ordered.frame.select("request_id", "arrival_s", CANCEL_AFTER_S).rows() == [
        ("r1", 1.0, None),
        ("r2", 2.0, None),
        ("r0", 3.0, 9.0),
    ]


@pytest.mark.parametrize(
    ("cancels", "needle"),
    [
        ({"nope": 1.0}, "cancel_after_s 'nope': expected the id of a request of the workload"),
        ({"r0": 0}, "cancel_after_s['r0'] 0: expected a finite number of seconds > 0"),
        ({"r0": math.nan}, "cancel_after_s['r0'] nan: expected a finite number"),
        ({"r0": True}, "cancel_after_s['r0'] True: expected a finite number"),
    ],
)
def test_apply_cancels_errors(cancels: dict[str, float], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        apply_cancels(make_workload(), cancels)
    assert needle in str(caught.value)
