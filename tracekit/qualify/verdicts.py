"""The verdicts of a qualification: lifecycle labels, the functional gate, effectiveness.

Three questions, kept apart (docs/report.md, "The verdict rules"):

1. **Lifecycle** — how far the candidate got: *installed* (``bidkv`` and its manifests import,
   the policy class resolves), *configured* (the policy configuration validates), *enabled* (the
   candidate ran through the engine's typed host in every repeat), *runtime-effective* (the
   policy was called and selected a victim at least once). Each label stands on its own
   evidence; a later label does not imply an earlier one was checked.
2. **Functional compatibility gate** — passed only if every check passes: every request of the
   candidate's and the baseline's runs completed, no policy failure, no invalid selection, the
   policy stayed enabled, the policy was asked at every preemption, the legacy and typed paths are
   equivalent (``diff/diff.json``), and every conformance check passed.
3. **Effectiveness** — per cell and strategy, see :mod:`tracekit.qualify.effectiveness`.

:func:`compute_qualification` returns everything as one JSON-ready dictionary
(``qualification.json``, documented field by field in ``docs/report.md``). It is deterministic:
the same results folder gives the same dictionary.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import ConfigError, ManifestError
from tracekit.qualify.aa_control import AA_ARM, AA_STRATEGY, aa_summary
from tracekit.qualify.effectiveness import (
    BENEFICIAL,
    EQUIVALENT,
    HARMFUL,
    INCONCLUSIVE,
    compare,
)
from tracekit.qualify.endpoints import VerdictRule
from tracekit.qualify.load_verdicts import (
    OVERLOADED,
    go_no_go,
    judged_comparisons,
    label_matrix,
    load_headlines,
    relabel_entries,
)
from tracekit.qualify.results import BASELINE, Results, load_results

__all__ = [
    "EQUIVALENT_VERDICTS",
    "effectiveness_verdicts",
    "QUALIFICATION_FORMAT",
    "QUALIFICATION_NAME",
    "compute_qualification",
    "conformance_checks",
    "dumps_qualification",
    "functional_gate",
    "lifecycle_labels",
    "qualification_from_results",
    "rejections_summary",
    "write_qualification",
]

QUALIFICATION_FORMAT = "tracekit.qualification"
# The verdicts' file name, beside report.html.
QUALIFICATION_NAME = "qualification.json"
EQUIVALENT_VERDICTS = ("equivalent", "equivalent-modulo-contract")


def _label(reached: bool, evidence: str) -> dict[str, Any]:
    return {"reached": reached, "evidence": evidence}


def _installed(candidate: str) -> dict[str, Any]:
    # Checked in the environment that computes the verdicts, the one that ran the qualification.
    from tracekit import __version__
    from tracekit.hosts.preemption_policy import resolve_qualname
    from tracekit.manifests import validate_manifest

    try:
        from tracekit.strategies import POLICY_CLASS, policy_manifests

        manifests = policy_manifests()
        for _, path in manifests:
            validate_manifest(str(path), resolve=True)
        qualname = candidate if ":" in candidate else POLICY_CLASS
        resolve_qualname(qualname)
    except (ImportError, AttributeError, ValueError, ManifestError) as exc:
        return _label(False, f"{type(exc).__name__}: {exc}")
    names = ", ".join(name for name, _ in manifests)
    return _label(
        True, f"bidkv {__version__} imports; manifests {names} validate; {qualname} resolves"
    )


def _configured(results: Results) -> dict[str, Any]:
    from tracekit.strategies import resolve_strategy

    try:
        spec = resolve_strategy(results.candidate, dict(results.inputs.get("policy_config") or {}))
    except ConfigError as exc:
        return _label(False, str(exc))
    changed = results.changed_settings
    shown = json.dumps(changed, sort_keys=True) if changed else "the default settings"
    return _label(True, f"strategy {spec.name} with {shown} (others default) validates")


def _per_repeat(frame: pl.DataFrame, column: str) -> str:
    """``r0: v, r1: v, ...``; under a load plan each run is named by its cell too."""
    if "load" in frame.columns and frame["load"].n_unique() > 1:
        frame = frame.sort("load", "repeat")
        names = [f"{load} r{r}" for load, r in zip(frame["load"], frame["repeat"], strict=True)]
    else:
        names = [f"r{r}" for r in frame["repeat"]]
    return ", ".join(f"{n}: {v}" for n, v in zip(names, frame[column], strict=True))


def lifecycle_labels(results: Results) -> dict[str, dict[str, Any]]:
    """The four lifecycle labels of the candidate, each with its evidence.

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    dict
        ``installed``, ``configured``, ``enabled``, ``runtime_effective``: each
        ``{"reached": bool, "evidence": str}``.
    """
    candidate = results.candidate
    runs = results.cells.filter(pl.col("strategy") == candidate).sort("repeat")
    labels = {
        "installed": _installed(candidate),
        "configured": _configured(results),
    }
    if runs.height == 0:
        none = f"no run of {candidate} in cells.parquet"
        labels["enabled"] = _label(False, none)
        labels["runtime_effective"] = _label(False, none)
        return labels
    typed = runs.filter(pl.col("host_path") == "typed").height
    labels["enabled"] = _label(
        typed == runs.height,
        f"{typed} of {runs.height} runs went through the typed host "
        f"(host_path {_per_repeat(runs, 'host_path')})",
    )
    calls = int(runs["calls"].sum())
    selections = int(runs["selections"].sum())
    labels["runtime_effective"] = _label(
        calls > 0 and selections > 0,
        f"{calls} calls, {selections} selections over {runs.height} runs "
        f"(selections {_per_repeat(runs, 'selections')})",
    )
    return labels


def _check(name: str, passed: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "passed": passed, "detail": detail}


def _failing(frame: pl.DataFrame, condition: pl.Expr, what: str) -> str:
    bad = frame.filter(condition)
    return "; ".join(
        f"r{r} {s}: {what} {v}"
        for r, s, v in zip(bad["repeat"], bad["strategy"], bad["value"], strict=True)
    )


def _run_name(frame: pl.DataFrame) -> pl.Expr:
    """``r<k> <strategy>``, with the load first under a load plan."""
    if "load" in frame.columns:
        return pl.format("{} r{} {}", "load", "repeat", "strategy")
    return pl.format("r{} {}", "repeat", "strategy")


def rejections_summary(results: Results) -> dict[str, Any] | None:
    """The requests the engine refused on arrival, once for the report (``None``: none).

    A request whose prompt is at least ``max_model_len`` is rejected by the engine in every run
    of every strategy alike (docs/qualify.md, "Requests the engine rejects"), so it is taken out
    of both arms of every comparison; it is reported here once, not as a failure of each run.
    """
    cells = results.cells
    if "rejected" not in cells.columns:
        return None
    base = cells.filter(pl.col("strategy") == BASELINE)
    if base.height == 0 or not int(base["rejected"].sum()):
        return None
    per_cell = base.group_by("cell", maintain_order=True).agg(pl.col("rejected").sum())
    count = int(per_cell["rejected"].max())
    requests = int(base.group_by("cell").agg(pl.col("requests").sum())["requests"].max())
    engine = results.inputs.get("engine_config") or {}
    limit = engine.get("max_model_len", "?")
    return {
        "requests": count,
        "of": requests,
        "max_model_len": limit,
        "text": f"{count} of {requests} requests of the workload have a prompt of at least "
        f"max_model_len ({limit}) tokens: the engine rejects them in every run of every "
        "strategy, so they are left out of both arms of every comparison (load the workload "
        "with --oversize-prompts drop or cap to leave them out or shorten them)",
    }


def _run_checks(results: Results) -> list[dict[str, Any]]:
    candidate = results.candidate
    cells = results.cells
    runs = cells.filter(pl.col("strategy") == candidate)
    compared = cells.filter(pl.col("strategy").is_in([candidate, BASELINE]))
    # A request its client cancelled (--ttft-timeout-s, a recorded cancel) ended as the client
    # chose, and one the engine refused on arrival (prompt >= max_model_len) is refused in
    # both arms alike: neither is a failure of the policy.
    done = pl.col("finished").fill_null(0)
    for column in ("aborted", "rejected"):
        if column in compared.columns:
            done = done + pl.col(column).fill_null(0)
    unfinished = "; ".join(
        compared.filter(done < pl.col("requests"))
        .select(pl.format("{}: finished {} of {}", _run_name(compared), "finished", "requests"))
        .to_series()
        .to_list()
    )
    refused = ""
    if "rejected" in compared.columns:
        # The engine refuses a request for its prompt alone: a difference between the two arms
        # in the same repeat would be the candidate's doing.
        pairs = (
            compared.group_by("cell", "repeat")
            .agg(pl.col("rejected").n_unique().alias("kinds"))
            .filter(pl.col("kinds") > 1)
        )
        if pairs.height:
            refused = f"rejected requests differ between {candidate} and {BASELINE} in "
            refused += f"{pairs.height} repeat(s)"
    aborted = int(compared["aborted"].sum()) if "aborted" in compared.columns else 0
    finished_text = f"every request finished in {compared.height} runs"
    if aborted:
        finished_text = (
            f"every request finished or was aborted by its client in {compared.height} runs "
            f"({aborted} aborted)"
        )
    rejections = rejections_summary(results)
    if rejections is not None:
        finished_text += (
            f"; {rejections['requests']} request(s) with a prompt >= max_model_len rejected by "
            "the engine in both arms alike, left out"
        )
    problems = "; ".join(p for p in (unfinished, refused) if p)
    checks = [
        _check(
            "all_requests_completed",
            not problems and compared.height > 0,
            problems or finished_text,
        )
    ]
    for name, column, what in (
        ("no_policy_failure", "failures", "failures"),
        ("no_invalid_selection", "invalid_selections", "invalid selections"),
    ):
        bad = _failing(runs.rename({column: "value"}), pl.col("value") > 0, what)
        checks.append(_check(name, not bad and runs.height > 0, bad or f"0 {what}"))
    # A run that never called the policy (no preemption) has no enabled state: it is not a
    # disabled one; invocation is checked below.
    disabled = _failing(
        runs.with_columns(pl.lit("disabled").alias("value")),
        ~pl.col("policy_enabled").fill_null(True),
        "policy",
    )
    checks.append(
        _check(
            "policy_stayed_enabled",
            not disabled and runs.height > 0,
            disabled or "enabled at the end of every run",
        )
    )
    checks.append(_invoked_check(runs))
    return checks


def _invoked_check(runs: pl.DataFrame) -> dict[str, Any]:
    """The policy was asked at every preemption: called in every run that preempted, and once.

    A light load or a short window may preempt nothing, and then the policy is never asked;
    that is no failure. A run whose engine preempted (it recorded decisions) without calling the
    policy is one: the engine bypassed it.
    """
    if runs.height == 0:
        return _check("invoked_at_every_preemption", False, "no run of the candidate")
    decisions = pl.col("decisions") if "decisions" in runs.columns else pl.col("calls")
    bypassed = runs.filter((decisions > 0) & (pl.col("calls").fill_null(0) <= 0))
    called = int(runs.filter(pl.col("calls") > 0).height)
    if bypassed.height:
        names = bypassed.select(_run_name(bypassed)).to_series().to_list()
        return _check(
            "invoked_at_every_preemption",
            False,
            f"the engine preempted without calling the policy in {len(names)} run(s): "
            + ", ".join(names[:5]),
        )
    if called == 0:
        # No run preempted at all: the engine never needed a victim, so the policy had nothing
        # to do. That is no incompatibility (the lifecycle's runtime_effective says it was not
        # exercised); failing the gate would blame the policy for the workload.
        return _check(
            "invoked_at_every_preemption",
            True,
            f"no run preempted (no victim decision in any of {runs.height} runs): the policy was "
            "never needed",
        )
    quiet = runs.height - called
    detail = f"called in {called} of {runs.height} runs, at every preemption"
    if quiet:
        detail += f" ({quiet} run(s) preempted nothing)"
    return _check("invoked_at_every_preemption", True, detail)


def _diff_check(diff: dict[str, Any] | None) -> dict[str, Any]:
    if diff is None:
        return _check("legacy_typed_equivalent", False, "diff/diff.json is missing")
    verdict = str(diff.get("verdict"))
    return _check(
        "legacy_typed_equivalent",
        verdict in EQUIVALENT_VERDICTS,
        f"legacy-versus-typed verdict: {verdict}",
    )


def conformance_checks(conformance: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The named checks of ``conformance.json`` as ``{name, passed, detail}`` (tolerant reader).

    Parameters
    ----------
    conformance
        The parsed file, or ``None``.

    Returns
    -------
    list of dict
        Empty when the file is absent or lists no check.
    """
    if conformance is None:
        return []
    raw = conformance.get("checks", [])
    if isinstance(raw, dict):
        raw = [{"name": k, **(v if isinstance(v, dict) else {"passed": v})} for k, v in raw.items()]
    checks = []
    for item in raw if isinstance(raw, list) else []:
        passed = item.get("passed", item.get("ok"))
        if passed is None:
            passed = str(item.get("status", "")).lower() in ("pass", "passed", "ok")
        detail = item.get("detail", item.get("details", item.get("message", "")))
        if not isinstance(detail, str):
            detail = json.dumps(detail, sort_keys=True, default=str)
        checks.append(
            {"name": str(item.get("name", "?")), "passed": bool(passed), "detail": detail}
        )
    return checks


