"""How ``tracekit replay`` recognises a folder it wrote (docs/guarantees.md, "Safe output").

Both modes write the marker file :data:`MARKER` into their output folder, and ``--overwrite``
replaces only a folder that holds it and nothing but replay's own files.
"""

from __future__ import annotations

from tracekit import safe_output

__all__ = ["MARKER", "OPEN_FILES", "REPLAY_MARK"]

MARKER = ".tracekit-replay"
#: What open mode writes (the marker included).
OPEN_FILES = (
    "replay_decisions.parquet",
    "summary.parquet",
    "summary.json",
    "summary.txt",
    "agreement.parquet",
    "replay.json",
    MARKER,
)
#: What closed mode writes besides the marker: the counterfactual bundles and the summary.
CLOSED_FILES = ("bundles", "closed_summary.parquet", "closed_summary.json")
REPLAY_MARK = safe_output.marker_files(
    "tracekit replay", MARKER, (*OPEN_FILES, *CLOSED_FILES), what="replay folder"
)
