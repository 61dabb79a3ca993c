"""What ``tracekit qualify`` prints and exits with, from a results folder's verdicts.

The verdict line (the report's first line) goes to stdout; ``--json`` prints
:func:`outcome_document` instead; the exit status is :func:`exit_code`: 0 for GO, 1 for NO-GO
(a qualification that ran and did not pass), 2 for bad input (raised before, by the job).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracekit.qualify.verdicts import QUALIFICATION_NAME

__all__ = ["EXIT_GO", "EXIT_NO_GO", "exit_code", "outcome_document", "read_qualification"]

EXIT_GO = 0
EXIT_NO_GO = 1


def read_qualification(results: Path) -> dict[str, Any]:
    """The ``qualification.json`` a finished job wrote into ``results``."""
    document: dict[str, Any] = json.loads((results / QUALIFICATION_NAME).read_text("utf-8"))
    return document


def exit_code(document: dict[str, Any]) -> int:
    """0 when the headline is GO, 1 when it is NO-GO."""
    return EXIT_GO if document["headline"]["decision"] == "go" else EXIT_NO_GO


def _endpoint(stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("mean", "low", "high", "n", "unit", "margin", "better", "primary", "verdict")
    return {k: stats.get(k) for k in keys}


def outcome_document(results: Path, document: dict[str, Any]) -> dict[str, Any]:
    """``tracekit qualify --json``: the decision, every verdict with its intervals, the files.

    Returns
    -------
    dict
        ``decision``, ``headline``, ``exit_code``, ``out``, ``report``, ``files``,
        ``gate`` (``status``, ``reasons``), ``rule``, ``matrix``, ``aa_control`` (its counts
        and text), ``rejections`` and ``verdicts`` (one per load and strategy: ``load``,
        ``cell``, ``strategy``, ``label``, ``reason``, ``repeats_needed`` and ``endpoints``,
        each ``mean, low, high, n, unit, margin, better, primary, verdict``).
    """
    aa = document.get("aa_control")
    gate = document["functional_compatibility"]
    return {
        "decision": document["headline"]["decision"],
        "headline": document["headline"]["text"],
        "exit_code": exit_code(document),
        "out": str(results),
        "report": str(results / "report.html"),
        "files": sorted(p.name for p in results.iterdir()),
        "gate": {"status": gate["status"], "reasons": gate["reasons"]},
        "rule": document["effectiveness"]["rule"],
        "matrix": document.get("matrix"),
        "aa_control": None
        if aa is None
        else {
            k: aa[k] for k in ("judged", "false_positives", "rate", "nominal", "trusted", "text")
        },
        "rejections": document.get("rejections"),
        "verdicts": [
            {
                "load": e.get("load"),
                "cell": e["cell"],
                "strategy": e["strategy"],
                "label": e["label"],
                "reason": e["reason"],
                "repeats_needed": e.get("repeats_needed"),
                "endpoints": {name: _endpoint(s) for name, s in e["endpoints"].items()},
            }
            for e in document["effectiveness"]["cells"]
        ],
    }
