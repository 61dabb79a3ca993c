"""``sglang-default`` and ``slack-aware`` against SGLang 0.5.23's own victims on recorded batches.

Open-mode replay (every recorded retraction's candidate batch, unchanged, given to each strategy)
on the committed SGLang fixtures; the recorded victim is the one SGLang's ``retract_decode``
popped (docs/engine.md, "Strategies against SGLang's own order").
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.replay import replay_open
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.strategies import parse_strategy_list

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    """Every replayed decision of both strategies, with the fixture's retraction policy."""
    tmp = tmp_path_factory.mktemp("replay")
    frames = []
    for name in sorted(FIXTURES):
        out = tmp / name
        replay_open(
            ROOT / FIXTURES_DIR / name, parse_strategy_list("sglang-default,slack-aware"), out
        )
        frame = pl.read_parquet(out / "replay_decisions.parquet")
        config = FIXTURES[name].config
        frames.append(
            frame.with_columns(
                fixture=pl.lit(name),
                policy=pl.lit(config.retraction_policy),
                low_first=pl.lit(config.schedule_low_priority_values_first),
            )
        )
    return pl.concat(frames)


def _agreement(
    frame: pl.DataFrame, strategy: str, policy: str, low_first: bool | None = None
) -> tuple[int, int]:
    rows = frame.filter((pl.col("strategy") == strategy) & (pl.col("policy") == policy))
    if low_first is not None:
        rows = rows.filter(pl.col("low_first") == low_first)
    return int(rows["agrees_with_recorded"].sum()), len(rows)


def test_sglang_default_is_sglangs_own_order(replayed: pl.DataFrame) -> None:
    # Both loops of every fixture: 164 length retractions, 30 under --retraction-policy
    # priority with lower values first (the workloads' meaning, which the strategy reads).
    assert _agreement(replayed, "sglang-default", "length") == (164, 164)
    assert _agreement(replayed, "sglang-default", "priority", low_first=True) == (30, 30)


def test_sglang_default_reads_priorities_lower_first(replayed: pl.DataFrame) -> None:
    """In SGLang's default direction (larger values more important) it departs from SGLang.

    The strategy sees the candidates' priorities but not the direction: it keeps the lower
    values, SGLang keeps the larger ones; they agree where the priority does not decide.
    """
    assert _agreement(replayed, "sglang-default", "priority", low_first=False) == (20, 28)


def test_slack_aware_differs_mostly_under_the_priority_policy(replayed: pl.DataFrame) -> None:
    assert _agreement(replayed, "slack-aware", "length") == (42, 164)
    assert _agreement(replayed, "slack-aware", "priority") == (18, 58)


def test_where_slack_aware_and_sglang_part_on_a_length_tie() -> None:
    """A hand-read recorded batch: equal outputs, so SGLang takes the longest prompt."""
    bundle = ROOT / FIXTURES_DIR / "shared-prefix-radix-length"
    candidates = pl.read_parquet(bundle / "candidates.parquet").filter(pl.col("seq") == 0)
    rows = candidates.select(
        "request_id", "arrival_time", "num_prompt_tokens", "num_output_tokens"
    ).rows()
    assert rows == [
        ("spx-033", 4.174, 880, 86),
        ("spx-034", 4.189, 677, 86),
        ("spx-035", 4.5055, 800, 86),
    ]
    decision = pl.read_parquet(bundle / "decisions.parquet").filter(pl.col("seq") == 0)
    assert decision["builtin_victim_id"].item() == "spx-033"  # longest prompt among 86 outputs


def test_the_tie_decision_is_the_length_disagreement(replayed: pl.DataFrame) -> None:
    differ = replayed.filter(
        (pl.col("strategy") == "slack-aware")
        & (pl.col("policy") == "length")
        & ~pl.col("agrees_with_recorded")
    )
    # slack-aware takes the latest arrival (most slack under one objective): on the shared-prefix
    # tie (both loops), where the fewest outputs is not the latest arrival (priority-high), and
    # on retract-many, where dozens of small requests admitted together tie on their outputs
    # (SGLang then takes the longest prompt, the last in batch order among equals).
    assert differ.filter(pl.col("fixture").str.starts_with("shared-prefix")).select(
        "fixture", "seq", "applied_victim_id"
    ).rows() == [
        ("shared-prefix-radix-length", 0, "spx-035"),
        ("shared-prefix-radix-length-overlap", 0, "spx-035"),
    ]
    assert set(differ["fixture"]) == {
        "shared-prefix-radix-length",
        "shared-prefix-radix-length-overlap",
        "priority-high",
        "priority-high-overlap",
        "retract-many-radix",
        "retract-many-radix-overlap",
    }
