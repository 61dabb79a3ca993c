"""Verdicts of a qualification on hand-built results folders (no trace bundles needed).

Every expected interval is computed here from the cells by hand, with Student's t quantiles from
SciPy (an independent implementation), never from the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

# SciPy is in the dev extra: the independent reference must be there, never skipped.
import scipy.stats as scipy_stats

from tracekit.qualify import ResultsError, compute_qualification, write_qualification
from tracekit.qualify.endpoints import DEFAULT_ENDPOINTS
from tracekit.qualify.results import CELL_COLUMNS

CELL = "hand|rate=1.0|bidkv:defaults"
ENDPOINTS = len(DEFAULT_ENDPOINTS)  # 11


def t_crit(comparisons: int, df: int, alpha: float = 0.05) -> float:
    """Two-sided Bonferroni critical value: t_{1 - alpha / (2 m)}(df)."""
    return float(scipy_stats.t.ppf(1 - alpha / (2 * comparisons), df))


# Every endpoint column, with the value of a built-in run of repeat k.
BASE = {
    "output_tokens_per_s": lambda k: 100.0 + 10 * k,
    "goodput_rps": lambda k: 1.0 + 0.1 * k,
    "e2e_p95_s": lambda k: 20.0 + k,
    "e2e_p99_s": lambda k: 30.0 + k,
    "ttft_p50_s": lambda k: 0.5 + 0.01 * k,
    "ttft_p99_s": lambda k: 3.0 + 0.1 * k,
    "tpot_p50_s": lambda k: 0.05,
    "tpot_p99_s": lambda k: 0.09,
    "slo_attainment": lambda k: 0.9,
    "truly_recomputed_tokens": lambda k: 1000.0 + 100 * k,
    "recompute_tax": lambda k: 0.01,
}


def _row(repeat: int, strategy: str, values: dict[str, float], **extra: Any) -> dict:
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
        "throughput_rps": values["output_tokens_per_s"] / 100,
        "ttft_p95_s": values["ttft_p99_s"] / 2,
        "preemptions": 10,
        "recomputed_tokens": 5000,
        "computed_tokens": 100_000,
        "decisions": 10,
        "calls": 10 if policy else 0,
        "selections": 8 if policy else 0,
        "abstentions": 2 if policy else 0,
        "failures": 0,
        "invalid_selections": 0,
        "liveness_abstentions": 0,
        "cascade_abstentions": 2 if policy else 0,
        "gate_fallbacks": 0,
        "policy_enabled": True,
        "aborted": 0,
        "rejected": 0,
        **values,
    }
    row.update(extra)
    return row


def _values(k: int, changes: dict[str, float]) -> dict[str, float]:
    """Repeat k's values: the baseline's, each column changed by ``changes[column]`` percent of
    that repeat's value (``slo_attainment`` and ``recompute_tax``: by that many points)."""
    out = {}
    for column, base in BASE.items():
        value = base(k)
        change = changes.get(column, 0.0)
        out[column] = (
            value + change / 100
            if column in ("slo_attainment", "recompute_tax")
            else (value * (1 + change / 100))
        )
    return out


