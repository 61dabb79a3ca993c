"""The real-SGLang recorder against SGLang 0.5.23 itself (skipped without its environment).

Set ``BIDKV_REQUIRE_SGLANG=1`` to fail instead of skipping when the environment
(``scripts/install-sglang-cpu.sh``) is absent. Facts asserted are SGLang's own rules, from
``srt/managers/schedule_batch.py`` (``_get_decode_retraction_order``, ``retract_decode``) and
``srt/managers/scheduler.py`` (``update_running_batch``, ``_add_request_to_queue``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from tracekit.sglang.protocol import SglangConfig
from tracekit.sglang.record import (
    STEPS_FILE,
    SglangUnavailableError,
    find_sglang_python,
    read_sglang_steps,
    record_sglang,
)
from tracekit.trace.validate import validate_trace
from tracekit.workloads.model import assemble_workload

try:
    find_sglang_python()
    _REASON = None
except SglangUnavailableError as error:
    _REASON = f"no SGLang environment ({error}); run scripts/install-sglang-cpu.sh"

if _REASON is not None and os.environ.get("BIDKV_REQUIRE_SGLANG") == "1":
    raise RuntimeError(f"BIDKV_REQUIRE_SGLANG=1 but {_REASON}")

pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

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
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One driver process for the length, priority and radix-cache runs."""
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
        kv_tokens=4000, max_context_len=2000, chunked_prefill_size=None, step_s=1.0
    )
    workloads = [
        _workload(tmp, _rows(), "length"),
        _workload(tmp, _rows({"c": 1}, only="abc"), "priority"),
        _workload(tmp, shared, "radix_on"),
        _workload(tmp, shared, "radix_off"),
    ]
    configs = [
        CONFIG,
        _replace(CONFIG, retraction_policy="priority"),
        radix,
        _replace(radix, radix_cache=False),
    ]
    names = ["length", "priority", "radix_on", "radix_off"]
    outs = [tmp / n for n in names]
    record_sglang(workloads, outs, config=configs)
    return dict(zip(names, outs, strict=True))


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


def test_committed_fixtures_record_again_identically(tmp_path: Path) -> None:
    """Every committed fixture, recorded again from the installed SGLang, has the same steps."""
    from tracekit.sglang.fidelity import compare_sglang_fidelity
    from tracekit.sglang.fixtures import FIXTURES_DIR, record_fixtures

    root = Path(__file__).resolve().parents[1]
    for bundle in record_fixtures(root, out=tmp_path):
        report = compare_sglang_fidelity(root / FIXTURES_DIR / bundle.name, bundle)
        assert report.matched, report.render()


def test_cli_records_a_bundle_the_engine_matches(tmp_path: Path) -> None:
    """record sglang on workloads the fixtures do not use; the engine agrees step by step."""
    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.sglang.compare import compare_bundle

    data = Path(__file__).resolve().parent / "data" / "workloads"
    cases = [
        ("mooncake_small.jsonl", ["--radix-cache", "--retraction-policy", "length"]),
        ("azure_small.csv", ["--no-radix-cache", "--retraction-policy", "priority"]),
    ]
    for name, flags in cases:
        out = tmp_path / name
        args = ["record", "sglang", "--workload", str(data / name), "--kv-tokens", "1200"]
        args += ["--max-running-requests", "3", "--context-length", "1100", "--out", str(out)]
        result = CliRunner().invoke(cli, [*args, *flags])
        assert result.exit_code == 0, result.output
        assert validate_trace(out).status == "ok"
        total, mismatch = compare_bundle(out)
        assert total > 0 and mismatch is None, mismatch and mismatch.render()
