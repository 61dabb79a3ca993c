"""tracekit.measured: measured runs replayed, compared and calibrated (docs/latency.md).

The measured runs are the real client outputs of tests/data/bench-results/. The fit is checked
on runs whose "measured" latencies come from the engine under a known model and known
overheads (the fit must give them back), and the comparison and metrics on hand-worked
examples.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.engine.config import make_engine_config
from tracekit.errors import ConfigError
from tracekit.latency.calibrated import TERMS, CalibratedModel, load_calibrated_model
from tracekit.measured.calibrate import HUBER_DELTA, fit_from_runs
from tracekit.measured.compare import compare_metrics, compare_runs
from tracekit.measured.metrics import run_metrics
from tracekit.measured.runs import accuracy
from tracekit.measured.server_log import read_vllm_server_log
from tracekit.measured.simulate import RequestOverheads, simulate_run
from tracekit.measured.spread import LatencySpread, simulated_metrics, spread_requests
from tracekit.workloads.vllm_bench import read_vllm_bench_run

DATA = Path(__file__).parent / "data" / "bench-results"
RATE8 = DATA / "vllm-bench-rate8.json"
FAILURES = DATA / "vllm-bench-failures.json"
GUIDELLM = DATA / "guidellm-poisson.json"
LOG = DATA / "vllm-serve.log"
#: A step model of every term (the pairs term too), seconds per unit.
TRUTH = (0.004, 3e-6, 2e-4, 2e-7, 5e-5, 2e-9)
OVERHEADS = RequestOverheads(ttft_s=0.006, ttft_per_prompt_token_s=2e-6, e2e_s=0.001)
#: Every step term and the three overheads of TRUTH free (the default fit leaves the
#: per-scheduled-request term and the per-prompt-token overhead at 0).
FULL = {"terms": TERMS, "overheads": ("ttft_s", "ttft_per_prompt_token_s", "e2e_s")}


def _config(tmp_path: Path, coefficients: tuple[float, ...] = TRUTH, name: str = "m.json"):
    path = CalibratedModel(coefficients).save(tmp_path / name)
    return make_engine_config(
        block_size=32,
        num_blocks=256,
        max_model_len=4096,
        max_num_seqs=32,
        max_num_batched_tokens=2048,
        async_scheduling=False,
        latency=f"calibrated:{path}",
    )


def test_walk_prices_back_the_engines_own_step_times(tmp_path: Path) -> None:
    sim = simulate_run(read_vllm_bench_run(FAILURES), _config(tmp_path))
    busy = sim.steps.filter(~pl.col("idle"))
    priced = busy.select(sum(pl.col(t) * c for t, c in zip(TERMS, TRUTH, strict=True)))
    assert priced.to_series().to_list() == pytest.approx(busy["duration_s"].to_list(), rel=1e-12)
    assert busy["prefill_attention_pairs"].sum() > 0


def test_simulated_token_times_agree_with_the_engines_records(tmp_path: Path) -> None:
    run = read_vllm_bench_run(RATE8)
    sim = simulate_run(run, _config(tmp_path))
    records = {r.request_id: r for r in sim.result.requests}
    measured = dict(zip(run.frame["request_id"], run.frame["output_tokens"], strict=True))
    for row in sim.requests.iter_rows(named=True):
        r = records[row["request_id"]]
        assert row["output_tokens"] == measured[row["request_id"]] == r.num_output_tokens
        assert row["ttft_s"] == pytest.approx(r.first_token_s - r.arrival_s)
        assert row["e2e_s"] == pytest.approx(r.finish_s - r.arrival_s)
        assert len(row["itl_s"]) == row["output_tokens"] - 1
        assert sum(row["itl_s"]) == pytest.approx(row["e2e_s"] - row["ttft_s"])
    # Overheads add to both latencies and leave the schedule alone.
    shifted = simulate_run(run, _config(tmp_path), overheads=OVERHEADS)
    both = sim.requests.join(shifted.requests, on="request_id", suffix="_o")
    expected = OVERHEADS.ttft_s + OVERHEADS.ttft_per_prompt_token_s * both["prompt_tokens"]
    assert (both["ttft_s_o"] - both["ttft_s"]).to_list() == pytest.approx(expected.to_list())
    assert (both["e2e_s_o"] - both["e2e_s"]).to_list() == pytest.approx(
        (expected + OVERHEADS.e2e_s).to_list()
    )


def _as_measured(run, sim):
    """``run`` with its latencies replaced by the simulation's (a run of a known engine)."""
    frame = run.frame.drop("ttft_s", "e2e_s", "itl_s").join(
        sim.requests.select("request_id", "ttft_s", "e2e_s", "itl_s"),
        on="request_id",
        maintain_order="left",  # the run's order: requests sent at one instant queue in it
    )
    frame = frame.select(run.frame.columns)
    return dataclasses.replace(run, frame=frame)