def write_folder(
    root: Path,
    changes: list[dict[str, float]],
    *,
    strategies: dict[str, list[dict[str, float]]] | None = None,
    candidate_extra: dict[int, dict[str, Any]] | None = None,
    builtin_extra: dict[int, dict[str, Any]] | None = None,
    inputs_extra: dict[str, Any] | None = None,
    policy_config: dict[str, Any] | None = None,
    diff: dict[str, Any] | bool | None = None,
    conformance: dict[str, Any] | bool | None = None,
) -> Path:
    """A results folder whose bidkv runs differ from builtin by ``changes[k]`` in repeat k.

    ``strategies`` adds other strategies the same way (name -> changes per repeat).
    """
    rows = []
    others = {"bidkv": changes, **(strategies or {})}
    for k in range(len(changes)):
        rows.append(_row(k, "builtin", _values(k, {}), **(builtin_extra or {}).get(k, {})))
        for name, per_repeat in others.items():
            extra = (candidate_extra or {}).get(k, {}) if name == "bidkv" else {}
            rows.append(_row(k, name, _values(k, per_repeat[k]), **extra))
    root.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows).write_parquet(root / "cells.parquet")
    inputs = {
        "workload": {"name": "hand", "source": "hand.csv", "sha256": "0" * 64, "options": {}},
        "engine_config": {"num_blocks": 300, "max_model_len": 4096},
        "strategies": ["builtin", *others],
        "candidate": "bidkv",
        "policy_config": policy_config or {},
        "repeats": len(changes),
        "repeat_kind": "windows",
        "repeat_details": [
            {"repeat": k, "window": [60.0 * k, 60.0 * (k + 1)], "seed": 0}
            for k in range(len(changes))
        ],
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "tool_version": "test",
        "created_at": "2026-11-30T00:00:00+00:00",
        **(inputs_extra or {}),
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


def _repeats(column: str, per_repeat: list[float]) -> list[dict[str, float]]:
    return [{column: c} for c in per_repeat]


def test_relative_change_interval_matches_hand_computation(tmp_path: Path) -> None:
    per_repeat = [1.0, 2.0, 3.0, 4.0, 6.0]
    q = compute_qualification(write_folder(tmp_path, _repeats("output_tokens_per_s", per_repeat)))
    stats = _entry(q)["endpoints"]["output_throughput"]
    # By hand: s_k - b_k over the built-in runs' mean, in percent.
    base = [100.0 + 10 * k for k in range(5)]
    changes = [100 * b * c / 100 / (sum(base) / 5) for b, c in zip(base, per_repeat, strict=True)]
    mean = sum(changes) / 5
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / 4)
    # One strategy x one load x 11 endpoints: Bonferroni over m = 11.
    half = t_crit(ENDPOINTS, 4) * sd / math.sqrt(5)
    assert stats["changes"] == pytest.approx(changes)
    assert stats["mean"] == pytest.approx(mean)
    assert stats["low"] == pytest.approx(mean - half, rel=1e-9)
    assert stats["high"] == pytest.approx(mean + half, rel=1e-9)
    assert stats["unit"] == "%" and stats["metric"] == "output_tokens_per_s"
    rule = q["effectiveness"]["rule"]
    assert rule["comparisons"] == ENDPOINTS
    assert rule["confidence"] == pytest.approx(1 - 0.05 / ENDPOINTS)


def test_absolute_endpoint_is_a_difference_in_points(tmp_path: Path) -> None:
    q = compute_qualification(write_folder(tmp_path, _repeats("slo_attainment", [5.0] * 4)))
    stats = _entry(q)["endpoints"]["slo_attainment"]
    assert stats["unit"] == "pp"
    assert stats["changes"] == pytest.approx([5.0] * 4)
    assert stats["low"] == pytest.approx(5.0) and stats["high"] == pytest.approx(5.0)
    assert stats["verdict"] == "better"


NOISE = [0.1, -0.1, 0.05, -0.05, 0.0]


def _noisy(column: str, level: float, noise: list[float] = NOISE) -> list[dict[str, float]]:
    return [{column: level + n} for n in noise]


