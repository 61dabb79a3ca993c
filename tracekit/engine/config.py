"""The embedded engine's configuration: one frozen record, validated once at construction.

Defaults follow vLLM 0.32.0 where vLLM has one (``vllm/config/scheduler.py``
``SchedulerConfig``; ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults``) and the
original BidKV experiment otherwise (600 blocks of 16 tokens, 32 sequences, 8,192-token model
length). In ``sglang`` mode the unset fields take SGLang 0.5.23's own defaults instead
(:data:`SGLANG_DEFAULTS`: page size 1, the radix cache and overlap scheduling on, SGLang's
``--max-prefill-tokens``, its chunk size for the cost model's GPU and its derived
``--max-running-requests``; the same KV pool in tokens as ``vllm`` mode). docs/engine.md,
"Configuration defaults" and "SGLang mode" list where each one comes from.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

from tracekit.engine_options import (
    CLOCKS,
    DEFAULT_CLOCK,
    ENGINE_CHOICES,
    ENGINE_MODES,
    ENGINE_OPTIONS,
    ENGINE_RANGES,
    ENGINE_SCOPES,
    RETRACTION_POLICIES,
    SCHEDULING_POLICIES,
    VLLM_VERSIONS,
    ClockName,
    EngineMode,
    EngineOption,
    RetractionPolicyName,
    VllmVersion,
    default_text,
)
from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import SchedulingPolicyName

__all__ = [
    "CLOCKS",
    "DEFAULT_CLOCK",
    "ENGINE_CHOICES",
    "ENGINE_DEFAULTS",
    "ENGINE_OPTIONS",
    "ENGINE_RANGES",
    "ENGINE_MODES",
    "ENGINE_SCOPES",
    "RETRACTION_POLICIES",
    "SCHEDULING_POLICIES",
    "VLLM_VERSIONS",
    "EngineConfig",
    "EngineOption",
    "PRE_FEATURE_SETTINGS",
    "SGLANG_DEFAULTS",
    "SGLANG_PRE_FEATURE_SETTINGS",
    "default_text",
    "make_engine_config",
    "recorded_engine_config",
    "recorded_form",
    "recorded_settings",
    "sglang_max_running_requests",
]

# The settings' values, ranges and scopes, and the options that offer them, are declared in
# tracekit.engine_options, which imports no engine (so that a command's --help does not).

#: The default of a size field that the mode decides: None until ``__post_init__`` replaces it
#: (typed ``Any`` so that the field's type is the resolved one, ``int``).
_MODE_DEFAULT: Any = None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything that decides the embedded engine's scheduling and timing.

    Parameters
    ----------
    mode
        ``"vllm"`` reproduces the vLLM v1 scheduler; ``"sglang"`` SGLang 0.5.23's scheduler.
    num_blocks
        KV cache blocks, including vLLM's reserved null block: ``num_blocks - 1`` are usable.
        Unset: 600 in ``vllm`` mode; in ``sglang`` mode the same pool in tokens (9,584) at
        SGLang's page size 1, so 9,585.
    block_size
        Tokens per KV block (vLLM ``--block-size``, default 16; SGLang ``--page-size`` in
        ``sglang`` mode, default 1).
    max_num_seqs
        Most requests in the running queue (vLLM ``--max-num-seqs``, default 32; SGLang
        ``--max-running-requests`` in ``sglang`` mode, default derived from the pool and the
        context length as SGLang does, :func:`sglang_max_running_requests`).
    max_num_batched_tokens
        Token budget of one step (vLLM ``--max-num-batched-tokens``). 2048 is vLLM 0.32's default
        for an OpenAI server on a CPU or on a GPU under 70 GiB such as the A6000. In ``sglang``
        mode SGLang's ``--max-prefill-tokens``, default 16,384.
    watermark
        Fraction of ``num_blocks`` kept free when admitting waiting requests. vLLM 0.32's
        ``SchedulerConfig.watermark`` defaults to 0.0; vLLM v0 and vidur used 0.01.
    scheduling_policy
        ``"fcfs"`` or ``"priority"`` (vLLM ``--scheduling-policy``). In ``sglang`` mode
        ``"priority"`` is SGLang's ``--enable-priority-scheduling`` (the two always agree).
    max_model_len
        Longest sequence (prompt plus output). Must fit in the usable KV cache, as vLLM checks
        at startup; longer prompts are rejected on arrival. SGLang's ``--context-length``.
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
        mode, whose cache is the radix cache, and which refuses an explicit True.
    async_scheduling
        vLLM's ``AsyncScheduler`` driven by ``EngineCore.step_with_batch_queue``
        (``SchedulerConfig.async_scheduling``). Unset (None) means the mode's default: on in
        ``vllm`` mode, as ``VllmConfig.__post_init__`` turns it on for a GPU deployment; off in
        ``sglang`` mode (whose counterpart is ``overlap_schedule``), which refuses an explicit
        True. After construction both fields are always a bool.
    retraction_policy
        SGLang mode only: ``--retraction-policy``, ``"length"`` (SGLang's default) or
        ``"priority"`` (the least important request retracted first, then the length rule; it
        needs ``--enable-priority-scheduling``, as SGLang checks).
    radix_cache
        SGLang mode only: SGLang's radix cache (``--disable-radix-cache`` turns it off). Unset:
        on in ``sglang`` mode, as in SGLang; ``vllm`` mode refuses True.
    chunked_prefill_size
        SGLang mode only: ``--chunked-prefill-size``; 0 turns chunking off. Unset: SGLang's
        default for the cost model's GPU (``arg_groups/memory_hook.py``
        ``_handle_gpu_memory_settings``: 4,096 on the 48 GB A6000, 8,192 on the 80 GB A100).
        After construction an int in ``sglang`` mode, None in ``vllm`` mode.
    overlap_schedule
        SGLang mode only: the overlap event loop (``Scheduler.event_loop_overlap``: the next
        batch is scheduled while the current one runs, and each batch's results are processed
        one iteration late); False is ``--disable-overlap-schedule`` (``event_loop_normal``).
        Unset: on in ``sglang`` mode, as SGLang runs on a GPU; ``vllm`` mode refuses True.
    enable_priority_scheduling
        SGLang mode: ``--enable-priority-scheduling`` (the waiting queue is sorted by priority,
        then entry time). Unset: ``scheduling_policy == "priority"``; True sets
        ``scheduling_policy`` to ``"priority"``. After construction always equal to
        ``scheduling_policy == "priority"``.
    schedule_low_priority_values_first
        SGLang mode only: ``--schedule-low-priority-values-first``. False (SGLang's default): a
        larger priority value is more important; True: a smaller one (vLLM's meaning).
    disable_priority_preemption
        SGLang mode only: ``--disable-priority-preemption``. With priority scheduling on and this
        False (SGLang's default), an arrival that finds the running batch full preempts running
        requests less important than it by more than the threshold.
    priority_scheduling_preemption_threshold
        SGLang mode only: ``--priority-scheduling-preemption-threshold`` (default 10): the
        priority difference a preemption at admission must exceed.
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
    # Unset: the mode's default (vLLM's or SGLang's, see _VLLM_SIZES and SGLANG_DEFAULTS),
    # resolved in __post_init__, so that every built configuration holds an int.
    num_blocks: int = _MODE_DEFAULT
    block_size: int = _MODE_DEFAULT
    max_num_seqs: int = _MODE_DEFAULT
    max_num_batched_tokens: int = _MODE_DEFAULT
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
    # --- SGLang mode (tracekit.engine.sglang); SGLang's own names and defaults ---------------
    retraction_policy: RetractionPolicyName = "length"
    radix_cache: bool | None = None
    chunked_prefill_size: int | None = None
    # -- step-time model (docs/latency.md) --
    latency: str | None = None
    # --- SGLang mode: overlap scheduling and priority options --------------------------------
    overlap_schedule: bool | None = None
    enable_priority_scheduling: bool | None = None
    schedule_low_priority_values_first: bool = False
    disable_priority_preemption: bool = False
    priority_scheduling_preemption_threshold: int = 10

    def __post_init__(self) -> None:
        _choice("mode", self.mode, ENGINE_MODES)
        _choice("scheduling_policy", self.scheduling_policy, SCHEDULING_POLICIES)
        _resolve_sizes(self)
        _sglang_checks(self)
        _choice("clock", self.clock, CLOCKS)
        _choice("vllm_version", self.vllm_version, VLLM_VERSIONS)
        # The null block needs one block of its own and a request needs at least one more.
        for name in _INTEGER_SETTINGS:
            _integer(name, getattr(self, name))
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
            or not _STEP_LOW <= self.step_s <= _STEP_HIGH
        ):
            raise ValueError(
                f"step_s must be a number of seconds from {_STEP_LOW:g} to {_STEP_HIGH:g}; "
                f"found {self.step_s!r}"
            )
        # vLLM refuses to start when one max-length sequence cannot fit in the KV cache; without
        # this check a long request could wait forever at the head of the queue. (SGLang starts
        # with a warning and refuses the prompts that cannot fit: max_prompt_tokens.)
        usable_tokens = (self.num_blocks - 1) * self.block_size
        if self.max_model_len > usable_tokens and self.mode == "vllm":
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
        _check_scopes(self)

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
    def max_prompt_tokens(self) -> int:
        """The longest prompt accepted on arrival; a longer one is rejected.

        vLLM: ``max_model_len - 1``. SGLang 0.5.23 (``TpModelWorker.get_worker_info``,
        ``validate_input_length``): below ``min(context, pool) - 6`` tokens.
        """
        if self.mode == "sglang":
            return min(self.max_model_len, self.num_usable_blocks * self.block_size) - 7
        return self.max_model_len - 1

    @property
    def victim_scheduling_policy(self) -> SchedulingPolicyName:
        """The scheduling policy a victim host sees (``PreemptionContext.scheduling_policy``).

        ``scheduling_policy`` in ``vllm`` mode; in ``sglang`` mode ``priority`` exactly under
        ``--retraction-policy priority``, the only SGLang victim rule that reads priorities.
        """
        if self.mode == "sglang":
            return "priority" if self.retraction_policy == "priority" else "fcfs"
        return self.scheduling_policy

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
#: The whole-number settings checked against :data:`ENGINE_RANGES` (chunked_prefill_size, of
#: SGLang mode, may be None and is checked with the SGLang fields).
_INTEGER_SETTINGS = (
    "num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "long_prefill_token_threshold",
)  # fmt: skip
_STEP_LOW, _STEP_HIGH = ENGINE_RANGES["step_s"]

#: ``vllm``-mode values of the fields whose unset value means "the mode's default".
_VLLM_SIZES: MappingProxyType[str, int] = MappingProxyType(
    {"num_blocks": 600, "block_size": 16, "max_num_seqs": 32, "max_num_batched_tokens": 2048}
)

#: SGLang 0.5.23's ``--chunked-prefill-size`` default for the GPU of each cost-model preset
#: (``arg_groups/memory_hook.py`` ``_handle_gpu_memory_settings``: 4,096 below 60 GB, 8,192
#: below 160 GB, 16,384 above); 4,096 is also its default when the GPU memory is unknown.
_SGLANG_CHUNK_BY_GPU: MappingProxyType[str, int] = MappingProxyType(
    {
        "a6000-llama3-8b": 4096,
        "a100-llama2-7b": 8192,
        "a100-llama3-8b": 8192,
        "h100-llama3-8b": 8192,
        "h200-llama3-8b": 8192,
        "l40s-llama3-8b": 4096,
        "b200-llama3-8b": 16384,
    }
)
_SGLANG_CHUNK_FALLBACK = 4096

#: The KV pool of both modes' defaults, in tokens: vLLM mode's 599 usable blocks of 16.
_DEFAULT_POOL_TOKENS = (_VLLM_SIZES["num_blocks"] - 1) * _VLLM_SIZES["block_size"]


def sglang_max_running_requests(kv_tokens: int, context_length: int) -> int:
    """SGLang 0.5.23's ``--max-running-requests`` when it is not given.

    ``mem_cache/kv_cache_configurator.py`` ``resolve_max_num_reqs``: ``kv / context * 512``
    requests, clamped to [2048, 4096], and at most half the pool in tokens.
    """
    estimated = int(kv_tokens / context_length * 512)
    estimated = max(min(estimated, 4096), 2048)
    return max(1, min(estimated, kv_tokens // 2))


def _resolve_sizes(config: EngineConfig) -> None:
    """Give the unset size fields the mode's default (vLLM's, or SGLang 0.5.23's)."""
    values: dict[str, Any] = {}
    if config.mode == "vllm":
        values = {k: v for k, v in _VLLM_SIZES.items() if getattr(config, k) is None}
    else:
        block = 1 if config.block_size is None else config.block_size
        values["block_size"] = block
        if config.num_blocks is None and isinstance(block, int) and block > 0:
            # The same pool in tokens as vllm mode's default, in pages of ``block``, plus the
            # null block (SGLang's pool is all usable; the engine reserves block 0).
            values["num_blocks"] = -(-_DEFAULT_POOL_TOKENS // block) + 1
        if config.max_num_batched_tokens is None:
            values["max_num_batched_tokens"] = 16384  # --max-prefill-tokens
        if config.chunked_prefill_size is None:
            values["chunked_prefill_size"] = _SGLANG_CHUNK_BY_GPU.get(
                config.cost_model, _SGLANG_CHUNK_FALLBACK
            )
        blocks = values.get("num_blocks", config.num_blocks)
        if (
            config.max_num_seqs is None
            and isinstance(blocks, int)
            and isinstance(block, int)
            and isinstance(config.max_model_len, int)
            and blocks > 1
            and block > 0
            and config.max_model_len > 0
        ):
            values["max_num_seqs"] = sglang_max_running_requests(
                (blocks - 1) * block, config.max_model_len
            )
    for name, value in values.items():
        object.__setattr__(config, name, value)


#: What a recorded ``engine_config`` that lacks a vLLM feature was recorded with: both options
#: postdate the first trace bundles, which were all recorded with prefix caching off and
#: synchronous scheduling (the defaults of the time).
PRE_FEATURE_SETTINGS: MappingProxyType[str, bool] = MappingProxyType(
    {"enable_prefix_caching": False, "async_scheduling": False}
)


#: What a recorded ``sglang``-mode ``engine_config`` that lacks the overlap and priority
#: options was recorded with: the synchronous loop, priority scheduling exactly when
#: ``scheduling_policy`` was ``priority``, with lower values first and no preemption at
#: admission (the only SGLang settings of the time), and a chunk of the token budget when the
#: chunk size was unset.
SGLANG_PRE_FEATURE_SETTINGS: MappingProxyType[str, bool] = MappingProxyType(
    {
        "overlap_schedule": False,
        "schedule_low_priority_values_first": True,
        "disable_priority_preemption": True,
    }
)


def recorded_settings(recorded: dict[str, Any]) -> dict[str, Any]:
    """A manifest's ``engine_config`` with the settings of the time for the fields it lacks.

    A field the record lacks because it predates the field keeps its setting of the time
    (:data:`PRE_FEATURE_SETTINGS`, and :data:`SGLANG_PRE_FEATURE_SETTINGS` in ``sglang``
    mode), never today's default. A setting that the recorded mode ignores
    (:data:`ENGINE_SCOPES`) is read as its neutral value: it changed nothing then either.
    """
    settings = {**PRE_FEATURE_SETTINGS, **recorded}
    # A setting its mode ignored changed nothing when the run was recorded (earlier versions
    # took and recorded it): read as the neutral value, which is what ran.
    mode = settings.get("mode", "vllm")
    for field in fields(EngineConfig):
        scope = ENGINE_SCOPES.get(field.name)
        if scope is not None and scope[0] == "mode" and scope[1] != mode and field.name in settings:
            settings[field.name] = field.default
    if settings.get("mode") == "sglang" and "overlap_schedule" not in recorded:
        settings = {**SGLANG_PRE_FEATURE_SETTINGS, **settings}
        if settings.get("chunked_prefill_size") is None:
            # Then unset meant the token budget.
            settings["chunked_prefill_size"] = settings.get("max_num_batched_tokens")
        for name in ("radix_cache", "num_blocks", "block_size", "max_num_seqs"):
            # Recorded explicitly by every manifest of the time; None kept the old defaults.
            if settings.get(name) is None:
                settings[name] = {"radix_cache": False, **_VLLM_SIZES}[name]
        if settings.get("max_num_batched_tokens") is None:
            settings["max_num_batched_tokens"] = _VLLM_SIZES["max_num_batched_tokens"]
    return settings


#: SGLang-only settings newer than the first vLLM-mode records, which never carried them. A
#: vLLM-mode record leaves each out while it holds the value vLLM mode gives it (SGLang's three
#: older settings stay: every vLLM-mode record has carried them).
_SGLANG_LATER_SETTINGS = (
    "overlap_schedule",
    "enable_priority_scheduling",
    "schedule_low_priority_values_first",
    "disable_priority_preemption",
    "priority_scheduling_preemption_threshold",
)


def recorded_form(config: EngineConfig) -> dict[str, Any]:
    """What a manifest (or a digest of a configuration) records of ``config``.

    Every field, except in ``vllm`` mode the later SGLang-only settings that hold vLLM mode's
    own value: they change nothing there, and leaving them out keeps the records, and the run
    ids digested from them, what they were before those settings existed. The inverse of
    :func:`recorded_settings`: ``recorded_engine_config(recorded_form(c)) == c``.
    """
    settings = asdict(config)
    if config.mode == "vllm":
        plain = EngineConfig(scheduling_policy=config.scheduling_policy)
        for name in _SGLANG_LATER_SETTINGS:
            if settings[name] == getattr(plain, name):
                del settings[name]
    return settings


def recorded_engine_config(recorded: dict[str, Any]) -> EngineConfig:
    """The :class:`EngineConfig` a manifest's ``engine_config`` was recorded with.

    See :func:`recorded_settings`. ``TypeError``/``ValueError`` as :class:`EngineConfig`
    raises them.
    """
    return EngineConfig(**recorded_settings(recorded))


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


#: The SGLang features whose unset value means "the mode's default" (on in sglang mode).
_SGLANG_FEATURES = ("radix_cache", "overlap_schedule")


def _sglang_checks(config: EngineConfig) -> None:
    """The SGLang-mode fields (kept apart from the vLLM ones); resolves the unset ones."""
    sglang = config.mode == "sglang"
    _choice("retraction_policy", config.retraction_policy, RETRACTION_POLICIES)
    for name in _SGLANG_FEATURES:
        value = getattr(config, name)
        if value is None:
            object.__setattr__(config, name, sglang)
        elif not isinstance(value, bool):
            raise ValueError(f"{name} must be a bool; found {value!r}")
        elif value and not sglang:
            raise ValueError(
                f"{name} is modelled in sglang mode only; leave it unset or false with "
                f"mode={config.mode!r}"
            )
    if config.chunked_prefill_size is not None:
        _integer("chunked_prefill_size", config.chunked_prefill_size)
    page = config.block_size
    if sglang and config.radix_cache and isinstance(page, int) and page > 1:
        # The tree counts tokens; SGLang's paged tree keys on whole pages (not modelled).
        raise ValueError(
            f"radix_cache is modelled at page size 1 (SGLang's default); found block_size "
            f"{config.block_size}: use block_size 1, or radix_cache False"
        )
    for name in ("schedule_low_priority_values_first", "disable_priority_preemption"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name} must be a bool; found {getattr(config, name)!r}")
    _integer(
        "priority_scheduling_preemption_threshold", config.priority_scheduling_preemption_threshold
    )
    enable = config.enable_priority_scheduling
    priority = config.scheduling_policy == "priority"
    if enable is None:
        object.__setattr__(config, "enable_priority_scheduling", priority)
    elif not isinstance(enable, bool):
        raise ValueError(f"enable_priority_scheduling must be a bool; found {enable!r}")
    elif enable and not priority:
        # --enable-priority-scheduling is the priority scheduling policy.
        object.__setattr__(config, "scheduling_policy", "priority")
    elif not enable and priority:
        raise ValueError(
            "enable_priority_scheduling=False contradicts scheduling_policy='priority'; "
            "leave one of them unset"
        )
    if sglang and config.retraction_policy == "priority" and not config.enable_priority_scheduling:
        # SGLang's own check (arg_groups/validation_hook.py).
        raise ValueError(
            "retraction_policy 'priority' requires enable_priority_scheduling (SGLang: "
            "--retraction-policy priority requires --enable-priority-scheduling)"
        )


#: How each mode is named in a message.
_MODE_NAMES = MappingProxyType({"vllm": "vLLM", "sglang": "SGLang"})


def _check_scopes(config: EngineConfig) -> None:
    """Refuse a setting that the mode would ignore (:data:`ENGINE_SCOPES`).

    Neutral, and so accepted anywhere: the field's default, or off (``False``) for a setting
    whose unset value means the mode's default (what a recorded manifest holds).
    """
    for field in fields(EngineConfig):
        scope = ENGINE_SCOPES.get(field.name)
        if scope is None or scope[0] != "mode":
            continue
        what, which = scope
        if getattr(config, what) == which:
            continue
        value = getattr(config, field.name)
        default = field.default
        if value == default or (default is None and value is False):
            continue
        where = f"in {_MODE_NAMES[which]} mode" if what == "mode" else f"by the {which} clock"
        raise ValueError(
            f"{field.name} {value!r} is read {where} only; {what} {getattr(config, what)!r} "
            f"would ignore it: use {what} {which!r}, or leave it out"
        )


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


def _integer(field: str, value: object) -> None:
    low, high = (int(bound) for bound in ENGINE_RANGES[field])
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{field} must be an integer from {low} to {high}; found {value!r}")


# The defaults, built once the checks above are defined (the steps clock, so that no cost
# model is looked up; the clock shown is the real default).
_VLLM = EngineConfig(clock="steps")
_SGLANG = EngineConfig(mode="sglang", clock="steps")

#: Every :class:`EngineConfig` field and its ``vllm``-mode default, for option help and
#: documentation (the vLLM features show their ``vllm``-mode default; they are off in
#: ``sglang`` mode, whose defaults are :data:`SGLANG_DEFAULTS`).
ENGINE_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {f.name: getattr(_VLLM, f.name) for f in fields(EngineConfig)} | {"clock": DEFAULT_CLOCK}
)

#: Every :class:`EngineConfig` field and its ``sglang``-mode default: SGLang 0.5.23's own
#: (``srt/arg_groups/fields/schedule.py`` and the resolutions cited at each field).
SGLANG_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {f.name: getattr(_SGLANG, f.name) for f in fields(EngineConfig)} | {"clock": DEFAULT_CLOCK}
)
