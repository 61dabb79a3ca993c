"""The output-equality gate: greedy outputs of a candidate live run against the built-in run.

With greedy decoding, a request's output token ids depend only on its prompt and the model, so a
policy that changes only *which* request is preempted must leave every request that was never
preempted with exactly the same output. A request that was preempted (in either run) had its KV
recomputed, possibly in a batch of another shape, and floating-point sums in another order may
legitimately flip a near-tie; those are counted and reported, not failed.

Both bundles must be live recordings (``tracekit record vllm --live``) of the same workload on
the same model (seed); the gate reads their ``outputs.parquet`` side tables and the
``num_preemptions`` column of their ``requests`` tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import ConfigError
from tracekit.trace.validate import open_checked

__all__ = ["OUTPUT_GATE_FILE", "OutputGate", "compare_outputs"]

#: The file a qualify results folder holds the gate in (the report's functional gate reads it).
OUTPUT_GATE_FILE = "output_gate.json"


@dataclass(frozen=True, slots=True)
class OutputGate:
    """The outcome of :func:`compare_outputs`.

    Attributes
    ----------
    baseline, candidate
        The two runs' ids.
    compared
        Requests never preempted in either run: their outputs must be equal.
    mismatched
        Ids of those whose outputs differ (the gate fails when there is any).
    preempted
        Requests preempted in at least one of the runs.
    preempted_differ
        How many of those have different outputs (reported, not failed).
    missing
        Requests finished in one run but not the other (the gate fails when there is any).
    """

    baseline: str
    candidate: str
    compared: int
    mismatched: tuple[str, ...]
    preempted: int
    preempted_differ: int
    missing: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """Every never-preempted request has the same output, and no request is missing."""
        return not self.mismatched and not self.missing

    @property
    def exit_code(self) -> int:
        """0 when passed, 1 otherwise."""
        return 0 if self.passed else 1

    @property
    def detail(self) -> str:
        """One line: what was compared and what differs."""
        text = (
            f"{self.compared - len(self.mismatched)} of {self.compared} never-preempted requests "
            f"have identical greedy outputs; {self.preempted_differ} of {self.preempted} "
            "preempted requests differ"
        )
        if self.mismatched:
            text += f"; differing: {', '.join(self.mismatched[:5])}"
        if self.missing:
            text += f"; missing from one run: {', '.join(self.missing[:5])}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible form (``output_gate.json``)."""
        return {
            "name": "outputs_equal",
            "passed": self.passed,
            "detail": self.detail,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "compared": self.compared,
            "mismatched": list(self.mismatched),
            "preempted": self.preempted,
            "preempted_differ": self.preempted_differ,
            "missing": list(self.missing),
        }

    def render(self) -> str:
        """Text for the terminal."""
        verdict = "passed" if self.passed else "FAILED"
        return f"output-equality gate {verdict}: {self.detail}"


def _load(path: str | Path) -> tuple[str, dict[str, Any], pl.DataFrame]:
    """Run id, manifest, and one row per request: request_id, num_preemptions, token_ids."""
    dataset = open_checked(path, {"requests": ("run_id", "request_id", "num_preemptions")})
    if len(dataset) != 1:
        raise ConfigError(f"{path}: expected one live bundle, found {len(dataset)} runs")
    bundle = dataset.bundles[0]
    live = (bundle.manifest.get("vllm") or {}).get("live")
    if not isinstance(live, dict) or not live.get("outputs"):
        raise ConfigError(
            f"{path}: not a live recording (no vllm.live.outputs in its manifest); record it "
            "with tracekit record vllm --live"
        )
    file = bundle.path / str(live["outputs"])
    if not file.is_file():
        raise ConfigError(f"{file}: missing; re-record the bundle with tracekit record vllm --live")
    try:
        outputs = pl.read_parquet(file, columns=["request_id", "token_ids"])
    except Exception as exc:  # a broken or foreign file: bad input, named
        raise ConfigError(f"{file}: unreadable outputs table ({exc}); re-record it") from None
    requests = dataset.scan("requests").select("request_id", "num_preemptions").collect()
    frame = requests.join(outputs, on="request_id", how="inner")
    return bundle.run_id, bundle.manifest, frame


def compare_outputs(baseline: str | Path, candidate: str | Path) -> OutputGate:
    """Compare the greedy outputs of two live bundles of one workload.

    Parameters
    ----------
    baseline
        The built-in run's bundle.
    candidate
        The candidate policy's bundle.

    Raises
    ------
    ConfigError
        Either is not a live bundle, or they ran different workloads or models.
    """
    base_id, base_manifest, base = _load(baseline)
    cand_id, cand_manifest, cand = _load(candidate)
    for field, read in (
        ("workload", lambda m: (m.get("workload") or {}).get("sha256")),
        ("model", lambda m: ((m.get("vllm") or {}).get("model") or {}).get("folder")),
    ):
        if read(base_manifest) != read(cand_manifest):
            raise ConfigError(
                f"{candidate}: its {field} differs from {baseline}'s; compare two live "
                "recordings of one workload on one model (same --seed)"
            )
    joined = base.join(cand, on="request_id", how="full", suffix="_c", coalesce=True)
    present = pl.col("token_ids").is_not_null() & pl.col("token_ids_c").is_not_null()
    missing = joined.filter(~present).get_column("request_id").sort().to_list()
    both = joined.filter(present).with_columns(
        preempted=(pl.col("num_preemptions") > 0) | (pl.col("num_preemptions_c") > 0),
        same=pl.col("token_ids") == pl.col("token_ids_c"),
    )
    clean = both.filter(~pl.col("preempted"))
    dirty = both.filter(pl.col("preempted"))
    return OutputGate(
        baseline=base_id,
        candidate=cand_id,
        compared=clean.height,
        mismatched=tuple(clean.filter(~pl.col("same")).get_column("request_id").sort().to_list()),
        preempted=dirty.height,
        preempted_differ=int((~dirty.get_column("same")).sum()),
        missing=tuple(missing),
    )
