"""Radix-cache hits in SGLang-mode traces, as vLLM mode records prefix-cache hits.

The engine's ``record sim --engine-mode sglang`` bundle of a fixture's scenario carries, per step
(``steps.cache_hit_tokens``), per admission (``admissions``) and per request
(``requests.num_cached_tokens`` for the first admission, ``resume_cached_tokens`` for the later
ones), the radix hits that SGLang 0.5.23's own recording of that scenario shows: the tokens each
admitted request found in the tree (``prefix_lens`` of its prefill batch, the recorder's step
file). ``inspect`` reads them back as the cache-hit rate, the report's cache section over time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from tracekit.qualify.frames import cache_hit_frame
from tracekit.recording.sim import SimRun, record_sim
from tracekit.sglang.compare import engine_config
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.sglang.record import read_sglang_scenario, read_sglang_steps
from tracekit.strategies import resolve_strategy
from tracekit.trace.inspect import inspect_trace
from tracekit.trace.validate import validate_trace

ROOT = Path(__file__).resolve().parents[1]


def _sim(tmp_path: Path, name: str) -> Path:
    fixture = FIXTURES[name]
    workload = fixture.load_workload(ROOT)
    config, _ = read_sglang_scenario(ROOT / FIXTURES_DIR / name)
    run = SimRun(workload, engine_config(config), resolve_strategy("builtin"), "typed")
    return record_sim(run, tmp_path / name)


def _sglang_hits(name: str) -> dict[int, int]:
    """Step -> radix hit tokens of its admissions, read from SGLang's step records."""
    hits: dict[int, int] = {}
    for step in read_sglang_steps(ROOT / FIXTURES_DIR / name):
        admitted = step.admissions
        if admitted:
            hits[step.step] = sum(r.cached_tokens for r in admitted)
    return hits


@pytest.mark.parametrize(
    "name", ["shared-prefix-radix-length-overlap", "mooncake-radix-length", "priority-preempt"]
)
def test_engine_trace_carries_sglangs_radix_hits(tmp_path: Path, name: str) -> None:
    bundle = _sim(tmp_path, name)
    assert validate_trace(bundle).status == "ok"
    steps = pl.read_parquet(bundle / "steps.parquet")
    engine = {s: h for s, h in steps.select("step", "cache_hit_tokens").iter_rows() if h}
    sglang = {s: h for s, h in _sglang_hits(name).items() if h}
    assert sglang, "the fixture is meant to hit the tree"
    assert engine == sglang
    # Per request: the first admission's hit and the later ones', as SGLang's bundle has them.
    columns = ["request_id", "num_cached_tokens", "resume_cached_tokens"]
    ours = pl.read_parquet(bundle / "requests.parquet").select(columns).sort("request_id")
    theirs = (
        pl.read_parquet(ROOT / FIXTURES_DIR / name / "requests.parquet")
        .select(columns)
        .sort("request_id")
    )
    assert ours.equals(theirs)
    admissions = pl.read_parquet(bundle / "admissions.parquet")
    assert admissions["cached_tokens"].sum() == sum(sglang.values())
    (report,) = inspect_trace(bundle)
    assert report["cache_hit_tokens"] == sum(sglang.values()) > 0
    assert report["cache_hit_rate"] > 0


def test_without_the_radix_cache_every_hit_is_zero(tmp_path: Path) -> None:
    bundle = _sim(tmp_path, "shared-prefix-noradix-length")
    steps = pl.read_parquet(bundle / "steps.parquet")
    requests = pl.read_parquet(bundle / "requests.parquet")
    assert steps["cache_hit_tokens"].null_count() == 0 and steps["cache_hit_tokens"].sum() == 0
    assert requests["num_cached_tokens"].sum() == 0
    assert not (bundle / "admissions.parquet").exists()


def test_sglangs_own_bundles_carry_the_hits_too() -> None:
    """The recorder writes them from SGLang's step records (and they validate)."""
    for name in ("shared-prefix-radix-length", "priority-high-overlap"):
        bundle = ROOT / FIXTURES_DIR / name
        assert validate_trace(bundle).status == "ok"
        steps = pl.read_parquet(bundle / "steps.parquet")
        recorded = {s: h for s, h in steps.select("step", "cache_hit_tokens").iter_rows() if h}
        assert recorded == {s: h for s, h in _sglang_hits(name).items() if h}


@dataclasses.dataclass
class _Results:
    """What the report's cache frames read of a results folder: its cells and bundle paths."""

    cells: pl.DataFrame

    def bundle(self, name: str) -> Path:
        return Path(name)

    def reference_runs(self, strategies: list[str]) -> pl.DataFrame:
        return self.cells.filter(pl.col("strategy").is_in(strategies))


def test_the_reports_cache_section_shows_them(tmp_path: Path) -> None:
    name = "shared-prefix-radix-length-overlap"
    bundle = _sim(tmp_path, name)
    cells = pl.DataFrame({"bundle": [str(bundle)], "repeat": [0], "strategy": ["builtin"]})
    frame = cache_hit_frame(_Results(cells), ["builtin"])  # type: ignore[arg-type]
    assert frame is not None
    assert frame["cache_hit_tokens"].sum() == sum(_sglang_hits(name).values())
    assert frame["hit_rate"].max() > 0
