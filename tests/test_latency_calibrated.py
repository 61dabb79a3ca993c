"""The calibrated step-time model: least squares by hand, recovery, refusals, JSON round trip."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest

from tracekit.errors import ConfigError
from tracekit.latency.calibrated import (
    FORMAT,
    MIN_STEPS,
    TERMS,
    CalibratedModel,
    FitError,
    fit_step_time_model,
    load_calibrated_model,
    nnls,
    prefill_attention_pairs,
)
from tracekit.latency.interface import StepShape

TRUE = (0.004, 8e-5, 3e-4, 2e-7, 1e-4, 3e-8)


def true_time(s: StepShape) -> float:
    c0, c1, c2, c3, c4, c5 = TRUE
    # The attention pairs by hand, not by the function under test.
    pairs = sum(c.num_tokens * c.num_computed_tokens for c in s.prefill_chunks) + sum(
        c.num_tokens * (c.num_tokens + 1) / 2 for c in s.prefill_chunks
    )
    return (
        c0
        + c1 * s.num_prefill_tokens
        + c2 * s.num_decode_seqs
        + c3 * s.kv_tokens_read
        + c4 * s.num_sequences
        + c5 * pairs
    )


def synthetic_steps(n: int, noise: float, seed: int = 3) -> list[tuple[StepShape, float]]:
    """Mixed steps: 0-3 prefill chunks (some with a prefix) and 0-32 decoding sequences."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        chunks = [
            (rng.randint(1, 2048), rng.choice([0, 0, rng.randint(0, 4000)]))
            for _ in range(rng.choice([0, 0, 1, 2, 3]))
        ]
        decode = [rng.randint(10, 4000) for _ in range(rng.randint(0 if chunks else 1, 32))]
        shape = StepShape.of(chunks, decode)
        rows.append((shape, true_time(shape) * (1 + rng.gauss(0, noise))))
    return rows


def steps_frame(
    rows: list[tuple[StepShape, float]], *, pairs: bool = True, duration: str = "duration_s"
) -> pl.DataFrame:
    """``rows`` as the frame a fit reads: the make-up columns (the pairs term unless
    ``pairs`` is False) and each step's time in column ``duration``."""
    columns = {
        "num_prefill_tokens": [s.num_prefill_tokens for s, _ in rows],
        "num_decode_seqs": [s.num_decode_seqs for s, _ in rows],
        "kv_tokens_read": [s.kv_tokens_read for s, _ in rows],
        "num_sequences": [s.num_sequences for s, _ in rows],
    }
    if pairs:
        columns["prefill_attention_pairs"] = [prefill_attention_pairs(s) for s, _ in rows]
    columns[duration] = [d for _, d in rows]
    return pl.DataFrame(columns)


def test_nnls_hand_worked():
    # Unconstrained: [[2, 1], [1, 2]] b = [4, 5] gives b = (1, 2), feasible.
    assert nnls([[2.0, 1.0], [1.0, 2.0]], [4.0, 5.0]) == pytest.approx([1.0, 2.0])
    # [[2, 1], [1, 2]] b = [5, 1] gives (3, -1); with b2 = 0 the optimum is 2 b1 = 5, b1 = 2.5.
    assert nnls([[2.0, 1.0], [1.0, 2.0]], [5.0, 1.0]) == pytest.approx([2.5, 0.0])


def test_fit_hand_worked_exact_line():
    # Durations exactly 1 ms + 10 us per prefill token + 100 us per decode seq
    # + 1 us per KV token read + 0 per sequence: recovered exactly, zero error.
    rows = []
    for i in range(60):
        shape = StepShape.of([(1 + 37 * i % 500, 13 * i % 300)] * (i % 3), [5 + i] * (1 + i % 7))
        t = (
            0.001
            + 1e-5 * shape.num_prefill_tokens
            + 1e-4 * shape.num_decode_seqs
            + 1e-6 * shape.kv_tokens_read
        )
        rows.append((shape, t))
    model = fit_step_time_model(rows)
    assert model.coefficients == pytest.approx((0.001, 1e-5, 1e-4, 1e-6, 0.0, 0.0), abs=1e-9)
    assert model.errors["holdout"]["mape_pct"] == pytest.approx(0.0, abs=1e-6)


