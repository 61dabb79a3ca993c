"""Step times from NVIDIA AIConfigurator's measured per-operator tables (``aiconfigurator-core``).

The estimator is aiconfigurator-core's native forward-pass model,
``aiconfigurator_core.sdk.rust_engine_step.RustForwardPassPerfModel.from_native(config)``: it
compiles the model's operator graph (GEMMs, context and generation attention, communication)
against the measured tables of one system, backend and backend version, and
``estimate_forward_pass_time_ms({"scheduled_requests": {...}})`` returns the time of one
forward pass from the step's scheduled work (``num_prefill_requests``, ``sum_prefill_tokens``,
``sum_prefill_kv_tokens``, ``num_decode_requests``, ``sum_decode_kv_tokens``). A step's
:class:`~tracekit.latency.interface.StepShape` maps onto those five figures exactly (the
variance fields it also accepts do not change its answer).

**Tabulation.** One estimator call costs about 15 us; the adapter caches calls on a grid and
interpolates (``docs/latency.md`` gives the measured error and speed). The five figures become
five axes: prefill chunks and decode sequences (integers, exact), prefill tokens (exact up to
4,096), mean prefix per chunk and mean decode context (exact up to 64), each continuous axis then
on a geometric grid of ``steps_per_octave`` points per doubling. A step is the multilinear
interpolation of the estimator at the grid points around it (at most 8 cached calls).

**Out of range.** Every axis has the limit of the shipped tables it leans on: 16,384 prefill
tokens per step and per-chunk prefix (context attention is measured up to a 16,384-token
sequence), 256 prefill chunks (context attention batch), 2,048 decode sequences (generation
attention batch), 131,072 mean decode context (generation attention). Beyond a limit the adapter
never asks the estimator: it extrapolates linearly from the last grid cell below the limit on
that axis. Inside the limits the estimator's own interpolation between measured points applies.

Import is lazy: nothing of ``aiconfigurator_core`` is loaded until a model is built.
"""

from __future__ import annotations

import bisect
import difflib
import logging
import math
from collections.abc import Callable
from importlib import resources
from typing import Any

from tracekit.errors import ConfigError
from tracekit.latency.interface import StepShape

__all__ = [
    "DEFAULT_BACKEND",
    "LIMITS",
    "MISSING_MESSAGE",
    "AIConfiguratorModel",
    "Estimator",
    "available_models",
    "available_systems",
    "did_you_mean",
    "load_estimator",
]

#: The backend whose tables are used unless ``@<backend>`` says otherwise.
DEFAULT_BACKEND = "vllm"
#: The one-line error when the optional extra is missing.
MISSING_MESSAGE = (
    "--latency aiconfigurator needs the aiconfigurator-core package: "
    'pip install ".[aiconfigurator]" (it needs Python 3.11 or newer)'
)
#: Axis limits of the shipped tables (see the module docstring); beyond them: linear extrapolation.
LIMITS = {
    "num_prefill_chunks": 256,
    "num_prefill_tokens": 16384,
    "mean_prefix": 16384,
    "num_decode_seqs": 2048,
    "mean_decode_context": 131072,
}
#: Below this, grid points are every integer.
_EXACT_BELOW = 64
#: Prefill tokens are exact below this: the estimator jumps at GEMM kernel boundaries (2-4 %
#: near 1,024 tokens on h100_sxm), which a grid would smear (``docs/latency.md``).
_EXACT_TOKENS_BELOW = 4096

#: ``fields -> milliseconds``: one forward pass of the scheduled work ``fields`` (the keys of
#: aiconfigurator-core's ``ScheduledRequestMetrics``).
Estimator = Callable[[dict[str, int]], float]


def _import_core() -> Any:
    """The ``aiconfigurator_core`` package, or the one-line :class:`ConfigError`."""
    try:
        import aiconfigurator_core  # noqa: F401
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel
    except ImportError:
        raise ConfigError(MISSING_MESSAGE) from None
    return perf_database, RustForwardPassPerfModel


def available_systems(backend: str = DEFAULT_BACKEND) -> dict[str, list[str]]:
    """Systems with tables for ``backend``, each with its table versions (oldest first)."""
    perf_database, _ = _import_core()
    supported = perf_database.get_supported_databases()
    return {s: list(b[backend]) for s, b in sorted(supported.items()) if b.get(backend)}


def available_models() -> list[str]:
    """Model ids (``org/name``) whose configurations ship with aiconfigurator-core."""
    _import_core()
    folder = resources.files("aiconfigurator_core") / "model_configs"
    suffix = "_config.json"
    names = (p.name for p in folder.iterdir())
    return sorted(
        n[: -len(suffix)].replace("--", "/", 1)
        for n in names
        if n.endswith(suffix) and not n.endswith("_hf_quant_config.json")
    )


def did_you_mean(value: str, choices: list[str]) -> str:
    """``"; did you mean a, b?"`` with up to three close choices (case-insensitive), or ``""``."""
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=3, cutoff=0.5)
    if not close:
        close = [c for c in lowered if value.lower() in c][:3]
    return f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else ""


