"""Safe HTML building blocks: escaping, number formatting, tables, and JSON inside ``<script>``.

Every string that reaches the page from a trace or a configuration (request ids, strategy
names, settings, reasons) goes through :func:`esc` (HTML text and attributes) or
:func:`script_json` (data inside a ``<script>`` element), so that it shows as text and never
runs. Both show Unicode's bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE and the rest)
as visible text, ``<U+202E>``: a request id that holds one cannot reorder what follows it on
the page, and the reader sees that it is there. Control characters (NUL, BEL, ESC, DEL, C1)
are shown the same way.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

__all__ = [
    "BIDI_CONTROLS",
    "CONTROL_CHARACTERS",
    "MISSING",
    "Column",
    "esc",
    "fmt_bool",
    "fmt_float",
    "fmt_int",
    "fmt_pct",
    "fmt_signed_pct",
    "fmt_value",
    "html_table",
    "script_json",
    "show_bidi",
]

Formatter = Callable[[Any], str]
# Shown for a missing value (an en dash).
MISSING = "\u2013"

#: The characters that change the direction of the text around them: the embeddings and
#: overrides (U+202A-U+202E), the isolates (U+2066-U+2069) and the marks (U+200E, U+200F,
#: U+061C). Unicode Technical Standard #39 and CVE-2021-42574 ("Trojan Source").
BIDI_CONTROLS = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
)
#: The control characters (C0 but tab, line feed and carriage return; DEL; C1): NUL, BEL or an
#: ESC sequence in a request id reached the page raw (and a terminal showing the file).
CONTROL_CHARACTERS = frozenset(
    chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in "\t\n\r"
)
_VISIBLE = {ord(c): f"<U+{ord(c):04X}>" for c in BIDI_CONTROLS | CONTROL_CHARACTERS}


def show_bidi(text: str) -> str:
    """``text`` with every bidirectional control and control character shown as ``<U+XXXX>``."""
    return text.translate(_VISIBLE)


def _shown(value: Any) -> Any:
    """``value`` with :func:`show_bidi` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return show_bidi(value)
    if isinstance(value, dict):
        return {_shown(k): _shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(v) for v in value]
    return value


def esc(value: Any) -> str:
    """``value`` as HTML-escaped text (``&``, ``<``, ``>``, both quotes).

    Parameters
    ----------
    value
        Anything; ``None`` shows as an en dash.

    Returns
    -------
    str
        Text safe in element content and in quoted attribute values, its bidirectional
        controls shown (:func:`show_bidi`).
    """
    return MISSING if value is None else html.escape(show_bidi(str(value)), quote=True)


def script_json(value: Any) -> str:
    r"""``value`` as JSON that is safe inside a ``<script>`` element.

    ``<``, ``>`` and ``&`` become ``\u003c``, ``\u003e`` and ``\u0026`` (so neither
    ``</script>`` nor ``<!--`` can appear), and the line separators U+2028/U+2029 are escaped.
    Bidirectional controls in strings are shown as text (:func:`show_bidi`), so a chart's
    labels cannot be reordered by them. Keys are sorted, so equal values give equal text.

    Parameters
    ----------
    value
        A JSON-ready value without NaN.

    Returns
    -------
    str
        The JSON text.
    """
    text = json.dumps(_shown(value), sort_keys=True, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_int(value: Any) -> str:
    """An integer with thousands separators (``12,345``)."""
    return MISSING if _missing(value) else f"{int(value):,}"


def fmt_float(digits: int = 3) -> Formatter:
    """A formatter of floats with ``digits`` decimals and thousands separators."""

    def format_float(value: Any) -> str:
        return MISSING if _missing(value) else f"{float(value):,.{digits}f}"

    return format_float


def fmt_pct(value: Any) -> str:
    """A share in [0, 1] as a percentage (``87.5%``)."""
    return MISSING if _missing(value) else f"{100 * float(value):.1f}%"


def fmt_signed_pct(value: Any) -> str:
    """A change in percent with its sign (``+1.23%``)."""
    return MISSING if _missing(value) else f"{float(value):+.2f}%"


def fmt_bool(value: Any) -> str:
    """``yes``/``no``."""
    return MISSING if value is None else ("yes" if value else "no")


def fmt_value(value: Any) -> str:
    """A generic value: numbers formatted, containers as compact JSON, the rest as text."""
    if isinstance(value, bool):
        return fmt_bool(value)
    if isinstance(value, int):
        return fmt_int(value)
    if isinstance(value, float):
        return fmt_float(4)(value) if abs(value) < 1e6 else f"{value:.4g}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return MISSING if value is None else str(value)


class Column:
    """One table column: the frame column, its header and its formatter.

    Parameters
    ----------
    name
        Column of the frame.
    header
        Header text (escaped when rendered).
    fmt
        Formatter of a value; the result is escaped.
    numeric
        Right-align the column.
    """

    def __init__(
        self,
        name: str,
        header: str | None = None,
        fmt: Formatter = fmt_value,
        numeric: bool = False,
    ) -> None:
        self.name = name
        self.header = header or name
        self.fmt = fmt
        self.numeric = numeric


def html_table(
    frame: pl.DataFrame,
    columns: Sequence[Column],
    *,
    row_class: str | None = None,
    caption: str | None = None,
) -> str:
    """A ``<table>`` of ``frame``'s columns, every cell formatted then escaped.

    Parameters
    ----------
    frame
        The rows to show (already filtered and sorted).
    columns
        Which columns, in order, with headers and formatters.
    row_class
        A column whose value becomes each row's CSS classes (letters, digits, ``-`` and
        spaces are kept).
    caption
        Optional table caption (escaped).

    Returns
    -------
    str
        The table's HTML.
    """
    head = "".join(
        f'<th class="{"num" if c.numeric else ""}">{esc(c.header)}</th>' for c in columns
    )
    names = [c.name for c in columns]
    classes = frame[row_class].to_list() if row_class else [None] * frame.height
    body = []
    # Rendering, not analysis: one HTML row per (already aggregated) table row.
    for values, cls in zip(frame.select(names).iter_rows(), classes, strict=True):
        cells = "".join(
            f'<td class="{"num" if c.numeric else ""}">{esc(c.fmt(v))}</td>'
            for c, v in zip(columns, values, strict=True)
        )
        safe = "".join(ch for ch in str(cls or "") if ch.isalnum() or ch in "- ")
        body.append(f'<tr class="{safe}">{cells}</tr>')
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="table-wrap"><table>{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