def test_fit_gives_back_a_known_model_and_its_overheads(tmp_path: Path) -> None:
    runs = []
    for path in (RATE8, FAILURES):
        run = read_vllm_bench_run(path)
        runs.append(_as_measured(run, simulate_run(run, _config(tmp_path), overheads=OVERHEADS)))
    config = dataclasses.replace(_config(tmp_path), latency=None)
    fit = fit_from_runs(runs, config, max_iterations=15, tol=1e-6, **FULL)
    model = fit.model
    # Every measured latency is reproduced (the schedule converges to the true one) ...
    for run in runs:
        sim = simulate_run(
            run, _config(tmp_path, model.coefficients, "fit.json"), overheads=fit.overheads
        )
        both = run.frame.filter(pl.col("ok")).join(sim.requests, on="request_id", suffix="_s")
        assert both["e2e_s_s"].to_list() == pytest.approx(both["e2e_s"].to_list(), rel=0.05)
        # A TTFT moves by a step when an arrival falls on the other side of a step boundary.
        ttft = both.select(((pl.col("ttft_s_s") / pl.col("ttft_s")) - 1).abs().mean()).item()
        assert ttft < 0.08
    # ... and the large terms come back: the fixed step cost and the TTFT overhead (per
    # decoding sequence and per scheduled request move together in decode steps, and trade off
    # against each other on 42 requests).
    assert model.coefficients[0] == pytest.approx(TRUTH[0], rel=0.1)
    assert fit.overheads.ttft_s == pytest.approx(OVERHEADS.ttft_s, rel=0.3)
    errors = model.measured_error["fitted_runs"]
    assert all(abs(errors[m]) < 0.05 for m in ("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p99"))
    assert errors["output_throughput"] == pytest.approx(0, abs=0.01)
    assert model.request_overheads == fit.overheads.as_dict()
    assert len(fit.history) == fit.iterations


def test_the_fit_refuses_too_few_requests(tmp_path: Path) -> None:
    run = read_vllm_bench_run(FAILURES)  # 11 served requests
    with pytest.raises(ConfigError, match=r"11 requests were served .* at least 20"):
        fit_from_runs([run], dataclasses.replace(_config(tmp_path), latency=None))


def test_metric_definitions_on_a_hand_worked_run() -> None:
    frame = pl.DataFrame(
        {
            "start_s": [0.0, 1.0, 2.0, 3.0],
            "ok": [True, True, True, False],
            "output_tokens": [3, 1, 5, 0],
            "ttft_s": [0.5, 0.2, 1.0, None],
            "e2e_s": [0.9, 0.2, 2.0, None],
            "itl_s": [[0.2, 0.2], [], [0.25, 0.25, 0.25, 0.25], []],
        }
    )
    m = run_metrics(frame)
    assert m["ttft_mean"] == pytest.approx(1.7 / 3)
    assert m["ttft_p50"] == pytest.approx(0.5)
    # TPOT without the first token, requests with two or more tokens: 0.4/2 and 1.0/4.
    assert m["tpot_mean"] == pytest.approx((0.2 + 0.25) / 2)
    assert m["itl_mean"] == pytest.approx(1.4 / 6)
    assert m["e2e_p90"] == pytest.approx(0.9 + 0.8 * (2.0 - 0.9))
    # Span: first send (0) to last token (2 + 2.0): 9 tokens, 3 requests over 4 s.
    assert m["output_throughput"] == pytest.approx(9 / 4)
    assert m["request_throughput"] == pytest.approx(3 / 4)
    assert m["num_ok"] == 3 and m["num_requests"] == 4


