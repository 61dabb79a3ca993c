"""``write_report``: a results folder's ``report.html`` and ``qualification.json``.

The one place where reading, computing and rendering meet. It loads the folder
(:mod:`~tracekit.qualify.results`), computes the verdicts (:mod:`~tracekit.qualify.verdicts`)
and the chart frames (:mod:`~tracekit.qualify.frames`, :mod:`~tracekit.qualify.diff_frames`),
and hands the finished :class:`~tracekit.report.ReportInputs` to
:func:`tracekit.report.render_page`. ``tracekit qualify`` and ``tracekit report`` both call it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.oracle.job import load_oracle
from tracekit.qualify import frames
from tracekit.qualify.diff_frames import diff_classes_frame, diff_timeline_frame, first_difference
from tracekit.qualify.effectiveness import interval_frame
from tracekit.qualify.load_frames import goodput_frame, queue_depth_frame
from tracekit.qualify.results import BASELINE, Results, ResultsError, load_order, load_results
from tracekit.qualify.verdicts import (
    EQUIVALENT_VERDICTS,
    QUALIFICATION_NAME,
    dumps_qualification,
    qualification_from_results,
)
from tracekit.report import REPORT_NAME, ReportInputs
from tracekit.report.headroom_section import HeadroomInputs
from tracekit.report.html import page_html, write_files
from tracekit.report.sections import build_sections

__all__ = ["report_inputs", "write_report"]


#: ``(steps done, steps in all)`` while a report is computed (``tracekit qualify``'s progress).
ReportProgress = Callable[[int, int], None]


def report_inputs(
    results: Results, qualification: dict[str, Any], progress: ReportProgress | None = None
) -> ReportInputs:
    """Everything the page shows, computed from a loaded results folder.

    Parameters
    ----------
    results
        A loaded results folder.
    qualification
        Its :func:`~tracekit.qualify.verdicts.qualification_from_results` document.
    progress
        Called after each frame is computed.

    Returns
    -------
    ReportInputs
        The document, ``qualify.json`` and the finished frames of every section.
    """
    strategies = results.strategies
    summary = results.replay_summary
    diff = results.diff
    verdict = None if diff is None else str(diff.get("verdict"))
    order = load_order(results.cells)
    # One step per frame; each reads the trace bundles it needs.
    steps: dict[str, Callable[[], Any]] = {
        "latency_ecdf": lambda: frames.latency_ecdf_frame(results),
        # The KV chart compares the baseline with the candidate on repeat 0 only: one run each.
        "kv_usage": lambda: frames.kv_usage_frame(
            results, [BASELINE, results.candidate], repeat=0
        ),
        "preemption_histogram": lambda: frames.preemption_histogram_frame(results),
        "most_preempted": lambda: frames.most_preempted_frame(results),
        "recomputed": lambda: frames.recomputed_frame(results),
        "counters": lambda: frames.counter_frame(results),
        "agreement": lambda: frames.agreement_frame(results),
        "diff_classes": lambda: diff_classes_frame(diff),
        "diff_timeline": lambda: diff_timeline_frame(results),
        "headroom": lambda: _headroom(results.root),
        # Prefix caching (trace v2): None when no run hit the cache, and the section is left out.
        "cache_hits": lambda: frames.cache_hit_frame(results, strategies, repeat=0),
        "cache_split": lambda: frames.cache_split_frame(results, strategies),
        "goodput": lambda: goodput_frame(results),
        "queue_depth": lambda: queue_depth_frame(results),
    }
    done: dict[str, Any] = {}
    for index, (name, step) in enumerate(steps.items()):
        done[name] = step()
        if progress is not None:
            progress(index + 1, len(steps))
    counts = victims = decisions = None
    if summary is not None:
        counts, victims = frames.replay_summary_frame(summary)
        decisions = int(summary["decisions"].max()) if "decisions" in summary.columns else None
    cells = results.cells.with_columns(
        pl.col("cell").replace_strict(order, default=len(order)).cast(pl.Int64).alias("load_order")
    )
    return ReportInputs(
        qualification=qualification,
        inputs=results.inputs,
        strategies=tuple(strategies),
        changed_settings=results.changed_settings,
        cells=cells,
        intervals=interval_frame(qualification["effectiveness"]["cells"]),
        recomputed_summary=frames.recomputed_summary_frame(done["recomputed"], strategies),
        replay_counts=counts,
        replay_victims=victims,
        replay_decisions=decisions,
        diff_verdict=verdict,
        diff_equivalent=verdict in EQUIVALENT_VERDICTS,
        first_difference=first_difference(diff),
        **done,
    )


def _headroom(root: Path) -> HeadroomInputs | None:
    """The oracle's outputs of ``qualify --oracle`` (``oracle/``), or None."""
    loaded = load_oracle(root / "oracle")
    return None if loaded is None else HeadroomInputs(*loaded)


def write_report(
    results_dir: str | Path,
    out_html: str | Path | None = None,
    *,
    progress: ReportProgress | None = None,
) -> Path:
    """Render the qualification report of a results folder.

    Writes the HTML page and, beside it, ``qualification.json`` (the verdicts). The same folder
    gives byte-identical files.

    Parameters
    ----------
    results_dir
        A folder written by ``tracekit qualify`` (or ``tracekit sweep``).
    out_html
        The HTML file to write; ``<results_dir>/report.html`` by default.
    progress
        Called with ``(steps done, steps in all)`` as the frames are computed.

    Returns
    -------
    Path
        The HTML file.

    Raises
    ------
    ResultsError
        The folder lacks ``qualify.json`` or ``cells.parquet``, or a required column, or one
        of its tables cannot be read; or the files cannot be written (``out_html``'s folder
        cannot be created or written to). Nothing is written then.

    Notes
    -----
    Both files are computed in full first, then written to temporary files beside their final
    names and renamed into place: a failure leaves no partial file and keeps an existing report.
    """
    results = load_results(results_dir)
    out = Path(out_html) if out_html is not None else results.root / REPORT_NAME
    qualification = qualification_from_results(results)
    view = report_inputs(results, qualification, progress)
    page = page_html(view, build_sections(view))
    files = {out: page, out.parent / QUALIFICATION_NAME: dumps_qualification(qualification)}
    try:
        write_files(files)
    except OSError as exc:
        # A missing permission, a file where a folder is needed, a full disk: one line.
        where = exc.filename or out
        reason = exc.strerror or str(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            reason = "a file is where a folder is needed"
        raise ResultsError(
            f"{where}: cannot write the report ({reason}); choose another --out "
            "(a folder you can write to)"
        ) from None
    return out