def _conformance_check(conformance: dict[str, Any] | None) -> dict[str, Any]:
    if conformance is None:
        return _check("conformance_passed", False, "conformance.json is missing")
    checks = conformance_checks(conformance)
    failed = [c["name"] for c in checks if not c["passed"]]
    overall = conformance.get("passed")
    passed = bool(checks) and not failed and overall is not False
    if not checks:
        detail = "conformance.json lists no check"
    elif failed:
        detail = f"{len(failed)} of {len(checks)} failed: {', '.join(failed)}"
    else:
        detail = f"all {len(checks)} checks passed"
    return _check("conformance_passed", passed, detail)


def _output_gate_check(gate: dict[str, Any]) -> dict[str, Any]:
    # output_gate.json is written by tracekit.vllm.live_engine.gate (OutputGate.to_dict).
    return _check("outputs_equal", gate.get("passed") is True, str(gate.get("detail", "")))


def functional_gate(results: Results) -> dict[str, Any]:
    """The functional compatibility gate: every check, and the reasons of a failure.

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    dict
        ``status`` (``passed`` or ``failed``), ``checks`` (``{name, passed, detail}`` each),
        ``reasons`` (``"<name>: <detail>"`` of every failed check, empty when passed).
    """
    checks = [
        *_run_checks(results),
        _diff_check(results.diff),
        _conformance_check(results.conformance),
    ]
    # A row only when a live recording's output gate is in the folder (tracekit outputs).
    if results.output_gate is not None:
        checks.append(_output_gate_check(results.output_gate))
    reasons = [f"{c['name']}: {c['detail']}" for c in checks if not c["passed"]]
    if is_sweep(results) and results.diff is None and results.conformance is None:
        # A sweep runs neither by design: the gate was not run, which is not a failure.
        ran = [f"{c['name']}: {c['detail']}" for c in checks[:-2] if not c["passed"]]
        why = f"{SWEEP_GATE}; run tracekit qualify for the gate"
        return {"status": "failed" if ran else "not-run", "checks": checks, "reasons": [*ran, why]}
    return {"status": "failed" if reasons else "passed", "checks": checks, "reasons": reasons}


