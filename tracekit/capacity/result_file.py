"""``tracekit capacity --out``: the saturation point as a JSON file.

The file is the document ``tracekit capacity --json`` prints, with ``format`` and ``version``
first: the mark by which ``--overwrite`` recognises a file capacity wrote (docs/guarantees.md,
"Existing files"). It is written through a staging file and a rename.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tracekit import safe_output
from tracekit.capacity.search import CapacityResult

__all__ = ["CAPACITY_FORMAT", "CAPACITY_MARK", "check_capacity_file", "write_capacity"]

CAPACITY_FORMAT = "tracekit.capacity"


def _capacity_file(path: Path) -> str | None:
    """None if ``path`` holds a capacity document (its ``format``), else why not."""
    try:
        document = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        document = None
    if isinstance(document, dict) and document.get("format") == CAPACITY_FORMAT:
        return None
    return "not a capacity file written by tracekit capacity"


CAPACITY_MARK = safe_output.Mark("tracekit capacity", _capacity_file)


def check_capacity_file(
    out: str | Path, *, overwrite: bool = False, inputs: Sequence[str | Path] = ()
) -> None:
    """Refuse ``out`` before the search if writing it could damage a file (one line)."""
    safe_output.check_new_file(out, mark=CAPACITY_MARK, overwrite=overwrite, inputs=inputs)


def write_capacity(
    result: CapacityResult,
    out: str | Path,
    *,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
) -> Path:
    """Write ``result`` to the JSON file ``out`` (created; replaced only with ``overwrite``).

    Parameters
    ----------
    result
        What :func:`tracekit.capacity.find_capacity` found.
    out
        The file to create.
    overwrite
        Replace an existing ``out``, and only a file capacity wrote (:data:`CAPACITY_MARK`).
    inputs
        The workload file (an output may not be it, hold it or lie inside it).

    Returns
    -------
    Path
        ``out``.
    """
    document = {"format": CAPACITY_FORMAT, "version": 1, **result.to_dict()}
    text = json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"
    with safe_output.staged_file(
        out, mark=CAPACITY_MARK, overwrite=overwrite, inputs=inputs
    ) as staging:
        staging.write_text(text, "utf-8")
    return Path(out)
