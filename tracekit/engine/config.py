"""The embedded engine's configuration: one frozen record, validated once at construction.

Defaults follow vLLM 0.32.0 where vLLM has one (``vllm/config/scheduler.py``
``SchedulerConfig``; ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults``) and the
original BidKV experiment otherwise (600 blocks of 16 tokens, 32 sequences, 8,192-token model
length). docs/engine.md, "Configuration defaults" lists where each one comes from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Literal, get_args

from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import SchedulingPolicyName

__all__ = [
    "CLOCKS",
    "DEFAULT_CLOCK",
    "ENGINE_DEFAULTS",
    "ENGINE_MODES",
    "RETRACTION_POLICIES",
    "SCHEDULING_POLICIES",
    "VLLM_VERSIONS",
    "EngineConfig",
    "PRE_FEATURE_SETTINGS",
    "make_engine_config",
    "recorded_engine_config",
]

EngineMode = Literal["vllm", "sglang"]
ClockName = Literal["steps", "cost-model"]
VllmVersion = Literal["0.32", "0.33"]
RetractionPolicyName = Literal["length", "priority"]

# The tuples are the Literal types' values, so a new value is added in one place.
#: Accepted values of :attr:`EngineConfig.mode`.
ENGINE_MODES: tuple[str, ...] = get_args(EngineMode)
#: Accepted values of :attr:`EngineConfig.scheduling_policy` (the contract's own type).
SCHEDULING_POLICIES: tuple[str, ...] = get_args(SchedulingPolicyName)
#: Accepted values of :attr:`EngineConfig.clock`.
CLOCKS: tuple[str, ...] = get_args(ClockName)
#: vLLM releases whose scheduling rules the ``vllm`` mode reproduces.
VLLM_VERSIONS: tuple[str, ...] = get_args(VllmVersion)
#: Accepted values of :attr:`EngineConfig.retraction_policy` (SGLang mode).
RETRACTION_POLICIES: tuple[str, ...] = get_args(RetractionPolicyName)
#: The clock every run uses unless told otherwise (the engine, the CLI and the sweep alike).
DEFAULT_CLOCK: ClockName = "cost-model"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything that decides the embedded engine's scheduling and timing.

    Parameters
    ----------
    mode
        ``"vllm"`` reproduces the vLLM v1 scheduler; ``"sglang"`` models SGLang's retraction.
    num_blocks
        KV cache blocks, including vLLM's reserved null block: ``num_blocks - 1`` are usable.
    block_size
        Tokens per KV block (vLLM ``--block-size``; SGLang page size in ``sglang`` mode).
    max_num_seqs
        Most requests in the running queue (vLLM ``--max-num-seqs``).
    max_num_batched_tokens
        Token budget of one step (vLLM ``--max-num-batched-tokens``). 2048 is vLLM 0.32's default
        for an OpenAI server on a CPU or on a GPU under 70 GiB such as the A6000.
    watermark
        Fraction of ``num_blocks`` kept free when admitting waiting requests. vLLM 0.32's
        ``SchedulerConfig.watermark`` defaults to 0.0; vLLM v0 and vidur used 0.01.
    scheduling_policy
        ``"fcfs"`` or ``"priority"`` (vLLM ``--scheduling-policy``).
    max_model_len
        Longest sequence (prompt plus output). Must fit in the usable KV cache, as vLLM checks
        at startup; longer prompts are rejected on arrival.
    long_prefill_token_threshold
        Per-request cap on prefill tokens in one step when more than one request is present;
        0 disables it (vLLM default).
    full_sequence_must_fit
        Admit a waiting request only if its whole current sequence fits (vLLM 0.32
        ``scheduler_reserve_full_isl``, default True).
    vllm_version
        ``"0.32"`` or ``"0.33"``: 0.33 lets the running scan continue after a request preempted
        itself under PRIORITY; 0.32 stops the scan.
    clock
        ``"cost-model"`` (the default; see ``clock.py``) or ``"steps"`` (every step lasts
        ``step_s``).
    step_s
        Step length of the ``steps`` clock, in seconds.
    cost_model
        Name of the cost-model preset used by the ``cost-model`` clock.
    enable_prefix_caching
        vLLM's automatic prefix caching (``CacheConfig.enable_prefix_caching``). Unset (None)
        means the mode's default: on in ``vllm`` mode, as in vLLM 0.32/0.33; off in ``sglang``
        mode, which models no prefix cache and refuses an explicit True.
    async_scheduling
        vLLM's ``AsyncScheduler`` driven by ``EngineCore.step_with_batch_queue``
        (``SchedulerConfig.async_scheduling``). Unset (None) means the mode's default: on in
        ``vllm`` mode, as ``VllmConfig.__post_init__`` turns it on for a GPU deployment; off in
        ``sglang`` mode, which refuses an explicit True. After construction both fields are
        always a bool.
    retraction_policy
        SGLang mode only: ``--retraction-policy``, ``"length"`` (SGLang's default) or
        ``"priority"`` (lowest priority retracted first, then the length rule).
    radix_cache
        SGLang mode only: SGLang's radix cache (on by default in SGLang; off here unless asked,
        as ``--disable-radix-cache``).
    chunked_prefill_size
        SGLang mode only: ``--chunked-prefill-size``; ``None`` uses ``max_num_batched_tokens``,
        0 turns chunking off.
    latency
        The step-time model of the ``cost-model`` clock, as a ``--latency`` spelling
        (``docs/latency.md``): ``roofline[:<preset>]``, ``aiconfigurator:<system>/<model>...``
        or ``calibrated:<file>``. None (the default) and ``roofline`` are the ``cost_model``
        preset, with identical times. A string, so that configurations pickle to sweep
        workers; any spelling but ``roofline`` is checked and built by the process's step-time
        model source (``tracekit.engine.step_time``; ``tracekit.latency`` installs it), once
        per process.
    """

    mode: EngineMode = "vllm"
    num_blocks: int = 600
    block_size: int = 16
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    watermark: float = 0.0
    scheduling_policy: SchedulingPolicyName = "fcfs"
    max_model_len: int = 8192
    long_prefill_token_threshold: int = 0
    full_sequence_must_fit: bool = True
    vllm_version: VllmVersion = "0.32"
    clock: ClockName = DEFAULT_CLOCK
    step_s: float = 0.02
    cost_model: str = "a6000-llama3-8b"
    enable_prefix_caching: bool | None = None
    async_scheduling: bool | None = None
    # --- SGLang mode (tracekit.engine.sglang) ------------------------------------------------
    retraction_policy: RetractionPolicyName = "length"
    radix_cache: bool = False
    chunked_prefill_size: int | None = None
    # -- step-time model (docs/latency.md) --
    latency: str | None = None

    def __post_init__(self) -> None:
        _sglang_checks(self)
        _choice("mode", self.mode, ENGINE_MODES)
        _choice("scheduling_policy", self.scheduling_policy, SCHEDULING_POLICIES)
        _choice("clock", self.clock, CLOCKS)
        _choice("vllm_version", self.vllm_version, VLLM_VERSIONS)
        # The null block needs one block of its own and a request needs at least one more.
        _integer("num_blocks", self.num_blocks, minimum=2)
        _integer("block_size", self.block_size, minimum=1)
        _integer("max_num_seqs", self.max_num_seqs, minimum=1)
        _integer("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)
        _integer("max_model_len", self.max_model_len, minimum=2)
        _integer("long_prefill_token_threshold", self.long_prefill_token_threshold, minimum=0)
        if not isinstance(self.full_sequence_must_fit, bool):
            raise ValueError(
                f"full_sequence_must_fit must be a bool; found {self.full_sequence_must_fit!r}"
            )
        for name in _VLLM_FEATURES:
            value = getattr(self, name)
            if value is None:
                # The mode's default: vLLM's (on) in vllm mode; sglang mode models neither.
                object.__setattr__(self, name, self.mode == "vllm")
            elif not isinstance(value, bool):
                raise ValueError(f"{name} must be a bool; found {value!r}")
            elif value and self.mode != "vllm":
                raise ValueError(
                    f"{name} is modelled in vllm mode only; leave it unset or false with "
                    f"mode={self.mode!r}"
                )
        if (
            not isinstance(self.watermark, (int, float))
            or isinstance(self.watermark, bool)
            or not 0.0 <= self.watermark < 1.0
        ):
            raise ValueError(f"watermark must be a number in [0.0, 1.0); found {self.watermark!r}")
        if (
            not isinstance(self.step_s, (int, float))
            or isinstance(self.step_s, bool)
            or not math.isfinite(self.step_s)
            or self.step_s <= 0
        ):
            raise ValueError(f"step_s must be a finite number > 0; found {self.step_s!r}")
        # vLLM refuses to start when one max-length sequence cannot fit in the KV cache; without
        # this check a long request could wait forever at the head of the queue.
        usable_tokens = (self.num_blocks - 1) * self.block_size
        if self.max_model_len > usable_tokens:
            raise ValueError(
                f"max_model_len must be at most the usable KV cache, (num_blocks - 1) * "
                f"block_size = {usable_tokens} tokens; found {self.max_model_len}"
            )
        if self.long_prefill_token_threshold > self.max_model_len:
            raise ValueError(
                f"long_prefill_token_threshold must be at most max_model_len "
                f"({self.max_model_len}); found {self.long_prefill_token_threshold}"
            )
        if not isinstance(self.cost_model, str) or not self.cost_model:
            raise ValueError(f"cost_model must be a preset name; found {self.cost_model!r}")
        if self.clock == "cost-model":
            # Imported here: clock.py imports this module for its type hints.
            from tracekit.engine.clock import COST_MODEL_PRESETS

            if self.cost_model not in COST_MODEL_PRESETS:
                known = ", ".join(sorted(COST_MODEL_PRESETS))
                raise ValueError(f"cost_model must be one of {known}; found {self.cost_model!r}")

        # -- step-time model (docs/latency.md) --
        if self.latency is not None:
            _check_latency(self)

    @property
    def effective_latency(self) -> str:
        """The spelling of the model that times the steps.

        ``roofline:<cost_model>`` when ``latency`` is None or ``roofline``, and
        ``steps:<step_s>`` under the steps clock.
        """
        if self.clock == "steps":
            return f"steps:{self.step_s:g}"
        if self.latency is None or self.latency.strip().lower() == "roofline":
            return f"roofline:{self.cost_model}"
        return self.latency.strip()

    @property
    def num_usable_blocks(self) -> int:
        """Blocks a request can hold: every block but vLLM's null block."""
        return self.num_blocks - 1

    @property
    def watermark_blocks(self) -> int:
        """Blocks kept free on admission: ``int(watermark * num_blocks)`` as in vLLM."""
        return int(self.watermark * self.num_blocks)


#: The vLLM features whose unset value means "the mode's default" (on in vllm mode).
_VLLM_FEATURES = ("enable_prefix_caching", "async_scheduling")

#: Every :class:`EngineConfig` field and its default, for option help and documentation (the
#: vLLM features show their ``vllm``-mode default; they are off in ``sglang`` mode).
ENGINE_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {f.name: (True if f.name in _VLLM_FEATURES else f.default) for f in fields(EngineConfig)}
)

