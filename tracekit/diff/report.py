"""The result of ``tracekit diff``: differences, their classes, the verdict and the exit code.

Verdicts, per pair of runs and overall (the worst pair wins):

- ``equivalent``: no difference at all;
- ``equivalent-modulo-contract``: every difference is a contract difference (the typed contract
  gives the policy information or outcomes the legacy one lacks, ``tracekit.diff.classes``);
- ``different``: at least one difference the contracts do not explain.

Exit codes: 0 for ``equivalent`` (and for ``equivalent-modulo-contract`` when contract
differences are allowed), 1 otherwise; invalid input raises before a report exists (status 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from tracekit.diff.classes import CLASSES

__all__ = [
    "EXIT_INVALID_INPUT",
    "FORMAT",
    "VERDICTS",
    "CounterRow",
    "DiffReport",
    "Difference",
    "Divergence",
    "PairDiff",
    "RunInfo",
    "Verdict",
]

# The exit status for a TracekitError raised before a report exists (unreadable or
# incomparable recordings, an unknown strategy): reports themselves exit 0 or 1.
EXIT_INVALID_INPUT = 2

FORMAT = "tracekit.diff"
FORMAT_VERSION = 1

Verdict = Literal["equivalent", "equivalent-modulo-contract", "different"]
VERDICTS: tuple[Verdict, ...] = ("equivalent", "equivalent-modulo-contract", "different")

Scope = Literal["decision", "divergence", "counter", "metric", "snapshot", "end-state"]


@dataclass(frozen=True, slots=True)
class Difference:
    """One difference between the two runs.

    Attributes
    ----------
    kind
        Its class (a key of :data:`tracekit.diff.classes.CLASSES`).
    contract
        Whether the contracts explain it.
    scope
        ``decision`` (a comparable decision), ``divergence`` (the first divergence),
        ``counter``, ``metric``, ``snapshot`` or ``end-state``.
    seq
        The decision's ``seq`` (decision and divergence scopes), else None.
    fields
        The differing fields (columns, counters or metric keys).
    legacy, typed
        Each side's values of ``fields``.
    detail
        A short explanation specific to this difference (which victim is the utility top, ...).
    """

    kind: str
    contract: bool
    scope: Scope
    seq: int | None
    fields: tuple[str, ...]
    legacy: dict[str, Any]
    typed: dict[str, Any]
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kind": self.kind,
            "contract": self.contract,
            "scope": self.scope,
            "seq": self.seq,
            "fields": list(self.fields),
            "legacy": self.legacy,
            "typed": self.typed,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first decision whose contexts differ, with both contexts side by side.

    Attributes
    ----------
    seq
        Its sequence number; later decisions are not compared.
    kind, contract, detail
        Its class, whether the contracts explain it, and why.
    context_fields, candidate_fields
        The differing context fields and candidate fields.
    caused_by_seq
        The earlier decision that applied different victims (``history``), else None.
    legacy, typed
        ``{"context": {...} | None, "candidates": [{...}, ...]}`` of each side.
    differing_cells
        ``[{"position": int, "field": str}, ...]``: the candidate cells that differ.
    """

    seq: int
    kind: str
    contract: bool
    detail: str
    context_fields: tuple[str, ...]
    candidate_fields: tuple[str, ...]
    caused_by_seq: int | None
    legacy: dict[str, Any]
    typed: dict[str, Any]
    differing_cells: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "contract": self.contract,
            "detail": self.detail,
            "context_fields": list(self.context_fields),
            "candidate_fields": list(self.candidate_fields),
            "caused_by_seq": self.caused_by_seq,
            "legacy": self.legacy,
            "typed": self.typed,
            "differing_cells": self.differing_cells,
        }


@dataclass(frozen=True, slots=True)
class CounterRow:
    """One host counter of both runs.

    ``status``: ``equal``; ``typed-only`` (the legacy host has no controller and keeps only
    ``calls``; the typed value agrees with the decisions); ``not-comparable`` (typed-only after
    the histories split); or ``different`` (it is also listed as a difference).
    """

    name: str
    legacy: Any
    typed: Any
    status: Literal["equal", "typed-only", "not-comparable", "different"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "legacy": self.legacy,
            "typed": self.typed,
            "status": self.status,
        }


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One side's run."""

    run_id: str
    path: str
    policy_name: str | None
    decisions: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "run_id": self.run_id,
            "path": self.path,
            "policy_name": self.policy_name,
            "decisions": self.decisions,
        }


