"""The committed real-vLLM fixtures against the embedded engine: runs in CI without vLLM.

Each bundle under ``traces/vllm-fixtures/vllm-<version>/`` was recorded from the unmodified vLLM
scheduler (``tracekit.vllm.fixtures``). The embedded engine, configured from the fixture's
manifest, must reproduce every step, scheduled-token map, decision and request outcome.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from engine_helpers import StepWatcher

from tracekit.engine import BuiltinHost, run_engine
from tracekit.engine.config import recorded_engine_config
from tracekit.engine.outputs import StepRecord
from tracekit.engine.request import engine_requests
from tracekit.engine.scheduler import make_vllm_scheduler
from tracekit.real_engine.fidelity import compare_fidelity
from tracekit.recording.sim import record_sim
from tracekit.trace.validate import validate_trace
from tracekit.vllm.fixtures import (
    ASYNC_FIXTURES,
    FIXTURE_VERSIONS,
    FIXTURES,
    FIXTURES_DIR,
    PREFIX_CACHING_FIXTURES,
    SHARED_PREFIX_TABLE,
    SYNTHETIC_CSV,
    fixture_dir,
    shared_prefix_requests,
    synthetic_csv,
)

ROOT = Path(__file__).resolve().parents[1]
CASES = [(version, name) for version, names in FIXTURE_VERSIONS.items() for name in names]


def manifest_of(version: str, name: str) -> dict:
    return json.loads((fixture_dir(ROOT, version, name) / "manifest.json").read_text("utf-8"))


@pytest.mark.parametrize(("version", "name"), CASES, ids=[f"{v}-{n}" for v, n in CASES])
def test_embedded_engine_matches_the_real_scheduler(
    version: str, name: str, tmp_path: Path
) -> None:
    fixture = FIXTURES[name]
    manifest = manifest_of(version, name)
    config = recorded_engine_config(manifest["engine_config"])
    assert config == fixture.engine_config(config.vllm_version)
    run = fixture.sim_run(ROOT, config.vllm_version)
    assert manifest["workload"]["sha256"] == run.workload.sha256
    sim = record_sim(run, tmp_path / "sim", record_scheduled=True)
    report = compare_fidelity(sim, fixture_dir(ROOT, version, name))
    assert report.matched, report.render()
    assert report.compared["steps"] > 0
    assert report.compared["requests"] == run.workload.num_requests
    if name in PREFIX_CACHING_FIXTURES:
        # The fixtures with prefix caching on carry the real scheduler's cache hits: compared
        # per step, per admission and per request.
        assert report.compared["cache_hit_steps"] == report.compared["steps"], report.notes
        assert report.compared["admissions"] > 0


@pytest.mark.parametrize(("version", "name"), CASES, ids=[f"{v}-{n}" for v, n in CASES])
def test_fixture_is_a_valid_real_vllm_bundle(version: str, name: str) -> None:
    folder = fixture_dir(ROOT, version, name)
    assert validate_trace(folder).status == "ok"
    manifest = manifest_of(version, name)
    assert manifest["engine"] == f"vllm-{version}"
    assert manifest["engine_config"]["vllm_version"] == ".".join(version.split(".")[:2])
    assert manifest["strategy"] == "builtin" and manifest["host_path"] == "builtin"
    vllm = manifest["vllm"]
    assert vllm["version"] == version
    assert vllm["recorder"]["shim"] is False
    assert vllm["cache_config"]["enable_prefix_caching"] is bool(
        FIXTURES[name].config.get("enable_prefix_caching")
    )
    is_async = bool(FIXTURES[name].config["async_scheduling"])
    assert vllm["scheduler_config"]["async_scheduling"] is is_async
    assert vllm["scheduler_class"].endswith(".AsyncScheduler" if is_async else ".Scheduler")
    assert recorded_engine_config(manifest["engine_config"]).async_scheduling is is_async
    assert vllm["scheduler_config"]["policy"] == FIXTURES[name].scheduling_policy
    assert vllm["cache_config"]["num_gpu_blocks"] == FIXTURES[name].config["num_blocks"]
    assert vllm["model"]["weights"] is None
    assert (folder / "scheduled.parquet").is_file()
    if name in PREFIX_CACHING_FIXTURES:
        assert manifest["schema_version"] == 2 and (folder / "admissions.parquet").is_file()
    # Sources are repository-relative, so the manifests hold nothing of the recording machine.
    assert not Path(manifest["workload"]["source"]).is_absolute()


def run_counting_hits(requests, config):  # type: ignore[no-untyped-def]
    """Run the engine; return the result, the prefix-cache hits (tokens) and the evictions."""
    made: list = []
    hits = [0]

    def factory(c, h, d):  # type: ignore[no-untyped-def]
        scheduler = make_vllm_scheduler(c, h, d)
        made.append(scheduler)
        return scheduler

    def on_step(record: StepRecord) -> None:
        hits[0] += sum(getattr(made[0], "step_cache_hits", {}).values())

    observer = StepWatcher(on_step)
    result = run_engine(requests, config, BuiltinHost(), observer, scheduler_factory=factory)
    return result, hits[0], getattr(made[0].block_pool, "num_evicted", 0)


def test_fixtures_exercise_what_they_claim() -> None:
    """Pressure everywhere; chunked prefill, multi-victim cascades and self-preemption."""
    for name, fixture in FIXTURES.items():
        config = fixture.engine_config()
        workload = fixture.load_workload(ROOT)
        requests = engine_requests(workload)
        result, hits, evicted = run_counting_hits(requests, config)
        if name in PREFIX_CACHING_FIXTURES:
            # Prefix caching: hits, and cached blocks evicted on reuse (its kind of pressure;
            # the Mooncake slice's short outputs preempt nothing).
            assert hits > 0 and evicted > 0, name
        if not name.startswith("mooncake-apc"):
            assert result.num_decisions >= 4, name
        prompts = {r.request_id: r.prompt_tokens for r in requests}
        chunks = sum(
            1
            for step in result.steps
            for rid, n in step.num_scheduled_tokens.items()
            if 1 < n < prompts[rid]
        )
        assert chunks > 0, name
        # The cascade claims are the synchronous synthetic fixtures' (async ones have fewer).
        if name.startswith("synthetic") and name not in ASYNC_FIXTURES:
            cascades: dict[tuple[int, str], int] = {}
            for d in result.decisions:
                key = (d.step, d.requesting_request_id)
                cascades[key] = cascades.get(key, 0) + 1
            assert max(cascades.values()) >= 3, name
            assert sum(1 for n in cascades.values() if n >= 2) >= 3, name
            assert any(d.victim_id == d.requesting_request_id for d in result.decisions), name


def test_synthetic_workload_is_the_generators_output() -> None:
    assert (ROOT / SYNTHETIC_CSV).read_text("utf-8") == synthetic_csv()


def test_shared_prefix_workload_is_the_generators_output() -> None:
    frame = pl.read_parquet(ROOT / SHARED_PREFIX_TABLE)
    assert frame.to_dicts() == shared_prefix_requests()


def test_fixture_inventory_and_size() -> None:
    base = ROOT / FIXTURES_DIR
    found = {
        (path.parent.name.removeprefix("vllm-"), path.name)
        for path in base.glob("vllm-*/*")
        if path.is_dir()
    }
    assert found == set(CASES)
    total = sum(path.stat().st_size for path in base.rglob("*") if path.is_file())
    # 36 bundles of 30 to 65 kB (the async-scheduling fixtures took it past 800 kB, the
    # eight multi-turn session fixtures and the re-recorded cache hits to 1.75 MB).
    assert total < 1_900_000, f"fixtures grew to {total} bytes; keep them small"


def test_the_versions_differ_where_the_fixtures_say() -> None:
    """0.33's PRIORITY self-preemption rule: the 0.32 rules miss the 0.33 fixture."""
    name = "synthetic-priority"
    fixture = FIXTURES[name]
    requests = engine_requests(fixture.load_workload(ROOT))
    steps = {}
    for release in ("0.32", "0.33"):
        result = run_engine(requests, fixture.engine_config(release), BuiltinHost())
        steps[release] = [s.num_scheduled_tokens for s in result.steps]
    assert steps["0.32"] != steps["0.33"]


def test_async_fixtures_differ_from_their_synchronous_twins() -> None:
    """Each async fixture schedules differently from the same run with async scheduling off."""
    for name in ASYNC_FIXTURES:
        fixture = FIXTURES[name]
        requests = engine_requests(fixture.load_workload(ROOT))
        config = fixture.engine_config()
        steps = {}
        for is_async in (True, False):
            run_config = dataclasses.replace(config, async_scheduling=is_async)
            result = run_engine(requests, run_config, BuiltinHost(), check_consistency=True)
            steps[is_async] = [s.num_scheduled_tokens for s in result.steps]
        assert steps[True] != steps[False], name