#: What a recorded ``engine_config`` that lacks a vLLM feature was recorded with: both options
#: postdate the first trace bundles, which were all recorded with prefix caching off and
#: synchronous scheduling (the defaults of the time).
PRE_FEATURE_SETTINGS: MappingProxyType[str, bool] = MappingProxyType(
    {"enable_prefix_caching": False, "async_scheduling": False}
)


def recorded_engine_config(recorded: dict[str, Any]) -> EngineConfig:
    """The :class:`EngineConfig` a manifest's ``engine_config`` was recorded with.

    A field the record lacks because it predates the field keeps its setting of the time
    (:data:`PRE_FEATURE_SETTINGS`), never today's default. ``TypeError``/``ValueError`` as
    :class:`EngineConfig` raises them.
    """
    return EngineConfig(**{**PRE_FEATURE_SETTINGS, **recorded})


def make_engine_config(**settings: Any) -> EngineConfig:
    """An :class:`EngineConfig` from option values; ``None`` values keep the defaults.

    Raises
    ------
    ConfigError
        An unknown setting or an invalid value (the message names the field).
    """
    given = {k: v for k, v in settings.items() if v is not None}
    try:
        return EngineConfig(**given)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"engine configuration: {exc}") from None


def _sglang_checks(config: EngineConfig) -> None:
    """The SGLang-mode fields (kept apart from the vLLM ones)."""
    _choice("retraction_policy", config.retraction_policy, ("length", "priority"))
    if not isinstance(config.radix_cache, bool):
        raise ValueError(f"radix_cache must be a bool; found {config.radix_cache!r}")
    if config.radix_cache and config.mode != "sglang":
        raise ValueError("radix_cache is modelled in sglang mode only")
    if config.chunked_prefill_size is not None:
        _integer("chunked_prefill_size", config.chunked_prefill_size, minimum=0)


