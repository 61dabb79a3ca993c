"""Verdicts of a qualification on hand-built results folders (no trace bundles needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.qualify import ResultsError, compute_qualification, write_qualification
from tracekit.qualify.results import CELL_COLUMNS

CELL = "hand|rate=1.0|bidkv:defaults"
T95_DF2 = 4.303  # two-sided 95% Student-t critical value, 2 degrees of freedom


def _row(repeat: int, strategy: str, throughput: float, latency: float, **extra: Any) -> dict:
    policy = strategy != "builtin"
    row = {
        "repeat": repeat,
        "strategy": strategy,
        "host_path": "typed" if policy else "builtin",
        "run_id": f"{strategy}-{repeat}",
        "bundle": f"runs/r{repeat}/{strategy}",
        "cell": CELL,
        "requests": 100,
        "finished": 100,
        "all_finished": True,
        "throughput_rps": throughput / 100,
        "output_tokens_per_s": throughput,
        "ttft_p95_s": latency / 10,
        "e2e_p95_s": latency,
        "preemptions": 10,
        "recomputed_tokens": 1000,
        "calls": 10 if policy else 0,
        "selections": 8 if policy else 0,
        "abstentions": 2 if policy else 0,
        "failures": 0,
        "invalid_selections": 0,
        "liveness_abstentions": 0,
        "cascade_abstentions": 2 if policy else 0,
        "gate_fallbacks": 0,
        "policy_enabled": True,
    }
    row.update(extra)
    return row


def write_folder(
    root: Path,
    throughput_changes: list[float],
    latency_changes: list[float],
    *,
    candidate_extra: dict[int, dict[str, Any]] | None = None,
    policy_config: dict[str, Any] | None = None,
    diff: dict[str, Any] | bool | None = None,
    conformance: dict[str, Any] | bool | None = None,
) -> Path:
    """A results folder whose bidkv runs change throughput/latency by the given percentages."""
    rows = []
    for k, (dt, dl) in enumerate(zip(throughput_changes, latency_changes, strict=True)):
        base_t, base_l = 100.0 + 10 * k, 20.0 + k  # different baselines per repeat
        rows.append(_row(k, "builtin", base_t, base_l))
        extra = (candidate_extra or {}).get(k, {})
        rows.append(_row(k, "bidkv", base_t * (1 + dt / 100), base_l * (1 + dl / 100), **extra))
    root.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows).write_parquet(root / "cells.parquet")
    inputs = {
        "workload": {"name": "hand", "source": "hand.csv", "sha256": "0" * 64, "options": {}},
        "engine_config": {"num_blocks": 300},
        "strategies": ["builtin", "bidkv"],
        "candidate": "bidkv",
        "policy_config": policy_config or {},
        "repeats": len(throughput_changes),
        "repeat_kind": "windows",
        "repeat_details": [
            {"repeat": k, "window": [60.0 * k, 60.0 * (k + 1)], "seed": 0}
            for k in range(len(throughput_changes))
        ],
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "tool_version": "test",
        "created_at": "2026-11-30T00:00:00+00:00",
    }
    (root / "qualify.json").write_text(json.dumps(inputs))
    (root / "diff").mkdir(exist_ok=True)
    if diff is not False:
        (root / "diff" / "diff.json").write_text(json.dumps(diff or {"verdict": "equivalent"}))
    if conformance is not False:
        payload = conformance or {
            "passed": True,
            "checks": [{"name": "a", "passed": True, "detail": ""}],
        }
        (root / "conformance.json").write_text(json.dumps(payload))
    return root


def _entry(q: dict[str, Any], strategy: str = "bidkv") -> dict[str, Any]:
    (entry,) = [e for e in q["effectiveness"]["cells"] if e["strategy"] == strategy]
    return entry


def test_paired_interval_matches_hand_computation(tmp_path: Path) -> None:
    # Changes 1, 2, 3 %: mean 2, sample sd 1, half-width t(2) * 1 / sqrt(3).
    q = compute_qualification(write_folder(tmp_path, [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]))
    throughput = _entry(q)["throughput"]
    half = T95_DF2 / math.sqrt(3)
    assert throughput["n"] == 3
    assert throughput["mean_pct"] == pytest.approx(2.0)
    assert throughput["low_pct"] == pytest.approx(2.0 - half)
    assert throughput["high_pct"] == pytest.approx(2.0 + half)
    assert throughput["changes_pct"] == pytest.approx([1.0, 2.0, 3.0])
    assert throughput["metric"] == "output_tokens_per_s"
    assert _entry(q)["p95_latency"]["metric"] == "e2e_p95_s"


@pytest.mark.parametrize(
    ("throughput", "latency", "label"),
    [
        # low end 5 - 2.48 > 0; latency high end 1 + 2.48 <= 5
        ([4.0, 5.0, 6.0], [0.0, 1.0, 2.0], "beneficial"),
        # throughput entirely below 0
        ([-4.0, -5.0, -6.0], [0.0, 1.0, 2.0], "not-beneficial-in-tested-cell"),
        # latency low end 10 - 2.48 > +5%
        ([4.0, 5.0, 6.0], [9.0, 10.0, 11.0], "not-beneficial-in-tested-cell"),
        # throughput interval straddles 0
        ([-1.0, 2.0, 5.0], [0.0, 1.0, 2.0], "inconclusive"),
    ],
)
def test_effectiveness_labels(
    tmp_path: Path, throughput: list[float], latency: list[float], label: str
) -> None:
    entry = _entry(compute_qualification(write_folder(tmp_path, throughput, latency)))
    assert entry["label"] == label
    assert entry["attributable"] is True
    assert entry["reason"]


def test_never_invoked_is_inconclusive_and_not_attributable(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path,
        [4.0, 5.0, 6.0],
        [0.0, 1.0, 2.0],
        candidate_extra={1: {"calls": 0, "selections": 0, "abstentions": 0}},
    )
    q = compute_qualification(root)
    entry = _entry(q)
    assert entry["label"] == "inconclusive"
    assert entry["attributable"] is False
    assert entry["reason"].startswith("not attributable")
    assert "repeat 1" in entry["reason"]
    assert q["functional_compatibility"]["status"] == "failed"
    assert q["runtime_qualification"]["effectiveness_qualifications"][0]["status"] == (
        "inconclusive"
    )


def test_fewer_than_three_pairs_is_inconclusive(tmp_path: Path) -> None:
    entry = _entry(compute_qualification(write_folder(tmp_path, [4.0, 5.0], [0.0, 1.0])))
    assert entry["label"] == "inconclusive"
    assert "at least 3" in entry["reason"]
    assert entry["throughput"]["low_pct"] is not None  # two pairs still give an interval


def test_everything_passes(tmp_path: Path) -> None:
    q = compute_qualification(write_folder(tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0]))
    gate = q["functional_compatibility"]
    assert gate["status"] == "passed", gate["reasons"]
    assert gate["reasons"] == []
    assert [c["name"] for c in gate["checks"]] == [
        "all_requests_completed",
        "no_policy_failure",
        "no_invalid_selection",
        "policy_stayed_enabled",
        "invoked_every_repeat",
        "legacy_typed_equivalent",
        "conformance_passed",
    ]
    assert all(label["reached"] for label in q["lifecycle"].values()), q["lifecycle"]
    assert q["runtime_qualification"]["functional_compatibility"]["status"] == "passed"


GATE_CASES = {
    "all_requests_completed": {"candidate_extra": {0: {"finished": 97, "all_finished": False}}},
    "no_policy_failure": {"candidate_extra": {2: {"failures": 1}}},
    "no_invalid_selection": {"candidate_extra": {1: {"invalid_selections": 1}}},
    "policy_stayed_enabled": {"candidate_extra": {1: {"policy_enabled": False}}},
    "invoked_every_repeat": {"candidate_extra": {2: {"calls": 0, "selections": 0}}},
    "legacy_typed_equivalent": {"diff": {"verdict": "different"}},
    "conformance_passed": {
        "conformance": {
            "passed": False,
            "checks": [
                {"name": "bidkv/startup/valid", "passed": True, "detail": "ok"},
                {"name": "bidkv/rollback/typed-exception", "passed": False, "detail": "no"},
            ],
        }
    },
}


@pytest.mark.parametrize("check", list(GATE_CASES))
def test_each_gate_check_fails_on_purpose(tmp_path: Path, check: str) -> None:
    root = write_folder(tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], **GATE_CASES[check])
    gate = compute_qualification(root)["functional_compatibility"]
    assert gate["status"] == "failed"
    failed = [c["name"] for c in gate["checks"] if not c["passed"]]
    assert failed == [check]
    assert len(gate["reasons"]) == 1
    assert gate["reasons"][0].startswith(f"{check}: ")


def test_gate_reason_details(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], **GATE_CASES["all_requests_completed"]
    )
    (reason,) = compute_qualification(root)["functional_compatibility"]["reasons"]
    assert reason == "all_requests_completed: r0 bidkv: finished 97 of 100"
    root = write_folder(
        tmp_path / "c", [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], **GATE_CASES["conformance_passed"]
    )
    (reason,) = compute_qualification(root)["functional_compatibility"]["reasons"]
    assert reason == "conformance_passed: 1 of 2 failed: bidkv/rollback/typed-exception"


@pytest.mark.parametrize(
    ("missing", "check"),
    [("diff", "legacy_typed_equivalent"), ("conformance", "conformance_passed")],
)
def test_missing_diff_or_conformance_fails_the_gate(
    tmp_path: Path, missing: str, check: str
) -> None:
    root = write_folder(tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], **{missing: False})
    gate = compute_qualification(root)["functional_compatibility"]
    assert [c["name"] for c in gate["checks"] if not c["passed"]] == [check]
    assert "missing" in gate["reasons"][0]


def test_equivalent_modulo_contract_passes(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], diff={"verdict": "equivalent-modulo-contract"}
    )
    assert compute_qualification(root)["functional_compatibility"]["status"] == "passed"


def test_lifecycle_labels_stay_separate(tmp_path: Path) -> None:
    # An invalid configuration: configured fails, yet the runs still show the later labels.
    root = write_folder(
        tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], policy_config={"utility_kv_gate": 2}
    )
    labels = compute_qualification(root)["lifecycle"]
    assert labels["installed"]["reached"] is True
    assert labels["configured"]["reached"] is False
    assert "utility_kv_gate" in labels["configured"]["evidence"]
    assert labels["enabled"]["reached"] is True
    assert labels["runtime_effective"]["reached"] is True


def test_enabled_needs_the_typed_host_and_effective_needs_a_selection(tmp_path: Path) -> None:
    legacy = {k: {"host_path": "legacy", "selections": 0} for k in range(3)}
    root = write_folder(tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0], candidate_extra=legacy)
    labels = compute_qualification(root)["lifecycle"]
    assert labels["enabled"]["reached"] is False
    assert "0 of 3 runs" in labels["enabled"]["evidence"]
    assert labels["runtime_effective"]["reached"] is False


def test_qualification_json_is_deterministic_and_nan_free(tmp_path: Path) -> None:
    root = write_folder(tmp_path, [4.0, 5.0, 6.0], [0.0, 1.0, 2.0])
    cells = pl.read_parquet(root / "cells.parquet").with_columns(
        pl.when(pl.col("strategy") == "builtin").then(0.0).otherwise(pl.col("ttft_p95_s"))
        .alias("ttft_p95_s")
    )  # fmt: skip
    cells.write_parquet(root / "cells.parquet")
    first = write_qualification(root, tmp_path / "a.json").read_bytes()
    second = write_qualification(root, tmp_path / "b.json").read_bytes()
    assert first == second
    document = json.loads(first)
    assert document["format"] == "tracekit.qualification"
    # A zero baseline gives no change: null, never NaN.
    assert document["effectiveness"]["cells"][0]["p95_ttft"]["changes_pct"] == [None] * 3
    assert b"NaN" not in first


def test_missing_files_and_columns_raise(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"qualify\.json: missing"):
        compute_qualification(tmp_path)
    root = write_folder(tmp_path / "r", [1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    pl.read_parquet(root / "cells.parquet").drop("e2e_p95_s", "calls").write_parquet(
        root / "cells.parquet"
    )
    with pytest.raises(ResultsError, match="missing column\\(s\\) e2e_p95_s, calls"):
        compute_qualification(root)
    assert "e2e_p95_s" in CELL_COLUMNS


def test_per_run_evidence_names_the_load_cell_under_a_load_plan() -> None:
    from tracekit.qualify.verdicts import _per_repeat

    frame = pl.DataFrame(
        {"load": ["rate-1x", "rate-0.6x", "rate-1x"], "repeat": [0, 0, 1], "selections": [4, 0, 7]}
    )
    assert _per_repeat(frame, "selections") == "rate-0.6x r0: 0, rate-1x r0: 4, rate-1x r1: 7"
    # One cell (or no load column): the repeat alone, as before.
    single = frame.filter(pl.col("load") == "rate-1x")
    assert _per_repeat(single, "selections") == "r0: 4, r1: 7"
