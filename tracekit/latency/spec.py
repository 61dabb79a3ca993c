"""The ``--latency`` spelling: which step-time model a run uses.

::

    roofline[:<preset>]
        the engine's cost model (preset a6000-llama3-8b by default); no dependencies
    aiconfigurator:<system>/<model>[@<backend>[:<version>]]
        AIConfigurator's measured tables: aiconfigurator:h100_sxm/Qwen/Qwen3-8B,
        aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B@vllm:0.27.0 (backend vllm and the
        current tables by default; the version may also be current, previous or next)
    aisimulate:<system>/<model>[@<backend>[:<version>]]
        AISimulate's measured tables, spelled alike: aisimulate:h100_sxm/Qwen/Qwen3-8B@vllm:next
    calibrated:<file>
        a model fitted to a live engine's measured steps (``tracekit calibrate``)

:func:`parse_latency_spec` checks the spelling only (cheap, no optional import; a calibrated
model's file must exist); :meth:`LatencySpec.build` makes the model, and it is there that an
AIConfigurator or AISimulate system or model name is checked against the installed tables.

Importing this module installs :data:`SOURCE` as the engine's step-time model source
(``tracekit.engine.step_time``): the engine, which never imports this package, then checks and
times every ``EngineConfig.latency`` spelling through it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.engine.clock import COST_MODEL_PRESETS
from tracekit.engine.config import EngineConfig
from tracekit.engine.step_time import install_step_time_source
from tracekit.errors import ConfigError
from tracekit.latency.aiconfigurator import AIConfiguratorModel
from tracekit.latency.aisimulate import AISimulateModel
from tracekit.latency.interface import StepTimeModel
from tracekit.latency.perf_tables import BACKENDS, DEFAULT_BACKEND, TabulatedModel, did_you_mean

__all__ = [
    "A6000_STAND_IN",
    "BACKENDS",
    "KINDS",
    "SOURCE",
    "TABLE_MODELS",
    "LatencySpec",
    "LatencySpellings",
    "cached_step_time_model",
    "check_latency_spec",
    "latency_manifest",
    "make_step_time_model",
    "parse_latency_spec",
]

#: The kinds of step-time model, in the order the help lists them.
KINDS = ("roofline", "aiconfigurator", "aisimulate", "calibrated")
#: The kinds backed by NVIDIA's measured tables, and their models (``perf_tables``).
TABLE_MODELS: dict[str, type[TabulatedModel]] = {
    "aiconfigurator": AIConfiguratorModel,
    "aisimulate": AISimulateModel,
}
#: What stands in for the paper's RTX A6000 + Llama-3.1-8B set-up, which the tables lack: the
#: L40S (Ada, 48 GB GDDR6 at 864 GB/s, the A6000's 768 GB/s is the nearest bandwidth in the
#: tables) serving the same model under vLLM (``docs/latency.md``).
A6000_STAND_IN = "aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B@vllm"

_USAGE = (
    "expected roofline[:<preset>], aiconfigurator:<system>/<model>[@<backend>[:<version>]], "
    "aisimulate:<system>/<model>[@<backend>[:<version>]] or calibrated:<file>"
)


@dataclass(frozen=True, slots=True)
class LatencySpec:
    """A parsed ``--latency`` value.

    Attributes
    ----------
    kind
        ``roofline``, ``aiconfigurator``, ``aisimulate`` or ``calibrated``.
    text
        The value as given (recorded in manifests).
    preset
        Roofline preset.
    system, model, backend, version
        AIConfigurator or AISimulate set-up (``version`` None: the system's current tables;
        or a version, or ``current``, ``previous``, ``next``).
    path
        Calibrated model file.
    """

    kind: str
    text: str
    preset: str | None = None
    system: str | None = None
    model: str | None = None
    backend: str | None = None
    version: str | None = None
    path: Path | None = None

    def build(self) -> StepTimeModel:
        """The step-time model this spec names.

        Raises
        ------
        ConfigError
            The tables' package is missing, or its system or model is unknown; the calibrated
            file is not a step-time model.
        """
        if self.kind == "roofline":
            from tracekit.latency.roofline import RooflineModel

            return RooflineModel.from_preset(self.preset or "a6000-llama3-8b")
        if self.kind in TABLE_MODELS:
            assert self.system and self.model and self.backend
            return TABLE_MODELS[self.kind](self.system, self.model, self.backend, self.version)
        from tracekit.latency.calibrated import load_calibrated_model

        assert self.path is not None
        return load_calibrated_model(self.path)


def parse_latency_spec(text: str) -> LatencySpec:
    """Parse a ``--latency`` value (see the module docstring).

    Examples
    --------
    >>> parse_latency_spec("roofline").preset
    'a6000-llama3-8b'
    >>> s = parse_latency_spec("aiconfigurator:h100_sxm/Qwen/Qwen3-8B@sglang")
    >>> s.system, s.model, s.backend, s.version
    ('h100_sxm', 'Qwen/Qwen3-8B', 'sglang', None)
    >>> s = parse_latency_spec("aisimulate:l40s/meta-llama/Meta-Llama-3.1-8B@vllm:next")
    >>> s.kind, s.system, s.backend, s.version
    ('aisimulate', 'l40s', 'vllm', 'next')

    Raises
    ------
    ConfigError
        An unknown kind or roofline preset (with the closest names), a malformed
        AIConfigurator or AISimulate set-up, an unknown backend, or a calibrated file that does
        not exist.
    """
    text = text.strip()
    kind, sep, arg = text.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ConfigError(
            f"--latency {text!r}: unknown kind {kind!r}{did_you_mean(kind, list(KINDS))}; {_USAGE}"
        )
    if kind == "roofline":
        preset = arg.strip() if sep else "a6000-llama3-8b"
        if preset not in COST_MODEL_PRESETS:
            known = sorted(COST_MODEL_PRESETS)
            raise ConfigError(
                f"--latency {text!r}: unknown roofline preset {preset!r}"
                f"{did_you_mean(preset, known)} (known: {', '.join(known)})"
            )
        return LatencySpec("roofline", text, preset=preset)
    if not arg.strip():
        raise ConfigError(f"--latency {text!r}: {kind} needs an argument; {_USAGE}")
    if kind == "calibrated":
        path = Path(arg.strip())
        if not path.is_file():
            raise ConfigError(f"--latency {text!r}: calibrated model file {str(path)!r} not found")
        return LatencySpec("calibrated", text, path=path)
    setup, at, backend_part = arg.strip().rpartition("@")
    if not at:
        setup, backend_part = backend_part, DEFAULT_BACKEND
    backend, colon, version = backend_part.partition(":")
    backend = backend.strip().lower()
    if backend not in BACKENDS:
        raise ConfigError(
            f"--latency {text!r}: unknown backend {backend!r}"
            f"{did_you_mean(backend, list(BACKENDS))} (known: {', '.join(BACKENDS)})"
        )
    if colon and not version.strip():
        raise ConfigError(f"--latency {text!r}: empty table version after {backend}:")
    system, slash, model = setup.partition("/")
    if not (slash and system.strip() and model.strip()):
        raise ConfigError(
            f"--latency {text!r}: expected {kind}:<system>/<model>, e.g. "
            f"{kind}:h100_sxm/meta-llama/Meta-Llama-3.1-8B"
        )
    return LatencySpec(
        kind,
        text,
        system=system.strip(),
        model=model.strip(),
        backend=backend,
        version=version.strip() or None,
    )


def check_latency_spec(text: str) -> LatencySpec:
    """:func:`parse_latency_spec`, and refuse a table model whose package is not installed.

    What ``EngineConfig`` runs when it is made: a configuration that no process here could run
    is refused where it is made (a sweep matrix is loaded, a bundle is replayed) rather than by
    every run. Still cheap: ``find_spec`` imports nothing and no table is loaded.
    """
    spec = parse_latency_spec(text)
    if spec.kind in TABLE_MODELS:
        package = TABLE_MODELS[spec.kind].package
        if not package.is_installed():
            raise ConfigError(package.missing_message)
    return spec


def make_step_time_model(text: str) -> StepTimeModel:
    """Parse ``text`` and build its model (:func:`parse_latency_spec`, then ``build``)."""
    return parse_latency_spec(text).build()


def cached_step_time_model(text: str) -> StepTimeModel:
    """The model of ``text``, built once per process (the engine clock's entry point).

    Sweep workers and qualify jobs receive ``EngineConfig.latency`` as a string and call this
    for every run; building an AIConfigurator model loads its tables (seconds) and its grid
    cache is worth keeping across runs, so one model per spelling is kept. A calibrated file is
    keyed by its modification time and size as well, so a re-fitted file is read again.
    """
    spec = parse_latency_spec(text)
    stamp: tuple[int, int] | None = None
    if spec.path is not None:
        st = spec.path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    return _build_cached(spec, stamp)


@functools.lru_cache(maxsize=16)
def _build_cached(spec: LatencySpec, stamp: tuple[int, int] | None) -> StepTimeModel:
    return spec.build()


def latency_manifest(config: EngineConfig) -> dict[str, Any]:
    """The manifest's ``latency`` record of a run: the spelling and the model's ``describe()``.

    ``spec`` is :attr:`EngineConfig.effective_latency` (``roofline:<cost_model>`` when no
    ``latency`` was given); under the steps clock the record says that every step lasts
    ``step_s``. Building the model here (once per process) also surfaces a missing package or
    an unknown AIConfigurator system before anything is written.
    """
    spelling = config.effective_latency
    if config.clock == "steps":
        return {
            "spec": spelling,
            "kind": "steps",
            "name": spelling,
            "measured": False,
            "step_s": config.step_s,
        }
    return {"spec": spelling, **cached_step_time_model(spelling).describe()}


class LatencySpellings:
    """``tracekit.latency`` as the engine's step-time model source (``StepTimeModelSource``)."""

    def check(self, spelling: str) -> None:
        """:func:`check_latency_spec` (cheap: no model is built)."""
        check_latency_spec(spelling)

    def model(self, spelling: str) -> StepTimeModel:
        """:func:`cached_step_time_model`: one model per spelling and process."""
        return cached_step_time_model(spelling)


#: Installed when this module is imported, so that a process that imports ``tracekit.latency``
#: runs every ``EngineConfig.latency`` spelling.
SOURCE = LatencySpellings()
install_step_time_source(SOURCE)