@pytest.mark.parametrize(
    ("changes", "label"),
    [
        # +6% throughput, interval about [5.7, 6.3] > the 2% margin; all else unchanged.
        (_noisy("output_tokens_per_s", 6.0), "beneficial"),
        # P95 end-to-end latency +20%, far beyond its 5% margin.
        (_noisy("e2e_p95_s", 20.0), "harmful"),
        # A third more truly recomputed tokens is harm even when every latency holds.
        (_noisy("truly_recomputed_tokens", 33.0), "harmful"),
        # A tiny, nearly deterministic +0.1% throughput: inside the margin, not a benefit (the
        # old rule called every interval above 0 beneficial).
        ([{"output_tokens_per_s": 0.1 + n / 100} for n in NOISE], "equivalent"),
        # Every endpoint unchanged but for noise well inside its margin.
        (_noisy("ttft_p99_s", 0.5), "equivalent"),
        # +3% +- 3%: the interval spans the margin.
        ([{"output_tokens_per_s": c} for c in (0.0, 6.0, 3.0, 1.0, 5.0)], "inconclusive"),
        # +6% throughput, but TTFT P99 too noisy to show it within its margin: not beneficial.
        (
            [{"output_tokens_per_s": 6.0 + n, "ttft_p99_s": t}
             for n, t in zip(NOISE, (-20.0, 25.0, 0.0, 15.0, -10.0), strict=True)],
            "inconclusive",
        ),
    ],
)  # fmt: skip
def test_labels(tmp_path: Path, changes: list[dict[str, float]], label: str) -> None:
    entry = _entry(compute_qualification(write_folder(tmp_path, changes)))
    assert entry["label"] == label, entry["reason"]
    assert entry["reason"]


def test_harm_names_the_endpoint_and_the_headline_says_no_go(tmp_path: Path) -> None:
    q = compute_qualification(write_folder(tmp_path, _noisy("truly_recomputed_tokens", 33.0)))
    entry = _entry(q)
    assert entry["endpoints"]["recomputed_tokens"]["verdict"] == "worse"
    assert "recomputed_tokens +33" in entry["reason"]
    assert q["headline"]["decision"] == "no-go"
    assert q["headline"]["text"].startswith("NO-GO for bidkv at hand|rate=1.0: it is harmful")
    assert "recomputed_tokens +33.0%" in q["headline"]["text"]


def test_benefit_is_go(tmp_path: Path) -> None:
    q = compute_qualification(write_folder(tmp_path, _noisy("goodput_rps", 5.0)))
    assert _entry(q)["label"] == "beneficial"
    assert q["headline"]["decision"] == "go"
    assert q["headline"]["text"].startswith("GO for bidkv at hand|rate=1.0: it is beneficial")


def test_repeats_needed_matches_a_brute_force_search(tmp_path: Path) -> None:
    per_repeat = [0.0, 6.0, 3.0, 1.0, 5.0]  # mean 3, above the 2% margin: beneficial in sight
    entry = _entry(
        compute_qualification(write_folder(tmp_path, _repeats("goodput_rps", per_repeat)))
    )
    assert entry["label"] == "inconclusive"
    base = [1.0 + 0.1 * k for k in range(5)]
    changes = [b * c / (sum(base) / 5) for b, c in zip(base, per_repeat, strict=True)]
    mean = sum(changes) / 5
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / 4)
    # The fewest repeats n whose interval's low end clears the margin at this mean and spread.
    n = next(
        n for n in range(6, 100_000) if mean - t_crit(ENDPOINTS, n - 1) * sd / math.sqrt(n) > 2.0
    )
    assert entry["repeats_needed"] == n
    assert entry["repeats_needed_label"] == "beneficial"


def _flat(column: str, level: float, noise: list[float] = NOISE) -> list[dict[str, float]]:
    """Changes whose paired change relative to the built-in mean is ``level + noise[k]``."""
    base = [BASE[column](k) for k in range(len(noise))]
    mean = sum(base) / len(base)
    return [{column: (level + n) * mean / b} for n, b in zip(noise, base, strict=True)]


