"""qualify's load plan: cells at fractions of the measured capacity, plus one concurrency cell.

A policy effect of a few percent is only visible where the engine is near, not far beyond, its
saturation point: in a cell offered five times what the engine serves, queueing swamps
every policy. The default plan therefore measures the saturation point first
(:func:`tracekit.capacity.find_capacity`: the largest rate at which the built-in policy meets the
SLO-attainment target) and qualifies at:

* ``rate-0.6x``, ``rate-0.9x``, ``rate-1.0x``, ``rate-1.2x``: the workload rescaled to those
  fractions of the knee (recorded arrivals keep their shape; generated ones are regenerated);
* ``concurrency-8``: a closed loop of 8 users with no think time (the seeds' "interactive
  concurrency-eight" cell), whose load regulates itself.

Each cell is judged on its own. A cell whose built-in runs meet the SLO for less than
:data:`OVERLOAD_SLO` of their requests is *overloaded*: its verdicts are labelled so, not
judged (:mod:`tracekit.qualify.verdicts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tracekit.analysis.serving import SloTargets
from tracekit.capacity.search import (
    DEFAULT_TARGET,
    DEFAULT_TOLERANCE,
    CapacityResult,
    Probe,
    find_capacity,
    workload_at_rate,
)
from tracekit.engine import EngineConfig
from tracekit.errors import ConfigError
from tracekit.workloads.arrivals import ArrivalKind, parse_arrivals
from tracekit.workloads.client import ClientModel
from tracekit.workloads.load_spec import LoadSpec, apply_load
from tracekit.workloads.model import Workload

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_FRACTIONS",
    "OVERLOAD_SLO",
    "LoadCell",
    "LoadPlan",
    "describe_loads",
    "parse_fractions",
    "plan_loads",
]

#: Fractions of the measured capacity the default plan qualifies at.
DEFAULT_FRACTIONS: tuple[float, ...] = (0.6, 0.9, 1.0, 1.2)
#: Users of the default plan's closed-loop cell.
DEFAULT_CONCURRENCY = 8
#: A cell whose built-in runs meet the SLO for less than this share of requests is overloaded.
OVERLOAD_SLO = 0.5


@dataclass(frozen=True, slots=True)
class LoadCell:
    """One load level of the plan.

    Attributes
    ----------
    label
        Folder-safe name: ``rate-0.6x`` or ``concurrency-8``.
    workload
        The workload as sent at this load (its ``options`` record the rate or client model).
    kind
        ``rate`` (open loop at ``rate_rps``) or ``concurrency`` (closed loop).
    fraction
        The fraction of the knee (``None`` for the concurrency cell).
    rate_rps
        The offered rate (``None`` for the concurrency cell).
    concurrency
        The users of the closed loop (``None`` for a rate cell).
    """

    label: str
    workload: Workload
    kind: Literal["rate", "concurrency"]
    fraction: float | None = None
    rate_rps: float | None = None
    concurrency: int | None = None

    def describe(self) -> dict[str, Any]:
        """The cell as recorded in ``qualify.json`` (``loads``)."""
        return {
            "label": self.label,
            "kind": self.kind,
            "fraction": self.fraction,
            "rate_rps": self.rate_rps,
            "concurrency": self.concurrency,
            "num_requests": self.workload.num_requests,
        }


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """The measured capacity and the load cells derived from it.

    ``base`` and ``spec`` (the loaded workload and the load options) let a rate cell of
    generated arrivals draw fresh arrivals for each repeat (:meth:`regenerate`).
    """

    capacity: CapacityResult
    cells: tuple[LoadCell, ...]
    base: Workload | None = None
    spec: LoadSpec | None = None

    def regenerate(self, cell: LoadCell, seed: int) -> Workload | None:
        """``cell``'s workload with arrivals drawn anew with ``seed``, or ``None``.

        ``None`` for recorded arrivals and for the closed loop: their repeats cannot be fresh
        samples of the traffic by a seed.
        """
        if self.base is None or self.spec is None or cell.kind != "rate":
            return None
        if parse_arrivals(self.spec.arrivals, rate=self.spec.rate).kind is ArrivalKind.RECORDED:
            return None
        assert cell.rate_rps is not None
        return workload_at_rate(self.base, self.spec, cell.rate_rps, seed=seed)

    def describe(self) -> dict[str, Any]:
        """``qualify.json``'s ``capacity`` and ``loads`` entries."""
        return {
            "capacity": self.capacity.to_dict(),
            "loads": [cell.describe() for cell in self.cells],
        }