def test_noise_floor_and_within_on_hand_worked_repeats() -> None:
    measured = [{"e2e_mean": 1.0}, {"e2e_mean": 1.2}, {"e2e_mean": 0.8}]
    simulated = [{"e2e_mean": 1.1}] * 3
    e2e = next(m for m in compare_metrics(measured, simulated, 0.05) if m.name == "e2e_mean")
    assert e2e.measured == pytest.approx(1.0)
    assert e2e.error == pytest.approx(0.1)
    # 1.2 against the mean of 1.0 and 0.8 (0.9): +33 %; the floor is the largest such gap.
    assert e2e.noise == pytest.approx(1.2 / 0.9 - 1)
    assert e2e.within is True
    tight = compare_metrics([{"e2e_mean": 1.0}] * 2, simulated[:2], 0.05)
    assert next(m for m in tight if m.name == "e2e_mean").within is False


def test_server_log_gives_the_engine_configuration() -> None:
    log = read_vllm_server_log(LOG)
    assert log.options == {
        "block_size": 32,
        "num_blocks": 256,
        "max_model_len": 4096,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 2048,
        "enable_prefix_caching": True,
        "async_scheduling": False,
    }
    assert log.vllm_version == "0.32.0" and log.kv_cache_tokens == 256 * 32
    assert log.missing == ()


def test_server_log_without_arguments_lists_what_is_missing(tmp_path: Path) -> None:
    lines = [line for line in LOG.read_text().splitlines() if "non-default args" not in line]
    short = tmp_path / "serve.log"
    short.write_text("\n".join(lines))
    log = read_vllm_server_log(short)
    # From the engine's config line: max_model_len, prefix caching, the CPU platform.
    assert log.options == {
        "max_model_len": 4096,
        "enable_prefix_caching": True,
        "async_scheduling": False,
    }
    assert set(log.missing) == {
        "block_size",
        "num_blocks",
        "max_num_seqs",
        "max_num_batched_tokens",
    }


def test_a_file_that_is_not_a_server_log_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.log"
    other.write_text("hello\n")
    with pytest.raises(ConfigError, match=r"--server-log .*other.log: no vLLM start-up lines"):
        read_vllm_server_log(other)


def _calibrate_real_results(runner: CliRunner, model: Path):
    """``tracekit calibrate`` on the real vLLM bench and GuideLLM results, with the server log."""
    result = runner.invoke(
        cli, ["calibrate", str(RATE8), str(GUIDELLM), "--server-log", str(LOG), "--out", str(model)]
    )
    assert result.exit_code == 0, result.output
    return result


def test_calibrate_and_accuracy_commands_on_real_results(tmp_path: Path) -> None:
    runner = CliRunner()
    model = tmp_path / "model.json"
    result = _calibrate_real_results(runner, model)
    assert "overheads" in result.output and "wrote" in result.output
    doc = json.loads(model.read_text())
    assert doc["version"] == 3
    assert set(doc["request_overheads"]) == {
        "ttft_s",
        "ttft_per_prompt_token_s",
        "e2e_s",
        "e2e_per_output_token_s",
    }
    # One set per client: GuideLLM's TTFT outside the engine is its own (about 0.19 s against
    # vllm bench's 0.015 s on these runs); the default set is vllm bench's (more requests).
    by_client = doc["request_overheads_by_client"]
    assert set(by_client) == {"vllm-bench", "guidellm"}
    assert doc["request_overheads"] == by_client["vllm-bench"]
    assert by_client["guidellm"]["ttft_s"] > 5 * by_client["vllm-bench"]["ttft_s"] > 0
    assert "e2e_p50" in doc["measured_error"]["fitted_runs"]
    assert "e2e_p50" in doc["measured_error"]["fitted_runs_without_spread"]
    assert doc["fit"]["engine_provenance"]["sources"]["num_blocks"].startswith("server log")
    loaded = load_calibrated_model(model)
    assert loaded.request_overheads == pytest.approx(doc["request_overheads"])
    # The spread: one TTFT residual per fitted request served on both sides.
    spread = doc["request_spread"]
    assert len(spread["ttft_s"]) >= 20
    assert f"spread         {len(spread['ttft_s'])} TTFT residuals" in result.output
    out = tmp_path / "accuracy.json"

    def run_accuracy(*options: str):
        argv = ["accuracy", str(RATE8), "--latency", f"calibrated:{model}", "--server-log"]
        return runner.invoke(cli, [*argv, str(LOG), *options])

    # A run the model was fitted on: every metric within 25 % (one run, so no noise floor),
    # the means within 10 %.
    result = run_accuracy("--json", "--out", str(out), "--target", "0.25")
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    assert payload["all_within"] is True
    errors = {m["metric"]: m["error"] for m in payload["metrics"]}
    assert set(errors) >= {"ttft_p99", "tpot_p50", "itl_p90"}
    for name in ("ttft_mean", "tpot_mean", "e2e_mean", "output_throughput"):
        assert abs(errors[name]) < 0.1, name
    assert payload["overheads"] == pytest.approx(by_client["vllm-bench"])
    assert payload["spread_residuals"] == len(spread["ttft_s"])
    # With a 0.1 % target a single run (no noise floor) is outside it: exit 1.
    strict = run_accuracy("--target", "0.001")
    assert strict.exit_code == 1
    assert "NO" in strict.output