#: Why a sweep folder has no functional compatibility verdict (docs/sweep.md, "The report of a
#: sweep").
SWEEP_GATE = "a sweep runs no legacy-versus-typed diff and no conformance checks"


def is_sweep(results: Results) -> bool:
    """Whether ``results`` is a ``tracekit sweep`` folder (its ``sweep.json``)."""
    return results.inputs.get("format") == "tracekit.sweep"


def sweep_headline(entries: list[dict[str, Any]], candidate: str) -> dict[str, str]:
    """The headline of a sweep: what it can conclude (effectiveness per cell), and what not."""
    mine = [e["label"] for e in entries if e["strategy"] == candidate]
    counts = ", ".join(f"{label} in {mine.count(label)}" for label in dict.fromkeys(mine))
    found = f"{candidate} is {counts} of {len(mine)} cells" if mine else "it is in no cell"
    return {
        "decision": "none",
        "text": f"No GO/NO-GO from a sweep: {SWEEP_GATE}, so it cannot qualify {candidate} "
        f"(run tracekit qualify); it compares each cell's strategies with the built-in rule: "
        f"{found}",
    }


def _scope(results: Results) -> str:
    workload = (results.inputs.get("workload") or {}).get("name", "?")
    return (
        f"workload {workload}, {results.inputs.get('repeats', '?')} repeats "
        f"({results.inputs.get('repeat_kind', '?')}), embedded engine"
    )


