"""Measured against simulated: a measured configuration's metrics next to its simulation's.

:func:`compare_runs` takes the repeats of one measured configuration (the same server, client
settings and request rate, run several times), simulates each repeat's own requests (its send
times and lengths) with a step-time model, and compares the means over the repeats of every
metric of :mod:`tracekit.measured.metrics`: the error is ``simulated mean / measured mean - 1``.
With two or more repeats, each repeat against the mean of the others gives the **noise floor**:
how far one measurement of the same configuration is from the others, which no model can be
expected to beat; a metric is **within** its target when ``|error| <= max(target, floor)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.engine.config import EngineConfig
from tracekit.measured.metrics import METRIC_NAMES, run_metrics
from tracekit.measured.simulate import RequestOverheads, simulate_run
from tracekit.measured.spread import LatencySpread, simulated_metrics
from tracekit.workloads.measured import MeasuredRun

__all__ = ["Comparison", "MetricComparison", "compare_runs"]


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric, measured and simulated.

    Attributes
    ----------
    name
        A :data:`~tracekit.measured.metrics.METRIC_NAMES` entry.
    measured
        Mean over the repeats (None when the client records no such figure, e.g. GuideLLM's ITL).
    measured_min, measured_max
        The repeats' range.
    simulated
        Mean over the repeats' simulations.
    error
        ``simulated / measured - 1`` (None when either is missing).
    noise
        The largest ``|repeat / mean of the other repeats - 1|`` (None with one repeat).
    within
        ``|error| <= max(target, noise)``.
    """

    name: str
    measured: float | None
    measured_min: float | None
    measured_max: float | None
    simulated: float | None
    error: float | None
    noise: float | None
    within: bool | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "metric": self.name,
            "measured": self.measured,
            "measured_min": self.measured_min,
            "measured_max": self.measured_max,
            "simulated": self.simulated,
            "error": self.error,
            "noise": self.noise,
            "within": self.within,
        }


@dataclass(frozen=True)
class Comparison:
    """A measured configuration against its simulation.

    Attributes
    ----------
    metrics
        One :class:`MetricComparison` per metric, in report order.
    runs
        Per repeat: its source, request counts and both sides' metrics.
    target
        The relative error each metric is held to (besides the noise floor).
    without_spread
        With a spread: the same comparison without it (the request overheads only, what the
        engine's own runs add; ``docs/latency.md``, "Measured error"); else empty.
    """

    metrics: tuple[MetricComparison, ...]
    runs: tuple[dict[str, Any], ...] = ()
    target: float = 0.10
    latency: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    without_spread: tuple[MetricComparison, ...] = ()

    def metric(self, name: str) -> MetricComparison:
        """The comparison of one metric by name."""
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def all_within(self) -> bool:
        """Every metric with both sides is within its target or the noise floor."""
        return all(m.within for m in self.metrics if m.within is not None)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``tracekit accuracy --json``)."""
        return {
            "latency": self.latency,
            "target": self.target,
            "all_within": self.all_within,
            "metrics": [m.as_dict() for m in self.metrics],
            **(
                {"metrics_without_spread": [m.as_dict() for m in self.without_spread]}
                if self.without_spread
                else {}
            ),
            "runs": list(self.runs),
            **self.extra,
        }


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if len(present) == len(values) and present else None


def compare_metrics(
    measured: Sequence[dict[str, Any]], simulated: Sequence[dict[str, Any]], target: float
) -> tuple[MetricComparison, ...]:
    """Compare per-repeat metric mappings (:func:`run_metrics` outputs), metric by metric."""
    out = []
    for name in METRIC_NAMES:
        values = [m.get(name) for m in measured]
        live = _mean(values)
        sim = _mean([s.get(name) for s in simulated])
        error = None if live in (None, 0) or sim is None else sim / live - 1
        noise = None
        if len(values) > 1 and all(v is not None for v in values):
            worst = 0.0
            for i, v in enumerate(values):
                rest = _mean(values[:i] + values[i + 1 :])
                if rest:
                    worst = max(worst, abs(v / rest - 1))  # type: ignore[operator]
            noise = worst
        within = None if error is None else abs(error) <= max(target, noise or 0.0)
        present = [v for v in values if v is not None]
        out.append(
            MetricComparison(
                name,
                live,
                min(present) if present else None,
                max(present) if present else None,
                sim,
                error,
                noise,
                within,
            )
        )
    return tuple(out)


def compare_runs(
    runs: Sequence[MeasuredRun],
    config: EngineConfig,
    *,
    overheads: RequestOverheads | None = None,
    spread: LatencySpread | None = None,
    target: float = 0.10,
    client_overheads: Mapping[str, RequestOverheads] | None = None,
) -> Comparison:
    """Simulate each repeat of one measured configuration and compare the metrics.

    Parameters
    ----------
    runs
        Repeats of one configuration (one is enough; two or more give the noise floor).
    config
        The engine configuration, with the step-time model in ``config.latency``.
    overheads
        Per-request time outside the step loop (a calibrated model's, or none).
    spread
        A calibrated model's residual spread: the simulated latency statistics are then those
        of the simulation convolved with it (:func:`~tracekit.measured.spread.spread_requests`).
    target
        The relative error a metric is held to where the noise floor is smaller.
    client_overheads
        Per client, its own overheads (a model fitted to several clients' runs); a run of
        another client takes ``overheads``.
    """
    if not runs:
        raise ValueError("compare_runs needs at least one measured run")
    measured, simulated, plain, rows = [], [], [], []
    for run in runs:
        own = (client_overheads or {}).get(run.client, overheads)
        sim = simulate_run(run, config, overheads=own)
        m = run_metrics(run.frame, start="start_s")
        s = simulated_metrics(sim.requests, spread)
        measured.append(m)
        simulated.append(s)
        if spread:
            plain.append(simulated_metrics(sim.requests))
        rows.append(
            {
                "source": str(run.source),
                "client": run.client,
                "settings": dict(run.settings),
                "num_requests": run.num_requests,
                "num_failed": run.num_failed,
                "num_simulated_ok": s["num_ok"],
                "measured": m,
                "simulated": s,
                "num_steps": sim.result.num_steps,
                "num_preemptions": sim.result.num_preemptions,
            }
        )
    return Comparison(
        compare_metrics(measured, simulated, target),
        tuple(rows),
        target,
        config.effective_latency,
        without_spread=compare_metrics(measured, plain, target) if spread else (),
    )
