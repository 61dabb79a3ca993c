"""The report's prefix-cache section: hit rate over time and recomputed tokens split.

Checked on the hand-worked run of tests/test_trace_v2_cache.py (docstring there): hits of 8
tokens at step 0 (A and B admitted: 10 + 2 tokens computed) and 12 at step 12 (B resumed: 5
computed); B threw away 16 computed tokens, 12 of which came back from the cache.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
from report_helpers import shared_results
from trace_helpers import (
    HAND_CACHE_CONFIG,
    engine_config,
    hand_cache_requests,
    record_engine_bundle,
)

from tracekit.qualify import load_results
from tracekit.qualify.frames import cache_hit_frame, cache_split_frame
from tracekit.qualify.reporting import report_inputs
from tracekit.qualify.verdicts import qualification_from_results
from tracekit.report.charts import cache_hit_rate_chart
from tracekit.report.sections import build_sections


@dataclasses.dataclass
class _Results:
    """What the cache frames read of a results folder: its cells and bundle paths."""

    cells: pl.DataFrame

    def bundle(self, name: str) -> Path:
        return Path(name)

    def reference_runs(self, strategies: list[str]) -> pl.DataFrame:
        return self.cells.filter(pl.col("strategy").is_in(strategies))


@pytest.fixture(scope="module")
def hand_results(tmp_path_factory: pytest.TempPathFactory) -> _Results:
    out = record_engine_bundle(
        tmp_path_factory.mktemp("cache") / "run",
        engine_config(**HAND_CACHE_CONFIG),
        hand_cache_requests(),
    )
    cells = pl.DataFrame({"bundle": [str(out)], "repeat": [0], "strategy": ["builtin"]})
    return _Results(cells)


def test_hit_rate_over_time_by_hand(hand_results: _Results) -> None:
    frame = cache_hit_frame(hand_results, ["builtin"])  # type: ignore[arg-type]
    assert frame is not None
    # 13 steps 0.02 s apart, each in its own bucket; only the two admitting steps have a rate.
    assert frame.height == 13
    rated = frame.filter(pl.col("hit_rate").is_not_null())
    assert rated.select("time_s", "cache_hit_tokens", "prefill_tokens", "hit_rate").rows() == [
        (0.0, 8, 12, 0.4),
        (0.24, 12, 5, round(12 / 17, 4)),
    ]
    chart = cache_hit_rate_chart(frame, ["builtin"]).to_dict()
    assert chart["encoding"]["y"]["field"] == "hit_rate"


def test_recomputed_split_by_hand(hand_results: _Results) -> None:
    split = cache_split_frame(hand_results, ["builtin"])  # type: ignore[arg-type]
    assert split is not None
    assert split.row(0, named=True) == {
        "strategy": "builtin",
        "recomputed_tokens": 16.0,
        "from_cache_tokens": 12.0,
        "truly_recomputed_tokens": 4.0,
        "cache_hit_tokens": 20.0,
    }


def test_section_appears_only_with_cache_hits(
    hand_results: _Results, tmp_path_factory: pytest.TempPathFactory
) -> None:
    results = load_results(shared_results(tmp_path_factory))
    view = report_inputs(results, qualification_from_results(results))
    # The shared results run with vLLM's defaults (prefix caching on), so preempted requests
    # hit the cache when they resume and the section is there; without hits it is left out.
    assert view.cache_hits is not None and view.cache_split is not None
    assert "prefix-cache" in [s.anchor for s in build_sections(view)]
    without = dataclasses.replace(view, cache_hits=None, cache_split=None)
    assert "prefix-cache" not in [s.anchor for s in build_sections(without)]
    with_cache = dataclasses.replace(
        view,
        cache_hits=cache_hit_frame(hand_results, ["builtin"]),  # type: ignore[arg-type]
        cache_split=cache_split_frame(hand_results, ["builtin"]),  # type: ignore[arg-type]
    )
    sections = build_sections(with_cache)
    names = [s.anchor for s in sections]
    assert names[names.index("recompute") + 1] == "prefix-cache"
    cache = sections[names.index("prefix-cache")]
    assert "prefix-cache-hit-rate" in cache.charts
    assert "truly recomputed" in "".join(cache.body)
