"""Step times from NVIDIA AIConfigurator's measured per-operator tables (``aiconfigurator-core``).

The estimator is aiconfigurator-core's native forward-pass model,
``aiconfigurator_core.sdk.rust_engine_step.RustForwardPassPerfModel.from_native(config)``: it
compiles the model's operator graph (GEMMs, context and generation attention, communication)
against the measured tables of one system, backend and backend version (tensor and pipeline
parallel 1). Everything else (the set-up checks, the listing, the grid, the out-of-range rule) is
shared with the AISimulate backend, in :mod:`tracekit.latency.perf_tables`.

Import is lazy: nothing of ``aiconfigurator_core`` is loaded until a model is built.
"""

from __future__ import annotations

from typing import Any

from tracekit.latency.perf_tables import (
    DEFAULT_BACKEND,
    LIMITS,
    Estimator,
    TablePackage,
    TabulatedModel,
    did_you_mean,
)

__all__ = [
    "AICONFIGURATOR",
    "DEFAULT_BACKEND",
    "LIMITS",
    "MISSING_MESSAGE",
    "AIConfiguratorModel",
    "Estimator",
    "did_you_mean",
    "load_estimator",
]


def _native(system: str, model: str, backend: str, version: str) -> Any:
    from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel

    return RustForwardPassPerfModel.from_native(
        {
            "schema_version": 1,
            "model_name": model,
            "system_name": system,
            "backend": backend,
            "backend_version": version,
            "tp_size": 1,
            "pp_size": 1,
        }
    )


#: aiconfigurator-core 0.12 (``--latency aiconfigurator:``).
AICONFIGURATOR = TablePackage(
    kind="aiconfigurator",
    distribution="aiconfigurator-core",
    module="aiconfigurator_core",
    extra="aiconfigurator",
    estimator="aiconfigurator_core RustForwardPassPerfModel.from_native (tp 1, pp 1)",
    build_native=_native,
)
#: The one-line error when the optional extra is missing.
MISSING_MESSAGE = AICONFIGURATOR.missing_message
#: :meth:`TablePackage.load_estimator` of aiconfigurator-core.
load_estimator = AICONFIGURATOR.load_estimator


class AIConfiguratorModel(TabulatedModel):
    """Step times from aiconfigurator-core's tables, tabulated (:class:`TabulatedModel`)."""

    package = AICONFIGURATOR
