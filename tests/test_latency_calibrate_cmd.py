"""``tracekit calibrate``: a step-time model fitted to a bundle's measured steps.

Independent facts: a bundle recorded by the engine with a calibrated model of known
coefficients must give those coefficients back (exactly without noise, closely with seeded
noise), which also checks the make-up derived from the tables against the engine's own; a
hand-built bundle's make-up is worked out by hand; recordings with too few or identical steps
must be refused.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.latency.calibrated import TERMS, load_calibrated_model
from tracekit.latency.measured import calibrate_trace, step_makeup
from tracekit.trace import open_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
# 120 Azure requests on 300 blocks: the run preempts, so the make-up must handle recomputation.
SMALL = [
    "--workload", str(SAMPLE), "--limit", "120", "--num-blocks", "300", "--max-model-len",
    "4608", "--record-scheduled",
]  # fmt: skip
KNOWN = {
    "intercept": 0.006,
    "num_prefill_tokens": 0.00012,
    "num_decode_seqs": 0.0004,
    "kv_tokens_read": 3e-7,
    "num_sequences": 0.0002,
    # Per query-key pair of prefill attention: the make-up derives the pairs from the scheduled
    # rows (through preemptions and prefix-cache hits), and the engine's clock times each step
    # from its chunks (no totals shortcut with this term).
    "prefill_attention_pairs": 2e-9,
}


def _model_file(path: Path, coefficients: dict[str, float]) -> Path:
    path.write_text(
        json.dumps(
            {"format": "tracekit-step-time-model", "version": 2, "coefficients": coefficients}
        )
    )
    return path


def _record(out: Path, *args: str) -> None:
    result = CliRunner().invoke(cli, ["record", "sim", *SMALL, "--out", str(out), *args])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def known_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle whose step times are exactly the KNOWN linear model of each step's make-up."""
    folder = tmp_path_factory.mktemp("known")
    model = _model_file(folder / "known.json", KNOWN)
    _record(folder / "bundle", "--latency", f"calibrated:{model}")
    return folder / "bundle"


