"""The one text-table renderer (polars) that every human-readable table goes through."""

from __future__ import annotations

from tracekit.trace.text import text_table


def test_text_table_pads_columns_two_spaces_apart() -> None:
    rows = [("strategy", "decisions"), ("builtin", "28"), ("largest-first", "1028")]
    assert text_table(rows) == [
        "strategy       decisions",
        "builtin        28       ",
        "largest-first  1028     ",
    ]
    assert text_table(rows, align="right")[1] == "      builtin         28"


def test_text_table_aligns_each_column_its_own_way() -> None:
    rows = [("name", "n", "share"), ("a", "1", "5.0%"), ("bbbb", "100", "12.5%")]
    assert text_table(rows, align=["left", "right", "right"]) == [
        "name    n  share",
        "a       1   5.0%",
        "bbbb  100  12.5%",
    ]


def test_text_table_prints_cells_verbatim() -> None:
    # No quotes, no truncation, no null markers: what the caller formatted is what prints.
    long = "x" * 300
    assert text_table([('"q"', "null", long)]) == [f'"q"  null  {long}']
