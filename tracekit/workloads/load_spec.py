"""One bundle of every client-model option, applied to a workload in one fixed order.

The commands that run workloads (``record sim``, ``qualify``, ``capacity``) take the same load
options; :class:`LoadSpec` holds them and :func:`apply_load` applies them after the workload was
loaded (windowed, limited, rate-scaled):

1. ``order``: re-order the requests onto the same arrival times (:mod:`.order`);
2. ``arrivals``/``rate``: replace the arrival times (:mod:`.arrivals`; seeded by ``seed``);
3. ``max_tokens``: the client's cap, then ``ignore_eos`` (:mod:`.output_lengths`);
4. the client model (``max_concurrency``, ``concurrency``/``think_time_s``,
   ``ttft_timeout_s``) is recorded in ``options["client"]``; the engine applies it as it runs
   (:func:`client_model` reads it back).

Everything lands in ``Workload.options`` and so in every manifest and run id: two runs with
different load options never share an id.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracekit.workloads.arrivals import ArrivalKind, apply_arrivals, parse_arrivals
from tracekit.workloads.client import ClientModel
from tracekit.workloads.model import Workload
from tracekit.workloads.order import OrderKind, apply_order, parse_order
from tracekit.workloads.output_lengths import apply_ignore_eos, apply_max_tokens

__all__ = ["LoadSpec", "apply_load", "client_model"]


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """The load generator's options (see ``docs/workloads.md``, "Client models").

    Parameters
    ----------
    arrivals
        ``recorded``, ``poisson``, ``gamma:<burstiness>`` or ``constant``.
    rate
        Requests per second for a generated ``arrivals``; ``None`` with ``recorded``.
    order
        ``recorded``, ``ascending``, ``descending`` or ``shuffled:<seed>``.
    max_tokens
        ``--max-tokens N``: every request's cap; ``None`` keeps the workload's own.
    ignore_eos
        ``--ignore-eos``: every request is sent with ``ignore_eos`` and runs to its cap.
    client
        Concurrency cap, closed loop and TTFT timeout.

    Raises
    ------
    tracekit.errors.ConfigError
        For any bad option, or generated arrivals in a closed loop; one line naming the flag.
    """

    arrivals: str = "recorded"
    rate: float | None = None
    order: str = "recorded"
    max_tokens: int | None = None
    client: ClientModel = dataclasses.field(default_factory=ClientModel)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        model = parse_arrivals(self.arrivals, rate=self.rate)
        parse_order(self.order)
        self.client.check_arrivals(model)

    @property
    def is_default(self) -> bool:
        """Whether the spec changes nothing (the workload runs as recorded)."""
        return self == LoadSpec()

    def with_rate(self, rate: float) -> LoadSpec:
        """The same spec at another generated ``rate`` (``recorded`` becomes ``poisson``)."""
        arrivals = "poisson" if self.arrivals.strip().lower() == "recorded" else self.arrivals
        return dataclasses.replace(self, arrivals=arrivals, rate=rate)


def apply_load(workload: Workload, spec: LoadSpec | None, *, seed: int = 0) -> Workload:
    """Return ``workload`` as the client of ``spec`` sends it.

    Parameters
    ----------
    workload
        The loaded workload.
    spec
        The load options; ``None`` or the default spec returns ``workload`` unchanged.
    seed
        Seed of generated arrivals (the run's ``--seed``).

    Returns
    -------
    Workload
        A new workload; ``options`` records ``order``, ``arrivals``, ``client_max_tokens``,
        ``ignore_eos`` and ``client`` when they differ from the defaults.

    Examples
    --------
    >>> from tracekit.workloads import load_workload
    >>> w = load_workload("tracekit/data/azure_conv_sample.csv", limit=4)
    >>> sent = apply_load(w, LoadSpec(arrivals="constant", rate=2.0))
    >>> sent.frame.get_column("arrival_s").to_list()
    [0.5, 1.0, 1.5, 2.0]
    """
    if spec is None or spec.is_default:
        return workload
    if parse_order(spec.order).kind is not OrderKind.RECORDED:
        workload = apply_order(workload, spec.order)
    arrivals = parse_arrivals(spec.arrivals, rate=spec.rate, seed=seed)
    if arrivals.kind is not ArrivalKind.RECORDED:
        workload = apply_arrivals(workload, arrivals)
    if spec.max_tokens is not None:
        workload = apply_max_tokens(workload, spec.max_tokens)
    if spec.ignore_eos:
        workload = apply_ignore_eos(workload)
    if spec.client != ClientModel():
        options = {**workload.options, "client": spec.client.describe()}
        workload = dataclasses.replace(workload, options=options)
    return workload


def client_model(workload: Workload) -> ClientModel | None:
    """The client model recorded by :func:`apply_load`, or ``None`` (open loop, no limits)."""
    described: dict[str, Any] | None = workload.options.get("client")
    if not described:
        return None
    return ClientModel(**described)