def _clean(value: Any) -> Any:
    # NaN and infinities are not JSON: they become null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def recomputation_note(
    results: Results, entries: list[dict[str, Any]], rule: VerdictRule
) -> str | None:
    """One line on the candidate's recomputation: harm, or why more discarded KV is not harm.

    ``recomputed_tokens`` in a trace counts the KV a request's preemptions threw away; with
    prefix caching much of it comes back from the cache on resume, so the endpoints judge the
    truly recomputed tokens and the recompute tax. When the candidate discarded more than the
    built-in rule but was not found harmful on either, this line says so and why, with the
    pooled figures over the judged loads. ``None`` when there is nothing to explain.
    """
    candidate = results.candidate
    mine = [e for e in entries if e["strategy"] == candidate and e["label"] != OVERLOADED]
    efficiency = [e.name for e in rule.endpoints if e.group == "efficiency"]
    broken = [
        (e["load"], name, e["endpoints"][name])
        for e in mine
        for name in efficiency
        if name in e["endpoints"] and e["endpoints"][name]["verdict"] == "worse"
    ]
    if broken:
        load, name, stats = broken[0]
        unit = "%" if stats["unit"] == "%" else " pp"
        return (
            f"{candidate}'s extra recomputation is harm: {name} {stats['mean']:+.1f}{unit} "
            f"[{stats['low']:+.1f}{unit}, {stats['high']:+.1f}{unit}] at {load}, beyond the "
            f"margin of {stats['margin']:g}{unit}"
        )
    needed = {"recomputed_tokens", "truly_recomputed_tokens", "computed_tokens"}
    cells = results.cells
    if not mine or not needed <= set(cells.columns):
        return None
    judged = cells.filter(pl.col("cell").is_in([e["cell"] for e in mine]))
    pairs = judged.filter(pl.col("strategy") == candidate).join(
        judged.filter(pl.col("strategy") == BASELINE), on=["cell", "repeat"], suffix="_base"
    )
    totals = pairs.select(
        pl.col(c).sum().alias(c) for c in (*needed, *(f"{n}_base" for n in needed))
    ).row(0, named=True)
    if not totals["recomputed_tokens_base"] or not totals["truly_recomputed_tokens_base"]:
        return None
    discarded = 100 * (totals["recomputed_tokens"] / totals["recomputed_tokens_base"] - 1)
    if discarded <= 0:
        return None
    truly = 100 * (totals["truly_recomputed_tokens"] / totals["truly_recomputed_tokens_base"] - 1)
    served = 1 - totals["truly_recomputed_tokens"] / max(1, totals["recomputed_tokens"])
    tax = 100 * (
        totals["truly_recomputed_tokens"] / max(1, totals["computed_tokens"])
        - totals["truly_recomputed_tokens_base"] / max(1, totals["computed_tokens_base"])
    )
    margins = {e.name: e for e in rule.endpoints}
    shown = ", ".join(
        f"{margins[n].margin:g}{'%' if margins[n].unit == '%' else ' pp'} for {n}"
        for n in efficiency
        if n in margins
    )
    text = (
        f"Harm not shown: {candidate} discarded {discarded:+.0f}% more KV than the built-in rule "
        f"over the judged loads, but the prefix cache served {served:.0%} of its discarded "
        f"tokens back, so it truly recomputed {truly:+.0f}% and its recompute tax moved "
        f"{tax:+.2f} pp; at no load is either shown beyond its margin ({shown})"
    )
    # The interval that comes closest to showing harm: how far the evidence is from a verdict.
    open_ = [
        (stats["mean"] / stats["margin"], e["load"], name, stats)
        for e in mine
        for name in efficiency
        if (stats := e["endpoints"].get(name))
        and stats["verdict"] == "undecided"
        and stats["mean"] is not None
        and stats["low"] is not None
    ]
    if not open_:
        return text + ", and at every load the interval stays below the margin"
    _, load, name, stats = max(open_, key=lambda item: item[0])
    unit = "%" if stats["unit"] == "%" else " pp"
    return (
        f"{text}, nor within it: {name} at {load} is {stats['mean']:+.1f}{unit} "
        f"[{stats['low']:+.1f}{unit}, {stats['high']:+.1f}{unit}], an interval that spans the "
        f"margin"
    )


