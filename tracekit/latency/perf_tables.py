"""Step times from NVIDIA's measured per-operator tables: what the two table backends share.

aiconfigurator-core 0.12 (``--latency aiconfigurator:``) and its successor AISimulate 0.13
(``--latency aisimulate:``, imports under ``aisimulate_core``) ship the same kind of data, laid
out alike: measured per-operator tables (GEMM, context and generation attention, communication,
MoE) under ``<package>/systems/data/<system>/<op>/<backend>/<version>/``, system descriptions
(``<package>/systems/<system>.yaml``), model configurations (``<package>/model_configs/``), a
``sdk.perf_database`` module that says which tables are installed, and a native forward-pass
estimator: ``estimate_forward_pass_time_ms({"scheduled_requests": fields})`` times one forward
pass from five figures of the step (``num_prefill_requests``, ``sum_prefill_tokens``,
``sum_prefill_kv_tokens``, ``num_decode_requests``, ``sum_decode_kv_tokens``), onto which a
:class:`~tracekit.latency.interface.StepShape` maps exactly. Only the estimator's constructor
differs; each backend module (``aiconfigurator.py``, ``aisimulate.py``) says how to call it, as a
:class:`TablePackage`, and everything else is here:

- the set-up checks against the installed tables (:meth:`TablePackage.load_estimator`: system,
  backend, table version or its alias, model configuration, with the closest names);
- what the installed tables cover (:meth:`TablePackage.coverage`, ``tracekit latency tables``);
- the grid that tabulates an estimator (:class:`TabulatedModel`).

**Tabulation.** One estimator call costs about 10-17 us; the model caches calls on a grid and
interpolates (``docs/latency.md`` gives the measured error and speed). The five figures become
five axes: prefill chunks and decode sequences (integers, exact), prefill tokens (exact up to
4,096), mean prefix per chunk and mean decode context (exact up to 64), each continuous axis then
on a geometric grid of ``steps_per_octave`` points per doubling. A step is the multilinear
interpolation of the estimator at the grid points around it (at most 8 cached calls).

**Out of range.** Every axis has the limit of the largest shipped tables it leans on, the same in
both packages: 16,384 prefill tokens per step and per-chunk prefix (context attention is measured
up to a 16,384-token sequence), 256 prefill chunks (context attention batch), 2,048 decode
sequences (generation attention batch), 131,072 mean decode context (generation attention).
Beyond a limit the model never asks the estimator: it extrapolates linearly from the last grid
cell below the limit on that axis. Inside the limits the estimator's own interpolation between
measured points applies.

Imports are lazy: nothing of either package is loaded until a model is built or a listing made.
"""

from __future__ import annotations

import bisect
import difflib
import importlib
import importlib.metadata
import importlib.util
import logging
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, ClassVar

from tracekit.errors import ConfigError
from tracekit.latency.interface import StepShape

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "LIMITS",
    "VERSION_ALIASES",
    "Estimator",
    "NativeBuilder",
    "TableCoverage",
    "TablePackage",
    "TabulatedModel",
    "did_you_mean",
]

#: Serving frameworks the tables are measured under, in the order listings show them.
BACKENDS = ("vllm", "sglang", "trtllm")
#: The backend whose tables are used unless ``@<backend>`` says otherwise.
DEFAULT_BACKEND = "vllm"
#: Names both packages accept for a system's table versions (``query_versions.yaml`` slots).
VERSION_ALIASES = ("current", "previous", "next")
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
#: the packages' ``ScheduledRequestMetrics``).
Estimator = Callable[[dict[str, int]], float]
#: ``(system, model, backend, version) -> native model`` whose
#: ``estimate_forward_pass_time_ms({"scheduled_requests": fields})`` is milliseconds or None.
NativeBuilder = Callable[[str, str, str, str], Any]


def did_you_mean(value: str, choices: list[str]) -> str:
    """``"; did you mean a, b?"`` with up to three close choices (case-insensitive), or ``""``."""
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=3, cutoff=0.5)
    if not close:
        close = [c for c in lowered if value.lower() in c][:3]
    return f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else ""