@pytest.fixture(scope="module")
def known_bundle_sync(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As ``known_bundle``, recorded with synchronous scheduling and no prefix caching (the set-up
    whose noisy fit docs/latency.md quotes)."""
    folder = tmp_path_factory.mktemp("known_sync")
    model = _model_file(folder / "known.json", KNOWN)
    _record(
        folder / "bundle",
        "--latency",
        f"calibrated:{model}",
        "--no-async-scheduling",
        "--no-prefix-caching",
    )
    return folder / "bundle"


def test_recovers_known_coefficients_exactly_without_noise(
    known_bundle: Path, tmp_path: Path
) -> None:
    decisions = open_trace(known_bundle).scan("decisions").collect()
    assert decisions["applied_victim_id"].is_not_null().sum() > 0  # recomputation is covered
    # Recorded with the defaults (prefix caching and async on): resumes hit the cache, so the
    # make-up must add each admission's hit to the context read (trace v2 admissions).
    admissions = open_trace(known_bundle).scan("admissions").collect()
    assert admissions["cached_tokens"].sum() > 0
    result = CliRunner().invoke(
        cli, ["calibrate", str(known_bundle), "--out", str(tmp_path / "m.json")]
    )
    assert result.exit_code == 0, result.output
    assert "held-out error MAPE 0.00 %" in result.output
    model = load_calibrated_model(tmp_path / "m.json")
    for term, value in zip(TERMS, model.coefficients, strict=True):
        assert value == pytest.approx(KNOWN[term], rel=1e-6), term


def test_recovers_known_coefficients_from_noisy_durations(
    known_bundle_sync: Path, tmp_path: Path
) -> None:
    known_bundle = known_bundle_sync
    # The same steps with 2 % seeded Gaussian noise on every measured duration.
    noisy = tmp_path / "noisy"
    noisy.mkdir()
    for item in known_bundle.iterdir():
        (noisy / item.name).write_bytes(item.read_bytes())
    steps = pl.read_parquet(noisy / "steps.parquet")
    rng = random.Random(7)
    noise = pl.Series([1.0 + rng.gauss(0.0, 0.02) for _ in range(steps.height)])
    steps.with_columns(pl.col("duration_s") * noise).write_parquet(noisy / "steps.parquet")

    result = calibrate_trace(noisy, tmp_path / "m.json", seed=3)
    got = dict(zip(TERMS, result.model.coefficients, strict=True))
    # The terms that carry most of the time come back within a few percent.
    for term in ("intercept", "num_prefill_tokens"):
        assert got[term] == pytest.approx(KNOWN[term], rel=0.05), term
    # A decoding sequence is also a sequence: their sum per decoding sequence is what the
    # decode-heavy steps pin down (each alone moved 5 % once the pairs term joined the fit).
    per_decode = got["num_decode_seqs"] + got["num_sequences"]
    assert per_decode == pytest.approx(KNOWN["num_decode_seqs"] + KNOWN["num_sequences"], rel=0.05)
    held = result.model.errors["holdout"]
    # 2 % Gaussian noise: mean |e| = 0.02 * sqrt(2 / pi) = 1.6 %; P95 of |e| = 0.02 * 1.96.
    assert held["mape_pct"] == pytest.approx(1.6, abs=0.3)
    assert held["p95_rel"] == pytest.approx(0.039, abs=0.008)
    assert result.model.fit["seed"] == 3 and result.model.fit["source"] == str(noisy)


def test_the_fitted_file_loads_with_latency_and_changes_times(
    known_bundle: Path, tmp_path: Path
) -> None:
    fitted = tmp_path / "fitted.json"
    calibrate_trace(known_bundle, fitted)
    _record(tmp_path / "roofline")
    _record(tmp_path / "calibrated", "--latency", f"calibrated:{fitted}")
    roofline = open_trace(tmp_path / "roofline").scan("steps").collect()
    calibrated = open_trace(tmp_path / "calibrated").scan("steps").collect()
    known = open_trace(known_bundle).scan("steps").collect()
    assert calibrated["duration_s"].to_list() != roofline["duration_s"].to_list()
    # The fitted model is the known one, so the run repeats the known bundle's times.
    assert calibrated["duration_s"].to_list() == pytest.approx(known["duration_s"].to_list())
    manifest = json.loads((tmp_path / "calibrated" / "manifest.json").read_text())
    assert manifest["latency"]["kind"] == "calibrated"
    assert manifest["latency"]["spec"] == f"calibrated:{fitted}"
    assert manifest["latency"]["errors"]["holdout"]["mape_pct"] < 1e-6


def test_make_up_of_a_hand_built_bundle(tmp_path: Path) -> None:
    # Request a: prompt 6 in chunks 4 + 2, preempted at step 2, then recomputed (7 tokens).
    # Request b: prompt 3, then decodes. Step 1's make-up: a's chunk 2 (computed 6) + b's 3.
    _record(tmp_path / "b")  # any bundle: its tables are replaced below
    bundle = tmp_path / "b"
    run_id = json.loads((bundle / "manifest.json").read_text())["run_id"]
    sched = pl.DataFrame(
        {
            "run_id": [run_id] * 6,
            "step": [0, 1, 1, 2, 3, 3],
            "request_id": ["a", "a", "b", "b", "a", "b"],
            "num_tokens": [4, 2, 3, 1, 7, 1],
        }
    )
    steps = pl.DataFrame(
        {
            "step": [0, 1, 2, 3],
            "duration_s": [0.01, 0.02, 0.03, None],
            "scheduled_prefill_tokens": [4, 5, 0, 7],
            "scheduled_decode_tokens": [0, 0, 1, 1],
        }
    )
    old = pl.read_parquet(bundle / "steps.parquet")
    full_steps = steps.join(old.drop(steps.columns[1:]), on="step", how="left").with_columns(
        pl.lit(run_id).alias("run_id")
    )
    full_steps.select(old.columns).cast(old.schema).write_parquet(bundle / "steps.parquet")
    old_sched = pl.read_parquet(bundle / "scheduled.parquet")
    sched.select(old_sched.columns).cast(old_sched.schema).write_parquet(
        bundle / "scheduled.parquet"
    )
    dec = pl.read_parquet(bundle / "decisions.parquet").head(1)
    dec.with_columns(pl.lit(2).alias("step"), pl.lit("a").alias("applied_victim_id")).cast(
        dec.schema
    ).write_parquet(bundle / "decisions.parquet")
    frame = step_makeup(open_trace(bundle))
    # Step 3 has no measured duration: left out. Step 2: b decodes with 4 computed after it.
    assert frame.select(
        "step", "num_prefill_tokens", "num_decode_seqs", "kv_tokens_read", "num_sequences"
    ).rows() == [(0, 4, 0, 4, 1), (1, 5, 0, 9, 2), (2, 0, 1, 4, 1)]


def test_the_preemption_resets_computed_tokens(tmp_path: Path) -> None:
    # Same as above with the measured step 3 kept: a restarts from zero (7), b has 5.
    _record(tmp_path / "b")
    bundle = tmp_path / "b"
    run_id = json.loads((bundle / "manifest.json").read_text())["run_id"]
    old_sched = pl.read_parquet(bundle / "scheduled.parquet")
    pl.DataFrame(
        {
            "run_id": [run_id] * 4,
            "step": [0, 1, 3, 3],
            "request_id": ["a", "a", "a", "b"],
            "num_tokens": [4, 2, 7, 5],
        }
    ).select(old_sched.columns).cast(old_sched.schema).write_parquet(bundle / "scheduled.parquet")
    dec = pl.read_parquet(bundle / "decisions.parquet").head(1)
    dec.with_columns(pl.lit(2).alias("step"), pl.lit("a").alias("applied_victim_id")).cast(
        dec.schema
    ).write_parquet(bundle / "decisions.parquet")
    frame = step_makeup(open_trace(bundle)).filter(pl.col("step") == 3)
    assert frame["kv_tokens_read"].to_list() == [7 + 5]


def _refused(args: list[str], out: Path, words: str) -> None:
    result = CliRunner().invoke(cli, ["calibrate", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0], result.output
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))


def test_refuses_too_few_steps(tmp_path: Path) -> None:
    CliRunner().invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--limit", "1", "--record-scheduled",
         "--out", str(tmp_path / "b")],
    )  # fmt: skip
    _refused([str(tmp_path / "b")], tmp_path / "m.json", "too few to fit")


def test_refuses_too_uniform_steps(tmp_path: Path) -> None:
    _record(tmp_path / "b", "--clock", "steps")  # every step lasts 20 ms
    _refused([str(tmp_path / "b")], tmp_path / "m.json", "too uniform to fit")


def test_refuses_a_bundle_without_the_scheduled_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["record", "sim", *SMALL[:-1], "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    _refused([str(tmp_path / "b")], tmp_path / "m.json", "--record-scheduled")


def test_refuses_a_missing_trace_and_a_bad_holdout(tmp_path: Path) -> None:
    _refused([str(tmp_path / "nothing")], tmp_path / "m.json", "no such file or folder")
    result = CliRunner().invoke(
        cli, ["calibrate", str(tmp_path), "--holdout", "1.5", "--out", str(tmp_path / "m.json")]
    )
    assert result.exit_code == 2 and "--holdout" in result.output


def test_a_live_bundle_is_fitted_on_its_step_shapes_cpu_time(
    known_bundle_sync: Path, tmp_path: Path
) -> None:
    # A bundle with a live recorder's step_shapes.parquet: its make-up, the KNOWN model's time
    # as each step's CPU time, and a wall clock that a loaded machine inflated (every fifth
    # step descheduled for 30 ms). The fit must use the CPU time, exactly.
    live = tmp_path / "live"
    live.mkdir()
    for item in known_bundle_sync.iterdir():
        (live / item.name).write_bytes(item.read_bytes())
    shapes = step_makeup(open_trace(live)).with_columns(cpu_s=pl.col("duration_s"))
    shapes = shapes.with_columns(
        duration_s=pl.col("cpu_s") + pl.when(pl.col("step") % 5 == 0).then(0.03).otherwise(0.0)
    )
    shapes.write_parquet(live / "step_shapes.parquet")
    result = calibrate_trace(live, tmp_path / "m.json")
    assert result.model.fit["target"] == "cpu_s"
    assert result.model.fit["weighting"] == "absolute"
    got = dict(zip(TERMS, result.model.coefficients, strict=True))
    for term in TERMS:
        assert got[term] == pytest.approx(KNOWN[term], rel=1e-6, abs=1e-12), term
    # Without the CPU time the same bundle is fitted from its tables, on the wall clock.
    shapes.drop("cpu_s").write_parquet(live / "step_shapes.parquet")
    wall = calibrate_trace(live, tmp_path / "w.json")
    assert wall.model.fit["target"] == "duration_s"
    assert wall.model.fit["weighting"] == "relative"


def _live_copy(bundle: Path, folder: Path, speed: float) -> Path:
    """``bundle`` as a live recording whose steps ran ``speed`` times the KNOWN model's time."""
    folder.mkdir()
    for item in bundle.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    shapes = step_makeup(open_trace(folder)).with_columns(
        cpu_s=pl.col("duration_s") * speed, duration_s=pl.col("duration_s") * speed
    )
    shapes.write_parquet(folder / "step_shapes.parquet")
    return folder


def test_pooled_recordings_average_their_speed(known_bundle_sync: Path, tmp_path: Path) -> None:
    # Two live runs of the same steps, the second 20 % slower (a machine whose speed wandered).
    # Least squares over both, in seconds, lands on the mean speed: 1.1 times KNOWN, up to the
    # hold-out split taking unequal shares of the two runs. (Decoding sequences and sequences
    # move together in most steps, and the attention terms trade weight with them; the step
    # times may not.)
    fast = _live_copy(known_bundle_sync, tmp_path / "fast", 1.0)
    slow = _live_copy(known_bundle_sync, tmp_path / "slow", 1.2)
    out = tmp_path / "m.json"
    result = CliRunner().invoke(cli, ["calibrate", str(fast), str(slow), "--out", str(out)])
    assert result.exit_code == 0, result.output
    model = load_calibrated_model(out)
    assert model.fit["recordings"] == [str(fast), str(slow)]
    single = calibrate_trace(fast, tmp_path / "one.json").model
    assert single.fit["num_steps"] > 500
    assert int(result.output.split()[1]) == 2 * single.fit["num_steps"]
    steps = pl.read_parquet(fast / "step_shapes.parquet")
    low, high = steps["kv_tokens_read"].min(), steps["kv_tokens_read"].max()
    assert f"kv_tokens_read {low:,}-{high:,} per step" in result.output
    c = dict(zip(TERMS, model.coefficients, strict=True))
    predicted = steps.select(
        sum(c[t] * (pl.col(t) if t != "intercept" else pl.lit(1.0)) for t in TERMS)
    ).to_series()
    assert predicted.sum() == pytest.approx(1.1 * steps["cpu_s"].sum(), rel=0.01)
    ratio = predicted / steps["cpu_s"]
    assert ratio.quantile(0.05) > 1.05 and ratio.quantile(0.95) < 1.15
    for term in ("intercept", "num_prefill_tokens"):
        assert c[term] == pytest.approx(1.1 * KNOWN[term], rel=0.05), (term, c)


def test_refuses_to_pool_recordings_of_two_kinds(known_bundle_sync: Path, tmp_path: Path) -> None:
    live = _live_copy(known_bundle_sync, tmp_path / "live", 1.0)
    _refused([str(live), str(known_bundle_sync)], tmp_path / "m.json", str(known_bundle_sync))
    result = CliRunner().invoke(cli, ["calibrate", "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 2 and "TRACES" in result.output