def test_more_comparisons_widen_every_interval(tmp_path: Path) -> None:
    # Half-widths 0.20 (m = 11) and 0.37 (m = 110): 2.3% clears the 2% margin only alone.
    changes = _flat("output_tokens_per_s", 2.3)
    alone = _entry(compute_qualification(write_folder(tmp_path / "one", changes)))
    # Nine more strategies in the report: m = 10 x 1 x 11 instead of 11.
    others = {f"s{i}": [{}] * 5 for i in range(9)}
    crowded = compute_qualification(write_folder(tmp_path / "ten", changes, strategies=others))
    assert crowded["effectiveness"]["rule"]["comparisons"] == 10 * ENDPOINTS
    many = _entry(crowded)
    one, ten = alone["endpoints"]["output_throughput"], many["endpoints"]["output_throughput"]
    assert ten["mean"] == pytest.approx(one["mean"])
    ratio = t_crit(10 * ENDPOINTS, 4) / t_crit(ENDPOINTS, 4)
    assert (ten["high"] - ten["low"]) == pytest.approx((one["high"] - one["low"]) * ratio)
    # The same evidence clears the margin alone, but not among 110 comparisons.
    assert alone["label"] == "beneficial"
    assert many["label"] == "inconclusive"


def test_strategies_identical_to_built_in_do_not_widen_the_intervals(tmp_path: Path) -> None:
    # The same nine extra strategies, but every decision of theirs chose the built-in victim:
    # their runs are the baseline's, no interval of theirs can give a false label, so they are
    # not in the family; m stays 11 and 2.3% still clears the 2% margin.
    changes = _flat("output_tokens_per_s", 2.3)
    others = {f"s{i}": [{}] * 5 for i in range(9)}
    root = write_folder(tmp_path / "ten", changes, strategies=others)
    cells = pl.read_parquet(root / "cells.parquet")
    cells.with_columns(
        differing_decisions=pl.when(pl.col("strategy").str.starts_with("s")).then(0).otherwise(3)
    ).write_parquet(root / "cells.parquet")
    q = compute_qualification(root)
    assert q["effectiveness"]["rule"]["comparisons"] == ENDPOINTS
    assert q["effectiveness"]["rule"]["judged"] == {"strategy_loads": 1, "aa_loads": 0}
    assert {e["label"] for e in q["effectiveness"]["cells"] if e["strategy"] != "bidkv"} == {
        "identical to built-in"
    }
    assert _entry(q)["label"] == "beneficial"


def test_an_overloaded_cell_is_not_in_the_family(tmp_path: Path) -> None:
    # Built-in SLO attainment under 50%: nothing is judged there, so nothing is counted.
    root = write_folder(
        tmp_path / "over", _flat("output_tokens_per_s", 2.3), builtin_extra={
            k: {"slo_attainment": 0.3} for k in range(5)
        }, strategies={"s0": [{}] * 5},
    )  # fmt: skip
    q = compute_qualification(root)
    assert q["effectiveness"]["rule"]["comparisons"] == 0
    assert {e["label"] for e in q["effectiveness"]["cells"]} == {"overloaded"}


def _aa_rows(arm_b: list[dict[str, float]]) -> dict[str, list[dict[str, float]]]:
    return {"static-random": [{}] * len(arm_b), "static-random-aa": arm_b}


def test_aa_control_counts_its_false_positives(tmp_path: Path) -> None:
    quiet = write_folder(
        tmp_path / "quiet", [{}] * 5, strategies=_aa_rows(_noisy("ttft_p99_s", 0.5))
    )
    q = compute_qualification(quiet)
    aa = q["aa_control"]
    assert (aa["judged"], aa["false_positives"], aa["rate"], aa["trusted"]) == (1, 0, 0.0, True)
    assert "0 false positive(s) in 1 judged cell(s)" in aa["text"]
    assert [e["strategy"] for e in q["effectiveness"]["cells"]] == ["bidkv", "static-random"]
    # The A/A pair is part of the family: (bidkv, static-random, A/A) x 1 load x 11 endpoints.
    assert q["effectiveness"]["rule"]["comparisons"] == 3 * ENDPOINTS
    # A second arm 30% slower than the first: the rule calls it harmful, a false positive.
    broken = write_folder(
        tmp_path / "broken",
        _noisy("goodput_rps", 5.0),
        strategies=_aa_rows(_noisy("e2e_p95_s", 30.0)),
    )
    q = compute_qualification(broken)
    aa = q["aa_control"]
    assert (aa["judged"], aa["false_positives"], aa["rate"], aa["trusted"]) == (1, 1, 1.0, False)
    assert "cannot be trusted" in aa["text"]
    # Even a beneficial candidate is then no GO.
    assert _entry(q)["label"] == "beneficial"
    assert q["headline"]["decision"] == "no-go"
    assert "the verdicts cannot be trusted" in q["headline"]["text"]