@dataclass(frozen=True)
class TableCoverage:
    """What one package's installed tables cover (``tracekit latency tables``).

    Attributes
    ----------
    kind
        The ``--latency`` kind (``aiconfigurator``, ``aisimulate``).
    distribution, version
        The installed package and its version.
    systems
        ``system -> backend -> table versions`` (oldest first).
    slots
        ``system -> backend -> {"current": v, "previous": v, "next": v}`` where the package
        names them; ``current`` is the default table version.
    gpus
        ``system -> {"memory_gib", "bandwidth_gb_s", "bf16_tflops"}`` from its description.
    models
        Model configuration ids (``org/name``).
    """

    kind: str
    distribution: str
    version: str
    systems: dict[str, dict[str, list[str]]]
    slots: dict[str, dict[str, dict[str, str]]]
    gpus: dict[str, dict[str, float]]
    models: list[str]

    def to_dict(self) -> dict[str, Any]:
        """The listing as JSON-ready data."""
        return {
            "kind": self.kind,
            "package": {"name": self.distribution, "version": self.version},
            "systems": {
                system: {
                    "gpu": self.gpus.get(system, {}),
                    "backends": {
                        backend: {
                            "versions": versions,
                            "slots": self.slots.get(system, {}).get(backend, {}),
                        }
                        for backend, versions in backends.items()
                    },
                }
                for system, backends in self.systems.items()
            },
            "models": self.models,
        }

    def render(self) -> str:
        """A text listing: one row per system, then the model ids one per line."""
        lines = [
            f"{self.distribution} {self.version}: {len(self.systems)} systems, "
            f"{len(self.models)} models (--latency {self.kind}:<system>/<model>"
            "[@<backend>[:<version>]])",
            "",
        ]
        backends = [b for b in BACKENDS if any(b in s for s in self.systems.values())]
        header = ["system", "GPU memory, bandwidth, bf16", *backends]
        rows = [header]
        for system, tables in self.systems.items():
            gpu = self.gpus.get(system, {})
            figures = (
                f"{gpu['memory_gib']:.0f} GiB, {gpu['bandwidth_gb_s']:,.0f} GB/s, "
                f"{gpu['bf16_tflops']:,.0f} TFLOPS"
                if gpu
                else "-"
            )
            cells = []
            for backend in backends:
                slots = {v: k for k, v in self.slots.get(system, {}).get(backend, {}).items()}
                cells.append(
                    ", ".join(
                        f"{v} ({slots[v]})" if v in slots else v for v in tables.get(backend, [])
                    )
                    or "-"
                )
            rows.append([system, figures, *cells])
        # Imported here: polars' table formatter; this module is standard library only.
        from tracekit.trace.text import text_table

        lines += [line.rstrip() for line in text_table(rows)]
        lines += [
            "",
            "(current) is the default table version; @<backend>:<version> or "
            "@<backend>:current|previous|next picks another",
            "",
            "models:",
            *(f"  {m}" for m in self.models),
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class TablePackage:
    """One package of measured tables and how to build its native estimator.

    Parameters
    ----------
    kind
        The ``--latency`` kind that names it.
    distribution
        Its name on PyPI.
    module
        Its import name (``aiconfigurator_core``, ``aisimulate_core``).
    extra
        The project's optional extra that installs it.
    estimator
        How the native estimator is built, for ``describe()``.
    build_native
        Builds the native estimator (raises ``ImportError`` when the package is missing,
        ``ValueError`` or ``RuntimeError`` for a set-up it does not support).
    python
        The Python versions the package supports, for the missing-package message.
    """

    kind: str
    distribution: str
    module: str
    extra: str
    estimator: str
    build_native: NativeBuilder = field(repr=False)
    python: str = "3.11 to 3.13"

    @property
    def missing_message(self) -> str:
        """The one-line error when the package is not installed."""
        return (
            f"--latency {self.kind} needs the {self.distribution} package: "
            f'pip install ".[{self.extra}]" (it needs Python {self.python})'
        )

    def is_installed(self) -> bool:
        """Whether the package can be imported (imports nothing)."""
        return importlib.util.find_spec(self.module) is not None

    def installed_version(self) -> str | None:
        """The installed distribution's version, or None."""
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def _perf_database(self) -> Any:
        try:
            # The package first: a cached submodule would hide an uninstalled package.
            importlib.import_module(self.module)
            return importlib.import_module(f"{self.module}.sdk.perf_database")
        except ImportError:
            raise ConfigError(self.missing_message) from None

    def available_systems(self, backend: str = DEFAULT_BACKEND) -> dict[str, list[str]]:
        """Systems with tables for ``backend``, each with its table versions (oldest first)."""
        with self._quiet():
            supported = self._perf_database().get_supported_databases()
        return {s: list(b[backend]) for s, b in sorted(supported.items()) if b.get(backend)}

    def available_models(self) -> list[str]:
        """Model ids (``org/name``) whose configurations ship with the package."""
        self._perf_database()
        folder = resources.files(self.module) / "model_configs"
        suffix = "_config.json"
        names = (p.name for p in folder.iterdir())
        return sorted(
            n[: -len(suffix)].replace("--", "/", 1)
            for n in names
            if n.endswith(suffix) and not n.endswith("_hf_quant_config.json")
        )

    def version_slots(self, system: str, backend: str) -> dict[str, str]:
        """The named table versions of ``system`` under ``backend`` (``current`` and so on)."""
        with self._quiet():
            return dict(self._perf_database().get_version_slots(system, backend) or {})

    def default_version(self, system: str, backend: str) -> str:
        """The table version used when the spelling names none (the system's current one)."""
        perf_database = self._perf_database()
        with self._quiet():
            latest = perf_database.get_latest_database_version(system, backend)
        return latest or self.available_systems(backend)[system][-1]

    def coverage(self) -> TableCoverage:
        """Every system, backend, table version and model configuration installed.

        Raises
        ------
        ConfigError
            The package is not installed.
        """
        perf_database = self._perf_database()
        with self._quiet():
            supported = perf_database.get_supported_databases()
            systems = {
                system: {b: list(backends[b]) for b in BACKENDS if backends.get(b)}
                for system, backends in sorted(supported.items())
            }
            slots = {
                system: {b: self.version_slots(system, b) for b in tables}
                for system, tables in systems.items()
            }
            gpus = {system: _gpu_figures(perf_database, system) for system in systems}
        return TableCoverage(
            kind=self.kind,
            distribution=self.distribution,
            version=self.installed_version() or "unknown",
            systems=systems,
            slots=slots,
            gpus={s: g for s, g in gpus.items() if g},
            models=self.available_models(),
        )

    def load_native(
        self, system: str, model: str, backend: str = DEFAULT_BACKEND, version: str | None = None
    ) -> tuple[Any, str]:
        """Check a set-up against the installed tables and build the package's native model.

        Parameters
        ----------
        system
            A system of the installed tables (``h100_sxm``, ``l40s``, ...).
        model
            A shipped model id (``meta-llama/Meta-Llama-3.1-8B``, ``Qwen/Qwen3-8B``, ...).
        backend
            ``vllm``, ``sglang`` or ``trtllm``.
        version
            Table version, or ``current``/``previous``/``next``; the system's current tables
            for ``backend`` when None.

        Returns
        -------
        tuple
            The package's native forward-pass model (its own API, for checks and diagnostics)
            and the table version used.

        Raises
        ------
        ConfigError
            The package is missing, or the system, backend, version or model is unknown (with
            the closest names), or the package does not support the set-up.
        """
        kind = self.kind
        systems = self.available_systems(backend)
        if not systems:
            raise ConfigError(
                f"--latency {kind}: no tables for backend {backend!r}; expected "
                f"{', '.join(BACKENDS)}"
            )
        if system not in systems:
            hint = did_you_mean(system, list(systems))
            if "a6000" in system.lower():
                hint = (
                    "; the RTX A6000 is not in the tables, its stand-in is l40s (docs/latency.md)"
                )
            raise ConfigError(
                f"--latency {kind}: unknown system {system!r} for backend {backend}"
                f"{hint} (known: {', '.join(systems)})"
            )
        # Checked before the estimator sees it: an unknown model id makes AISimulate try to
        # download its configuration from the Hugging Face hub.
        models = self.available_models()
        if model not in models:
            raise ConfigError(
                f"--latency {kind}: unknown model {model!r}"
                f"{did_you_mean(model, models)} (one of the {len(models)} shipped model configs)"
            )
        if version is None:
            version = self.default_version(system, backend)
        elif version in VERSION_ALIASES:
            slots = self.version_slots(system, backend)
            if version not in slots:
                raise ConfigError(
                    f"--latency {kind}: {system} has no {version} {backend} tables; "
                    f"expected one of {', '.join(systems[system])}"
                )
            version = slots[version]
        elif version not in systems[system]:
            raise ConfigError(
                f"--latency {kind}: no {backend} {version} tables for {system}; "
                f"expected one of {', '.join(systems[system])}"
            )
        with self._quiet(), self._own_data_roots():
            try:
                native = self.build_native(system, model, backend, version)
            except ImportError:
                raise ConfigError(self.missing_message) from None
            except (ValueError, RuntimeError) as exc:
                raise ConfigError(
                    f"--latency {kind}: {system}/{model}@{backend} {version} is not supported "
                    f"by {self.distribution}: {_first_line(exc)}"
                ) from None
            # Some tables are missing only for what a step needs (attention of a sliding
            # window, say), which the estimator finds when first asked: ask it now, one step of
            # each kind, so that the set-up is refused where the model is built.
            for fields in _PROBE_STEPS:
                try:
                    native.estimate_forward_pass_time_ms({"scheduled_requests": fields})
                except (ValueError, RuntimeError) as exc:
                    raise ConfigError(
                        f"--latency {kind}: {system}/{model}@{backend} {version} cannot be timed "
                        f"by {self.distribution}: {_first_line(exc)}"
                    ) from None
        return native, version

    def load_estimator(
        self, system: str, model: str, backend: str = DEFAULT_BACKEND, version: str | None = None
    ) -> tuple[Estimator, str]:
        """:meth:`load_native`, as an estimator: scheduled-work fields to milliseconds.

        Returns
        -------
        tuple
            The estimator and the table version used.

        Raises
        ------
        ConfigError
            As :meth:`load_native`; the estimator raises it for a step it cannot time.
        """
        native, version = self.load_native(system, model, backend, version)
        kind = self.kind

        def estimate(fields: dict[str, int]) -> float:
            try:
                value = native.estimate_forward_pass_time_ms({"scheduled_requests": fields})
            except (ValueError, RuntimeError) as exc:
                raise ConfigError(
                    f"--latency {kind}: no estimate for {system}/{model} at {fields}: "
                    f"{_first_line(exc)}"
                ) from None
            if value is None or not math.isfinite(value):
                raise ConfigError(f"--latency {kind}: no estimate for {system}/{model} at {fields}")
            return float(value)

        return estimate, version

    @contextmanager
    def _own_data_roots(self) -> Iterator[None]:
        # Both packages' native estimators find their tables and model configurations through
        # two process-wide environment variables, which each sets to its own folders when it is
        # first used and leaves alone after that: AISimulate, built in a process that has built
        # an AIConfigurator model, compiled against aiconfigurator-core's tables (and, for a
        # model those lack, would try to download its configuration). So every build names its
        # own package's folders, and the variables are restored afterwards (docs/latency.md,
        # "aisimulate").
        root = resources.files(self.module)
        values = {
            "AICONFIGURATOR_SYSTEMS_PATH": str(root / "systems"),
            "AICONFIGURATOR_MODEL_CONFIGS_PATH": str(root / "model_configs"),
        }
        saved = {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        # Loading tables logs one line per low-fidelity fallback table (and AISimulate one per
        # missing attention-lane entry); keep the console clean.
        logger = logging.getLogger(self.module)
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            logger.setLevel(level)


#: One step of each kind the estimator tells apart: prefill, decode, both.
_PROBE_STEPS = (
    {"num_prefill_requests": 1, "sum_prefill_tokens": 128, "sum_prefill_kv_tokens": 0,
     "num_decode_requests": 0, "sum_decode_kv_tokens": 0},
    {"num_prefill_requests": 0, "sum_prefill_tokens": 0, "sum_prefill_kv_tokens": 0,
     "num_decode_requests": 1, "sum_decode_kv_tokens": 128},
    {"num_prefill_requests": 1, "sum_prefill_tokens": 128, "sum_prefill_kv_tokens": 0,
     "num_decode_requests": 1, "sum_decode_kv_tokens": 128},
)  # fmt: skip


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _gpu_figures(perf_database: Any, system: str) -> dict[str, float]:
    """Memory (GiB), bandwidth (GB/s) and dense bf16 TFLOPS of a system's description."""
    try:
        gpu = perf_database.load_system_spec(system).get("gpu", {})
        return {
            "memory_gib": gpu["mem_capacity"] / 2**30,
            "bandwidth_gb_s": gpu["mem_bw"] / 1e9,
            "bf16_tflops": gpu["bfloat16_tc_flops"] / 1e12,
        }
    except (KeyError, TypeError, OSError, AttributeError):
        return {}


class TabulatedModel:
    """Step times from a package's estimator, tabulated on a grid (see the module docstring).

    Subclasses name the package (:attr:`package`).

    Parameters
    ----------
    system, model, backend, version
        The set-up, as for :meth:`TablePackage.load_estimator`.
    steps_per_octave
        Grid points per doubling above 64 on the continuous axes (16: 4.4 % apart).
    tabulate
        When False every step calls the estimator directly (for measuring the grid's error).
    estimator
        An estimator to use instead of loading the package (tests); ``version`` is then
        recorded as given.
    """

    package: ClassVar[TablePackage]

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
            estimator, version = self.package.load_estimator(system, model, backend, version)
        self.system = system
        self.model = model
        self.backend = backend
        self.version = version
        self.steps_per_octave = steps_per_octave
        self.tabulate = tabulate
        self.name = f"{self.package.kind}:{system}/{model}@{backend}"
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
        """Kind, name, set-up, package, table version, grid and out-of-range rule."""
        return {
            "kind": self.package.kind,
            "name": self.name,
            "measured": True,
            "system": self.system,
            "model": self.model,
            "backend": self.backend,
            "backend_version": self.version,
            "package": {
                "name": self.package.distribution,
                "version": self.package.installed_version(),
            },
            "estimator": self.package.estimator,
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