# Why a label of repeats that are not independent samples is withheld.
_DEPENDENT = (
    "not judged: the repeats are the same traffic run with other seeds (recorded arrivals or a "
    "closed loop), not independent samples, so no interval is valid; repeat by windows, or "
    "generate the arrivals (--arrivals poisson --rate R) so that each seed draws its own"
)


def _dependent_loads(inputs: dict[str, Any]) -> set[str] | None:
    """The loads whose repeats are not independent (``None``: every load, without a plan)."""
    loads = inputs.get("loads")
    if loads:
        return {str(c["label"]) for c in loads if c.get("independent_repeats") is False}
    return None if inputs.get("independent_repeats") is False else set()


def _not_independent(entries: list[dict[str, Any]], dependent: set[str] | None) -> list[dict]:
    """Withhold the rule's label where the repeats are not independent samples."""
    out = []
    for entry in entries:
        hit = dependent is None or entry.get("load") in dependent
        if hit and entry["label"] in (BENEFICIAL, HARMFUL, EQUIVALENT, INCONCLUSIVE):
            entry = {**entry, "label": INCONCLUSIVE, "reason": _DEPENDENT,
                     "repeats_needed": None, "repeats_needed_label": None}  # fmt: skip
        out.append(entry)
    return out


def effectiveness_verdicts(results: Results) -> dict[str, Any]:
    """Every strategy's verdict per load, the A/A control and the rule they were judged by.

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    dict
        ``rule`` (the registered rule, with ``comparisons``, the family size ``m``, and the
        intervals' ``confidence``), ``cells`` (one entry per load and strategy against the
        built-in rule, lightest load first) and ``aa_control`` (``None`` when the folder has no
        A/A runs).
    """
    rule = VerdictRule.from_dict(results.inputs.get("rule"))
    cells = results.cells
    present = set(cells["strategy"].unique().to_list())
    strategies = [s for s in results.strategies if s in present and s not in (BASELINE, AA_ARM)]
    has_aa = AA_ARM in present and AA_STRATEGY in present
    dependent = _dependent_loads(results.inputs)
    # The family of the correction: every judged strategy (and the A/A pair) x load x endpoint;
    # a label the runs' structure decides (identical, overloaded, not independent) is no test.
    judged = judged_comparisons(cells, strategies, dependent)
    aa_judged = judged_comparisons(cells, [AA_ARM], dependent, identical=False) if has_aa else []
    comparisons = (len(judged) + len(aa_judged)) * len(rule.endpoints)
    entries = [e for s in strategies for e in compare(cells, s, BASELINE, rule, comparisons)]
    entries = _not_independent(relabel_entries(entries, cells), dependent)
    aa = None
    if has_aa:
        aa_entries = relabel_entries(
            compare(cells, AA_ARM, AA_STRATEGY, rule, comparisons), cells, identical=False
        )
        aa_entries = _not_independent(aa_entries, dependent)
        skipped = {e["cell"]: e["reason"] for e in aa_entries if e["label"] == OVERLOADED}
        aa = aa_summary(aa_entries, rule.alpha, skipped)
    return {
        "recomputation": recomputation_note(results, entries, rule),
        "rule": {
            **rule.to_dict(),
            "comparisons": comparisons,
            "confidence": rule.confidence(comparisons),
            "judged": {"strategy_loads": len(judged), "aa_loads": len(aa_judged)},
            "interval": "paired Student-t, two-sided, Bonferroni-corrected over the report's "
            "judged comparisons",
        },
        "cells": entries,
        "aa_control": aa,
    }