def _check_latency(config: EngineConfig) -> None:
    """Check the ``latency`` spelling cheaply (no model is built, no optional import)."""
    if not isinstance(config.latency, str) or not config.latency.strip():
        raise ValueError(f"latency must be a --latency spelling; found {config.latency!r}")
    if config.clock != "cost-model":
        raise ValueError(
            f"latency {config.latency!r} needs clock cost-model (the steps clock has fixed steps)"
        )
    # Imported here: step_time imports nothing of the engine, but clock.py imports this module.
    from tracekit.engine.step_time import check_step_time_spelling, installed_step_time_source

    spelling = config.latency.strip()
    kind, sep, preset = spelling.partition(":")
    try:
        if installed_step_time_source() is not None or kind.strip().lower() != "roofline":
            check_step_time_spelling(spelling)
        else:
            # No source installed: the engine still knows its own roofline presets.
            _check_roofline_preset(spelling, preset.strip() if sep else config.cost_model)
    except ConfigError as exc:
        raise ValueError(f"latency: {str(exc).removeprefix('--latency ')}") from None


def _check_roofline_preset(spelling: str, preset: str) -> None:
    from tracekit.engine.clock import COST_MODEL_PRESETS

    if preset not in COST_MODEL_PRESETS:
        known = ", ".join(sorted(COST_MODEL_PRESETS))
        raise ConfigError(
            f"--latency {spelling!r}: unknown roofline preset {preset!r} (known: {known})"
        )


def _choice(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}; found {value!r}")


def _integer(field: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}; found {value!r}")
