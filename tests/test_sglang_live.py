"""The real-SGLang recorder against SGLang 0.5.23 itself (skipped without its environment).

Set ``BIDKV_REQUIRE_SGLANG=1`` to fail instead of skipping when the environment
(``scripts/install-sglang-cpu.sh``) is absent. Facts asserted are SGLang's own rules, from
``srt/managers/schedule_batch.py`` (``_get_decode_retraction_order``, ``retract_decode``) and
``srt/managers/scheduler.py`` (``update_running_batch``, ``_add_request_to_queue``).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from sglang_helpers import needs_sglang

from tracekit.sglang.fixtures import FIXTURES
from tracekit.sglang.protocol import SglangConfig
from tracekit.sglang.record import (
    STEPS_FILE,
    read_sglang_scenario,
    read_sglang_steps,
)
from tracekit.sglang.rerecord import FixtureCheck, check_fixtures
from tracekit.trace.validate import validate_trace
from tracekit.workloads.model import assemble_workload

pytestmark = needs_sglang()

ROOT = Path(__file__).resolve().parents[1]

# Six requests at time 0, 100 output tokens each, in a 300-token pool: the first three are
# admitted (new requests reserve their whole output, running ones new_token_ratio of the rest),
# and the ratio's under-reservation forces a retraction near the end of their decode.
PROMPTS = {"a": 10, "b": 16, "c": 12, "d": 14, "e": 11, "f": 13}
CONFIG = SglangConfig(
    kv_tokens=300,
    max_running_requests=8,
    chunked_prefill_size=64,
    max_prefill_tokens=256,
    max_context_len=400,
    radix_cache=False,
    overlap_schedule=False,
    step_s=1.0,
)
# The hand-worked runs of tests/test_engine_sglang.py (their docstrings do the arithmetic),
# here on SGLang's own objects: 16-token blocks there, one pool of as many tokens here.
HAND = SglangConfig(
    kv_tokens=160,
    max_running_requests=16,
    chunked_prefill_size=1000,
    max_prefill_tokens=1000,
    max_context_len=160,
    radix_cache=False,
    overlap_schedule=False,
    step_s=1.0,
)


def _workload(tmp_path: Path, rows: list[dict], name: str = "w") -> object:
    source = tmp_path / f"{name}.json"
    source.write_text(json.dumps(rows), "utf-8")
    frame = pl.DataFrame(rows)
    return assemble_workload(source, format="test", frame=frame, options={}, name=name)


def _rows(priorities: dict[str, int] | None = None, only: str = "abcdef") -> list[dict]:
    return [
        {
            "request_id": rid,
            "arrival_s": 0.0,
            "prompt_tokens": PROMPTS[rid],
            "output_tokens": 100,
            "max_tokens": 100,
            "priority": (priorities or {}).get(rid, 0),
        }
        for rid in only
    ]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], list[FixtureCheck]]:
    """One driver process (SGLang's import costs 10 to 20 s) for the hand-worked runs below and
    every committed fixture recorded again (:func:`tracekit.sglang.rerecord.check_fixtures`)."""
    tmp = tmp_path_factory.mktemp("sglang")
    shared = [
        {
            "request_id": rid,
            "arrival_s": arrival,
            "prompt_tokens": 600,
            "output_tokens": 4,
            "max_tokens": 4,
            "priority": 0,
            "prefix_hash_ids": [7, 8] if rid != "z" else [9],
        }
        for rid, arrival in (("x", 0.0), ("y", 10.0), ("z", 20.0))
    ]
    radix = SglangConfig(
        kv_tokens=4000,
        max_context_len=2000,
        chunked_prefill_size=0,
        overlap_schedule=False,
        step_s=1.0,
    )
    overlap = _replace(HAND, overlap_schedule=True)
    one_slot = _replace(HAND, max_running_requests=1, enable_priority_scheduling=True)
    small = _replace(HAND, kv_tokens=200, max_context_len=200)
    runs = {
        "length": (_rows(), CONFIG),
        "priority": (
            _rows({"c": 1}, only="abc"),
            _replace(
                CONFIG,
                retraction_policy="priority",
                enable_priority_scheduling=True,
                schedule_low_priority_values_first=True,
            ),
        ),
        "radix_on": (shared, radix),
        "radix_off": (shared, _replace(radix, radix_cache=False)),
        "eos_normal": (_hand(("A", 0, 20, 2, 0, 5)), HAND),
        "eos_overlap": (_hand(("A", 0, 20, 2, 0, 5)), overlap),
        "length_overlap": (_hand(("B", 0, 20, 2, 0, 2)), overlap),
        "preempt_21": (_hand(("r", 0, 20, 6, 10), ("x", 2, 20, 2, 21)), one_slot),
        "preempt_20": (_hand(("r", 0, 20, 6, 10), ("x", 2, 20, 2, 20)), one_slot),
        "reserve": (_hand(("a", 0, 10, 100), ("b", 1, 10, 100)), small),
        "reserve_ignore_eos": (_hand(("a", 0, 10, 100, 0, 100, True), ("b", 1, 10, 100)), small),
    }
    names = list(runs)
    also = [(_workload(tmp, runs[n][0], n), tmp / n, runs[n][1]) for n in names]
    checks, bundles = check_fixtures(ROOT, also=also)
    return dict(zip(names, bundles, strict=True)), checks


@pytest.fixture(scope="module")
def recorded(live: tuple[dict[str, Path], list[FixtureCheck]]) -> dict[str, Path]:
    """The hand-worked runs' bundles, by name."""
    return live[0]


def _hand(*specs: tuple) -> list[dict]:
    """Rows from ``(id, arrival_s, prompt, output[, priority[, max_tokens[, ignore_eos]]])``."""
    rows = []
    for spec in specs:
        rid, arrival, prompt, output = spec[:4]
        row = {
            "request_id": rid,
            "arrival_s": float(arrival),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "max_tokens": spec[5] if len(spec) > 5 else output,
            "priority": spec[4] if len(spec) > 4 else 0,
        }
        row["ignore_eos"] = bool(spec[6]) if len(spec) > 6 else False
        rows.append(row)
    return rows


def _replace(config: SglangConfig, **changes: object) -> SglangConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)