def plan_loads(
    workload: Workload,
    config: EngineConfig,
    *,
    spec: LoadSpec | None = None,
    slo: SloTargets | None = None,
    target: float = DEFAULT_TARGET,
    tolerance: float = DEFAULT_TOLERANCE,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    concurrency: int | None = DEFAULT_CONCURRENCY,
    seed: int = 0,
    progress: Callable[[Probe], None] | None = None,
) -> LoadPlan:
    """Measure the saturation point of ``workload`` and build the load cells around it.

    Parameters
    ----------
    workload
        The loaded workload (load options not applied).
    config
        Engine configuration.
    spec
        Load options shared by every cell (arrival kind, order, caps, timeout); a closed loop
        is refused (the plan adds its own).
    slo, target, tolerance
        The SLO and the attainment that define the knee, and the search's precision: the
        same defaults as ``tracekit capacity``, so both find the same knee.
    fractions
        Fractions of the knee, each > 0.
    concurrency
        Users of the closed-loop cell; ``None`` leaves it out.
    seed
        Seed of generated arrivals.
    progress
        Called with every probe of the capacity search as it is made.

    Returns
    -------
    LoadPlan
        The capacity result and the cells, rate cells first.

    Raises
    ------
    tracekit.errors.ConfigError
        When no probed rate meets the target (the plan would have nothing to scale), or for a
        bad fraction.
    """
    spec = spec or LoadSpec()
    if spec.client.closed_loop:
        raise ConfigError(
            "--concurrency: the capacity plan scales an open-loop rate and adds its own "
            "closed-loop cell (--load-concurrency); drop --concurrency, or pass --load-plan "
            "single to qualify one closed loop"
        )
    if any(not (f > 0) for f in fractions):
        raise ConfigError(f"load fractions {list(fractions)}: each must be > 0")
    result = find_capacity(
        workload, config, spec=spec, slo=slo, target=target, tolerance=tolerance, seed=seed,
        progress=progress,
    )  # fmt: skip
    if result.knee is None:
        raise ConfigError(
            f"{workload.source}: the built-in policy meets {target:.0%} SLO attainment at no "
            f"probed rate (lowest {min(p.rate for p in result.probes):.3g} req/s); relax "
            "--slo-ttft-s/--slo-tpot-s, or pass --load-plan single to qualify at the "
            "workload's own rate"
        )
    knee = result.knee.rate
    cells = []
    for fraction in fractions:
        rate = fraction * knee
        cells.append(
            LoadCell(
                label=f"rate-{fraction:g}x",
                workload=workload_at_rate(workload, spec, rate, seed=seed),
                kind="rate",
                fraction=fraction,
                rate_rps=rate,
            )
        )
    if concurrency is not None:
        closed = dataclasses.replace(
            spec,
            arrivals="recorded",
            rate=None,
            client=ClientModel(concurrency=concurrency, ttft_timeout_s=spec.client.ttft_timeout_s),
        )
        cells.append(
            LoadCell(
                label=f"concurrency-{concurrency}",
                workload=apply_load(workload, closed, seed=seed),
                kind="concurrency",
                concurrency=concurrency,
            )
        )
    return LoadPlan(result, tuple(cells), base=workload, spec=spec)


#: Largest fraction of the measured capacity a cell may offer: 100 times the knee is far
#: into overload already, and a larger rate only makes the run longer.
MAX_LOAD_FRACTION = 100.0


def parse_fractions(text: str) -> tuple[float, ...]:
    """Parse ``--load-fractions`` (``0.6,0.9,1.0,1.2``): distinct numbers in (0, 100].

    Raises
    ------
    tracekit.errors.ConfigError
        In one line, for anything else (a repeated fraction would name two cells alike).
    """
    try:
        # An empty item ('0.6,,0.9', a trailing comma) is a slip, not a fraction: refused.
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or any(not (0 < v <= MAX_LOAD_FRACTION) for v in values):
        raise ConfigError(
            f"--load-fractions {text!r}: expected comma-separated numbers > 0 and <= "
            f"{MAX_LOAD_FRACTION:g}; pass e.g. --load-fractions 0.6,0.9,1.0,1.2"
        )
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ConfigError(
            f"--load-fractions {text!r}: {repeated[0]:g} is given twice, and each fraction is "
            "one cell; pass each fraction once"
        )
    return values


def describe_loads(plan: LoadPlan) -> str:
    """One stderr line per cell: the knee and the load of every cell."""
    knee = plan.capacity.knee
    assert knee is not None
    lines = [
        f"capacity: knee {knee.rate:.4g} req/s (built-in SLO attainment "
        f"{knee.slo_attainment:.1%}, achieved {knee.achieved_rps:.4g} req/s)"
    ]
    for cell in plan.cells:
        load = (
            f"{cell.rate_rps:.4g} req/s" if cell.rate_rps is not None else
            f"closed loop of {cell.concurrency} users"
        )  # fmt: skip
        lines.append(f"  load cell {cell.label}: {load}, {cell.workload.num_requests} requests")
    return "\n".join(lines)