def load_estimator(
    system: str, model: str, backend: str = DEFAULT_BACKEND, version: str | None = None
) -> tuple[Estimator, str]:
    """Build aiconfigurator-core's native forward-pass model for one set-up.

    Parameters
    ----------
    system
        A system of the shipped tables (``h100_sxm``, ``l40s``, ...).
    model
        A shipped model id (``meta-llama/Meta-Llama-3.1-8B``, ``Qwen/Qwen3-8B``, ...).
    backend
        ``vllm``, ``sglang`` or ``trtllm``.
    version
        Table version; the newest the system has for ``backend`` when None.

    Returns
    -------
    tuple
        The estimator (scheduled-work fields to milliseconds) and the table version used.

    Raises
    ------
    ConfigError
        The package is missing, or the system, backend, version or model is unknown (with the
        closest names).
    """
    perf_database, perf_model = _import_core()
    systems = available_systems(backend)
    if not systems:
        raise ConfigError(
            f"--latency aiconfigurator: no tables for backend {backend!r}; "
            "expected vllm, sglang or trtllm"
        )
    if system not in systems:
        hint = did_you_mean(system, list(systems))
        if "a6000" in system.lower():
            hint = "; the RTX A6000 is not in the tables, its stand-in is l40s (docs/latency.md)"
        raise ConfigError(
            f"--latency aiconfigurator: unknown system {system!r} for backend {backend}"
            f"{hint} (known: {', '.join(systems)})"
        )
    models = available_models()
    if model not in models:
        raise ConfigError(
            f"--latency aiconfigurator: unknown model {model!r}"
            f"{did_you_mean(model, models)} (one of the {len(models)} shipped model configs)"
        )
    if version is None:
        version = perf_database.get_latest_database_version(system, backend) or systems[system][-1]
    elif version not in systems[system]:
        raise ConfigError(
            f"--latency aiconfigurator: no {backend} {version} tables for {system}; "
            f"expected one of {', '.join(systems[system])}"
        )
    config = {
        "schema_version": 1,
        "model_name": model,
        "system_name": system,
        "backend": backend,
        "backend_version": version,
        "tp_size": 1,
        "pp_size": 1,
    }
    # Loading the tables logs one line per low-fidelity fallback table; keep the console clean.
    quiet = logging.getLogger("aiconfigurator_core")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        native = perf_model.from_native(config)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"--latency aiconfigurator: {system}/{model}@{backend} {version} is not supported by "
            f"aiconfigurator-core: {first}"
        ) from None
    finally:
        quiet.setLevel(level)

    def estimate(fields: dict[str, int]) -> float:
        value = native.estimate_forward_pass_time_ms({"scheduled_requests": fields})
        if value is None or not math.isfinite(value):
            raise ConfigError(
                f"--latency aiconfigurator: no estimate for {system}/{model} at {fields}"
            )
        return float(value)

    return estimate, version