def test_calibrate_refuses_results_mixed_with_bundles(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    out = tmp_path / "model.json"
    result = CliRunner().invoke(cli, ["calibrate", str(RATE8), str(bundle), "--out", str(out)])
    assert result.exit_code == 2
    assert "not a benchmark result" in result.output
    assert not out.exists()


def test_a_summary_only_result_is_refused_by_accuracy(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["accuracy", str(DATA / "vllm-bench-summary-only.json"), "--server-log", str(LOG)]
    )
    assert result.exit_code == 2
    assert "--save-detailed" in result.output


def test_accuracy_records_a_held_out_error_in_the_model_file(tmp_path: Path) -> None:
    runner = CliRunner()
    model = tmp_path / "model.json"
    _calibrate_real_results(runner, model)
    before = json.loads(model.read_text())
    result = runner.invoke(
        cli,
        [
            "accuracy",
            str(FAILURES),
            "--latency",
            f"calibrated:{model}",
            "--server-log",
            str(LOG),
            "--record-error",
            "vllm bench long prompts",
        ],
    )
    # Held out (3,000-token prompts the model never saw): recorded whether or not within 10 %.
    assert result.exit_code in (0, 1), result.output
    after = json.loads(model.read_text())
    held = after["measured_error"]["held_out"]["vllm bench long prompts"]
    assert held["runs"] == [str(FAILURES)]
    assert (
        set(held["errors"])
        == set(held["errors_without_spread"])
        == {
            "ttft_p50",
            "ttft_p99",
            "tpot_p50",
            "tpot_p99",
            "e2e_p50",
            "e2e_p99",
            "output_throughput",
        }
    )
    # The spread moves the percentiles, not the throughput.
    assert held["errors_without_spread"]["output_throughput"] == held["errors"]["output_throughput"]
    # The rest of the model is unchanged.
    assert after["coefficients"] == before["coefficients"]
    assert after["measured_error"]["fitted_runs"] == before["measured_error"]["fitted_runs"]
    # Without a calibrated model there is nowhere to record it.
    refused = runner.invoke(
        cli, ["accuracy", str(FAILURES), "--server-log", str(LOG), "--record-error", "x"]
    )
    assert refused.exit_code == 2 and "--record-error needs --latency calibrated:FILE" in (
        refused.output
    )


def _burst(tmp_path: Path, stall_s: float = 0.0):
    """RATE8's requests all sent at once, latencies from TRUTH and OVERHEADS.

    Every request arrives before the first step, so the schedule is the scheduler's alone and
    does not depend on the step times: the fit's first schedule is the true one. ``stall_s``
    holds one request up (a process of a shared machine taking the CPU).
    """
    run = read_vllm_bench_run(RATE8)
    run = dataclasses.replace(run, frame=run.frame.with_columns(pl.lit(0.0).alias("start_s")))
    run = _as_measured(run, simulate_run(run, _config(tmp_path), overheads=OVERHEADS))
    if stall_s:
        held = pl.col("request_id") == run.frame["request_id"][3]
        run = dataclasses.replace(
            run,
            frame=run.frame.with_columns(
                pl.when(held).then(pl.col(c) + stall_s).otherwise(pl.col(c)).alias(c)
                for c in ("ttft_s", "e2e_s")
            ),
        )
    return run


def test_fit_gives_back_every_coefficient_of_a_known_model(tmp_path: Path) -> None:
    # One latency is a sum of the true steps plus the true overheads; on the true schedule the
    # regression is exact, so all nine unknowns come back (the damped iteration of the first
    # version stopped after 12 rounds, 1 % away).
    fit = fit_from_runs(
        [_burst(tmp_path)], dataclasses.replace(_config(tmp_path), latency=None), **FULL
    )
    assert (fit.converged, fit.stop_reason) == (True, "fixed point")
    assert fit.model.coefficients == pytest.approx(TRUTH, rel=1e-6)
    assert fit.overheads.ttft_s == pytest.approx(OVERHEADS.ttft_s, rel=1e-6)
    assert fit.overheads.ttft_per_prompt_token_s == pytest.approx(
        OVERHEADS.ttft_per_prompt_token_s, rel=1e-6
    )
    assert fit.overheads.e2e_s == pytest.approx(OVERHEADS.e2e_s, rel=1e-6)
    assert fit.model.fit["stop_reason"] == "fixed point"


def test_a_huber_fit_is_not_moved_by_one_stalled_request(tmp_path: Path) -> None:
    # A 0.2 s stall on one of 30 requests (latencies of 20 to 200 ms). Least squares (the
    # default: its latencies add up to the measured ones, stall included) moves the fixed cost
    # per step by a fifth; the Huber loss counts the stall by its size.
    config = dataclasses.replace(_config(tmp_path), latency=None)
    run = _burst(tmp_path, stall_s=0.2)
    squares = fit_from_runs([run], config, **FULL).model.coefficients
    huber = fit_from_runs([run], config, huber_delta=HUBER_DELTA, **FULL).model
    assert abs(squares[0] / TRUTH[0] - 1) > 0.1
    c = huber.coefficients
    assert c[0] == pytest.approx(TRUTH[0], rel=0.02)
    # The step time of a full decode step of 29 sequences over 7,600 context tokens.
    step = c[0] + 29 * c[2] + 7646 * c[3] + 29 * c[4]
    truth = TRUTH[0] + 29 * TRUTH[2] + 7646 * TRUTH[3] + 29 * TRUTH[4]
    assert step == pytest.approx(truth, rel=0.02)
    assert huber.fit["huber_delta"] == HUBER_DELTA


def test_the_fit_keeps_the_best_model_it_simulated(tmp_path: Path) -> None:
    runs = []
    for path in (RATE8, FAILURES):
        run = read_vllm_bench_run(path)
        runs.append(_as_measured(run, simulate_run(run, _config(tmp_path), overheads=OVERHEADS)))
    fit = fit_from_runs(runs, dataclasses.replace(_config(tmp_path), latency=None), **FULL)
    objectives = [h["objective"] for h in fit.history]
    accepted = [h["objective"] for h in fit.history if h["accepted"]]
    # Levenberg-Marquardt: every accepted round is better than the one before it ...
    assert accepted == sorted(accepted, reverse=True) and len(set(accepted)) == len(accepted)
    # ... the model returned is the best one simulated, and the file says why the rounds ended.
    assert fit.model.fit["objective"] == min(objectives) <= objectives[0] / 50
    best = fit.history[objectives.index(min(objectives))]
    assert fit.model.coefficients == tuple(best["coefficients"].values())
    assert fit.model.fit["stop_reason"] == fit.stop_reason
    assert fit.stop_reason.startswith(
        ("fixed point", "objective stable", "no better model", "max_iterations")
    )


def test_the_spread_convolves_hand_worked_requests() -> None:
    # Two served requests (TTFT 0.1 and 0.3 s, 0.4 s after the first token, three tokens) and
    # two TTFT residuals, centred: -0.15 and +0.05 less their mean -0.05 give -0.1 and +0.1.
    frame = pl.DataFrame(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "ok": [True, True, False],
            "output_tokens": [3, 3, 0],
            "ttft_s": [0.1, 0.3, None],
            "e2e_s": [0.5, 0.7, None],
            "itl_s": [[0.2, 0.2], [0.2, 0.2], []],
        }
    )
    spread = LatencySpread.from_residuals([-0.15, 0.05])
    assert spread.ttft_s == pytest.approx((-0.1, 0.1))
    rows = spread_requests(frame, spread).sort("ttft_s")
    assert rows["ttft_s"].to_list() == pytest.approx([0.0, 0.2, 0.2, 0.4])
    # Every later token moves with the first: E2E by as much, the gaps not at all.
    assert rows["e2e_s"].to_list() == pytest.approx([0.4, 0.6, 0.6, 0.8])
    assert rows["itl_s"].to_list() == [[0.2, 0.2]] * 4
    m = simulated_metrics(frame, spread)
    plain = run_metrics(frame, start="arrival_s")
    # The means stay the simulation's; the percentiles spread.
    assert m["ttft_mean"] == pytest.approx(plain["ttft_mean"]) == pytest.approx(0.2)
    assert m["e2e_mean"] == pytest.approx(plain["e2e_mean"]) == pytest.approx(0.6)
    assert m["ttft_p90"] == pytest.approx(0.2 + 0.7 * 0.2)  # 0.2, 0.2, 0.4 at 2.7 of 0..3
    assert plain["ttft_p90"] == pytest.approx(0.1 + 0.9 * 0.2)
    assert m["tpot_p90"] == plain["tpot_p90"] == pytest.approx(0.2)
    # The schedule is the simulation's: throughput and counts do not change.
    assert m["output_throughput"] == plain["output_throughput"]
    assert (m["num_ok"], m["num_requests"]) == (2, 3)
    # A residual below the negative of a TTFT stops at a TTFT of 0, its E2E with it.
    floor = spread_requests(frame, LatencySpread((-0.2,)))
    assert floor["ttft_s"].to_list() == pytest.approx([0.0, 0.1])
    assert floor["e2e_s"].to_list() == pytest.approx([0.4, 0.5])