def test_bundles_validate(recorded: dict[str, Path]) -> None:
    for bundle in recorded.values():
        report = validate_trace(bundle)
        assert report.status == "ok", report
        assert (bundle / STEPS_FILE).is_file()


def test_length_victim_is_fewest_outputs_then_longest_prompt(recorded: dict[str, Path]) -> None:
    steps = read_sglang_steps(recorded["length"])
    retractions = [r for s in steps for r in s.retractions]
    assert retractions, "the workload is built to force a retraction"
    first = retractions[0]
    # a, b, c decode together: equal output counts, so the longest prompt (b, 16) goes first.
    assert {c.request_id for c in first.candidates} == {"a", "b", "c"}
    outputs = {c.request_id: c.output_tokens for c in first.candidates}
    prompts = {c.request_id: c.prompt_tokens for c in first.candidates}
    expected = min(first.candidates, key=lambda c: (outputs[c.request_id], -prompts[c.request_id]))
    assert first.victims[0] == expected.request_id == "b"
    # At least one request is kept; the ratio is re-estimated (raised) by the retraction.
    assert first.kept
    assert first.new_token_ratio_after > first.new_token_ratio_before


def test_retracted_requests_go_to_the_tail_of_the_waiting_queue(recorded: dict[str, Path]) -> None:
    steps = read_sglang_steps(recorded["length"])
    for step in steps:
        for r in step.retractions:
            assert list(r.waiting_positions) == list(
                range(r.waiting_len - len(r.victims), r.waiting_len)
            )
            assert list(step.waiting[-len(r.victims) :]) == list(r.victims)


def test_priority_policy_retracts_the_lowest_priority_first(recorded: dict[str, Path]) -> None:
    steps = read_sglang_steps(recorded["priority"])
    retractions = [r for s in steps for r in s.retractions]
    assert retractions
    # c has priority 1 (lower values run first): it goes before b, the length rule's victim.
    assert retractions[0].victims[0] == "c"


def test_radix_cache_hits_follow_the_hash_ids(recorded: dict[str, Path]) -> None:
    def cached(bundle: Path) -> dict[str, int]:
        hits: dict[str, int] = {}
        for step in read_sglang_steps(bundle):
            if step.mode == "prefill":
                for r in step.reqs:
                    hits.setdefault(r.request_id, r.radix_hit_tokens)
        return hits

    on = cached(recorded["radix_on"])
    # y shares x's two 512-token blocks but stops at its 600 prompt tokens: the first block
    # (512) and 88 tokens of the second; z starts another block: no hit.
    assert on["x"] == 0
    assert on["y"] >= 512
    assert on["z"] == 0
    assert set(cached(recorded["radix_off"]).values()) == {0}


def test_ratio_decays_by_a_fixed_step_after_a_retraction(recorded: dict[str, Path]) -> None:
    steps = read_sglang_steps(recorded["length"])
    decay = (0.7 - 0.7 * 0.14) / 600  # NewTokenRatioTracker.from_config defaults
    index = next(i for i, s in enumerate(steps) if s.retractions)
    after = steps[index].retractions[-1].new_token_ratio_after
    assert steps[index].new_token_ratio == after
    following = steps[index + 1]
    assert following.mode == "decode" and not following.retractions
    assert following.new_token_ratio == pytest.approx(after - decay)


