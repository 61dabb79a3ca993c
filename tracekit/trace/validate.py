"""``tracekit validate``: check a bundle or dataset against the schema and its invariants.

Every check is a polars expression over the lazily scanned tables, so large traces stream. A
bundle whose recorder never closed it (``complete: false``) is *truncated*: its flushed rows are
checked like any other, and it is reported as truncated rather than corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import polars as pl

from tracekit.trace.bundle import Bundle, TraceDataset, open_trace
from tracekit.trace.schema import trace_schema

__all__ = ["BundleReport", "ValidationReport", "validate_trace"]

OUTCOMES = ("selected", "abstained", "invalid", "exception", "disabled", "builtin")
# Outcomes that mean the controller called the policy (disabled/builtin do not;
# docs/trace-format.md, "Outcomes and counters").
CALLED = ("selected", "abstained", "invalid", "exception")

Status = Literal["ok", "truncated", "invalid"]


@dataclass(slots=True)
class BundleReport:
    """What validation found in one bundle."""

    path: Path
    run_id: str
    complete: bool
    rows: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> Status:
        """``invalid`` if any invariant fails, else ``truncated`` if unfinished, else ``ok``."""
        if self.problems:
            return "invalid"
        return "ok" if self.complete else "truncated"


@dataclass(slots=True)
class ValidationReport:
    """Validation results for every bundle of a trace or dataset."""

    bundles: list[BundleReport]

    @property
    def status(self) -> Status:
        """The worst status over all bundles."""
        statuses = {b.status for b in self.bundles}
        for status in ("invalid", "truncated"):
            if status in statuses:
                return status  # type: ignore[return-value]
        return "ok"

    @property
    def exit_code(self) -> int:
        """0 valid, 1 invalid, 3 truncated (readable but unfinished)."""
        return {"ok": 0, "invalid": 1, "truncated": 3}[self.status]


def _count(frame: pl.LazyFrame) -> int:
    return int(frame.select(pl.len()).collect().item())


def _problem(report: BundleReport, frame: pl.LazyFrame, message: str, sample: str) -> None:
    """Record ``message`` with the number of offending rows and the first one, if any."""
    bad = frame.collect()
    if bad.height:
        first = bad.row(0, named=True)
        report.problems.append(f"{message}: {bad.height} row(s), first {first.get(sample)!r}")


def _check_bundle(bundle: Bundle) -> BundleReport:
    schema = trace_schema()
    one = TraceDataset(bundle.path, (bundle,))
    report = BundleReport(bundle.path, bundle.run_id, bundle.complete)
    # Live recorders cannot see requests or steps; their manifests say which tables they lack.
    declared_missing = set(bundle.manifest.get("missing_tables") or ())
    for name in schema.required_tables:
        if name not in declared_missing and not bundle.has_table(name):
            if bundle.complete:
                report.problems.append(f"table {name!r} is missing")
            return report
    for name, spec in schema.tables.items():
        if not bundle.has_table(name):
            continue
        scan = one.scan(name)
        report.rows[name] = _count(scan)
        declared = bundle.manifest.get("tables", {}).get(name, {}).get("rows")
        if bundle.complete and declared is not None and declared != report.rows[name]:
            report.problems.append(
                f"table {name!r} has {report.rows[name]} rows, manifest says {declared}"
            )
        for column in spec.columns:
            if not column.nullable:
                _problem(
                    report,
                    scan.filter(pl.col(column.name).is_null()),
                    f"{name}.{column.name} is null",
                    "run_id",
                )
        _problem(
            report,
            scan.filter(pl.col("run_id") != bundle.run_id),
            f"{name}.run_id differs from the manifest's run_id",
            "run_id",
        )

    requests = one.scan("requests")  # empty frames for tables a live bundle lacks
    decisions = one.scan("decisions").sort("seq")
    candidates = one.scan("candidates")
    steps = one.scan("steps")

    _problem(
        report,
        requests.group_by("request_id").len().filter(pl.col("len") > 1),
        "requests.request_id is not unique",
        "request_id",
    )
    _problem(
        report,
        requests.filter(
            (pl.col("prompt_tokens") <= 0)
            | (pl.col("num_preemptions") < 0)
            | (pl.col("recomputed_tokens") < 0)
            | (pl.col("output_tokens") < 0)
        ),
        "requests has non-positive prompt_tokens or negative counts",
        "request_id",
    )
    _problem(
        report,
        decisions.with_row_index("expected").filter(pl.col("seq") != pl.col("expected")),
        "decisions.seq is not contiguous from 0",
        "seq",
    )
    _problem(
        report,
        decisions.filter((pl.col("time_s").diff() < 0) | (pl.col("step").diff() < 0)),
        "decisions.time_s or step decreases",
        "seq",
    )
    _problem(
        report,
        decisions.filter(~pl.col("outcome").is_in(OUTCOMES)),
        f"decisions.outcome is not one of {', '.join(OUTCOMES)}",
        "seq",
    )
    _problem(
        report,
        decisions.filter((pl.col("kv_usage") < 0) | (pl.col("kv_usage") > 1)),
        "decisions.kv_usage is outside [0, 1]",
        "seq",
    )
    per_decision = candidates.group_by("seq").agg(
        pl.len().alias("n"),
        pl.col("request_id").n_unique().alias("unique"),
        (pl.col("position").max() + 1).alias("span"),
    )
    _problem(
        report,
        decisions.join(per_decision, on="seq", how="left").filter(
            (pl.col("n").fill_null(0) != pl.col("num_candidates"))
            | (pl.col("unique") != pl.col("n"))
            | (pl.col("span") != pl.col("n"))
        ),
        "candidates do not match num_candidates (or ids repeat, or positions have gaps)",
        "seq",
    )
    for column in ("applied_victim_id", "builtin_victim_id"):
        _problem(
            report,
            decisions.join(
                candidates.select("seq", pl.col("request_id").alias(column)),
                on=["seq", column],
                how="anti",
            ),
            f"decisions.{column} is not among the decision's candidates",
            "seq",
        )
    _problem(
        report,
        decisions.filter(
            (pl.col("outcome") == "selected")
            & (pl.col("applied_victim_id") != pl.col("raw_result"))
            | (pl.col("outcome") != "selected")
            & (pl.col("applied_victim_id") != pl.col("builtin_victim_id"))
        ),
        "decisions.applied_victim_id disagrees with the outcome (selected: the policy's id; "
        "otherwise: the built-in victim)",
        "seq",
    )
    cumulative = {
        "calls": pl.col("outcome").is_in(CALLED),
        "selections": pl.col("outcome") == "selected",
        "abstentions": pl.col("outcome") == "abstained",
        "failures": pl.col("outcome").is_in(("invalid", "exception")),
        "invalid_selections": pl.col("outcome") == "invalid",
    }
    # Counters may start above 0 (a live recorder attached to a running controller), so compare
    # increments: counter(seq) - counter(first) must equal the outcomes counted since then.
    for counter, expr in cumulative.items():
        _problem(
            report,
            decisions.filter(
                (pl.col(counter) - pl.col(counter).first())
                != (expr.cast(pl.Int64).cum_sum() - expr.cast(pl.Int64).first())
            ),
            f"decisions.{counter} is inconsistent with the outcomes",
            "seq",
        )
    _problem(
        report,
        steps.sort("step").filter((pl.col("step").diff() <= 0) | (pl.col("time_s").diff() < 0)),
        "steps.step is not increasing or steps.time_s decreases",
        "step",
    )
    _problem(
        report,
        steps.filter(
            (pl.col("kv_blocks_used") < 0) | (pl.col("kv_blocks_used") > pl.col("kv_blocks_total"))
        ),
        "steps.kv_blocks_used is outside [0, kv_blocks_total]",
        "step",
    )
    return report


def validate_trace(path: str | Path) -> ValidationReport:
    """Validate every bundle at or below ``path``.

    Unreadable input (no bundle, bad manifest, truncated Parquet) raises ``TraceSchemaError``;
    broken invariants are collected as problems in the report.
    """
    dataset = open_trace(path)
    return ValidationReport([_check_bundle(b) for b in dataset])
