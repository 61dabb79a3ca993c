"""Async scheduling in the embedded engine: hand-worked runs and the rules the fixtures rely on.

The expected step sequences are worked by hand from vLLM's ``AsyncScheduler`` and
``EngineCore.step_with_batch_queue`` (docs/engine.md, "Async scheduling"); the real scheduler is
compared in ``tests/test_vllm_async_live.py`` and through the async fixtures.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from engine_helpers import async_scenarios

from tracekit.cli import cli
from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
from tracekit.engine.async_scheduler import AsyncVllmScheduler, _AsyncMixin
from tracekit.engine.scheduler import VllmScheduler, make_vllm_scheduler
from tracekit.vllm.cache_hits import engine_stream

STEP_S = 0.05


def config(**settings: object) -> EngineConfig:
    return EngineConfig(
        num_blocks=40,
        max_model_len=256,
        clock="steps",
        step_s=STEP_S,
        enable_prefix_caching=False,
        **settings,  # type: ignore[arg-type]
    )


def test_a_stop_token_costs_one_more_step_under_async() -> None:
    # Prompt 20, stops at its 3rd token (target), max_tokens 10. Async: step 0 prefills (20) and
    # samples; steps 1-3 each schedule 1 token before the previous token is known; step 2's
    # output is the 3rd token, which stops it at the end of step 2 while step 3 is in flight.
    # Step 4 is the empty step that reports the finished id (has_finished_requests).
    request = EngineRequest("a", 0.0, 20, 3, 10)
    sync = run_engine([request], config(async_scheduling=False), BuiltinHost())
    run = run_engine(
        [request], config(async_scheduling=True), BuiltinHost(), check_consistency=True
    )
    assert [s.num_scheduled_tokens for s in sync.steps] == [{"a": 20}, {"a": 1}, {"a": 1}]
    assert [s.num_scheduled_tokens for s in run.steps] == [
        {"a": 20},
        {"a": 1},
        {"a": 1},
        {"a": 1},
        {},
    ]
    # A decode of a token still in flight is a decode (its placeholder counts as output).
    assert [(s.num_prefill_tokens, s.num_decode_tokens) for s in run.steps] == [
        (20, 0),
        (0, 1),
        (0, 1),
        (0, 1),
        (0, 0),
    ]
    (record,) = run.requests
    assert record.status == "finished_stopped" and record.num_output_tokens == 3
    assert record.first_token_s == pytest.approx(STEP_S)  # end of step 0
    assert record.finish_s == pytest.approx(3 * STEP_S)  # end of step 2
    assert sync.requests[0].finish_s == pytest.approx(3 * STEP_S)


def test_max_tokens_in_flight_is_not_scheduled_again() -> None:
    # Prompt 20, max_tokens 3. At step 3, computed (22) + 2 - placeholders (1) >= 20 + 3: the
    # last token is in flight, so vLLM skips the request and the step is empty.
    request = EngineRequest("a", 0.0, 20, 10, 3)
    run = run_engine(
        [request], config(async_scheduling=True), BuiltinHost(), check_consistency=True
    )
    assert [s.num_scheduled_tokens for s in run.steps] == [{"a": 20}, {"a": 1}, {"a": 1}, {}, {}]
    (record,) = run.requests
    assert record.status == "finished_length_capped" and record.num_output_tokens == 3
    assert record.finish_s == pytest.approx(3 * STEP_S)


def test_a_chunked_prefill_samples_only_when_complete() -> None:
    # Prompt 50 with a 32-token budget: step 0 is a chunk (no token, no placeholder), step 1
    # completes it (18) and samples; the decode of step 2 is scheduled before that token is back.
    request = EngineRequest("a", 0.0, 50, 2, 2)
    run = run_engine(
        [request],
        config(async_scheduling=True, max_num_batched_tokens=32),
        BuiltinHost(),
        check_consistency=True,
    )
    assert [s.num_scheduled_tokens for s in run.steps][:3] == [{"a": 32}, {"a": 18}, {"a": 1}]
    assert run.requests[0].num_output_tokens == 2


def test_the_factory_picks_the_scheduler_the_config_asks_for() -> None:
    host = BuiltinHost()
    assert type(make_vllm_scheduler(config(async_scheduling=True), host)) is AsyncVllmScheduler
    assert type(make_vllm_scheduler(config(async_scheduling=False), host)) is VllmScheduler


def test_a_synchronous_scheduler_is_refused_in_the_async_loop() -> None:
    def factory(c, h, d):  # type: ignore[no-untyped-def]
        return VllmScheduler(c, BuiltinHost(), d)

    with pytest.raises(ValueError, match="scheduler is synchronous"):
        run_engine(
            [EngineRequest("a", 0.0, 20, 3, 10)],
            config(async_scheduling=True),
            None,
            scheduler_factory=factory,
        )


def test_the_live_workloads_exercise_every_async_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stale outputs (some of which finish a preempted request) and the max_tokens skip occur
    in the scenarios compared with the real AsyncScheduler, so the comparison covers them."""
    counts = {"stale": 0, "stale_finish": 0, "skip": 0}
    update = _AsyncMixin.update_from_output
    schedule = VllmScheduler.schedule

    def counting_update(self, out, end_s):  # type: ignore[no-untyped-def]
        for request_id in out.num_scheduled_tokens:
            request = self.requests.get(request_id)
            if request is not None and request.num_stale_output_tokens > 0:
                counts["stale"] += 1
                sampled = request in self._in_flight_steps[out.step][1]
                if sampled and request.num_output_tokens + 1 >= request.stop_output_tokens:
                    counts["stale_finish"] += 1
        return update(self, out, end_s)

    def counting_schedule(self, step, now):  # type: ignore[no-untyped-def]
        for request in self.running:
            placeholders = request.num_output_placeholders
            limit = request.num_prompt_tokens + request.max_tokens
            if placeholders and request.num_computed_tokens + 2 - placeholders >= limit:
                counts["skip"] += 1
        return schedule(self, step, now)

    monkeypatch.setattr(_AsyncMixin, "update_from_output", counting_update)
    monkeypatch.setattr(VllmScheduler, "schedule", counting_schedule)
    for scenario in async_scenarios("0.32"):
        engine_stream(scenario)
    assert counts["stale"] > 100 and counts["stale_finish"] > 0 and counts["skip"] > 100


