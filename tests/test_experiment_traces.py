"""The frozen-trace generator (docs/experiments.md, "Traces") and its verify mode."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import polars as pl
import pytest

from tracekit.errors import ConfigError
from tracekit.experiment.traces import (
    DEFAULT_POOL_MAX_PROMPT_TOKENS,
    DEFAULT_POOL_OPTIONS,
    DEFAULT_POOL_PATH,
    LengthPool,
    freeze_traces,
    generate_trace,
    load_default_pool,
    load_length_pool,
    trace_filename,
    verify_traces,
)
from tracekit.workloads import load_workload


def make_pool(n: int = 200, seed: int = 0) -> LengthPool:
    rng = random.Random(seed)
    return LengthPool(
        name="toy",
        source="toy.csv",
        sha256="0" * 64,
        options={},
        load_options=None,
        ids=tuple(f"row-{i}" for i in range(n)),
        prompt_tokens=tuple(rng.randint(1, 900) for _ in range(n)),
        output_tokens=tuple(rng.randint(1, 600) for _ in range(n)),
    )


@pytest.fixture
def pool_csv(tmp_path: Path) -> Path:
    """A canonical CSV whose lengths make the pool (arrivals unused)."""
    pool = make_pool(120, seed=5)
    frame = pl.DataFrame(
        {
            "request_id": list(pool.ids),
            "arrival_s": [float(i) for i in range(len(pool))],
            "prompt_tokens": list(pool.prompt_tokens),
            "output_tokens": list(pool.output_tokens),
        }
    )
    path = tmp_path / "pool.csv"
    frame.write_csv(path)
    return path


def original_generator(records: list[dict[str, object]], rate: float, seed: int, n: int) -> list:
    """The original freeze_traces algorithm, re-typed from docs/experiments.md, "Traces"."""
    rng = random.Random(seed)
    sampled = rng.sample(records, n)
    now, out = 0.0, []
    for i, record in enumerate(sampled):
        now += rng.expovariate(rate / 1000.0)
        out.append((f"mixed-{i:04d}", record["id"], max(1, min(int(record["output_tokens"]), 256)),
                    now, str(record["prompt_tokens"])))  # fmt: skip
    return out


def test_generator_draws_what_the_original_drew() -> None:
    pool = make_pool()
    records = [
        {"id": i, "prompt_tokens": p, "output_tokens": o}
        for i, p, o in zip(pool.ids, pool.prompt_tokens, pool.output_tokens, strict=True)
    ]
    document = generate_trace(pool, rate=3.8, seed=42, num_requests=50)
    ours = [
        (r["request_id"], r["metadata"]["original_id"], r["max_tokens"], r["arrival_time_ms"],
         r["metadata"]["actual_prompt_tokens"])
        for r in document["requests"]
    ]  # fmt: skip
    assert ours == original_generator(records, 3.8, 42, 50)
    assert list(document) == [
        "workload_name", "request_rate", "seed", "dataset_source", "frozen_at", "num_requests",
        "requests",
    ]  # fmt: skip
    assert document["frozen_at"] == "" and document["num_requests"] == 50
    assert list(document["requests"][0]) == [
        "request_id", "prompt", "max_tokens", "arrival_time_ms", "expected_output", "metadata",
    ]  # fmt: skip


def test_max_tokens_is_capped_at_256_and_at_least_one() -> None:
    pool = LengthPool("p", "p", "0" * 64, {}, None, ("a", "b", "c"), (5, 6, 7), (1, 256, 257))
    document = generate_trace(pool, rate=1.0, seed=0, num_requests=3)
    by_id = {r["metadata"]["original_id"]: r["max_tokens"] for r in document["requests"]}
    assert by_id == {"a": 1, "b": 256, "c": 256}
    capped = generate_trace(pool, rate=1.0, seed=0, num_requests=3, max_output_tokens=100)
    assert max(r["max_tokens"] for r in capped["requests"]) == 100


def test_rates_are_exact_time_scalings_with_identical_lengths(tmp_path: Path) -> None:
    traces = freeze_traces(make_pool(), tmp_path, rates=[2.0, 3.8, 5.7], seed=9, num_requests=80)
    documents = {rate: json.loads(path.read_text("utf-8")) for rate, path in traces.files.items()}
    base = documents[2.0]["requests"]
    for rate in (3.8, 5.7):
        requests = documents[rate]["requests"]
        assert [(r["request_id"], r["max_tokens"], r["metadata"]) for r in requests] == [
            (r["request_id"], r["max_tokens"], r["metadata"]) for r in base
        ]
        for ours, reference in zip(requests, base, strict=True):
            assert ours["arrival_time_ms"] * rate == pytest.approx(
                reference["arrival_time_ms"] * 2.0, rel=1e-12
            )


def test_same_inputs_same_bytes_and_seeds_differ(tmp_path: Path) -> None:
    pool = make_pool()
    one = freeze_traces(pool, tmp_path / "one", rates=[3.8], seed=42, num_requests=40)
    two = freeze_traces(pool, tmp_path / "two", rates=[3.8], seed=42, num_requests=40)
    other = freeze_traces(pool, tmp_path / "other", rates=[3.8], seed=43, num_requests=40)
    name = trace_filename("mixed", 3.8)
    assert name == "mixed_rate3.8.json"
    assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert one.manifest["hashes"] == two.manifest["hashes"] != other.manifest["hashes"]
    digest = hashlib.sha256((tmp_path / "one" / name).read_bytes()).hexdigest()
    assert one.manifest["hashes"][name] == digest
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text("utf-8"))
    assert manifest["seed"] == 42 and manifest["rates"] == [3.8]
    assert manifest["pool"]["num_rows"] == 200 and "frozen_at" in manifest


def test_trace_loads_as_a_vllm_workload(tmp_path: Path) -> None:
    pool = make_pool()
    traces = freeze_traces(pool, tmp_path, rates=[5.7], seed=1, num_requests=30)
    workload = load_workload(traces.files[5.7])
    document = json.loads(traces.files[5.7].read_text("utf-8"))
    assert workload.format == "vllm-workload" and workload.name == "mixed"
    frame = workload.frame
    assert frame.get_column("request_id").to_list() == [f"mixed-{i:04d}" for i in range(30)]
    expected_prompts = [int(r["metadata"]["actual_prompt_tokens"]) for r in document["requests"]]
    assert frame.get_column("prompt_tokens").to_list() == expected_prompts
    assert frame.get_column("arrival_s").to_list() == pytest.approx(
        [r["arrival_time_ms"] / 1000 for r in document["requests"]]
    )
    assert frame.get_column("output_tokens").to_list() == frame.get_column("max_tokens").to_list()


def test_verify_passes_and_detects_changes(tmp_path: Path, pool_csv: Path) -> None:
    pool = load_length_pool(pool_csv, max_prompt_tokens=700)
    assert pool.load_options == {} and max(pool.prompt_tokens) <= 700
    folder = tmp_path / "traces"
    freeze_traces(pool, folder, rates=[2.0, 3.8], seed=42, num_requests=20)
    report = verify_traces(folder)  # reloads the pool from the manifest
    assert report.ok and report.checked == 2
    assert report.render() == f"{folder}: all 2 trace hashes match"
    # A file edited on disk is reported.
    path = folder / "mixed_rate2.0.json"
    path.write_text(path.read_text("utf-8").replace("mixed-0000", "mixed-9999"), "utf-8")
    report = verify_traces(folder)
    assert not report.ok and list(report.mismatches) == ["mixed_rate2.0.json (on disk)"]
    assert "expected sha256" in report.render()
    # A different pool regenerates different files and is itself reported.
    other = verify_traces(folder, pool=make_pool(120, seed=6))
    assert {"pool", "mixed_rate3.8.json"} <= set(other.mismatches)


def test_verify_of_a_given_workload_pool_needs_the_pool(tmp_path: Path, pool_csv: Path) -> None:
    pool = load_length_pool(load_workload(pool_csv))
    assert pool.load_options is None
    # Not into tmp_path itself: that folder holds the pool, and no command writes there.
    traces = tmp_path / "traces"
    freeze_traces(pool, traces, rates=[1.0], seed=0, num_requests=10)
    with pytest.raises(ConfigError, match="pass the same pool"):
        verify_traces(traces)
    assert verify_traces(traces, pool=pool).ok


def test_bad_inputs_raise_one_line_errors(tmp_path: Path) -> None:
    pool = make_pool(10)
    with pytest.raises(ConfigError, match="between 1 and the pool's 10 rows"):
        generate_trace(pool, rate=1.0, seed=0, num_requests=11)
    with pytest.raises(ConfigError, match="rate must be > 0"):
        generate_trace(pool, rate=0.0, seed=0, num_requests=5)
    with pytest.raises(ConfigError, match="distinct"):
        freeze_traces(pool, tmp_path, rates=[1.0, 1.0])
    with pytest.raises(ConfigError, match="no trace manifest"):
        verify_traces(tmp_path / "missing")


def test_shipped_sharegpt_pool_matches_the_original_mean_prompt() -> None:
    pool = load_default_pool()
    described = pool.describe()
    assert described["num_rows"] == 13_227 >= 1000
    assert described["mean_prompt_tokens"] == pytest.approx(505.9, abs=0.05)
    assert described["options"]["max_prompt_tokens"] == DEFAULT_POOL_MAX_PROMPT_TOKENS
    assert described["load_options"] == DEFAULT_POOL_OPTIONS
    unfiltered = load_length_pool(DEFAULT_POOL_PATH, **DEFAULT_POOL_OPTIONS)
    assert unfiltered.describe()["mean_prompt_tokens"] == pytest.approx(2340.0, abs=0.1)


def test_the_default_pool_is_found_outside_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default pool is not a path relative to the working directory (it once was).

    It is read from the package (``tracekit/data``) and recorded by its stable name, so the
    traces are byte-identical whichever folder they are frozen from.
    """
    from click.testing import CliRunner

    from tracekit.cli import cli

    checkout = Path(__file__).resolve().parents[1]
    # The manifest's frozen_at is the wall clock; pinned, so two runs a second apart agree.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    args = ["experiment", "traces", "--num-requests", "20", "--rates", "2.0", "--out"]
    outs = {}
    for name, cwd in (("away", tmp_path), ("checkout", checkout)):
        monkeypatch.chdir(cwd)
        outs[name] = tmp_path / f"traces-{name}"
        result = CliRunner().invoke(cli, [*args, str(outs[name])])
        assert result.exit_code == 0, result.output
    files = {
        name: {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
        for name, folder in outs.items()
    }
    assert files["away"] == files["checkout"] and len(files["away"]) == 2
    manifest = json.loads(files["away"]["manifest.json"])
    assert manifest["pool"]["source"] == "traces/sharegpt-lengths/" + PACKAGED_NAME
    monkeypatch.chdir(tmp_path)
    verify = ["experiment", "traces", "--mode", "verify", "--out", str(outs["away"])]
    verify = CliRunner().invoke(cli, verify)
    assert verify.exit_code == 0, verify.output


PACKAGED_NAME = "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


def test_the_packaged_pool_and_its_licence_are_package_data() -> None:
    import tomllib

    from tracekit.experiment.traces import PACKAGED_POOL_PATH

    data = PACKAGED_POOL_PATH.parent
    assert PACKAGED_POOL_PATH.is_file() and (data / "LICENSE-sharegpt-lengths").is_file()
    # The checkout holding these tests (an installed package has no pyproject beside it).
    checkout = Path(__file__).resolve().parents[1]
    pyproject = tomllib.loads((checkout / "pyproject.toml").read_text("utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["tracekit.data"]
    assert {"*.csv", "LICENSE-*"} <= set(patterns)