def _scattered(run, seed: int):
    """``run`` with each request's TTFT delayed by an exponential time (mean 50 ms) and its
    decode time scaled by a log-normal factor (sigma 0.3): a shared machine's scatter."""
    rng = random.Random(seed)
    n = run.frame.height
    delay = pl.Series("_d", [rng.expovariate(1 / 0.05) for _ in range(n)])
    ratio = pl.Series("_q", [rng.lognormvariate(0, 0.3) for _ in range(n)])
    decode = (pl.col("e2e_s") - pl.col("ttft_s")) * pl.col("_q")
    frame = (
        run.frame.with_columns(delay, ratio)
        .with_columns(
            (pl.col("ttft_s") + pl.col("_d")).alias("ttft_s"),
            (pl.col("ttft_s") + pl.col("_d") + decode).alias("e2e_s"),
            (pl.col("itl_s") * pl.col("_q")).alias("itl_s"),
        )
        .drop("_d", "_q")
    )
    return dataclasses.replace(run, frame=frame)


def test_the_spread_predicts_held_out_percentiles_a_constant_overhead_misses(
    tmp_path: Path,
) -> None:
    # Live latencies scatter around the engine's: a constant overhead fits the mean, so it
    # over-predicts the median TTFT and under-predicts its tail (docs/latency.md, "End to
    # end"). Fitted on two scattered repeats, predicting two others of other seeds.
    run = read_vllm_bench_run(RATE8)
    exact = _as_measured(run, simulate_run(run, _config(tmp_path), overheads=OVERHEADS))
    config = dataclasses.replace(_config(tmp_path), latency=None)
    fit = fit_from_runs([_scattered(exact, 1), _scattered(exact, 2)], config, **FULL)
    spread = LatencySpread.from_dict(fit.model.request_spread)
    assert spread is not None and len(spread) == 2 * 30
    assert sum(spread.ttft_s) == pytest.approx(0, abs=1e-9)
    held_out = [_scattered(exact, 3), _scattered(exact, 4)]
    config = dataclasses.replace(
        config, latency=f"calibrated:{fit.model.save(tmp_path / 'f.json')}"
    )

    def errors(spread: LatencySpread | None) -> dict[str, float]:
        c = compare_runs(held_out, config, overheads=fit.overheads, spread=spread)
        return {m.name: m.error for m in c.metrics if m.error is not None}

    constant, spread_errors = errors(None), errors(spread)
    assert constant["ttft_p50"] > 0.15 and constant["ttft_p90"] < -0.3
    for metric in ("ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50"):
        assert abs(spread_errors[metric]) < abs(constant[metric]), metric
    # The median within 10 %; the tail's error down by more than a third (-37.5 % to +20.7 %:
    # the residuals carry the fit's own misfit too, so the convolution spreads a little wide).
    assert abs(spread_errors["ttft_p50"]) < 0.1
    assert abs(spread_errors["ttft_p90"]) < abs(constant["ttft_p90"]) * 2 / 3
    # Only the time before the first token is spread: TPOT is the model's.
    assert spread_errors["tpot_p90"] == pytest.approx(constant["tpot_p90"], rel=1e-9)
    # The means are the model's either way.
    assert spread_errors["e2e_mean"] == pytest.approx(constant["e2e_mean"], abs=0.01)
    # tracekit accuracy reads the spread from the model file.
    read = accuracy(held_out, config)
    assert read.extra["spread_residuals"] == 60
    assert (
        read.metrics
        == compare_runs(held_out, config, overheads=fit.overheads, spread=spread).metrics
    )


