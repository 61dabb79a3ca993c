"""``diff_traces``: legacy-host versus typed-host recordings of the same run.

Runs are recorded with ``record_sim`` on the first 200 requests of the shipped Azure sample
(600 KV blocks: about 30 decisions). With ``largest-first`` nothing depends on the requester, so
both paths are identical. With the default ``bidkv`` configuration the typed path's cascade guard
abstains early in the run (seq 6 today) where the legacy path (no requester) takes the utility
top, and the histories split there. Doctored copies of the legacy bundle give every divergence
class on purpose.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from trace_helpers import rewrite_table

from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy
from tracekit.diff import (
    CLASSES,
    EXIT_INVALID_INPUT,
    DiffReport,
    IncomparableTracesError,
    diff_traces,
)
from tracekit.diff.align import align
from tracekit.diff.pairing import pair_runs
from tracekit.diff.policy_views import policy_views
from tracekit.engine.config import make_engine_config
from tracekit.errors import TracekitError, TraceSchemaError
from tracekit.recording.sim import SimRun, load_run_workload, record_sim
from tracekit.strategies import resolve_strategy

WORKLOAD = Path(__file__).parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
LIMIT = 200
# bidkv with weights 0 and rho 1: the cascade needs a tie with the requester (none here), and
# liveness abstentions apply the same victim on both paths.
LIVENESS_ONLY = {
    "utility_completion_weight": 0,
    "utility_preempt_weight": 0,
    "utility_cascade_gain_ratio": 1,
}


def record(
    out: Path,
    host: str,
    strategy: str = "bidkv",
    config: dict[str, Any] | None = None,
    limit: int = LIMIT,
    **engine: Any,
) -> Path:
    run = SimRun(
        load_run_workload(WORKLOAD, limit=limit),
        # The CLI's default clock; prefix caching off and synchronous scheduling, the engine
        # these comparisons were worked out on (the defaults are now vLLM's: both on).
        make_engine_config(
            **{
                "clock": "cost-model",
                "enable_prefix_caching": False,
                "async_scheduling": False,
                **engine,
            }
        ),
        resolve_strategy(strategy, config),
        host,  # type: ignore[arg-type]
    )
    return record_sim(run, out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[Path, Path]]:
    """Record (legacy, typed) once per configuration for the whole module."""
    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, tuple[Path, Path]] = {}

    def get(strategy: str = "bidkv", config: dict[str, Any] | None = None) -> tuple[Path, Path]:
        key = json.dumps([strategy, config], sort_keys=True)
        if key not in cache:
            folder = root / f"run{len(cache)}"
            cache[key] = (
                record(folder / "legacy", "legacy", strategy, config),
                record(folder / "typed", "typed", strategy, config),
            )
        return cache[key]

    return get


def doctored(source: Path, out: Path, table: str, edit: Callable[[pl.DataFrame], pl.DataFrame]):
    """A copy of bundle ``source`` with ``table`` rewritten by ``edit``."""
    shutil.copytree(source, out)
    rewrite_table(out, table, edit(pl.read_parquet(out / f"{table}.parquet")))
    return out


def at(seq: int, position: int | None = None) -> pl.Expr:
    expr = pl.col("seq") == seq
    return expr if position is None else expr & (pl.col("position") == position)


def with_victim(source: Path, out: Path, seq: int, victim: str) -> Path:
    """A copy of bundle ``source`` whose decision ``seq`` applied (and returned) ``victim``."""
    return doctored(
        source,
        out,
        "decisions",
        lambda d: d.with_columns(
            pl.when(at(seq)).then(pl.lit(victim)).otherwise(pl.col(c)).alias(c)
            for c in ("applied_victim_id", "raw_result")
        ),
    )


# -- equivalent --------------------------------------------------------------------------------


def test_largest_first_is_equivalent_through_both_hosts(runs) -> None:
    legacy, typed = runs("largest-first")
    report = diff_traces(legacy, typed)
    assert (report.verdict, report.exit_code) == ("equivalent", 0)
    (pair,) = report.pairs
    assert pair.divergence is None
    assert pair.decisions.is_empty() and pair.differences == []
    assert pair.comparable_decisions == pair.legacy.decisions == pair.typed.decisions > 10
    statuses = {c.name: c.status for c in pair.counters}
    assert statuses == {
        "calls": "equal",
        "selections": "typed-only",
        "abstentions": "typed-only",
        "failures": "typed-only",
        "invalid_selections": "typed-only",
        "enabled": "typed-only",
    }
    text = report.render_text()
    assert text.splitlines()[0] == "tracekit diff: equivalent: no difference (exit 0)"
    assert "differences by class" not in text


def test_liveness_abstentions_are_contract_differences_with_the_same_victims(runs) -> None:
    report = diff_traces(*runs("bidkv", LIVENESS_ONLY))
    (pair,) = report.pairs
    assert report.verdict == "equivalent-modulo-contract"
    assert pair.divergence is None and pair.differences == []
    kinds = pair.decisions["kind"].unique().to_list()
    assert kinds == ["abstention-contract"]
    rows = pair.decisions.unnest("legacy", "typed", separator="_")
    # Same victim, only the outcome differs: the legacy face turned None into its default.
    assert (rows["legacy_applied_victim_id"] == rows["typed_applied_victim_id"]).all()
    assert set(rows["typed_outcome"]) == {"abstained"}
    assert set(rows["legacy_outcome"]) == {"selected"}
    assert set(rows["typed_decision_reason"]) == {"liveness_abstain"}
    counters = {c.name: c for c in pair.counters}
    assert counters["abstentions"].typed == pair.decisions.height
    assert counters["abstentions"].status == "typed-only"
    assert counters["selections"].typed == counters["calls"].legacy - pair.decisions.height


# -- contract differences -------------------------------------------------------------------


def test_default_bidkv_is_equivalent_modulo_contract(runs) -> None:
    legacy, typed = runs()
    report = diff_traces(legacy, typed)
    assert report.verdict == "equivalent-modulo-contract"
    assert report.exit_code == 1
    assert diff_traces(legacy, typed, allow_contract_differences=True).exit_code == 0
    (pair,) = report.pairs
    kinds = pair.decisions["kind"].to_list()
    assert set(kinds) == {"abstention-contract", "cascade-contract"}
    # On this workload: a liveness abstention (same victim) before the first cascade guard.
    assert kinds.index("abstention-contract") < kinds.index("cascade-contract")
    cascade = pair.decisions.filter(pl.col("kind") == "cascade-contract").row(0, named=True)
    assert cascade["contract"]
    assert cascade["typed"]["outcome"] == "abstained"
    assert cascade["typed"]["decision_reason"] == "cascade_abstain"
    assert cascade["legacy"]["decision_reason"] == "strategy"
    assert cascade["legacy"]["applied_victim_id"] != cascade["typed"]["applied_victim_id"]
    divergence = pair.divergence
    assert divergence is not None
    assert (divergence.kind, divergence.caused_by_seq) == ("history", cascade["seq"])
    assert divergence.seq > cascade["seq"]
    assert pair.comparable_decisions == divergence.seq
    assert divergence.contract
    # Everything after the split belongs to different histories, explained by the cascade.
    after = [d for d in pair.differences if d.kind == "after-divergence"]
    assert after and all(d.contract for d in after)
    assert {"cascade_guard_hits", "calls", "requests"} <= {f for d in after for f in d.fields}
    assert pair.exposure["legacy_cascade_condition"] > 0


def test_the_policy_view_reproduces_the_policy_on_every_recorded_decision(runs) -> None:
    # The cascade class is verified, not read off labels: the recomputed utility top is the
    # victim of every legacy utility pick, and the cascade condition holds exactly where the
    # typed path abstained by the cascade guard.
    legacy, typed = runs()
    (pair,) = pair_runs(legacy, typed)
    alignment = align(pair)
    for side in ("legacy", "typed"):
        decisions = alignment.decisions.filter(pl.col(f"outcome_{side}").is_not_null())
        views = decisions.join(
            policy_views(alignment.candidates, decisions, pair.strategy_config, side=side), on="seq"
        )
        picks = views.filter(pl.col(f"decision_reason_{side}") == "strategy")
        assert (picks[f"applied_victim_id_{side}"] == picks["top_id"]).all()
        guarded = views.filter(pl.col(f"decision_reason_{side}") == "cascade_abstain")
        assert guarded["cascade"].all()
        if side == "typed":
            assert guarded.height > 0 and not picks["cascade"].any()


def test_a_cascade_label_without_the_condition_is_unexplained(runs, tmp_path: Path) -> None:
    legacy, typed = runs()
    (pair,) = diff_traces(legacy, typed).pairs
    seq, victim = (
        pair.decisions.filter(pl.col("kind") == "cascade-contract")
        .select("seq", pl.col("legacy").struct.field("applied_victim_id"))
        .row(0)
    )
    # Pretend the legacy path took another candidate than the utility top there.
    other = (
        pl.read_parquet(legacy / "candidates.parquet")
        .filter(at(seq) & (pl.col("request_id") != victim))["request_id"]
        .first()
    )
    bad = with_victim(legacy, tmp_path / "legacy", seq, other)
    report = diff_traces(bad, typed)
    (pair,) = report.pairs
    row = pair.decisions.filter(at(seq)).row(0, named=True)
    assert (row["kind"], row["contract"]) == ("unexplained", False)
    assert pair.divergence is not None and not pair.divergence.contract
    assert report.verdict == "different" and report.exit_code == 1


# -- first divergence built on purpose -------------------------------------------------------


def test_a_doctored_candidate_is_the_first_divergence(runs, tmp_path: Path) -> None:
    legacy, typed = runs("largest-first")
    bad = doctored(
        legacy,
        tmp_path / "legacy",
        "candidates",
        lambda c: c.with_columns(
            pl.when(at(5, 1))
            .then(pl.col("num_computed_tokens") + 1)
            .otherwise(pl.col("num_computed_tokens"))
            .alias("num_computed_tokens")
        ),
    )
    report = diff_traces(bad, typed)
    (pair,) = report.pairs
    divergence = pair.divergence
    assert divergence is not None
    assert (divergence.seq, divergence.kind, divergence.contract) == (5, "unexplained", False)
    assert divergence.context_fields == ()
    assert divergence.candidate_fields == ("num_computed_tokens",)
    assert divergence.differing_cells == [{"position": 1, "field": "num_computed_tokens"}]
    legacy_cell = divergence.legacy["candidates"][1]["num_computed_tokens"]
    assert legacy_cell == divergence.typed["candidates"][1]["num_computed_tokens"] + 1
    assert pair.comparable_decisions == 5
    assert report.verdict == "different"
    text = report.render_text()
    assert "first divergence at seq 5 [unexplained]" in text
    # Candidate rows start with their position; only position 1 has a marked cell.
    marked = [line for line in text.splitlines() if "*" in line and line.strip()[:1].isdigit()]
    assert len(marked) == 1 and marked[0].split()[0] == "1"


@pytest.mark.parametrize(
    ("table", "edit", "kind", "fields"),
    [
        (
            "decisions",
            lambda d: d.with_columns(
                pl.when(at(4)).then(0.5).otherwise(pl.col("kv_usage")).alias("kv_usage")
            ),
            "kv-or-time",
            ("kv_usage",),
        ),
        (
            "candidates",
            # Swap the first two candidates of seq 4: same requests, another order.
            lambda c: c.with_columns(
                pl.when(at(4, 0))
                .then(1)
                .when(at(4, 1))
                .then(0)
                .otherwise(pl.col("position"))
                .alias("position")
            ).sort("seq", "position"),
            "candidate-order",
            ("request_id",),
        ),
        (
            "decisions",
            lambda d: d.filter(pl.col("seq") < pl.col("seq").max()),
            "decision-count",
            (),
        ),
    ],
    ids=["kv-or-time", "candidate-order", "decision-count"],
)
def test_divergence_classes(
    runs, tmp_path: Path, table: str, edit: Any, kind: str, fields: tuple[str, ...]
) -> None:
    legacy, typed = runs("largest-first")
    report = diff_traces(doctored(legacy, tmp_path / "legacy", table, edit), typed)
    (pair,) = report.pairs
    assert pair.divergence is not None
    assert pair.divergence.kind == kind and not pair.divergence.contract
    differing = pair.divergence.context_fields + pair.divergence.candidate_fields
    assert set(fields) <= set(differing)
    assert report.verdict == "different"


def test_a_different_victim_without_a_contract_cause_is_unexplained(runs, tmp_path: Path) -> None:
    legacy, typed = runs("largest-first")
    victim = pl.read_parquet(legacy / "decisions.parquet").filter(at(3))["applied_victim_id"]
    other = (
        pl.read_parquet(legacy / "candidates.parquet")
        .filter(at(3) & ~pl.col("request_id").is_in(victim.implode()))["request_id"]
        .first()
    )
    bad = with_victim(legacy, tmp_path / "legacy", 3, other)
    (pair,) = diff_traces(bad, typed).pairs
    row = pair.decisions.row(0, named=True)
    assert (row["seq"], row["kind"]) == (3, "unexplained")
    assert row["fields"] == ["applied_victim_id", "raw_result"]
    # Only the recorded victim changed: the later contexts still agree, so no divergence.
    assert pair.divergence is None
    assert pair.verdict == "different"


# -- incomparable input ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("variants")
    return {
        "workload": record(root / "workload", "typed", "largest-first", limit=LIMIT + 1),
        "engine": record(root / "engine", "typed", "largest-first", max_num_seqs=16),
        "config": record(root / "config", "typed", "largest-first", {"utility_slo_s": 60.0}),
        "builtin": record(root / "builtin", "typed", "builtin"),
    }


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("workload", "different workload (num_requests 200 vs 201, options"),
        ("engine", "different engine config (max_num_seqs 32 vs 16)"),
        ("config", "different strategy config (utility_slo_s 120.0 vs 60.0)"),
    ],
)
def test_incomparable_runs_are_refused(runs, variants, variant: str, message: str) -> None:
    legacy, _ = runs("largest-first")
    with pytest.raises(IncomparableTracesError) as error:
        diff_traces(legacy, variants[variant])
    assert message in str(error.value)
    assert "\n" not in str(error.value)
    assert isinstance(error.value, TracekitError)


def test_a_different_strategy_is_refused(runs) -> None:
    legacy, _ = runs("largest-first")
    _, typed = runs("bidkv")
    with pytest.raises(IncomparableTracesError) as error:
        diff_traces(legacy, typed)
    assert "not comparable: different strategy ('largest-first' vs 'bidkv')" in str(error.value)


def test_host_paths_must_be_legacy_then_typed(runs, variants) -> None:
    legacy, typed = runs("largest-first")
    with pytest.raises(
        IncomparableTracesError, match="both recordings were made through the typed"
    ):
        diff_traces(typed, typed)
    with pytest.raises(IncomparableTracesError, match="through the legacy host"):
        diff_traces(legacy, legacy)
    with pytest.raises(IncomparableTracesError, match="pass the legacy recording first"):
        diff_traces(typed, legacy)
    with pytest.raises(IncomparableTracesError, match="host_path is 'builtin'"):
        diff_traces(legacy, variants["builtin"])


def test_unreadable_input_is_a_trace_schema_error(tmp_path: Path, runs) -> None:
    legacy, _ = runs("largest-first")
    with pytest.raises(TraceSchemaError, match="no such file or folder"):
        diff_traces(legacy, tmp_path / "missing")
    assert EXIT_INVALID_INPUT == 2


def test_incomplete_recordings_are_refused(runs, tmp_path: Path) -> None:
    legacy, typed = runs("largest-first")
    copy = tmp_path / "legacy"
    shutil.copytree(legacy, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    with pytest.raises(IncomparableTracesError, match="incomplete"):
        diff_traces(copy, typed)


# -- datasets ----------------------------------------------------------------------------------


def test_datasets_pair_run_by_run(runs, tmp_path: Path, variants) -> None:
    datasets = {side: tmp_path / side for side in ("legacy", "typed")}
    for strategy in ("largest-first", "bidkv"):
        for side, bundle in zip(("legacy", "typed"), runs(strategy), strict=True):
            shutil.copytree(bundle, datasets[side] / strategy)
    report = diff_traces(datasets["legacy"], datasets["typed"])
    verdicts = {p.key["strategy"]: p.verdict for p in report.pairs}
    assert verdicts == {"largest-first": "equivalent", "bidkv": "equivalent-modulo-contract"}
    assert report.verdict == "equivalent-modulo-contract"
    shutil.copytree(variants["engine"], datasets["typed"] / "extra")
    with pytest.raises(IncomparableTracesError, match="no legacy run of the same workload"):
        diff_traces(datasets["legacy"], datasets["typed"])


# -- output --------------------------------------------------------------------------------------


def test_json_output_follows_the_documented_schema(runs) -> None:
    data = json.loads(json.dumps(diff_traces(*runs()).to_dict()))
    assert set(data) == {
        "format",
        "version",
        "verdict",
        "exit_code",
        "allow_contract_differences",
        "pairs",
    }
    assert (data["format"], data["version"], data["exit_code"]) == ("tracekit.diff", 1, 1)
    (pair,) = data["pairs"]
    assert set(pair) == {
        "verdict",
        "key",
        "legacy",
        "typed",
        "comparable_decisions",
        "divergence",
        "classes",
        "counters",
        "exposure",
        "differences",
    }
    assert set(pair["divergence"]) == {
        "seq",
        "kind",
        "contract",
        "detail",
        "context_fields",
        "candidate_fields",
        "caused_by_seq",
        "legacy",
        "typed",
        "differing_cells",
    }
    for difference in pair["differences"]:
        assert set(difference) == {
            "kind",
            "contract",
            "scope",
            "seq",
            "fields",
            "legacy",
            "typed",
            "detail",
        }
        assert difference["kind"] in CLASSES
    for summary in pair["classes"]:
        assert summary["cause"] == CLASSES[summary["kind"]].cause
    docs = (Path(__file__).parents[1] / "docs" / "diff.md").read_text()
    for key in [*data, *pair, *pair["divergence"], *pair["classes"][0], *CLASSES]:
        assert f"`{key}`" in docs, key


def test_human_output_shows_classes_and_both_contexts(runs) -> None:
    report: DiffReport = diff_traces(*runs())
    lines = report.render_text().splitlines()
    assert lines[0].startswith("tracekit diff: equivalent-modulo-contract: every difference")
    text = "\n".join(lines)
    (pair,) = report.pairs
    assert pair.divergence is not None
    cascade = pair.decisions.filter(pl.col("kind") == "cascade-contract")["seq"].to_list()
    assert f"  [contract] cascade-contract: 1 decision(s) (seq {cascade[0]})" in text
    assert "  [contract] abstention-contract: " in text
    assert f"first divergence at seq {pair.divergence.seq} [history]" in text
    assert "context                legacy" in text
    assert "candidates, legacy | typed" in text
    assert "host counters (the legacy host has no controller" in text


def test_barrier_mode_cascade_takes_the_requester_on_the_typed_path_only(runs) -> None:
    (pair,) = diff_traces(*runs("bidkv", {"utility_liveness_mode": "barrier"})).pairs
    cascade = pair.decisions.filter(pl.col("kind") == "cascade-contract")
    assert cascade.height >= 1
    row = cascade.row(0, named=True)
    # Barrier mode never abstains: both paths select, the typed one the requester.
    assert row["typed"]["outcome"] == row["legacy"]["outcome"] == "selected"
    assert "took the requester" in row["detail"]
    assert pair.verdict == "equivalent-modulo-contract"


def test_recordings_without_final_state_compare_decisions_only(runs, tmp_path: Path) -> None:
    copies = []
    for bundle in runs("largest-first"):
        copy = tmp_path / bundle.name
        shutil.copytree(bundle, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest.pop("final_state")
        (copy / "manifest.json").write_text(json.dumps(manifest))
        copies.append(copy)
    report = diff_traces(*copies)
    assert report.verdict == "equivalent"
    assert report.pairs[0].counters == []


class FailsOnTheTypedFace:
    """largest-first whose typed face raises on its third call (its legacy face never fails)."""

    def __init__(self) -> None:
        config = BidkvSelectorConfig(
            enable_utility_victim_selection=True, utility_strategy="largest-first"
        )
        self.policy = BidkvPreemptionPolicy(config)
        self.calls = 0

    def select_victim(self, context: Any) -> str | None:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("typed face bug")
        return self.policy.select_victim(context)

    def pick_victim(self, running: Any, policy: Any, **kwargs: Any) -> Any:
        return self.policy.pick_victim(running, policy, **kwargs)


def test_a_failure_on_one_path_only_is_a_policy_failure(tmp_path: Path) -> None:
    strategy = f"{__name__}:FailsOnTheTypedFace"
    legacy = record(tmp_path / "legacy", "legacy", strategy)
    typed = record(tmp_path / "typed", "typed", strategy)
    report = diff_traces(legacy, typed)
    (pair,) = report.pairs
    first = pair.decisions.row(0, named=True)
    assert (first["seq"], first["kind"], first["contract"]) == (2, "policy-failure", False)
    assert first["typed"]["outcome"] == "exception"
    assert set(pair.decisions["kind"]) == {"policy-failure"}
    counters = {c.name: c for c in pair.counters}
    assert (counters["failures"].typed, counters["failures"].status) == (1, "different")
    assert counters["enabled"].status == "different"
    assert report.verdict == "different"
