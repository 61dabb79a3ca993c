"""The verdicts of a qualification: lifecycle labels, the functional gate, effectiveness.

Three questions, kept apart (docs/report.md, "The verdict rules"):

1. **Lifecycle** — how far the candidate got: *installed* (``bidkv`` and its manifests import,
   the policy class resolves), *configured* (the policy configuration validates), *enabled* (the
   candidate ran through the engine's typed host in every repeat), *runtime-effective* (the
   policy was called and selected a victim at least once). Each label stands on its own
   evidence; a later label does not imply an earlier one was checked.
2. **Functional compatibility gate** — passed only if every check passes: every request of the
   candidate's and the baseline's runs completed, no policy failure, no invalid selection, the
   policy stayed enabled, the policy was invoked in every repeat, the legacy and typed paths are
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
from tracekit.qualify.effectiveness import (
    LATENCY_MARGIN_PCT,
    LATENCY_METRIC,
    MIN_REPEATS,
    THROUGHPUT_METRIC,
    effectiveness_entries,
    paired_changes,
)
from tracekit.qualify.load_verdicts import go_no_go, load_headlines, relabel_entries
from tracekit.qualify.results import BASELINE, Results, load_results

__all__ = [
    "EQUIVALENT_VERDICTS",
    "QUALIFICATION_FORMAT",
    "QUALIFICATION_NAME",
    "compute_qualification",
    "conformance_checks",
    "dumps_qualification",
    "functional_gate",
    "lifecycle_labels",
    "qualification_from_results",
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


def _run_checks(results: Results) -> list[dict[str, Any]]:
    candidate = results.candidate
    cells = results.cells
    runs = cells.filter(pl.col("strategy") == candidate)
    compared = cells.filter(pl.col("strategy").is_in([candidate, BASELINE]))
    completed = ~pl.col("all_finished").fill_null(False)
    if "aborted" in compared.columns:
        # A request its client cancelled (--ttft-timeout-s, a recorded cancel) ended as the
        # client chose: it counts as completed, and the detail says how many there were.
        done = pl.col("finished").fill_null(0) + pl.col("aborted").fill_null(0)
        completed = done < pl.col("requests")
    unfinished = _failing(
        compared.with_columns(
            pl.format("{} of {}", pl.col("finished").fill_null(0), "requests").alias("value")
        ),
        completed,
        "finished",
    )
    aborted = int(compared["aborted"].sum()) if "aborted" in compared.columns else 0
    finished_text = f"every request finished in {compared.height} runs"
    if aborted:
        finished_text = (
            f"every request finished or was aborted by its client in {compared.height} runs "
            f"({aborted} aborted)"
        )
    checks = [
        _check(
            "all_requests_completed",
            not unfinished and compared.height > 0,
            unfinished or finished_text,
        )
    ]
    for name, column, what in (
        ("no_policy_failure", "failures", "failures"),
        ("no_invalid_selection", "invalid_selections", "invalid selections"),
    ):
        bad = _failing(runs.rename({column: "value"}), pl.col("value") > 0, what)
        checks.append(_check(name, not bad and runs.height > 0, bad or f"0 {what}"))
    # With a load plan a light cell may see no preemption, so a run that never called the
    # policy (enabled unknown) is not a disabled one there; invocation is checked below.
    load_plan = "load" in cells.columns
    disabled = _failing(
        runs.with_columns(pl.lit("disabled").alias("value")),
        ~pl.col("policy_enabled").fill_null(load_plan),
        "policy",
    )
    checks.append(
        _check(
            "policy_stayed_enabled",
            not disabled and runs.height > 0,
            disabled or "enabled at the end of every run",
        )
    )
    if load_plan:
        checks.append(_invoked_in_some_cell(runs))
        return checks
    expected = int(results.inputs.get("repeats") or 0)
    invoked = runs.filter(pl.col("calls") > 0)["repeat"].unique().sort().to_list()
    repeats = sorted(set(range(expected)) | set(cells["repeat"].unique().to_list()))
    never = [r for r in repeats if r not in invoked]
    checks.append(
        _check(
            "invoked_every_repeat",
            not never and bool(repeats),
            f"no call in repeat {', '.join(map(str, never))}"
            if never
            else f"called in all {len(repeats)} repeats",
        )
    )
    return checks


def _invoked_in_some_cell(runs: pl.DataFrame) -> dict[str, Any]:
    """A load plan's invocation check: called in every repeat of at least one load cell.

    Light cells may preempt nothing (then the policy is never asked); the check needs one cell
    where every repeat exercised it, and names the cells where some repeat did not.
    """
    per_load = (
        runs.group_by("load", maintain_order=True)
        .agg((pl.col("calls") > 0).all().alias("every"))
        .sort("load")
    )
    full = per_load.filter(pl.col("every"))["load"].to_list()
    partial = per_load.filter(~pl.col("every"))["load"].to_list()
    detail = f"called in every repeat of {', '.join(full) or 'no load cell'}"
    if partial:
        detail += f"; not in every repeat of {', '.join(partial)} (no preemption there)"
    return _check("invoked_every_repeat", bool(full), detail)


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
    entries = effectiveness_entries(paired_changes(results.cells, BASELINE))
    entries = relabel_entries(entries, results.cells)
    mine = [e for e in entries if e["strategy"] == candidate]
    document = {
        "format": QUALIFICATION_FORMAT,
        "version": 1,
        "candidate": candidate,
        "baseline": BASELINE,
        # One line saying what the evidence supports (issue 14).
        "headline": sweep_headline(entries, candidate)
        if is_sweep(results)
        else go_no_go(gate, entries, candidate),
        "load_headlines": load_headlines(entries, results.cells, candidate),
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
            )
        },
        "lifecycle": lifecycle_labels(results),
        "functional_compatibility": gate,
        "conformance": conformance_checks(results.conformance),
        "effectiveness": {
            "rule": {
                "throughput_metric": THROUGHPUT_METRIC,
                "latency_metric": LATENCY_METRIC,
                "latency_margin_pct": LATENCY_MARGIN_PCT,
                "min_repeats": MIN_REPEATS,
                "interval": "paired Student-t 95%",
            },
            "cells": entries,
        },
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