def test_a_retracted_request_prefills_prompt_and_outputs_again_in_chunks(
    recorded: dict[str, Path],
) -> None:
    steps = read_sglang_steps(recorded["length"])
    victim = next(v for s in steps for v in s.victims)
    retracted_at = next(i for i, s in enumerate(steps) if victim in s.victims)
    chunks = [
        r
        for s in steps[retracted_at + 1 :]
        if s.mode == "prefill"
        for r in s.reqs
        if r.request_id == victim
    ]
    # Prompt (16) plus the 88 outputs it kept, in chunks of at most 64; each continued chunk
    # starts where the earlier ones ended.
    assert sum(c.new_tokens for c in chunks) == 16 + chunks[0].output_tokens
    assert all(c.new_tokens <= 64 for c in chunks)
    assert not chunks[0].continued_chunk and all(c.continued_chunk for c in chunks[1:])
    done = 0
    for c in chunks:
        assert c.cached_tokens == done
        done += c.new_tokens


def _scheduled(bundle: Path) -> list[dict[str, int]]:
    return [{r.request_id: r.new_tokens for r in s.reqs} for s in read_sglang_steps(bundle)]


def test_overlap_decodes_once_more_what_ends_at_its_end_of_sequence(
    recorded: dict[str, Path],
) -> None:
    """event_loop_overlap: a result is processed after the next batch was launched, so a
    request that samples its end of sequence is decoded once more; one that reaches
    max_new_tokens is kept out of that decode (_reqs_finishing_inflight)."""
    assert _scheduled(recorded["eos_normal"]) == [{"A": 20}, {"A": 1}]
    assert _scheduled(recorded["eos_overlap"]) == [{"A": 20}, {"A": 1}, {"A": 1}]
    assert _scheduled(recorded["length_overlap"]) == [{"B": 20}, {"B": 1}]


def test_priority_preemption_needs_a_difference_above_the_threshold(
    recorded: dict[str, Path],
) -> None:
    """One slot, held by r (priority 10): x (priority 21) preempts it at admission (step 2);
    x with priority 20 (a difference equal to the threshold, 10) waits for r to finish."""
    preempt = read_sglang_steps(recorded["preempt_21"])
    assert {r.request_id: r.new_tokens for r in preempt[2].reqs} == {"x": 20}
    assert preempt[2].preempted_ids == ("r",)
    wait = read_sglang_steps(recorded["preempt_20"])
    assert {r.request_id for r in wait[2].reqs} == {"r"}
    assert all(not s.preempted for s in wait)


def test_a_running_ignore_eos_request_reserves_its_whole_output(
    recorded: dict[str, Path],
) -> None:
    """200 tokens: b (10 + 100 + 1 needed) is admitted next to a running a that reserves 99 *
    0.7 of its output, not next to one that reserves all 99 (ignore_eos)."""
    assert _scheduled(recorded["reserve"])[1] == {"b": 10}
    assert _scheduled(recorded["reserve_ignore_eos"])[1] == {"a": 1}
    # The trace carries what each request was sent with.
    requests = pl.read_parquet(recorded["reserve_ignore_eos"] / "requests.parquet")
    assert dict(requests.select("request_id", "ignore_eos").rows()) == {"a": True, "b": False}


def test_committed_fixtures_record_again_identically(
    live: tuple[dict[str, Path], list[FixtureCheck]],
) -> None:
    """Every committed fixture, recorded again from the installed SGLang, has the same step
    records (every field), the same number of steps and the same request outcomes."""
    checks = live[1]
    assert [c.name for c in checks] == list(FIXTURES)
    assert sum(c.num_steps for c in checks) > 100_000
    differ = [c.difference for c in checks if c.difference is not None]
    assert not differ, "\n".join(differ)


def test_cli_records_a_bundle_the_engine_matches(tmp_path: Path) -> None:
    """record sglang on a workload the fixtures do not use; the engine agrees step by step.

    One command (its own driver: SGLang's import): SGLang's defaults (the overlap loop, the radix
    cache) with ignore_eos, priority scheduling in SGLang's direction and priority retraction
    from the command line. (What each option sets is checked without SGLang, in
    tests/test_sglang_config.py.)"""
    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.sglang.compare import compare_bundle

    data = Path(__file__).resolve().parent / "data" / "workloads" / "mooncake_small.jsonl"
    out = tmp_path / "bundle"
    args = ["record", "sglang", "--workload", str(data), "--kv-tokens", "1200"]
    args += ["--max-running-requests", "3", "--context-length", "1100", "--out", str(out)]
    args += ["--priority-seed", "1", "--ignore-eos", "--enable-priority-scheduling"]
    args += ["--retraction-policy", "priority"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert validate_trace(out).status == "ok"
    config, _ = read_sglang_scenario(out)
    assert config.overlap_schedule and config.radix_cache and config.enable_priority_scheduling
    total, mismatch = compare_bundle(out)
    assert total > 0 and mismatch is None, mismatch and mismatch.render()
