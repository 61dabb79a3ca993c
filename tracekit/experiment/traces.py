"""Frozen experiment traces: the original ``freeze_traces`` generator over a length pool.

The original BidKV runner replayed frozen workload files (docs/experiments.md, "Traces").
This module generates equivalent ones from any loaded workload's lengths:

- ``rng = random.Random(seed)``; ``rng.sample(pool, N)`` picks the requests; then, from the
  **same generator**, arrivals are cumulative ``rng.expovariate(rate / 1000)`` milliseconds. The
  draws of the arrivals do not depend on the rate, so the traces of one seed share their
  requests and their arrival times are exact ``1 / rate`` scalings of each other;
- ``max_tokens = max(1, min(output_tokens, 256))`` and requests are named ``mixed-0000``, ...;
- each trace is written as the original vLLM workload JSON (``mixed_rate3.8.json``, read by
  tracekit's ``vllm-workload`` loader) with ``frozen_at = ""`` so that its bytes depend only on
  the inputs, and ``manifest.json`` lists every file's SHA-256 (plus the pool's);
- :func:`verify_traces` regenerates into a temporary folder and compares the hashes.

The files carry no text: ``prompt`` and ``expected_output`` are empty, and
``metadata.actual_prompt_tokens`` holds the prompt length, which is all tracekit reads.
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import safe_output
from tracekit.errors import ConfigError, WorkloadError
from tracekit.trace.timestamps import utc_now_iso
from tracekit.workloads import Workload, load_workload

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_POOL_MAX_PROMPT_TOKENS",
    "DEFAULT_POOL_OPTIONS",
    "DEFAULT_POOL_PATH",
    "PACKAGED_POOL_PATH",
    "LengthPool",
    "TraceSet",
    "VerifyReport",
    "freeze_traces",
    "generate_trace",
    "load_default_pool",
    "load_length_pool",
    "read_trace_manifest",
    "trace_filename",
    "verify_traces",
]

#: Output cap of the original generator (``max_tokens = max(1, min(output, 256))``).
DEFAULT_MAX_OUTPUT_TOKENS = 256
#: The shipped ShareGPT length statistics, the closest public stand-in for the "mixed" pool.
#: This is the pool's stable name, recorded in manifests (the same on every machine, so traces
#: stay byte-identical); it is read from the package's copy, :data:`PACKAGED_POOL_PATH`,
#: wherever tracekit is installed and whatever the working directory.
DEFAULT_POOL_PATH = (
    Path("traces") / "sharegpt-lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
)
#: The default pool's file inside the installed package (``tracekit/data``).
PACKAGED_POOL_PATH = Path(__file__).resolve().parents[1] / "data" / DEFAULT_POOL_PATH.name
#: A lengths-only vidur file needs a rate to load; the pool's arrivals are never used.
DEFAULT_POOL_OPTIONS: dict[str, Any] = {"rate": 1.0}
#: Prompt cap applied to the ShareGPT pool so that its mean prompt (505.9 tokens, 13,227 rows)
#: matches the original mixed pool's "about 500" (the unfiltered file's mean is 2,340: it holds
#: whole conversations, the original pool first turns). See ``docs/experiments.md``.
DEFAULT_POOL_MAX_PROMPT_TOKENS = 1350

MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class LengthPool:
    """The rows requests are sampled from: prompt and output lengths, in source order.

    Parameters
    ----------
    name
        Pool name (the source workload's name).
    source
        Path of the source file.
    sha256
        SHA-256 of the source file's bytes.
    options
        What shaped the pool: the loader's recorded options and ``max_prompt_tokens``.
    load_options
        The keyword arguments the file was loaded with (None when a loaded workload was
        given), so that :func:`verify_traces` can reload it.
    ids
        Source request ids (``original_id`` in the traces).
    prompt_tokens, output_tokens
        Lengths, one per row.
    """

    name: str
    source: str
    sha256: str
    options: dict[str, Any]
    load_options: dict[str, Any] | None
    ids: tuple[str, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def describe(self) -> dict[str, Any]:
        """Provenance and summary statistics, as recorded in a trace manifest."""
        n = len(self)
        return {
            "name": self.name,
            "source": self.source,
            "sha256": self.sha256,
            "options": self.options,
            "load_options": self.load_options,
            "num_rows": n,
            "mean_prompt_tokens": sum(self.prompt_tokens) / n,
            "mean_output_tokens": sum(self.output_tokens) / n,
        }


def load_length_pool(
    source: str | Path | Workload,
    *,
    max_prompt_tokens: int | None = None,
    **options: Any,
) -> LengthPool:
    """The prompt and output lengths of a workload, as a sampling pool.

    Parameters
    ----------
    source
        A workload file (loaded with :func:`tracekit.workloads.load_workload` and ``options``)
        or an already loaded :class:`~tracekit.workloads.Workload`.
    max_prompt_tokens
        Keep only rows with at most this many prompt tokens (source order is kept).
    **options
        Loader options (a lengths-only vidur file needs ``rate=``; its arrivals are unused).

    Returns
    -------
    LengthPool
        The rows in source order.

    Raises
    ------
    tracekit.errors.WorkloadError
        When the file cannot be read or no row is left.
    """
    default = not isinstance(source, Workload) and Path(source) == DEFAULT_POOL_PATH
    if isinstance(source, Workload):
        workload = source
    else:
        workload = load_workload(PACKAGED_POOL_PATH if default else source, **options)
    frame = workload.frame.sort("arrival_s", maintain_order=True)
    if max_prompt_tokens is not None:
        if max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1; found {max_prompt_tokens}")
        frame = frame.filter(pl.col("prompt_tokens") <= max_prompt_tokens)
    if frame.height == 0:
        raise WorkloadError(
            f"{workload.source}: no request has at most {max_prompt_tokens} prompt tokens; "
            "fix: raise max_prompt_tokens"
        )
    return LengthPool(
        name=workload.name,
        # The default pool by its stable name, not the install path.
        source=str(DEFAULT_POOL_PATH) if default else str(workload.source),
        sha256=workload.sha256,
        options={**workload.options, "max_prompt_tokens": max_prompt_tokens},
        load_options=None if isinstance(source, Workload) else dict(options),
        ids=tuple(frame.get_column("request_id").to_list()),
        prompt_tokens=tuple(frame.get_column("prompt_tokens").to_list()),
        output_tokens=tuple(frame.get_column("output_tokens").to_list()),
    )


def load_default_pool(
    max_prompt_tokens: int | None = DEFAULT_POOL_MAX_PROMPT_TOKENS,
) -> LengthPool:
    """The shipped ShareGPT length statistics as a pool (:data:`DEFAULT_POOL_PATH`).

    Parameters
    ----------
    max_prompt_tokens
        Prompt cap; the default keeps rows of at most 1,350 prompt tokens, whose mean prompt
        (505.9 tokens) matches the original mixed pool's. None keeps every row.

    Returns
    -------
    LengthPool
        The pool, in file order.
    """
    return load_length_pool(
        DEFAULT_POOL_PATH, max_prompt_tokens=max_prompt_tokens, **DEFAULT_POOL_OPTIONS
    )


def trace_filename(prefix: str, rate: float) -> str:
    """The original's file name: ``f"{prefix}_rate{rate}.json"`` (``mixed_rate3.8.json``)."""
    return f"{prefix}_rate{float(rate)}.json"


def generate_trace(
    pool: LengthPool,
    *,
    rate: float,
    seed: int,
    num_requests: int,
    prefix: str = "mixed",
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
) -> dict[str, Any]:
    """One frozen trace as the original vLLM workload document.

    Parameters
    ----------
    pool
        Rows to sample from.
    rate
        Poisson arrival rate, requests per second.
    seed
        Seed of the one generator used for sampling and then for arrivals.
    num_requests
        Requests to sample (without replacement).
    prefix
        Workload name and request-id prefix (``mixed-0000``).
    max_output_tokens
        Cap of ``max_tokens``.

    Returns
    -------
    dict
        ``{workload_name, request_rate, seed, dataset_source, frozen_at, num_requests,
        requests}`` in the original's key order.

    Raises
    ------
    tracekit.errors.ConfigError
        For a rate <= 0 or a pool smaller than ``num_requests``.
    """
    if not rate > 0:
        raise ConfigError(f"rate must be > 0 requests per second; found {rate}")
    if not 1 <= num_requests <= len(pool):
        raise ConfigError(
            f"num_requests must be between 1 and the pool's {len(pool)} rows; found {num_requests}"
        )
    rng = random.Random(seed)
    # rng.sample chooses positions from the population's length only, so sampling positions
    # draws exactly what the original's rng.sample(pool_records, N) drew.
    picked = rng.sample(range(len(pool)), num_requests)
    rate_per_ms = rate / 1000.0
    now_ms = 0.0
    requests = []
    for i, row in enumerate(picked):
        now_ms += rng.expovariate(rate_per_ms)
        max_tokens = max(1, min(pool.output_tokens[row], max_output_tokens))
        requests.append(
            {
                "request_id": f"{prefix}-{i:04d}",
                "prompt": "",
                "max_tokens": max_tokens,
                "arrival_time_ms": now_ms,
                "expected_output": "",
                "metadata": {
                    "actual_prompt_tokens": str(pool.prompt_tokens[row]),
                    "dataset": pool.name,
                    "original_id": pool.ids[row],
                },
            }
        )
    return {
        "workload_name": prefix,
        "request_rate": float(rate),
        "seed": seed,
        "dataset_source": pool.name,
        "frozen_at": "",
        "num_requests": num_requests,
        "requests": requests,
    }


def _trace_bytes(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8")


def _trace_set(folder: Path) -> str | None:
    """None if ``folder`` holds a trace set :func:`freeze_traces` wrote (JSON files only)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text("utf-8"))
        names = [p.name for p in folder.iterdir()]
    except (OSError, ValueError):
        return "not a trace folder written by tracekit experiment traces (no trace manifest)"
    if not isinstance(manifest, dict) or not {"frozen_at", "hashes"} <= manifest.keys():
        return "not a trace folder written by tracekit experiment traces (no trace manifest)"
    others = sorted(n for n in names if not n.endswith(".json"))
    if others:
        return f"holds files tracekit experiment traces did not write ({', '.join(others[:3])})"
    return None


#: How ``experiment traces`` recognises a trace folder it wrote (and may write again).
TRACE_SET_MARK = safe_output.Mark("tracekit experiment traces", _trace_set)


@dataclass(frozen=True, slots=True)
class TraceSet:
    """A folder of frozen traces: one file per rate, and its manifest."""

    folder: Path
    manifest: dict[str, Any]

    @property
    def files(self) -> dict[float, Path]:
        """Rate -> trace file."""
        prefix = self.manifest["workload"]
        return {
            float(rate): self.folder / trace_filename(prefix, rate)
            for rate in self.manifest["rates"]
        }


def freeze_traces(
    pool: LengthPool,
    out: str | Path,
    *,
    rates: Sequence[float],
    seed: int = 42,
    num_requests: int = 1000,
    prefix: str = "mixed",
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    overwrite: bool = False,
) -> TraceSet:
    """Write one trace per rate and ``manifest.json`` with their SHA-256 hashes into ``out``.

    Parameters
    ----------
    pool
        Rows to sample from.
    out
        Folder to write: created if needed, or an empty folder, or (with ``overwrite``) a trace
        folder this function wrote (its files are replaced, all at once). Any other folder is
        refused, and so is a folder inside a trace bundle (docs/guarantees.md, "Safe output").
    rates
        Arrival rates, requests per second.
    seed, num_requests, prefix, max_output_tokens
        As for :func:`generate_trace`; one seed for every rate.

    Returns
    -------
    TraceSet
        The folder and its manifest.
    """
    folder = Path(out)
    rates = [float(r) for r in rates]
    if not rates or len(set(rates)) != len(rates):
        raise ConfigError(f"rates must be non-empty and distinct; found {rates}")
    safe_output.check_folder_output(folder, mark=TRACE_SET_MARK, resume=True)
    if not overwrite and (folder / MANIFEST).exists():
        raise safe_output.OutputRefused(
            f"--out {folder}: already exists (a trace set); choose a new path, or pass --overwrite "
            "to replace what tracekit experiment traces wrote there"
        )
    hashes = {}
    files: dict[Path, bytes | str] = {}
    for rate in rates:
        document = generate_trace(
            pool,
            rate=rate,
            seed=seed,
            num_requests=num_requests,
            prefix=prefix,
            max_output_tokens=max_output_tokens,
        )
        name = trace_filename(prefix, rate)
        files[folder / name] = data = _trace_bytes(document)
        hashes[name] = hashlib.sha256(data).hexdigest()
    manifest = {
        "frozen_at": utc_now_iso(),
        "seed": seed,
        "rates": rates,
        "workload": prefix,
        "num_requests": num_requests,
        "max_output_tokens": max_output_tokens,
        "pool": pool.describe(),
        "hashes": hashes,
    }
    files[folder / MANIFEST] = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    safe_output.write_files(files, cleanup=True)  # all the files, or none of them
    return TraceSet(folder, manifest)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of :func:`verify_traces`: files whose regenerated hash differs."""

    folder: Path
    checked: int
    mismatches: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every regenerated file has the recorded hash."""
        return not self.mismatches

    def render(self) -> str:
        """One line per mismatch, or one line saying all hashes match."""
        if self.ok:
            return f"{self.folder}: all {self.checked} trace hashes match"
        return "\n".join(
            f"{self.folder / name}: expected sha256 {expected[:12]}, regenerated {actual[:12]}"
            for name, (expected, actual) in sorted(self.mismatches.items())
        )


def read_trace_manifest(folder: str | Path) -> dict[str, Any]:
    """The ``manifest.json`` of a trace folder; a missing or broken one is a ``ConfigError``."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no trace manifest; fix: run the generator first") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    missing = [
        k
        for k in ("seed", "rates", "workload", "num_requests", "pool", "hashes")
        if k not in manifest
    ]
    if missing:
        raise ConfigError(f"{path}: manifest lacks {', '.join(missing)}; regenerate the traces")
    return dict(manifest)


def verify_traces(folder: str | Path, *, pool: LengthPool | None = None) -> VerifyReport:
    """Regenerate a trace folder into a temporary folder and compare every file's SHA-256.

    Parameters
    ----------
    folder
        A folder written by :func:`freeze_traces`.
    pool
        The pool to regenerate from; by default reloaded from the manifest's pool source and
        options. Its SHA-256 must match the manifest's.

    Returns
    -------
    VerifyReport
        Mismatching files (expected and regenerated hash); a changed pool is reported under
        the name ``pool``.
    """
    folder = Path(folder)
    manifest = read_trace_manifest(folder)
    recorded = manifest["pool"]
    if pool is None:
        if recorded.get("load_options") is None:
            raise ConfigError(
                f"{folder / MANIFEST}: the pool was given as a loaded workload; "
                "fix: pass the same pool to verify"
            )
        pool = load_length_pool(
            recorded["source"],
            max_prompt_tokens=recorded["options"].get("max_prompt_tokens"),
            **recorded["load_options"],
        )
    mismatches: dict[str, tuple[str, str]] = {}
    if pool.sha256 != recorded["sha256"]:
        mismatches["pool"] = (recorded["sha256"], pool.sha256)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = freeze_traces(
            pool,
            tmp,
            rates=manifest["rates"],
            seed=manifest["seed"],
            num_requests=manifest["num_requests"],
            prefix=manifest["workload"],
            max_output_tokens=manifest.get("max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS),
        )
    for name, expected in manifest["hashes"].items():
        actual = fresh.manifest["hashes"].get(name, "missing")
        on_disk = folder / name
        if on_disk.exists():
            disk = hashlib.sha256(on_disk.read_bytes()).hexdigest()
            if disk != expected:
                mismatches[f"{name} (on disk)"] = (expected, disk)
        if actual != expected:
            mismatches[name] = (expected, actual)
    return VerifyReport(folder, len(manifest["hashes"]), mismatches)