def test_async_runs_stay_consistent_under_pressure() -> None:
    for scenario in async_scenarios("0.33"):
        run_engine(
            list(scenario.requests),
            dataclasses.replace(scenario.config, clock="cost-model"),
            BuiltinHost(),
            collect=False,
            check_consistency=True,
        )


def test_defaults_are_vllms_and_sglang_mode_refuses_the_vllm_features() -> None:
    vllm = EngineConfig()
    assert vllm.enable_prefix_caching is True and vllm.async_scheduling is True
    sglang = EngineConfig(mode="sglang")
    assert sglang.enable_prefix_caching is False and sglang.async_scheduling is False
    for name in ("enable_prefix_caching", "async_scheduling"):
        with pytest.raises(ValueError, match=f"{name} is modelled in vllm mode only"):
            EngineConfig(mode="sglang", **{name: True})  # type: ignore[arg-type]
        assert getattr(EngineConfig(mode="sglang", **{name: False}), name) is False  # type: ignore[arg-type]


def test_manifests_older_than_the_features_were_recorded_with_them_off() -> None:
    from tracekit.engine.config import recorded_engine_config

    old = recorded_engine_config({"num_blocks": 64, "max_model_len": 1000, "mode": "vllm"})
    assert old.enable_prefix_caching is False and old.async_scheduling is False
    new = recorded_engine_config({"async_scheduling": True, "enable_prefix_caching": True})
    assert new.enable_prefix_caching is True and new.async_scheduling is True


def test_the_engine_options_reach_the_manifest(tmp_path: Path) -> None:
    workload = Path(__file__).resolve().parents[1] / "traces/azure-llm-2023/azure_conv_sample.csv"
    runner = CliRunner()
    base = ["record", "sim", "--workload", str(workload), "--limit", "20"]
    cases = {
        "default": ([], (True, True)),
        "off": (["--no-prefix-caching", "--no-async-scheduling"], (False, False)),
        "sglang": (["--engine-mode", "sglang"], (False, False)),
    }
    for name, (flags, expected) in cases.items():
        out = tmp_path / name
        result = runner.invoke(cli, [*base, *flags, "--out", str(out)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        config = json.loads((out / "manifest.json").read_text("utf-8"))["engine_config"]
        assert (config["enable_prefix_caching"], config["async_scheduling"]) == expected, name
    # Explicitly on in sglang mode: a one-line error naming the field, exit 2, no output.
    out = tmp_path / "refused"
    flags = ["--engine-mode", "sglang", "--async-scheduling", "--out", str(out)]
    result = runner.invoke(cli, [*base, *flags])
    assert result.exit_code == 2 and "--async-scheduling" in result.output
    assert not out.exists()