def _verdict(contract_flags: list[bool]) -> Verdict:
    if not contract_flags:
        return "equivalent"
    return "equivalent-modulo-contract" if all(contract_flags) else "different"


@dataclass(slots=True)
class PairDiff:
    """The comparison of one legacy run with its typed twin.

    Attributes
    ----------
    legacy, typed
        The two runs.
    key
        What they share (workload, engine, strategy, seed).
    comparable_decisions
        Decisions before the first divergence.
    divergence
        The first divergence, or None.
    decisions
        The differing comparable decisions, one row each
        (:data:`tracekit.diff.classify.DECISION_SCHEMA`), kept columnar.
    differences
        Every other difference: the divergence, counters, metrics, snapshots, end state.
    counters
        The host counters of both runs.
    exposure
        ``bidkv`` only: ``legacy_utility_picks`` (legacy decisions with reason ``strategy``) and
        ``legacy_cascade_condition`` (those where the requester was a candidate and the cascade
        condition held: a typed host would not have taken that victim).
    """

    legacy: RunInfo
    typed: RunInfo
    key: dict[str, Any]
    comparable_decisions: int
    divergence: Divergence | None
    decisions: pl.DataFrame
    differences: list[Difference] = field(default_factory=list)
    counters: list[CounterRow] = field(default_factory=list)
    exposure: dict[str, int] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        """``equivalent``, ``equivalent-modulo-contract`` or ``different``."""
        flags = self.decisions["contract"].to_list() + [d.contract for d in self.differences]
        return _verdict(flags)

    def classes(self) -> list[dict[str, Any]]:
        """One summary per (class, contract): decisions first (by first seq), then the rest."""
        summary = (
            self.decisions.group_by("kind", "contract", maintain_order=True)
            .agg(pl.len().alias("count"), pl.col("seq").head(10).alias("seqs"))
            .with_columns(pl.lit(["decision"]).alias("scopes"))
            .to_dicts()
        )
        groups: dict[tuple[str, bool], list[Difference]] = {}
        for d in self.differences:
            groups.setdefault((d.kind, d.contract), []).append(d)
        for (kind, contract), items in groups.items():
            summary.append(
                {
                    "kind": kind,
                    "contract": contract,
                    "count": len(items),
                    "seqs": [d.seq for d in items if d.seq is not None][:10],
                    "scopes": sorted({d.scope for d in items}),
                }
            )
        for entry in summary:
            entry["cause"] = CLASSES[entry["kind"]].cause
        return summary

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (schema in ``docs/diff.md``)."""
        decisions = self.decisions.with_columns(pl.lit("decision").alias("scope")).to_dicts()
        return {
            "verdict": self.verdict,
            "key": self.key,
            "legacy": self.legacy.to_dict(),
            "typed": self.typed.to_dict(),
            "comparable_decisions": self.comparable_decisions,
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "classes": self.classes(),
            "counters": [c.to_dict() for c in self.counters],
            "exposure": self.exposure,
            "differences": decisions + [d.to_dict() for d in self.differences],
        }


@dataclass(slots=True)
class DiffReport:
    """Every pair's comparison and the overall verdict.

    Attributes
    ----------
    pairs
        One :class:`PairDiff` per paired run.
    allow_contract_differences
        Whether ``equivalent-modulo-contract`` exits 0.
    """

    pairs: list[PairDiff]
    allow_contract_differences: bool = False

    @property
    def verdict(self) -> Verdict:
        """The worst verdict over the pairs."""
        return max((p.verdict for p in self.pairs), key=VERDICTS.index, default="equivalent")

    @property
    def exit_code(self) -> int:
        """0 equivalent (or modulo contract when allowed), 1 otherwise."""
        if self.verdict == "equivalent":
            return 0
        if self.verdict == "equivalent-modulo-contract" and self.allow_contract_differences:
            return 0
        return 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (schema in ``docs/diff.md``)."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "allow_contract_differences": self.allow_contract_differences,
            "pairs": [p.to_dict() for p in self.pairs],
        }

    def render_text(self) -> str:
        """The human report (see :mod:`tracekit.diff.render`)."""
        from tracekit.diff.render import render_diff

        return render_diff(self)