@pytest.mark.parametrize(
    "spread",
    [
        {"ttft_s": [0.1], "decode_ratio": [1.0]},
        {"ttft_s": [float("nan")]},
        {"ttft_s": ["0.1"]},
        {"ttft_s": 0.1},
        [0.1],
    ],
)
def test_a_bad_request_spread_is_refused(tmp_path: Path, spread: object) -> None:
    path = CalibratedModel(TRUTH, request_spread={"ttft_s": [-0.01, 0.01]}).save(
        tmp_path / "m.json"
    )
    doc = json.loads(path.read_text())
    assert doc["version"] == 3
    assert load_calibrated_model(path).request_spread == doc["request_spread"]
    doc["request_spread"] = spread
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"m\.json: field request_spread must be"):
        load_calibrated_model(path)


def test_calibrate_no_spread_writes_constant_overheads_only(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    argv = ["calibrate", str(RATE8), str(GUIDELLM), "--server-log", str(LOG), "--out", str(model)]
    result = CliRunner().invoke(cli, [*argv, "--no-spread", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(model.read_text())
    assert "request_spread" not in doc and doc["version"] == 3
    assert json.loads(result.stdout)["spread_residuals"] == 0


def test_the_engine_adds_a_measured_models_overheads_to_its_records(tmp_path: Path) -> None:
    # What record sim, replay and qualify run: the step model times the steps, and a model
    # fitted to measured latencies also delays each request's first token and last token by its
    # overheads, leaving the schedule alone (as tracekit accuracy adds them).
    overheads = {
        "ttft_s": 0.006,
        "ttft_per_prompt_token_s": 2e-6,
        "e2e_s": 0.001,
        "e2e_per_output_token_s": 1e-4,
    }
    measured = CalibratedModel(TRUTH, request_overheads=overheads).save(tmp_path / "o.json")
    run = read_vllm_bench_run(RATE8)
    plain = simulate_run(run, _config(tmp_path))
    shifted = simulate_run(
        run, dataclasses.replace(_config(tmp_path), latency=f"calibrated:{measured}")
    )
    assert shifted.steps.equals(plain.steps)
    before = {r.request_id: r for r in plain.result.requests}
    for r in shifted.result.requests:
        b = before[r.request_id]
        ahead = 0.006 + 2e-6 * r.prompt_tokens
        assert r.first_token_s - b.first_token_s == pytest.approx(ahead, abs=1e-12)
        tail = ahead + 0.001 + 1e-4 * (r.num_output_tokens - 1)
        assert r.finish_s - b.finish_s == pytest.approx(tail, abs=1e-12)
        assert (r.arrival_s, r.first_scheduled_s) == (b.arrival_s, b.first_scheduled_s)
    # simulate_run adds the overheads it is given; the engine's records do not count twice.
    assert shifted.requests.equals(plain.requests)


def test_each_client_gets_its_own_overheads_and_the_default_fit_leaves_out_the_rest(
    tmp_path: Path,
) -> None:
    # One engine (TRUTH without the per-scheduled-request term, which the default fit leaves
    # out), two clients with their own time before the first token: RATE8's requests sent at
    # once (a schedule that does not depend on the step times) as vllm bench, 6 ms ahead, and
    # the same requests as GuideLLM, 150 ms ahead (GuideLLM's own processes).
    truth = (*TRUTH[:4], 0.0, TRUTH[5])
    run = read_vllm_bench_run(RATE8)
    run = dataclasses.replace(run, frame=run.frame.with_columns(pl.lit(0.0).alias("start_s")))
    config = _config(tmp_path, truth)
    fast = _as_measured(run, simulate_run(run, config, overheads=RequestOverheads(ttft_s=0.006)))
    slow = _as_measured(run, simulate_run(run, config, overheads=RequestOverheads(ttft_s=0.15)))
    slow = dataclasses.replace(slow, client="guidellm")
    fit = fit_from_runs([fast, slow], dataclasses.replace(config, latency=None))
    assert fit.stop_reason == "fixed point"
    assert fit.model.coefficients == pytest.approx(truth, rel=1e-6)
    assert fit.overheads_by_client["vllm-bench"].ttft_s == pytest.approx(0.006, rel=1e-6)
    assert fit.overheads_by_client["guidellm"].ttft_s == pytest.approx(0.15, rel=1e-6)
    assert fit.model.request_overheads_by_client["guidellm"]["ttft_s"] == pytest.approx(0.15)
    # The per-prompt-token and after-the-last-token overheads are not fitted by default.
    assert fit.overheads.ttft_per_prompt_token_s == fit.overheads.e2e_s == 0.0
    # One set for both: their mean, 78 ms, which is neither client's.
    single = fit_from_runs(
        [fast, slow], dataclasses.replace(config, latency=None), per_client=False
    )
    assert single.overheads.ttft_s == pytest.approx((0.006 + 0.15) / 2, rel=1e-6)


@pytest.mark.e2e
def test_qualify_with_a_model_calibrated_on_real_results_names_its_error(tmp_path: Path) -> None:
    # The model of `tracekit calibrate` on the committed real client outputs drives a qualify
    # job; the report's header names the model's measured error, that of what the job's runs
    # apply (the step model and the overheads, not the spread), and every TTFT of the runs
    # includes the time before the first token.
    from report_helpers import qualify_exit
    from sweep_helpers import SAMPLE

    from tracekit.trace import open_trace

    runner = CliRunner()
    model = tmp_path / "model.json"
    _calibrate_real_results(runner, model)
    doc = json.loads(model.read_text())
    out = tmp_path / "results"
    result = runner.invoke(
        cli,
        ["qualify", "--workload", str(SAMPLE), "--limit", "60", "--num-blocks", "300",
         "--max-model-len", "4608", "--load-plan", "single", "--strategy", "builtin,bidkv",
         "--latency", f"calibrated:{model}", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == qualify_exit(out), result.output
    carried = json.loads((out / "qualify.json").read_text())["latency_measured_error"]
    fitted = doc["measured_error"]["fitted_runs_without_spread"]
    assert carried["fitted_runs_without_spread"] == fitted
    page = (out / "report.html").read_text("utf-8")
    expected = (
        "<dt>measured error</dt><dd>simulated vs measured (the step model with its request "
        "overheads, as these runs): on the 2 runs it was fitted on: "
        f"TTFT P50 {fitted['ttft_p50']:+.1%}, TPOT P50 {fitted['tpot_p50']:+.1%}"
    )
    assert expected in page
    before = doc["request_overheads"]["ttft_s"]
    assert before > 0
    requests = open_trace(out / "runs").scan("requests").filter(pl.col("status") == "finished")
    ttft = requests.select((pl.col("first_token_s") - pl.col("arrival_s")).min()).collect()
    assert ttft.item() > before