def qualification_from_results(results: Results) -> dict[str, Any]:
    """The qualification of a loaded results folder (see :func:`compute_qualification`).

    Parameters
    ----------
    results
        A loaded results folder.

    Returns
    -------
    dict
        The ``qualification.json`` document.
    """
    inputs = results.inputs
    candidate = results.candidate
    gate = functional_gate(results)
    verdicts = effectiveness_verdicts(results)
    entries = verdicts["cells"]
    aa = verdicts["aa_control"]
    mine = [e for e in entries if e["strategy"] == candidate]
    strategies = [candidate, *(s for s in results.strategies if s != candidate)]
    document = {
        "format": QUALIFICATION_FORMAT,
        "version": 2,
        "candidate": candidate,
        "baseline": BASELINE,
        # The report's first line: GO or NO-GO, the loads and the reason in one sentence; a
        # sweep decides nothing and says so.
        "headline": sweep_headline(entries, candidate)
        if is_sweep(results)
        else go_no_go(gate, entries, candidate, aa),
        "matrix": label_matrix(
            entries, results.cells, strategies, [] if aa is None else aa["cells"]
        ),
        "load_headlines": load_headlines(entries, results.cells, candidate),
        "rejections": rejections_summary(results),
        "recomputation": verdicts["recomputation"],
        "inputs": {
            key: inputs.get(key)
            for key in (
                "workload",
                "engine_config",
                "strategies",
                "policy_config",
                "repeats",
                "repeat_kind",
                "repeat_details",
                "slo",
                "tool_version",
                "created_at",
                "capacity",
                "loads",
                "rule",
            )
        },
        "lifecycle": lifecycle_labels(results),
        "functional_compatibility": gate,
        "conformance": conformance_checks(results.conformance),
        "effectiveness": {"rule": verdicts["rule"], "cells": entries},
        "aa_control": aa,
        "runtime_qualification": {
            "functional_compatibility": {"status": gate["status"], "scope": _scope(results)},
            "effectiveness_qualifications": [
                {"status": e["label"], "scope": e["cell"], "reason": e["reason"]} for e in mine
            ],
        },
    }
    return _clean(document)  # type: ignore[no-any-return]


