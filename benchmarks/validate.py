"""Benchmark ``tracekit validate``: time and peak memory on one large bundle.

1. Records (once; cached) a small source dataset with the trace writer: the shipped sample
   workload (``traces/azure-llm-2023/azure_conv_sample.csv``) on the embedded engine under the
   replay benchmark's KV pressure (``benchmarks/replay.py``: ``PRESSURE``, ``RATE_SCALE``), with
   ``tracekit.recording.sim.record_sim``, or takes ``--source`` (any dataset, e.g. the replay
   benchmark's recorded one).
2. Builds (cached) the large bundle: ``decisions`` and ``candidates`` with the replay
   benchmark's own generator, ``concatenated_bundle`` (the source runs repeated back to back to
   ``--decisions`` decisions), plus ``steps`` tiled to ``--steps`` rows (steps and times keep
   increasing) and ``requests`` tiled to ``--requests`` rows (ids made unique per repeat).
3. Validates it in a child process and prints the wall time, rows per second and the child's
   peak RSS.

The repeats restart each run's decision times and counters, so the large bundle is expected to
be reported invalid at every repeat boundary; every row is checked all the same, so the figures
are those of a valid trace of that size.

Target: a ten-million-decision trace validated with a peak RSS under 2 GB.

``--readers`` measures instead what the readers' check costs (docs/trace-format.md,
"Validation"): the row rules every reader applies before it reads (``check_values``, one lazy
scan per table), on the whole Azure conversation hour (19,366 requests) recorded once with
``record sim --strategy bidkv --record-scheduled`` (cached), against reading the same tables
whole with polars and against ``validate``. Figures are CPU time of this process (every polars
thread), best of ``--repeat`` rounds run side by side.

Usage: ``python benchmarks/validate.py [--decisions 10000000] [--steps 16500000]
[--requests 1000000] [--cache DIR] [--source DATASET]``, or ``python benchmarks/validate.py
--readers [--repeat 5] [--cache DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import PRESSURE, RATE_SCALE, concatenated_bundle, default_cache

from tracekit import safe_output
from tracekit.engine.config import make_engine_config
from tracekit.recording.sim import SimRun, record_sim
from tracekit.strategies import resolve_strategy
from tracekit.trace import open_trace
from tracekit.trace.schema import trace_schema
from tracekit.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
# (name, strategy, KV blocks): small runs with many preemptions.
SOURCE_RUNS = [("bidkv-3000", "bidkv", 3000), ("builtin-2500", "builtin", 2500)]
ROW_GROUP = 65_536


def source_dataset(cache: Path) -> Path:
    """The cached small dataset recorded from the sample workload."""
    root = cache / "validate-source"
    for name, strategy, blocks in SOURCE_RUNS:
        out = root / name
        if (out / "manifest.json").exists():
            continue
        print(f"recording {name} ...", flush=True)
        workload = load_workload(SAMPLE, rate_scale=RATE_SCALE)
        config = make_engine_config(
            **PRESSURE, num_blocks=blocks, max_model_len=blocks - 200, scheduling_policy="fcfs"
        )
        record_sim(SimRun(workload, config, resolve_strategy(strategy), "typed"), out)
    return root


def _tiled(
    source: Path, table: str, rows: int, run_id: str, out: Path, shift: dict[str, str]
) -> None:
    """Write ``rows`` rows of ``table``: the first source run's rows repeated, shifted.

    ``shift`` maps a column to how it moves on at each repeat: ``"count"`` (integers) and
    ``"time"`` (floats) add the source's largest value + 1 per repeat, so they keep increasing;
    ``"suffix"`` (ids) appends ``-<repeat>``.
    """
    base = pq.read_table(open_trace(source).bundles[0].path / f"{table}.parquet")
    base = base.set_column(
        base.schema.get_field_index("run_id"), "run_id", pa.array([run_id] * base.num_rows)
    )
    offsets = dict.fromkeys(shift, 0.0)
    spans = {c: pc.max(base.column(c)).as_py() + 1 for c, kind in shift.items() if kind != "suffix"}
    written = 0
    repeat = 0
    schema = trace_schema().table(table).arrow_schema
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        while written < rows:
            part = base.slice(0, rows - written)
            for column, kind in shift.items():
                index = part.schema.get_field_index(column)
                values = part.column(column)
                if kind == "suffix":
                    values = pc.binary_join_element_wise(values, f"-{repeat}", "")
                elif kind == "count":
                    values = pc.add(values, int(offsets[column]))
                else:
                    values = pc.add(values, offsets[column])
                part = part.set_column(index, column, values)
            writer.write_table(part.cast(schema), row_group_size=ROW_GROUP)
            written += part.num_rows
            repeat += 1
            for column in offsets:
                if column in spans:
                    offsets[column] += spans[column]


def large_bundle(source: Path, cache: Path, decisions: int, steps: int, requests: int) -> Path:
    """The cached large bundle: concatenated decisions and candidates, tiled steps, requests."""
    out = cache / f"validate-{decisions}-{steps}-{requests}"
    if (out / "manifest.json").exists():
        return out
    concat = concatenated_bundle(source, cache, decisions)
    manifest = json.loads((concat / "manifest.json").read_text())
    run_id = manifest["run_id"]
    with safe_output.made_once(out, done="manifest.json") as partial:
        for table in ("decisions", "candidates"):
            os.link(concat / f"{table}.parquet", partial / f"{table}.parquet")
        print(f"writing {steps:,} steps and {requests:,} requests ...", flush=True)
        _tiled(
            source,
            "steps",
            steps,
            run_id,
            partial / "steps.parquet",
            {"step": "count", "time_s": "time"},
        )
        _tiled(
            source,
            "requests",
            requests,
            run_id,
            partial / "requests.parquet",
            {"request_id": "suffix", "input_index": "count"},
        )
        manifest["tables"] = {
            t: {"rows": pq.ParquetFile(partial / f"{t}.parquet").metadata.num_rows, "files": [f]}
            for t, f in (
                (t, f"{t}.parquet") for t in ("requests", "decisions", "candidates", "steps")
            )
        }
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    return out


def child(bundle: str) -> None:
    """Validate ``bundle`` and print the figures as JSON (run in a fresh process)."""
    from tracekit.trace.validate import validate_trace

    started = time.perf_counter()
    report = validate_trace(bundle)
    wall = time.perf_counter() - started
    (only,) = report.bundles
    print(
        json.dumps(
            {
                "wall": wall,
                "status": report.status,
                "rows": only.rows,
                "findings": len(only.problems),
                "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


HOUR = ROOT / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def hour_bundle(cache: Path) -> Path:
    """The whole Azure hour recorded with BidKV and its scheduled table (cached)."""
    out = cache / "validate-readers-hour"
    if not (out / "manifest.json").exists():
        print("recording the Azure hour ...", flush=True)
        workload = load_workload(HOUR)
        run = SimRun(workload, make_engine_config(), resolve_strategy("bidkv"), "typed")
        record_sim(run, out, record_scheduled=True)
    return out


def readers(cache: Path, repeat: int) -> None:
    """Print the CPU time of the readers' check against reading the tables and validating."""
    import polars as pl

    from tracekit.trace.inspect import READS as INSPECT_READS
    from tracekit.trace.inspect import inspect_trace
    from tracekit.trace.validate import check_readable, validate_trace
    from tracekit.trace.values import ALL_COLUMNS, check_values

    bundle = open_trace(hour_bundle(cache)).bundles[0]
    tables = [t for t in trace_schema().tables if bundle.has_table(t)]
    every = dict.fromkeys(tables, ALL_COLUMNS)

    def read() -> None:
        for table in tables:
            pl.read_parquet(bundle.table_files(table))

    tasks = {
        "read every table (polars)": read,
        "structure and row counts": lambda: check_readable(bundle),
        "row rules, every column": lambda: check_values(bundle, every),
        "row rules, inspect's columns": lambda: check_values(bundle, INSPECT_READS),
        "inspect (its check included)": lambda: inspect_trace(bundle.path),
        "validate": lambda: validate_trace(bundle.path),
    }
    best = dict.fromkeys(tasks, float("inf"))
    for _ in range(repeat):
        for name, task in tasks.items():
            started = time.process_time()
            task()
            best[name] = min(best[name], time.process_time() - started)
    rows = {t: pq.ParquetFile(bundle.table_files(t)[0]).metadata.num_rows for t in tables}
    print(f"bundle     {bundle.path}")
    print(f"rows       {', '.join(f'{t} {n:,}' for t, n in rows.items())}")
    base = best["read every table (polars)"]
    for name, cpu in best.items():
        print(f"{name:30} {cpu * 1000:8.1f} ms CPU  {cpu / base:5.2f} x reading")
    print(f"load average     {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=10_000_000)
    parser.add_argument("--steps", type=int, default=16_500_000)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--source", type=Path, default=None, help="Dataset to repeat.")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--readers", action="store_true", help="The readers' check instead.")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.readers:
        args.cache.mkdir(parents=True, exist_ok=True)
        readers(args.cache, args.repeat)
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    source = args.source or source_dataset(args.cache)
    bundle = large_bundle(source, args.cache, args.decisions, args.steps, args.requests)
    print(f"validating {bundle} in a child process ...", flush=True)
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(bundle)],
        check=True,
        capture_output=True,
        text=True,
    )
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    rows = sum(stats["rows"].values())
    peak = stats["peak_mib"]
    print(f"rows             {', '.join(f'{t} {n:,}' for t, n in stats['rows'].items())}")
    print(f"status           {stats['status']} ({stats['findings']} finding(s))")
    print(f"time             {stats['wall']:.1f} s, {rows / stats['wall']:,.0f} rows/s")
    print(
        f"peak RSS         {peak:.0f} MiB "
        f"(target < 2048 MiB: {'met' if peak < 2048 else 'NOT met'})"
    )
    print(f"load average     {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
