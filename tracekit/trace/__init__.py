"""Trace bundles: writing, reading, validating and summarising decision traces.

A bundle is one recorded run: a folder with ``manifest.json`` and one Parquet file per table
(or, for live recorders that may be killed, a folder of part files per table). A dataset is any
folder holding bundles at any depth; every command accepts either.
"""

from tracekit.trace.bundle import Bundle, TraceDataset, open_trace
from tracekit.trace.writer import BundleWriter

__all__ = ["Bundle", "BundleWriter", "TraceDataset", "open_trace"]