def test_identical_arms_are_not_judged_by_the_aa_control(tmp_path: Path) -> None:
    q = compute_qualification(write_folder(tmp_path, [{}] * 4, strategies=_aa_rows([{}] * 4)))
    assert q["aa_control"]["judged"] == 0 and q["aa_control"]["rate"] is None
    assert q["aa_control"]["trusted"] is True


def test_repeats_that_are_not_independent_are_not_judged(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path, _noisy("e2e_p95_s", 20.0), inputs_extra={"independent_repeats": False}
    )
    entry = _entry(compute_qualification(root))
    assert entry["rule_label"] == "harmful"
    assert entry["label"] == "inconclusive"
    assert "not independent samples" in entry["reason"]


def test_fewer_than_three_pairs_is_inconclusive(tmp_path: Path) -> None:
    entry = _entry(compute_qualification(write_folder(tmp_path, _noisy("goodput_rps", 9.0)[:2])))
    assert entry["label"] == "inconclusive"
    assert "needs 3" in entry["reason"]
    assert entry["endpoints"]["goodput"]["low"] is not None  # two pairs still give an interval


def test_everything_passes(tmp_path: Path) -> None:
    q = compute_qualification(write_folder(tmp_path, _noisy("goodput_rps", 5.0)))
    gate = q["functional_compatibility"]
    assert gate["status"] == "passed", gate["reasons"]
    assert gate["reasons"] == []
    assert [c["name"] for c in gate["checks"]] == [
        "all_requests_completed",
        "no_policy_failure",
        "no_invalid_selection",
        "policy_stayed_enabled",
        "invoked_at_every_preemption",
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
    # The engine preempted (decisions) without asking the policy.
    "invoked_at_every_preemption": {"candidate_extra": {2: {"calls": 0, "selections": 0}}},
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
GOOD = _noisy("goodput_rps", 5.0)


@pytest.mark.parametrize("check", list(GATE_CASES))
def test_each_gate_check_fails_on_purpose(tmp_path: Path, check: str) -> None:
    root = write_folder(tmp_path, GOOD, **GATE_CASES[check])
    gate = compute_qualification(root)["functional_compatibility"]
    assert gate["status"] == "failed"
    failed = [c["name"] for c in gate["checks"] if not c["passed"]]
    assert failed == [check]
    assert len(gate["reasons"]) == 1
    assert gate["reasons"][0].startswith(f"{check}: ")


def test_a_run_that_preempted_nothing_needs_no_call(tmp_path: Path) -> None:
    quiet = {2: {"calls": 0, "selections": 0, "decisions": 0, "policy_enabled": None}}
    gate = compute_qualification(write_folder(tmp_path, GOOD, candidate_extra=quiet))[
        "functional_compatibility"
    ]
    assert gate["status"] == "passed", gate["reasons"]
    check = next(c for c in gate["checks"] if c["name"] == "invoked_at_every_preemption")
    assert (
        check["detail"] == "called in 4 of 5 runs, at every preemption (1 run(s) preempted nothing)"
    )


def test_a_job_in_which_nothing_preempted_passes_the_gate(tmp_path: Path) -> None:
    # A light workload: no run needed a victim, so the policy was never asked. The gate must
    # not blame the policy for that (a false NO-GO); the lifecycle says it was not exercised.
    quiet = {k: {"calls": 0, "selections": 0, "decisions": 0} for k in range(5)}
    q = compute_qualification(write_folder(tmp_path, GOOD, candidate_extra=quiet))
    gate = q["functional_compatibility"]
    assert gate["status"] == "passed", gate["reasons"]
    check = next(c for c in gate["checks"] if c["name"] == "invoked_at_every_preemption")
    assert check["detail"] == (
        "no run preempted (no victim decision in any of 5 runs): the policy was never needed"
    )
    assert q["lifecycle"]["runtime_effective"]["reached"] is False


def test_requests_the_engine_rejects_in_both_arms_fail_no_gate(tmp_path: Path) -> None:
    # One request of each repeat has a prompt >= max_model_len: rejected in both arms alike.
    refused = {k: {"finished": 99, "all_finished": False, "rejected": 1} for k in range(5)}
    root = write_folder(tmp_path, GOOD, candidate_extra=refused, builtin_extra=refused)
    q = compute_qualification(root)
    gate = q["functional_compatibility"]
    assert gate["status"] == "passed", gate["reasons"]
    check = next(c for c in gate["checks"] if c["name"] == "all_requests_completed")
    assert "5 request(s) with a prompt >= max_model_len rejected" in check["detail"]
    # Reported once, for the whole report.
    assert q["rejections"]["requests"] == 5 and q["rejections"]["of"] == 500
    assert "max_model_len (4096)" in q["rejections"]["text"]
    # A rejection in one arm only is the candidate's doing: the gate fails.
    more = {**refused, 3: {"finished": 98, "all_finished": False, "rejected": 2}}
    root = write_folder(tmp_path / "b", GOOD, candidate_extra=more, builtin_extra=refused)
    (reason,) = compute_qualification(root)["functional_compatibility"]["reasons"]
    assert reason == (
        "all_requests_completed: rejected requests differ between bidkv and builtin in 1 repeat(s)"
    )


def test_gate_reason_details(tmp_path: Path) -> None:
    root = write_folder(tmp_path, GOOD, **GATE_CASES["all_requests_completed"])
    (reason,) = compute_qualification(root)["functional_compatibility"]["reasons"]
    assert reason == "all_requests_completed: r0 bidkv: finished 97 of 100"
    root = write_folder(tmp_path / "c", GOOD, **GATE_CASES["conformance_passed"])
    (reason,) = compute_qualification(root)["functional_compatibility"]["reasons"]
    assert reason == "conformance_passed: 1 of 2 failed: bidkv/rollback/typed-exception"


@pytest.mark.parametrize(
    ("missing", "check"),
    [("diff", "legacy_typed_equivalent"), ("conformance", "conformance_passed")],
)
def test_missing_diff_or_conformance_fails_the_gate(
    tmp_path: Path, missing: str, check: str
) -> None:
    root = write_folder(tmp_path, GOOD, **{missing: False})
    gate = compute_qualification(root)["functional_compatibility"]
    assert [c["name"] for c in gate["checks"] if not c["passed"]] == [check]
    assert "missing" in gate["reasons"][0]


def test_equivalent_modulo_contract_passes(tmp_path: Path) -> None:
    root = write_folder(tmp_path, GOOD, diff={"verdict": "equivalent-modulo-contract"})
    assert compute_qualification(root)["functional_compatibility"]["status"] == "passed"


def test_lifecycle_labels_stay_separate(tmp_path: Path) -> None:
    # An invalid configuration: configured fails, yet the runs still show the later labels.
    root = write_folder(tmp_path, GOOD, policy_config={"utility_kv_gate": 2})
    labels = compute_qualification(root)["lifecycle"]
    assert labels["installed"]["reached"] is True
    assert labels["configured"]["reached"] is False
    assert "utility_kv_gate" in labels["configured"]["evidence"]
    assert labels["enabled"]["reached"] is True
    assert labels["runtime_effective"]["reached"] is True


def test_enabled_needs_the_typed_host_and_effective_needs_a_selection(tmp_path: Path) -> None:
    legacy = {k: {"host_path": "legacy", "selections": 0} for k in range(5)}
    root = write_folder(tmp_path, GOOD, candidate_extra=legacy)
    labels = compute_qualification(root)["lifecycle"]
    assert labels["enabled"]["reached"] is False
    assert "0 of 5 runs" in labels["enabled"]["evidence"]
    assert labels["runtime_effective"]["reached"] is False


def test_a_recorded_rule_is_the_one_applied(tmp_path: Path) -> None:
    from tracekit.qualify.endpoints import VerdictRule

    # A +3% goodput gain: beneficial under the default 2% margin, not under a registered 5%.
    rule = VerdictRule().with_settings({"goodput": 5.0})
    changes = _noisy("goodput_rps", 3.0)
    assert _entry(compute_qualification(write_folder(tmp_path / "a", changes)))["label"] == (
        "beneficial"
    )
    strict = write_folder(tmp_path / "b", changes, inputs_extra={"rule": rule.to_dict()})
    q = compute_qualification(strict)
    assert _entry(q)["label"] == "equivalent"
    margins = {e["name"]: e["margin"] for e in q["effectiveness"]["rule"]["endpoints"]}
    assert margins["goodput"] == 5.0


def test_qualification_json_is_deterministic_and_nan_free(tmp_path: Path) -> None:
    root = write_folder(tmp_path, GOOD)
    cells = pl.read_parquet(root / "cells.parquet").with_columns(
        pl.when(pl.col("strategy") == "builtin").then(0.0).otherwise(pl.col("ttft_p99_s"))
        .alias("ttft_p99_s")
    )  # fmt: skip
    cells.write_parquet(root / "cells.parquet")
    first = write_qualification(root, tmp_path / "a.json").read_bytes()
    second = write_qualification(root, tmp_path / "b.json").read_bytes()
    assert first == second
    document = json.loads(first)
    assert document["format"] == "tracekit.qualification"
    # A zero baseline mean gives no relative change: null, never NaN.
    stats = document["effectiveness"]["cells"][0]["endpoints"]["ttft_p99"]
    assert stats["changes"] == [None] * 5 and stats["verdict"] == "no interval"
    assert stats["note"] == "the built-in runs' mean is 0"
    assert b"NaN" not in first


def test_missing_files_and_columns_raise(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"qualify\.json: missing"):
        compute_qualification(tmp_path)
    root = write_folder(tmp_path / "r", GOOD)
    pl.read_parquet(root / "cells.parquet").drop("e2e_p95_s", "calls").write_parquet(
        root / "cells.parquet"
    )
    with pytest.raises(ResultsError, match="missing column\\(s\\) e2e_p95_s, calls"):
        compute_qualification(root)
    assert "e2e_p95_s" in CELL_COLUMNS


def test_an_endpoint_a_folder_does_not_record_is_no_interval(tmp_path: Path) -> None:
    root = write_folder(tmp_path, GOOD)
    pl.read_parquet(root / "cells.parquet").drop("goodput_rps").write_parquet(
        root / "cells.parquet"
    )
    entry = _entry(compute_qualification(root))
    assert entry["endpoints"]["goodput"]["verdict"] == "no interval"
    assert entry["endpoints"]["goodput"]["note"] == "not recorded"
    assert entry["label"] == "inconclusive"


def test_per_run_evidence_names_the_load_cell_under_a_load_plan() -> None:
    from tracekit.qualify.verdicts import _per_repeat

    frame = pl.DataFrame(
        {"load": ["rate-1x", "rate-0.6x", "rate-1x"], "repeat": [0, 0, 1], "selections": [4, 0, 7]}
    )
    assert _per_repeat(frame, "selections") == "rate-0.6x r0: 0, rate-1x r0: 4, rate-1x r1: 7"
    # One cell (or no load column): the repeat alone, as before.
    single = frame.filter(pl.col("load") == "rate-1x")
    assert _per_repeat(single, "selections") == "r0: 4, r1: 7"
