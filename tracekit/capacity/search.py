"""The saturation point: the largest request rate at which the built-in policy meets its SLO.

``tracekit capacity`` runs the workload through the embedded engine with the scheduler's own
victim rule at several request rates and bisects for the *knee*: the largest rate whose SLO
attainment is at least ``target``.

**The rate axis.** With recorded arrivals, rate ``R`` divides every arrival time by
``R / R_0``, ``R_0`` being the workload's mean rate (requests over the span from its start to
its last arrival, the sweep's ``rate_rps`` rule), so the traffic's shape is kept. With generated
arrivals (``--arrivals poisson|gamma:B|constant``) the arrivals are generated at rate ``R``
(same seed at every rate). A closed loop (``--concurrency``) has no offered rate and is refused.

**SLO attainment** here is the share of the requests the engine admitted (rejected ones are
warned about and left out: no rate changes them) that finished with TTFT <= ``ttft_s`` and,
when set, TPOT <= ``tpot_s`` (requests with one output token have no TPOT and pass it). A request
the client aborted (``--ttft-timeout-s``) misses. Over finished requests this is
``tracekit.analysis.serving``'s definition.

**The search.** Start at ``R_0`` (or ``--rate``); double while the target is met, halve while it
is not, until one rate meets it and another misses; then bisect geometrically until the two are
within ``tolerance`` of each other (2% by default) or ``max_runs`` runs were made. Attainment
need not fall monotonically with the rate; the search reports the bracket it found, with every
probe, so a reader can see a non-monotone stretch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.serving import SloTargets
from tracekit.defaults import DEFAULT_TARGET, DEFAULT_TOLERANCE
from tracekit.engine import BuiltinHost, EngineConfig, run_engine
from tracekit.engine.engine import FinishedRequests
from tracekit.engine.request import engine_requests
from tracekit.errors import ConfigError
from tracekit.trace.text import text_table
from tracekit.workloads.arrivals import ArrivalKind, parse_arrivals
from tracekit.workloads.load_spec import LoadSpec, apply_load, client_model
from tracekit.workloads.model import Workload

__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TOLERANCE",
    "CapacityResult",
    "Probe",
    "expected_probes",
    "find_capacity",
    "mean_rate",
    "workload_at_rate",
]

# The search gives up growing or shrinking the rate after this factor (2**10 either way).
_MAX_OCTAVES = 10


@dataclass(frozen=True, slots=True)
class Probe:
    """One run of the search.

    Attributes
    ----------
    rate
        Offered request rate (requests per second).
    slo_attainment
        Share of admitted requests meeting the SLO (see the module docstring).
    achieved_rps
        Finished requests per second of makespan (first arrival to last finish).
    output_tokens_per_s
        Output tokens of finished requests per second of makespan.
    ttft_p50_s
        Median TTFT of finished requests.
    num_aborted, num_rejected, num_preemptions
        Run totals.
    """

    rate: float
    slo_attainment: float
    achieved_rps: float
    output_tokens_per_s: float
    ttft_p50_s: float | None
    num_aborted: int
    num_rejected: int
    num_preemptions: int

    def meets(self, target: float) -> bool:
        """Whether the probe's attainment reaches ``target``."""
        return self.slo_attainment >= target


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """The knee and how it was found.

    Attributes
    ----------
    knee
        The highest probed rate meeting the target (``None`` when even the lowest probed rate
        misses it).
    above
        The lowest probed rate above the knee that misses it (``None`` when every probed rate,
        up to ``2**10`` times the start, meets it).
    base_rate
        The workload's own mean rate ``R_0``.
    target, slo
        What was searched for.
    probes
        Every run, in the order made.
    """

    knee: Probe | None
    above: Probe | None
    base_rate: float
    target: float
    slo: SloTargets
    probes: tuple[Probe, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form (``tracekit capacity --json``)."""
        return {
            "knee_rps": None if self.knee is None else self.knee.rate,
            "knee": None if self.knee is None else dataclasses.asdict(self.knee),
            "above": None if self.above is None else dataclasses.asdict(self.above),
            "base_rate_rps": self.base_rate,
            "target": self.target,
            "slo": dataclasses.asdict(self.slo),
            "probes": [dataclasses.asdict(p) for p in self.probes],
        }

    def render(self) -> str:
        """The text ``tracekit capacity`` prints."""
        slo = f"TTFT <= {self.slo.ttft_s:g} s" + (
            f", TPOT <= {self.slo.tpot_s:g} s" if self.slo.tpot_s is not None else ""
        )
        lines = []
        if self.knee is None:
            lines.append(
                f"knee: none: even {self.probes[-1].rate:.4g} req/s misses {self.target:.0%} "
                f"SLO attainment ({slo}); the engine cannot meet the SLO at any probed load"
            )
        else:
            k = self.knee
            lines.append(
                f"knee: {k.rate:.4g} req/s ({k.rate / self.base_rate:.3g} x the workload's "
                f"{self.base_rate:.4g} req/s): SLO attainment {k.slo_attainment:.1%} >= "
                f"{self.target:.0%} at {slo}"
            )
            lines.append(
                f"achieved throughput at the knee: {k.achieved_rps:.4g} req/s, "
                f"{k.output_tokens_per_s:.4g} output tokens/s"
            )
        if self.above is not None:
            a = self.above
            lines.append(f"next rate up: {a.rate:.4g} req/s, SLO attainment {a.slo_attainment:.1%}")
        else:
            lines.append("no probed rate missed the target (the search stopped growing)")
        lines.append("")
        rows = [["rate_rps", "slo", "achieved", "ttft_p50", "aborted"]]
        for p in sorted(self.probes, key=lambda p: p.rate):
            ttft = "-" if p.ttft_p50_s is None else f"{p.ttft_p50_s:.3g}"
            rows.append(
                [
                    f"{p.rate:.4g}",
                    f"{p.slo_attainment:.1%}",
                    f"{p.achieved_rps:.4g}",
                    ttft,
                    str(p.num_aborted),
                ]
            )
        lines += [line.rstrip() for line in text_table(rows, align="right")]
        return "\n".join(lines)


def mean_rate(workload: Workload) -> float:
    """Requests per second over the span from the workload start to its last arrival.

    Raises
    ------
    tracekit.errors.ConfigError
        When every request arrives at 0 (no span, no rate).
    """
    span = workload.duration_s
    if span <= 0:
        raise ConfigError(
            f"{workload.source}: every request arrives at once, so the workload has no rate; "
            "pass --arrivals poisson --rate R to search over generated arrivals"
        )
    return workload.num_requests / span


def workload_at_rate(workload: Workload, spec: LoadSpec, rate: float, *, seed: int = 0) -> Workload:
    """``workload`` as sent at ``rate`` requests per second under ``spec`` (module docstring).

    Parameters
    ----------
    workload
        The loaded workload (before :func:`~tracekit.workloads.load_spec.apply_load`).
    spec
        The load options; recorded arrivals are rescaled, generated ones generated at ``rate``.
    rate
        Requests per second, finite and > 0.
    seed
        Seed of generated arrivals.

    Returns
    -------
    Workload
        The workload to run; ``options["rate_rps"]`` records ``rate``.
    """
    kind = parse_arrivals(spec.arrivals, rate=spec.rate).kind
    if kind is ArrivalKind.RECORDED:
        base = mean_rate(workload)
        frame = workload.frame.with_columns(pl.col("arrival_s") * (base / rate))
        scaled = dataclasses.replace(workload, frame=frame)
        sent = apply_load(scaled, spec, seed=seed)
    else:
        sent = apply_load(workload, dataclasses.replace(spec, rate=rate), seed=seed)
    options = {**sent.options, "rate_rps": rate}
    return dataclasses.replace(sent, options=options)


def measure(workload: Workload, config: EngineConfig, slo: SloTargets, rate: float) -> Probe:
    """Run ``workload`` (already at ``rate``) with the built-in policy and measure it."""
    observer = FinishedRequests()
    result = run_engine(
        engine_requests(workload), config, BuiltinHost(), observer, collect=False,
        client=client_model(workload),
    )  # fmt: skip
    records = observer.requests
    frame = pl.DataFrame(
        {
            "status": [r.status for r in records],
            "arrival_s": [r.arrival_s for r in records],
            "first_token_s": [r.first_token_s for r in records],
            "finish_s": [r.finish_s for r in records],
            "output_tokens": [r.num_output_tokens for r in records],
        },
        schema={
            "status": pl.String, "arrival_s": pl.Float64, "first_token_s": pl.Float64,
            "finish_s": pl.Float64, "output_tokens": pl.Int64,
        },
    )  # fmt: skip
    done = pl.col("status").str.starts_with("finished")
    ttft = pl.col("first_token_s") - pl.col("arrival_s")
    tpot = (pl.col("finish_s") - pl.col("first_token_s")) / (pl.col("output_tokens") - 1)
    meets = done & (ttft <= slo.ttft_s)
    if slo.tpot_s is not None:
        meets = meets & ((pl.col("output_tokens") <= 1) | (tpot <= slo.tpot_s))
    admitted = frame.filter(pl.col("status") != "rejected")
    finished = frame.filter(done)
    row = admitted.select(
        meets.mean().alias("slo"),
        done.sum().alias("finished"),
        pl.col("output_tokens").filter(done).sum().alias("tokens"),
        (pl.col("finish_s").filter(done).max() - pl.col("arrival_s").min()).alias("makespan"),
    ).row(0, named=True)
    makespan = row["makespan"] or 0.0
    ttft_p50 = finished.select(ttft.median()).item() if finished.height else None
    return Probe(
        rate=rate,
        slo_attainment=float(row["slo"] or 0.0),
        achieved_rps=row["finished"] / makespan if makespan > 0 else 0.0,
        output_tokens_per_s=row["tokens"] / makespan if makespan > 0 else 0.0,
        ttft_p50_s=None if ttft_p50 is None else float(ttft_p50),
        num_aborted=result.num_aborted,
        num_rejected=result.num_rejected,
        num_preemptions=result.num_preemptions,
    )


def expected_probes(
    probes: list[Probe],
    target: float = DEFAULT_TARGET,
    tolerance: float = DEFAULT_TOLERANCE,
    max_runs: int = 24,
) -> int:
    """How many probes the search will make in all, estimated from those made so far.

    Once one probe meets the target and another misses it, the bisection needs
    ``ceil(log2(ln(high / low) / ln(1 + tolerance)))`` more; before that, one more doubling or
    halving is assumed, then the bisection of a factor of 2. For progress lines only.
    """

    def bisections(ratio: float) -> int:
        if ratio <= 1 + tolerance:
            return 0
        return math.ceil(math.log2(math.log(ratio) / math.log1p(tolerance)))

    meeting = [p.rate for p in probes if p.meets(target)]
    missing = [p.rate for p in probes if not p.meets(target)]
    if meeting and missing:
        high = min(missing)
        below = [r for r in meeting if r < high]
        if below:
            return min(max_runs, len(probes) + bisections(high / max(below)))
    return min(max_runs, len(probes) + 1 + bisections(2.0))


def find_capacity(
    workload: Workload,
    config: EngineConfig,
    *,
    spec: LoadSpec | None = None,
    slo: SloTargets | None = None,
    target: float = DEFAULT_TARGET,
    tolerance: float = DEFAULT_TOLERANCE,
    max_runs: int = 24,
    seed: int = 0,
    progress: Callable[[Probe], None] | None = None,
) -> CapacityResult:
    """Bisect for the largest rate at which the built-in policy meets ``target`` attainment.

    Parameters
    ----------
    workload
        The loaded workload (load options not applied yet).
    config
        Engine configuration.
    spec
        Load options (arrival kind, order, caps, concurrency cap, timeout); not a closed loop.
    slo
        Latency targets (default ``SloTargets()``: TTFT 2 s, TPOT 0.1 s).
    target
        SLO attainment to reach, in ``(0, 1]``.
    tolerance
        Stop when the meeting and missing rates are within this relative distance.
    max_runs
        Most engine runs.
    seed
        Seed of generated arrivals.
    progress
        Called with every probe as it is made.

    Returns
    -------
    CapacityResult
        The knee, the rate above it and every probe.

    Raises
    ------
    tracekit.errors.ConfigError
        For a target outside ``(0, 1]``, a non-positive tolerance, a closed loop, or a
        workload with no rate.
    """
    spec = spec or LoadSpec()
    slo = slo or SloTargets()
    if isinstance(target, bool) or not (0 < target <= 1):
        raise ConfigError(f"--target {target!r}: expected a share in (0, 1]; pass e.g. 0.9")
    # A relative gap: 1 or more (or inf) would stop at the first bracket, without a search.
    if isinstance(tolerance, bool) or not (0 < tolerance < 1):
        raise ConfigError(
            f"--tolerance {tolerance!r}: expected a relative gap in (0, 1); pass e.g. 0.02"
        )
    if spec.client.closed_loop:
        raise ConfigError(
            "--concurrency: a closed loop has no offered rate to search; drop --concurrency "
            "(--max-concurrency caps an open loop)"
        )
    base = mean_rate(workload)
    start = spec.rate if spec.rate is not None and math.isfinite(spec.rate) else base
    probes: list[Probe] = []

    def probe(rate: float) -> Probe:
        sent = workload_at_rate(workload, spec, rate, seed=seed)
        made = measure(sent, config, slo, rate)
        probes.append(made)
        if progress is not None:
            progress(made)
        return made

    first = probe(start)
    low: Probe | None = first if first.meets(target) else None
    high: Probe | None = None if first.meets(target) else first
    factor = 2.0 if low is not None else 0.5
    for _ in range(_MAX_OCTAVES):
        if (low is not None and high is not None) or len(probes) >= max_runs:
            break
        current = probe(probes[-1].rate * factor)
        if current.meets(target):
            low = current
        else:
            high = current
    while (
        low is not None
        and high is not None
        and high.rate / low.rate > 1 + tolerance
        and len(probes) < max_runs
    ):
        mid = probe(math.sqrt(low.rate * high.rate))
        if mid.meets(target):
            low = mid
        else:
            high = mid
    return CapacityResult(low, high, base, target, slo, tuple(probes))
