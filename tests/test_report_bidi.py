"""Bidirectional controls in a trace's strings are shown, not obeyed, in the report.

A raw U+202E (RIGHT-TO-LEFT OVERRIDE) in a request id reordered the report's text after it
("Trojan Source", CVE-2021-42574). Every string reaches the page through ``esc`` or
``script_json``, which now write each bidirectional control out as ``<U+202E>``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tracekit.qualify import write_report
from tracekit.report.markup import BIDI_CONTROLS, esc, script_json, show_bidi

SPOOF = "req\u202eflow.exe"


def test_every_control_is_shown_in_text_attributes_and_script_data() -> None:
    for char in BIDI_CONTROLS:
        assert char not in esc(f"a{char}b") and char not in show_bidi(char)
        assert f"U+{ord(char):04X}" in esc(f"a{char}b")
        decoded = json.loads(script_json({"id": f"a{char}b", f"k{char}": [f"{char}"]}))
        assert not any(
            char in text for text in (decoded["id"], *decoded, *decoded[f"k<U+{ord(char):04X}>"])
        )
    assert esc(SPOOF) == "req&lt;U+202E&gt;flow.exe"
    # Other right-to-left text is untouched: it is content, not a control.
    assert esc("\u05e9\u05dc\u05d5\u05dd") == "\u05e9\u05dc\u05d5\u05dd"


def test_a_request_id_with_an_override_cannot_reorder_the_report(
    report_results_copy: Path, tmp_path: Path
) -> None:
    # The most preempted request of every bundle gets an id that holds U+202E.
    renamed = 0
    for requests in report_results_copy.rglob("requests.parquet"):
        frame = pl.read_parquet(requests)
        top = frame.sort("num_preemptions", descending=True)["request_id"][0]
        frame.with_columns(
            pl.when(pl.col("request_id") == top)
            .then(pl.lit(SPOOF))
            .otherwise(pl.col("request_id"))
            .alias("request_id")
        ).write_parquet(requests)
        renamed += 1
    assert renamed
    page = write_report(report_results_copy, tmp_path / "report.html").read_text("utf-8")
    assert "req&lt;U+202E&gt;flow.exe" in page or "req\\u003cU+202E\\u003eflow.exe" in page
    assert not BIDI_CONTROLS & set(page)


def test_control_characters_are_shown_too() -> None:
    # NUL, BEL, an ESC sequence, DEL and C1 controls in a request id reached the page raw
    # (found by the bad-input suite's report injections, benchmarks/bad_input_report.py).
    for char in "\x00\x07\x08\x1b\x7f\x85\x9b":
        shown = esc(f"a{char}b")
        assert char not in shown and f"U+{ord(char):04X}" in shown
        assert char not in json.loads(script_json({"id": f"a{char}b"}))["id"]
    # Tab and the line ends are text.
    assert esc("a\tb\nc\r") == "a\tb\nc\r"