class AIConfiguratorModel:
    """Step times from aiconfigurator-core, tabulated on a grid (see the module docstring).

    Parameters
    ----------
    system, model, backend, version
        The set-up, as for :func:`load_estimator`.
    steps_per_octave
        Grid points per doubling above 64 on the continuous axes (16: 4.4 % apart).
    tabulate
        When False every step calls the estimator directly (for measuring the grid's error).
    estimator
        An estimator to use instead of loading aiconfigurator-core (tests); ``version`` is then
        recorded as given.
    """

    def __init__(
        self,
        system: str,
        model: str,
        backend: str = DEFAULT_BACKEND,
        version: str | None = None,
        *,
        steps_per_octave: int = 16,
        tabulate: bool = True,
        estimator: Estimator | None = None,
    ) -> None:
        if steps_per_octave < 1:
            raise ConfigError(f"steps_per_octave must be >= 1, got {steps_per_octave}")
        if estimator is None:
            estimator, version = load_estimator(system, model, backend, version)
        self.system = system
        self.model = model
        self.backend = backend
        self.version = version
        self.steps_per_octave = steps_per_octave
        self.tabulate = tabulate
        self.name = f"aiconfigurator:{system}/{model}@{backend}"
        self._estimator = estimator
        self._cache: dict[tuple[int, int, int, int, int], float] = {}
        self.num_estimator_calls = 0
        # Every grid point from 64 past the largest limit (strictly increasing: 16 points per
        # doubling are at least 2.8 apart once rounded).
        top = max(LIMITS.values())
        self._points = [self._grid(0)]
        while self._points[-1] <= top:
            self._points.append(self._grid(len(self._points)))

    # -- the grid -------------------------------------------------------------------------

    def _grid(self, k: int) -> int:
        return round(_EXACT_BELOW * 2.0 ** (k / self.steps_per_octave))

    def _continuous_axis(
        self, x: float, limit: int, exact_below: int = _EXACT_BELOW
    ) -> list[tuple[int, float]]:
        """Grid points around ``x`` with their linear weights (extrapolating past ``limit``)."""
        if x <= exact_below:
            lo = math.floor(x)
            if lo == x:
                return [(lo, 1.0)]
            return [(lo, lo + 1 - x), (lo + 1, x - lo)]
        if x >= limit:
            hi = limit
            k = math.ceil(self.steps_per_octave * math.log2(limit / _EXACT_BELOW)) - 1
            lo = self._grid(k)
            if lo >= hi:
                lo = hi - 1
        else:
            # The grid cell holding x: points[i] <= x < points[i + 1] (a C bisection; this is
            # the hot path of a tabulated step).
            points = self._points
            i = bisect.bisect_right(points, x) - 1
            lo, hi = points[i], min(points[i + 1], limit)
        if x == lo:
            return [(lo, 1.0)]
        if x == hi:
            return [(hi, 1.0)]
        w = (x - lo) / (hi - lo)
        return [(lo, 1.0 - w), (hi, w)]

    @staticmethod
    def _integer_axis(n: int, limit: int) -> list[tuple[int, float]]:
        """``n`` exactly, or a linear extrapolation from ``limit - 1`` and ``limit`` beyond it."""
        if n <= limit:
            return [(n, 1.0)]
        w = float(n - (limit - 1))
        return [(limit - 1, 1.0 - w), (limit, w)]

    # -- evaluation -----------------------------------------------------------------------

    def _call(self, p: int, tokens: int, prefix: int, d: int, context: int) -> float:
        fields = {
            "num_prefill_requests": p,
            "sum_prefill_tokens": tokens,
            "sum_prefill_kv_tokens": prefix,
            "num_decode_requests": d,
            "sum_decode_kv_tokens": context,
        }
        self.num_estimator_calls += 1
        return self._estimator(fields)

    def _corner(self, p: int, tokens: int, mean_prefix: int, d: int, mean_ctx: int) -> float:
        key = (p, tokens, mean_prefix, d, mean_ctx)
        value = self._cache.get(key)
        if value is None:
            value = self._call(p, max(tokens, p), mean_prefix * p, d, mean_ctx * d)
            self._cache[key] = value
        return value

    def forward_ms(self, p: int, tokens: int, prefix: int, d: int, context: int) -> float:
        """Forward-pass time of a step's totals, milliseconds.

        ``p`` chunks schedule ``tokens`` tokens in all after ``prefix`` cached tokens in all;
        ``d`` decoding sequences have ``context`` tokens of context in all.
        """
        if not self.tabulate:
            return self._call(p, tokens, prefix, d, context)
        if p:
            p_axis = self._integer_axis(p, LIMITS["num_prefill_chunks"])
            t_axis = self._continuous_axis(
                tokens, LIMITS["num_prefill_tokens"], _EXACT_TOKENS_BELOW
            )
            k_axis = self._continuous_axis(prefix / p, LIMITS["mean_prefix"])
        else:
            p_axis = t_axis = k_axis = [(0, 1.0)]
        if d:
            d_axis = self._integer_axis(d, LIMITS["num_decode_seqs"])
            c_axis = self._continuous_axis(context / d, LIMITS["mean_decode_context"])
        else:
            d_axis = c_axis = [(0, 1.0)]
        total = 0.0
        corner = self._corner
        decode = [(dd, cc, wd * wc) for dd, wd in d_axis for cc, wc in c_axis]
        for pp, wp in p_axis:
            for tt, wt in t_axis:
                for kk, wk in k_axis:
                    w = wp * wt * wk
                    for dd, cc, wdc in decode:
                        total += w * wdc * corner(pp, tt, kk, dd, cc)
        return total

    def step_time_s(self, shape: StepShape) -> float:
        """Forward-pass time of the step from the tables, seconds."""
        return (
            self.forward_ms(
                len(shape.prefill_chunks),
                shape.num_prefill_tokens,
                shape.num_prefill_computed_tokens,
                shape.num_decode_seqs,
                shape.num_decode_context_tokens,
            )
            / 1000.0
        )

    def step_time_totals_s(self, p: int, tokens: int, prefix: int, d: int, context: int) -> float:
        """:meth:`step_time_s` of any step with these totals (the estimator sees only them)."""
        return self.forward_ms(p, tokens, prefix, d, context) / 1000.0

    def describe(self) -> dict[str, Any]:
        """Kind, name, set-up, table version, grid and out-of-range rule."""
        return {
            "kind": "aiconfigurator",
            "name": self.name,
            "measured": True,
            "system": self.system,
            "model": self.model,
            "backend": self.backend,
            "backend_version": self.version,
            "estimator": "aiconfigurator_core RustForwardPassPerfModel.from_native (tp 1, pp 1)",
            "tabulated": self.tabulate,
            "grid": {
                "exact_below": _EXACT_BELOW,
                "prefill_tokens_exact_below": _EXACT_TOKENS_BELOW,
                "steps_per_octave": self.steps_per_octave,
                "interpolation": "multilinear",
            },
            "limits": dict(LIMITS),
            "out_of_range": "linear extrapolation from the last grid cell below the limit",
        }
