"""The engine's SGLang mode against recordings of SGLang 0.5.23's real scheduling objects.

Each bundle under ``tests/data/sglang-0.5.23/`` was recorded by ``record_sglang`` (remake them
with ``python -m tracekit.sglang.fixtures``): Azure conversation slices, a Mooncake slice with
``hash_ids``, a shared-prefix table and a decode-heavy synthetic workload, each with the radix
cache on and off and with the ``length`` and ``priority`` retraction policies. The engine
re-runs each scenario and must agree on every step: batch kind, scheduled requests and tokens
in batch order, radix-cache hit tokens, retraction victims in order, ``new_token_ratio`` and
the waiting queue in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.sglang.compare import compare_bundle, engine_steps, first_mismatch
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.sglang.record import read_sglang_scenario, read_sglang_steps

ROOT = Path(__file__).resolve().parents[1]


def _bundle(name: str) -> Path:
    return ROOT / FIXTURES_DIR / name


def test_every_fixture_is_committed() -> None:
    assert sorted(p.name for p in (ROOT / FIXTURES_DIR).iterdir()) == sorted(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_engine_matches_sglang_step_by_step(name: str) -> None:
    total, mismatch = compare_bundle(_bundle(name))
    assert mismatch is None, mismatch.render()
    assert total > 100


def test_fixtures_cover_retractions_radix_hits_and_both_policies() -> None:
    """The fixtures exercise what they are for (facts of the recordings, not of the engine)."""
    victims = {n: sum(len(s.victims) for s in read_sglang_steps(_bundle(n))) for n in FIXTURES}
    assert sum(victims.values()) >= 25
    assert all(victims[n] > 0 for n in FIXTURES if n.startswith(("azure", "synthetic")))
    hits = {
        n: sum(
            r.radix_hit_tokens
            for s in read_sglang_steps(_bundle(n))
            if s.mode == "prefill"
            for r in s.reqs
        )
        for n in FIXTURES
    }
    assert hits["mooncake-radix-length"] > 0 and hits["shared-prefix-radix-length"] > 10_000
    assert all(hits[n] == 0 for n in FIXTURES if "noradix" in n)
    # The retraction policies choose differently on the same workload.
    length = [v for s in read_sglang_steps(_bundle("azure-late-noradix-length")) for v in s.victims]
    priority = [
        v for s in read_sglang_steps(_bundle("azure-late-noradix-priority")) for v in s.victims
    ]
    assert length != priority


def test_a_changed_rule_is_caught() -> None:
    """The comparison fails when the engine departs from SGLang (here: vLLM's front re-queue)."""
    bundle = _bundle("synthetic-noradix-length")
    config, rows = read_sglang_scenario(bundle)
    recorded = read_sglang_steps(bundle)
    steps = engine_steps(config, rows)
    index = next(i for i, s in enumerate(recorded) if s.victims)
    moved = steps[index]
    # Put the victims at the front of the waiting queue instead of its tail.
    victims = list(moved.victims)
    rest = [w for w in moved.waiting if w not in victims]
    altered = type(moved)(
        moved.step, moved.mode, moved.reqs, moved.victims, moved.new_token_ratio, (*victims, *rest)
    )
    if altered.waiting == moved.waiting:
        pytest.skip("the victims were the whole waiting queue")
    mismatch = first_mismatch(recorded, [*steps[:index], altered, *steps[index + 1 :]])
    assert mismatch is not None and mismatch.field == "waiting" and mismatch.index == index


@pytest.mark.parametrize("name", ["shared-prefix-radix-length", "azure-late-radix-priority"])
def test_block_and_tree_accounting_hold_every_step(name: str) -> None:
    """Held blocks plus the radix tree's tokens equal the used pool after every step."""
    from tracekit.engine import BuiltinHost, run_engine
    from tracekit.sglang.compare import engine_config, engine_requests

    config, rows = read_sglang_scenario(_bundle(name))
    result = run_engine(
        engine_requests(rows),
        engine_config(config),
        BuiltinHost(),
        collect=False,
        check_consistency=True,
    )
    assert result.num_steps == len(read_sglang_steps(_bundle(name)))
