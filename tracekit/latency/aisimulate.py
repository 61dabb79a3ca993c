"""Step times from NVIDIA AISimulate's measured per-operator tables (``aisimulate``, 0.13).

AISimulate supersedes aiconfigurator-core: the same kind of tables, more of them (newer table
versions, more model configurations), under ``aisimulate_core``. Its estimator is
``aisimulate_core.sdk.rust_engine_step.RustForwardPassPerfModel.best_available(config)`` with a
``ForwardPassPerfModelConfig`` that asks for exactly what the AIConfigurator backend uses:

- ``estimation_mode="op_level"`` (the per-operator tables; AISimulate's default, ``auto``,
  would fall back to FPM interpolation or regression where those fail) and
  ``fallback_policy="deny"``;
- ``worker_type="aggregated"``: one engine that prefills and decodes in the same steps;
- tensor and pipeline parallel 1, no speculation;
- ``estimator_config={"correction": {"enabled": False}}``: no online correction (it learns
  only from ``tune_with_fpms`` feedback, which this backend never gives; off, the answer cannot
  depend on what came before).

On a table version both packages ship, the two backends give the same step times
(``docs/latency.md``, "aisimulate"). The set-up checks, the listing, the grid and the
out-of-range rule are shared with the AIConfigurator backend, in
:mod:`tracekit.latency.perf_tables`.

Import is lazy: nothing of ``aisimulate_core`` is loaded until a model is built.
"""

from __future__ import annotations

from typing import Any

from tracekit.latency.perf_tables import TablePackage, TabulatedModel

__all__ = ["AISIMULATE", "MISSING_MESSAGE", "AISimulateModel", "load_estimator"]


def _native(system: str, model: str, backend: str, version: str) -> Any:
    from aisimulate_core.sdk.rust_engine_step import (
        ForwardPassPerfModelConfig,
        RustForwardPassPerfModel,
    )

    config = ForwardPassPerfModelConfig(
        model=model,
        system=system,
        backend=backend,
        worker_type="aggregated",
        backend_version=version,
        tp=1,
        pp=1,
        estimation_mode="op_level",
        fallback_policy="deny",
        estimator_config={"correction": {"enabled": False}},
    )
    return RustForwardPassPerfModel.best_available(config)


#: AISimulate 0.13 (``--latency aisimulate:``).
AISIMULATE = TablePackage(
    kind="aisimulate",
    distribution="aisimulate",
    module="aisimulate_core",
    extra="aisimulate",
    estimator=(
        "aisimulate_core RustForwardPassPerfModel.best_available (op_level, aggregated worker, "
        "tp 1, pp 1, no correction)"
    ),
    build_native=_native,
)
#: The one-line error when the optional extra is missing.
MISSING_MESSAGE = AISIMULATE.missing_message
#: :meth:`TablePackage.load_estimator` of AISimulate.
load_estimator = AISIMULATE.load_estimator


class AISimulateModel(TabulatedModel):
    """Step times from AISimulate's tables, tabulated (:class:`TabulatedModel`)."""

    package = AISIMULATE