def compute_qualification(results_dir: str | Path) -> dict[str, Any]:
    """Compute the verdicts of a results folder.

    Parameters
    ----------
    results_dir
        A folder written by ``tracekit qualify``.

    Returns
    -------
    dict
        The ``qualification.json`` document: ``format``, ``version``, ``candidate``,
        ``baseline``, ``inputs``, ``lifecycle``, ``functional_compatibility``, ``conformance``,
        ``effectiveness`` and ``runtime_qualification`` (``docs/report.md``).

    Raises
    ------
    ResultsError
        The folder lacks ``qualify.json`` or ``cells.parquet``, or a required column.
    """
    return qualification_from_results(load_results(results_dir))


def dumps_qualification(document: dict[str, Any]) -> str:
    """``qualification.json``'s text: indented, key order kept, no NaN, trailing newline."""
    return json.dumps(document, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_qualification(results_dir: str | Path, out: str | Path) -> Path:
    """Compute the verdicts of ``results_dir`` and write them to ``out`` as JSON.

    Parameters
    ----------
    results_dir
        A folder written by ``tracekit qualify``.
    out
        The JSON file to write.

    Returns
    -------
    Path
        ``out``.
    """
    path = Path(out)
    path.write_text(dumps_qualification(compute_qualification(results_dir)), "utf-8")
    return path
