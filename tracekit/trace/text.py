"""Plain-text tables printed by polars: the one column aligner of every human-readable output.

Library renderers (``inspect``, ``diff``, ``replay``, conformance) and the command line
(:mod:`tracekit.cli.output`) print their tables through :func:`text_table`, which lets polars'
table formatter size and pad the columns instead of padding strings by hand. It lives here, not in
``tracekit.cli``, because the library renderers must not import the command line.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Literal

import polars as pl

__all__ = ["Align", "frame_text", "text_table"]

Align = Literal["left", "right"]

# Borderless, no header decoration, nothing truncated: each line is one space, the cells padded to
# their column's width and joined by two spaces, and one space.
_PLAIN = {
    "tbl_formatting": "NOTHING",
    "tbl_hide_dataframe_shape": True,
    "tbl_hide_column_data_types": True,
    "tbl_hide_dtype_separator": True,
    "tbl_rows": -1,
    "tbl_cols": -1,
    "fmt_str_lengths": 100_000,
    "tbl_width_chars": 65_535,
}


def frame_text(frame: pl.DataFrame, *, align: Align = "left", header: bool = True) -> list[str]:
    """The lines of ``frame`` as a plain table (cells padded, columns two spaces apart).

    Parameters
    ----------
    frame
        The table; its values are printed as polars prints them.
    align
        Alignment of every cell.
    header
        Print the column names as the first line.
    """
    with pl.Config(
        **_PLAIN,  # type: ignore[arg-type]
        tbl_hide_column_names=not header,
        tbl_cell_alignment="LEFT" if align == "left" else "RIGHT",
        tbl_cell_numeric_alignment="LEFT" if align == "left" else "RIGHT",
    ):
        text = str(frame)
    # Drop the one-space margin polars puts at both ends of each line.
    return [line[1:-1] for line in text.split("\n")]


def text_table(
    rows: Sequence[Sequence[str]], *, align: Align | Sequence[Align] = "left"
) -> list[str]:
    """The lines of ``rows`` (header included, if any) as a plain table.

    Columns are padded to their widest cell and joined by two spaces; trailing padding is kept,
    so callers ``rstrip`` the lines where they want none.

    Parameters
    ----------
    rows
        Cells as strings, every row the same length.
    align
        One alignment for every column, or one per column.
    """
    if not rows:
        return []
    width = len(rows[0])
    aligns = [align] * width if isinstance(align, str) else list(align)
    blocks: list[list[str]] = []
    start = 0
    # Polars aligns a whole table one way: render each run of equally aligned columns, then
    # put the runs side by side.
    for side, run in itertools.groupby(aligns):
        stop = start + len(list(run))
        columns = {f"c{i}": [row[i] for row in rows] for i in range(start, stop)}
        frame = pl.DataFrame(columns, schema=dict.fromkeys(columns, pl.String))
        blocks.append(frame_text(frame, align=side, header=False))
        start = stop
    return ["  ".join(parts) for parts in zip(*blocks, strict=True)]
