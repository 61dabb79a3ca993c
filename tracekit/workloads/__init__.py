"""Workload loaders: request arrival and length traces turned into one canonical table.

Each format has one loader module with a ``read_*`` function returning a checked
:class:`Workload` (and a lazy ``scan_*`` where that helps); :func:`load_workload` detects the
format and adds windowing, limiting, rate scaling and seeded priorities. Client models (generated
arrivals, request order, a ``max_tokens`` cap, concurrency and aborts) are applied on top, by
:mod:`~tracekit.workloads.arrivals`, :mod:`~tracekit.workloads.order`,
:mod:`~tracekit.workloads.output_lengths` and :mod:`~tracekit.workloads.client`. The table's
columns are declared once, in :mod:`tracekit.workloads.model`. Bad input raises
:class:`tracekit.errors.WorkloadError` with a one-line message. See ``docs/workloads.md``.
"""

from tracekit.workloads.arrivals import (
    ArrivalKind,
    Arrivals,
    apply_arrivals,
    arrival_times,
    parse_arrivals,
)
from tracekit.workloads.azure import read_azure, scan_azure
from tracekit.workloads.bidkv_trace import read_bidkv_trace
from tracekit.workloads.cancels import apply_cancels
from tracekit.workloads.client import ClientModel, closed_loop_arrivals, dispatch_times
from tracekit.workloads.content import with_shared_prefix
from tracekit.workloads.detect import WorkloadFormat, detect_format, parse_format
from tracekit.workloads.load import READERS, load_workload
from tracekit.workloads.model import (
    CANCEL_AFTER_S,
    IGNORE_EOS,
    OPTIONAL_SCHEMA,
    PREFIX_HASH_IDS,
    REQUIRED_SCHEMA,
    Workload,
    WorkloadRequest,
    check_workload_frame,
    workload_schema,
)
from tracekit.workloads.mooncake import read_mooncake
from tracekit.workloads.order import Order, OrderKind, apply_order, parse_order
from tracekit.workloads.output_lengths import apply_ignore_eos, apply_max_tokens
from tracekit.workloads.sessions import read_sessions
from tracekit.workloads.table import read_table, scan_table
from tracekit.workloads.vidur import read_vidur
from tracekit.workloads.vllm_workload import read_vllm_workload

__all__ = [
    "ArrivalKind",
    "Arrivals",
    "CANCEL_AFTER_S",
    "IGNORE_EOS",
    "ClientModel",
    "OPTIONAL_SCHEMA",
    "Order",
    "OrderKind",
    "PREFIX_HASH_IDS",
    "READERS",
    "REQUIRED_SCHEMA",
    "Workload",
    "WorkloadFormat",
    "WorkloadRequest",
    "apply_arrivals",
    "apply_cancels",
    "apply_ignore_eos",
    "apply_max_tokens",
    "apply_order",
    "arrival_times",
    "check_workload_frame",
    "closed_loop_arrivals",
    "detect_format",
    "dispatch_times",
    "load_workload",
    "parse_arrivals",
    "parse_format",
    "parse_order",
    "read_azure",
    "read_bidkv_trace",
    "read_mooncake",
    "read_sessions",
    "read_table",
    "read_vidur",
    "read_vllm_workload",
    "scan_azure",
    "scan_table",
    "with_shared_prefix",
    "workload_schema",
]