def test_fit_recovers_known_coefficients_under_noise():
    model = fit_step_time_model(synthetic_steps(600, noise=0.02), seed=7)
    c = dict(zip(TERMS, model.coefficients, strict=True))
    assert c["intercept"] == pytest.approx(TRUE[0], rel=0.05)
    assert c["num_prefill_tokens"] == pytest.approx(TRUE[1], rel=0.02)
    assert c["kv_tokens_read"] == pytest.approx(TRUE[3], rel=0.05)
    assert c["prefill_attention_pairs"] == pytest.approx(TRUE[5], rel=0.05)
    # Decode sequences and sequences overlap (sequences = chunks + decode sequences): their sum
    # per decoding sequence is what the data pins down.
    assert c["num_decode_seqs"] + c["num_sequences"] == pytest.approx(TRUE[2] + TRUE[4], rel=0.05)
    held = model.errors["holdout"]
    assert held["num_steps"] == 120
    assert held["mape_pct"] < 2.5  # 2 % Gaussian noise: E|e| = 1.6 %
    assert held["p50_rel"] < held["p95_rel"] < 0.06
    assert model.fit["seed"] == 7
    assert model.fit["num_train"] + model.fit["num_holdout"] == 600


def test_fit_is_deterministic_for_a_seed_and_accepts_a_frame():
    rows = synthetic_steps(200, noise=0.05)
    frame = steps_frame(rows)
    a = fit_step_time_model(rows, seed=11)
    b = fit_step_time_model(frame, seed=11)
    assert a.coefficients == pytest.approx(b.coefficients, rel=1e-9)
    assert a.errors == b.errors
    assert fit_step_time_model(rows, seed=12).errors != a.errors


def test_refuses_too_few_steps():
    with pytest.raises(FitError, match=f"too few.*at least {MIN_STEPS}"):
        fit_step_time_model(synthetic_steps(MIN_STEPS - 1, noise=0.01))


def test_refuses_uniform_durations():
    rows = [(StepShape.of(decode=[100 + i]), 0.02) for i in range(100)]
    with pytest.raises(FitError, match="too uniform"):
        fit_step_time_model(rows)


def test_refuses_a_term_that_never_varies():
    # Decode-only steps: no prefill tokens ever, so their cost cannot be estimated.
    rng = random.Random(1)
    rows = []
    for _ in range(100):
        shape = StepShape.of(decode=[rng.randint(1, 3000)] * rng.randint(1, 32))
        rows.append((shape, true_time(shape)))
    with pytest.raises(FitError, match="num_prefill_tokens is 0 in every step"):
        fit_step_time_model(rows)


def test_refuses_a_rank_deficient_design():
    # Every step: one chunk of k tokens with k decode sequences, so prefill tokens, decode
    # sequences and sequences move together.
    rows = []
    for i in range(100):
        k = 1 + i % 20
        shape = StepShape.of([(k, 0)], [50] * k)
        rows.append((shape, 0.01 + 0.001 * k))
    with pytest.raises(FitError, match="rank-deficient"):
        fit_step_time_model(rows)


def test_refuses_bad_durations_and_missing_columns():
    rows = synthetic_steps(60, noise=0.01)
    rows[3] = (rows[3][0], 0.0)
    with pytest.raises(FitError, match="1 step"):
        fit_step_time_model(rows)
    with pytest.raises(ConfigError, match="lack column"):
        fit_step_time_model(pl.DataFrame({"duration_s": [1.0]}))


def test_save_load_round_trip(tmp_path):
    model = fit_step_time_model(synthetic_steps(100, noise=0.02), source="live.trace")
    path = model.save(tmp_path / "model.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT
    assert doc["version"] == 2
    assert doc["coefficients"]["prefill_attention_pairs"] > 0
    assert set(doc["fit"]["inputs"]) == {*TERMS[1:], "duration_s"}
    assert set(doc["errors"]) == {"train", "holdout"}
    loaded = load_calibrated_model(path)
    assert loaded.coefficients == model.coefficients
    assert loaded.errors == model.errors
    shape = StepShape.of([(300, 20)], [100, 200])
    assert loaded.step_time_s(shape) == model.step_time_s(shape)
    d = loaded.describe()
    assert d["kind"] == "calibrated"
    assert d["name"] == f"calibrated:{path}"


def test_load_refuses_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_calibrated_model(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="as JSON"):
        load_calibrated_model(bad)
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigError, match="not a step-time model"):
        load_calibrated_model(bad)
    bad.write_text(json.dumps({"format": FORMAT, "version": 9}))
    with pytest.raises(ConfigError, match="version 9"):
        load_calibrated_model(bad)
    coeffs = dict.fromkeys(TERMS, 0.0) | {"kv_tokens_read": -1.0}
    bad.write_text(json.dumps({"format": FORMAT, "version": 2, "coefficients": coeffs}))
    with pytest.raises(ConfigError, match="kv_tokens_read must be finite and >= 0"):
        load_calibrated_model(bad)
    # Version 1 had five terms: its files still load; a sixth term there is refused.
    bad.write_text(json.dumps({"format": FORMAT, "version": 1, "coefficients": coeffs}))
    with pytest.raises(ConfigError, match=r"exactly intercept, .*num_sequences$"):
        load_calibrated_model(bad)
    with pytest.raises(ConfigError, match="expected 6 coefficients"):
        CalibratedModel((1.0,))


