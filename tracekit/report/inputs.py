"""``ReportInputs``: everything the page shows, finished before rendering starts.

:func:`tracekit.qualify.reporting.report_inputs` builds one from a results folder: it reads the
traces, computes the verdicts and reduces every series to the small frames below. The report
only lays these out as HTML and Altair charts; it reads no file and computes no statistic, so
``tracekit.report`` never imports ``tracekit.qualify`` (imports go one way, qualify to report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.report.headroom_section import HeadroomInputs

__all__ = ["ReportInputs"]


@dataclass(frozen=True, slots=True)
class ReportInputs:
    """The finished inputs of one report page.

    Each frame's columns are documented on the function that builds it, named after the field
    in :mod:`tracekit.qualify.frames` or :mod:`tracekit.qualify.diff_frames`
    (``latency_ecdf`` is ``latency_ecdf_frame``; ``intervals`` is
    :func:`tracekit.qualify.effectiveness.interval_frame`).

    Attributes
    ----------
    qualification
        The ``qualification.json`` document (verdicts, candidate, baseline, conformance checks).
    inputs
        ``qualify.json`` (or ``sweep.json``): workload, engine configuration, repeats, SLO.
    strategies
        Strategy order for every chart and table.
    changed_settings
        The candidate's settings that differ from the policy's defaults.
    cells
        ``cells.parquet``: one row per run, for the Runs table.
    intervals
        The paired changes with their 95% intervals, one row per (cell, strategy, measure).
    latency_ecdf, kv_usage, preemption_histogram, most_preempted, recomputed, counters
        The chart and table frames of their sections; ``kv_usage`` is empty when the reference
        repeat (``qualify.json``'s ``reference``) has no run of the baseline or the candidate.
    recomputed_summary
        Mean recomputed tokens, preemptions and preempted requests per strategy, in order.
    agreement
        Pairwise victim agreement of the open-mode replay; ``None`` without the replay.
    replay_counts, replay_victims
        The replay summary's counters and most-picked victims; ``None`` without the summary.
    replay_decisions
        How many recorded decisions the replay asked about; ``None`` when not recorded.
    diff_verdict
        The legacy-versus-typed verdict; ``None`` without ``diff/diff.json``.
    diff_equivalent
        Whether that verdict counts as equivalent for the gate.
    diff_classes
        The diff's difference classes (``kind, contract, count, cause``); empty when none.
    diff_timeline
        Legacy and typed decisions and their differences; ``None`` without the diff.
    first_difference
        The first differing decision and the first divergence; ``None`` without the diff.
    headroom
        The hindsight oracle's outputs (``oracle/``); ``None`` when it did not run.
    cache_hits, cache_split
        Prefix caching (trace v2): the hit rate over time of the reference
        repeat (``cache_hit_frame``) and the recomputed tokens split into cache hits and truly
        recomputed (``cache_split_frame``); ``None`` when no run hit the cache.
    goodput, queue_depth
        The load section's frames (:mod:`tracekit.qualify.load_frames`); ``None`` or empty
        without a load plan.
    """

    qualification: dict[str, Any]
    inputs: dict[str, Any]
    strategies: tuple[str, ...]
    changed_settings: dict[str, Any]
    cells: pl.DataFrame
    intervals: pl.DataFrame
    latency_ecdf: pl.DataFrame
    kv_usage: pl.DataFrame
    preemption_histogram: pl.DataFrame
    most_preempted: pl.DataFrame
    recomputed: pl.DataFrame
    recomputed_summary: pl.DataFrame
    counters: pl.DataFrame
    agreement: pl.DataFrame | None
    replay_counts: pl.DataFrame | None
    replay_victims: pl.DataFrame | None
    replay_decisions: int | None
    diff_verdict: str | None
    diff_equivalent: bool
    diff_classes: pl.DataFrame
    diff_timeline: pl.DataFrame | None
    first_difference: dict[str, Any] | None
    headroom: HeadroomInputs | None = None
    cache_hits: pl.DataFrame | None = None
    cache_split: pl.DataFrame | None = None
    goodput: pl.DataFrame | None = None
    queue_depth: pl.DataFrame | None = None

    @property
    def candidate(self) -> str:
        """The qualified strategy."""
        return str(self.qualification["candidate"])

    @property
    def baseline(self) -> str:
        """The strategy every other one is compared with."""
        return str(self.qualification["baseline"])