def test_prefill_attention_pairs_hand_worked():
    # Chunk (3 after 0): tokens attend to 1, 2, 3 keys = 6. Chunk (2 after 10): 11 + 12 = 23.
    # Decodes read their context but are not prefill: 0.
    assert prefill_attention_pairs(StepShape.of([(3, 0)], [50])) == 6
    assert prefill_attention_pairs(StepShape.of([(3, 0), (2, 10)], [50, 7])) == 6 + 23
    assert prefill_attention_pairs(StepShape.of([], [50])) == 0


def test_version_1_files_load_with_no_pairs_term_and_time_by_totals(tmp_path):
    coeffs = dict(zip(TERMS[:5], (0.002, 1e-5, 1e-4, 1e-7, 5e-5), strict=True))
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "coefficients": coeffs}))
    model = load_calibrated_model(path)
    assert model.coefficients[5] == 0.0
    shape = StepShape.of([(100, 50)], [10, 20])
    # 0.002 + 100e-5 + 2e-4 + (150 + 11 + 21) * 1e-7 + 3 * 5e-5
    assert model.step_time_s(shape) == pytest.approx(0.002 + 1e-3 + 2e-4 + 182e-7 + 1.5e-4)
    assert model.step_time_totals_s(1, 100, 50, 2, 30) == pytest.approx(model.step_time_s(shape))
    # With a pairs term the time needs each chunk: the engine clock must build the shape.
    with_pairs = CalibratedModel((*model.coefficients[:5], 1e-9))
    assert with_pairs.step_time_totals_s is None
    pairs = 100 * 50 + 100 * 101 // 2
    assert with_pairs.step_time_s(shape) == pytest.approx(model.step_time_s(shape) + 1e-9 * pairs)


def test_a_frame_without_the_pairs_column_fits_five_terms():
    rows = synthetic_steps(300, noise=0.0)
    frame = steps_frame(
        [(s, d - TRUE[5] * prefill_attention_pairs(s)) for s, d in rows], pairs=False
    )
    model = fit_step_time_model(frame)
    assert model.fit["terms"] == list(TERMS[:5])
    assert model.coefficients[5] == 0.0
    assert model.coefficients[0] == pytest.approx(TRUE[0], rel=1e-6)
    assert model.coefficients[1] == pytest.approx(TRUE[1], rel=1e-6)


def test_absolute_weighting_recovers_coefficients_and_matches_the_total():
    # Exact data: both weightings recover the known coefficients.
    exact = synthetic_steps(300, noise=0.0)
    for weighting in ("relative", "absolute"):
        model = fit_step_time_model(exact, weighting=weighting)
        assert model.coefficients == pytest.approx(TRUE, rel=1e-6), weighting
        assert model.fit["weighting"] == weighting
    # A load-like tail: 10 % of the steps take 3 times as long (descheduled). The absolute fit,
    # whose residuals sum to zero with a free intercept, puts the training total back (up to
    # the non-negativity bounds: the intercept's stays slack, so its gradient, the residuals'
    # sum, is zero); the relative fit lands near the typical step and falls short of the total
    # by most of the tail's extra time.
    rng = random.Random(5)
    tail = [(s, d * (3.0 if rng.random() < 0.1 else 1.0)) for s, d in exact]
    frame = steps_frame(tail, duration="wall")
    absolute = fit_step_time_model(
        frame, weighting="absolute", target="wall", holdout_fraction=0.01
    )
    relative = fit_step_time_model(
        frame, weighting="relative", target="wall", holdout_fraction=0.01
    )
    assert absolute.coefficients[0] > 0
    held = set(random.Random(0).sample(range(300), 3))
    train = [(s, d) for i, (s, d) in enumerate(tail) if i not in held]
    measured = sum(d for _, d in train)
    assert sum(absolute.step_time_s(s) for s, _ in train) == pytest.approx(measured, rel=1e-9)
    assert sum(relative.step_time_s(s) for s, _ in train) < 0.9 * measured
    assert absolute.fit["target"] == "wall"


def test_refuses_an_unknown_weighting():
    with pytest.raises(ConfigError, match="weighting must be one of relative, absolute"):
        fit_step_time_model(synthetic_steps(100, noise=0.01), weighting="squared")
