"""How the command line offers the embedded engine's settings, without importing the engine.

The declarations of the engine's options (:data:`ENGINE_OPTIONS`: flag, help, type, range,
scope) and the values they read, in a module that imports the standard library alone, so that
a command's ``--help`` imports no engine, polars or numpy (``tests/test_cli_lazy.py``).
:mod:`tracekit.engine.config` imports them from here (one definition). The mode defaults that
the help states (:data:`VLLM_MODE_DEFAULTS`, :data:`SGLANG_MODE_DEFAULTS`,
:data:`SGLANG_CONFIG_DEFAULTS`) and the cost-model preset names (:data:`COST_MODEL_NAMES`) are
derived by the engine, and the scheduling policies (:data:`SCHEDULING_POLICIES`) are the
contracts' type: these are plain copies, which ``tests/test_cli_lazy.py`` keeps equal to the
library's (``tracekit.engine.config.ENGINE_DEFAULTS`` and ``SGLANG_DEFAULTS``,
``tracekit.sglang.protocol.SglangConfig``, ``tracekit.engine.clock.COST_MODEL_PRESETS`` and
``tracekit.hosts.preemption_policy.SchedulingPolicyName``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, get_args

__all__ = [
    "CLOCKS",
    "COST_MODEL_NAMES",
    "DEFAULT_CLOCK",
    "ENGINE_CHOICES",
    "ENGINE_MODES",
    "ENGINE_OPTIONS",
    "ENGINE_RANGES",
    "ENGINE_SCOPES",
    "RETRACTION_POLICIES",
    "SCHEDULING_POLICIES",
    "SGLANG_CONFIG_DEFAULTS",
    "SGLANG_MODE_DEFAULTS",
    "VLLM_MODE_DEFAULTS",
    "VLLM_VERSIONS",
    "ClockName",
    "EngineMode",
    "EngineOption",
    "RetractionPolicyName",
    "VllmVersion",
    "default_text",
]

EngineMode = Literal["vllm", "sglang"]
ClockName = Literal["steps", "cost-model"]
VllmVersion = Literal["0.32", "0.33"]
RetractionPolicyName = Literal["length", "priority"]

# The tuples are the Literal types' values, so a new value is added in one place.
#: Accepted values of :attr:`EngineConfig.mode`.
ENGINE_MODES: tuple[str, ...] = get_args(EngineMode)
#: Accepted values of :attr:`EngineConfig.scheduling_policy`: the values of the contract's own
#: type, ``tracekit.hosts.preemption_policy.SchedulingPolicyName`` (a plain copy, so that
#: ``--help`` does not import the contracts; ``tests/test_cli_lazy.py`` keeps it equal).
SCHEDULING_POLICIES: tuple[str, ...] = ("fcfs", "priority")
#: Accepted values of :attr:`EngineConfig.clock`.
CLOCKS: tuple[str, ...] = get_args(ClockName)
#: vLLM releases whose scheduling rules the ``vllm`` mode reproduces.
VLLM_VERSIONS: tuple[str, ...] = get_args(VllmVersion)
#: Accepted values of :attr:`EngineConfig.retraction_policy` (SGLang mode).
RETRACTION_POLICIES: tuple[str, ...] = get_args(RetractionPolicyName)
#: The clock every run uses unless told otherwise (the engine, the CLI and the sweep alike).
DEFAULT_CLOCK: ClockName = "cost-model"

#: The range of every numeric setting, ``(lowest, highest)``, which the command line's options
#: take too. The highest values are beyond any real deployment (4,194,304 KV blocks hold 67
#: million 16-token slots, more than a node of eight 141 GB GPUs caches for an 8B model) and
#: keep the engine's memory bounded: the prefix cache keeps a few objects per block, about
#: 0.5 GB at 2**22 blocks. A step of 1 us is far below any GPU's, and step indices of a run of
#: 1e10 s stay within int64 at that step.
ENGINE_RANGES: MappingProxyType[str, tuple[float, float]] = MappingProxyType(
    {
        "num_blocks": (2, 2**22),
        "block_size": (1, 2**16),
        "max_num_seqs": (1, 2**16),
        "max_num_batched_tokens": (1, 2**24),
        "max_model_len": (2, 2**24),
        "long_prefill_token_threshold": (0, 2**24),
        "chunked_prefill_size": (0, 2**24),
        "watermark": (0.0, 1.0),
        "step_s": (1e-6, 3600.0),
        "priority_scheduling_preemption_threshold": (-(2**31), 2**31 - 1),
    }
)

#: The settings that one engine mode, or one clock, alone reads, as ``(what, which)``: the
#: ``mode`` or the ``clock`` it needs. Given in the other mode or clock, the option changes
#: nothing, so the command line refuses it (``tracekit.cli.options.engine_settings``). A
#: mode's setting is refused by :class:`EngineConfig` too, unless neutral (the field's default,
#: or off), so that a manifest never records one that changed nothing; a clock's is not, since
#: configurations are switched between clocks (``dataclasses.replace(config, clock=...)``) and
#: every manifest records ``step_s`` whatever its clock. ``cost_model`` is not here: in
#: ``sglang`` mode it also picks the default chunk size, and a manifest's settings given back
#: as options (its ``cost_model`` included) must reproduce its run.
ENGINE_SCOPES: MappingProxyType[str, tuple[str, str]] = MappingProxyType(
    {
        # vLLM's scheduler alone reads these (tracekit.engine.scheduler).
        "watermark": ("mode", "vllm"),
        "long_prefill_token_threshold": ("mode", "vllm"),
        "vllm_version": ("mode", "vllm"),
        "enable_prefix_caching": ("mode", "vllm"),
        "async_scheduling": ("mode", "vllm"),
        # SGLang's alone (tracekit.engine.sglang).
        "retraction_policy": ("mode", "sglang"),
        "radix_cache": ("mode", "sglang"),
        "chunked_prefill_size": ("mode", "sglang"),
        "overlap_schedule": ("mode", "sglang"),
        "schedule_low_priority_values_first": ("mode", "sglang"),
        "disable_priority_preemption": ("mode", "sglang"),
        "priority_scheduling_preemption_threshold": ("mode", "sglang"),
        # The steps clock alone (the cost-model clock times steps by its model).
        "step_s": ("clock", "steps"),
    }
)


#: The names of the cost-model presets (``tracekit.engine.clock.COST_MODEL_PRESETS``), sorted.
COST_MODEL_NAMES: tuple[str, ...] = (
    "a100-llama2-7b",
    "a100-llama3-8b",
    "a6000-llama3-8b",
    "b200-llama3-8b",
    "h100-llama3-8b",
    "h200-llama3-8b",
    "l40s-llama3-8b",
)

#: Every ``EngineConfig`` field and its ``vllm``-mode default: a plain copy of
#: ``tracekit.engine.config.ENGINE_DEFAULTS``, for the options' help.
VLLM_MODE_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        "mode": "vllm",
        "num_blocks": 600,
        "block_size": 16,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 2048,
        "watermark": 0.0,
        "scheduling_policy": "fcfs",
        "max_model_len": 8192,
        "long_prefill_token_threshold": 0,
        "full_sequence_must_fit": True,
        "vllm_version": "0.32",
        "clock": "cost-model",
        "step_s": 0.02,
        "cost_model": "a6000-llama3-8b",
        "enable_prefix_caching": True,
        "async_scheduling": True,
        "retraction_policy": "length",
        "radix_cache": False,
        "chunked_prefill_size": None,
        "latency": None,
        "overlap_schedule": False,
        "enable_priority_scheduling": False,
        "schedule_low_priority_values_first": False,
        "disable_priority_preemption": False,
        "priority_scheduling_preemption_threshold": 10,
    }
)

#: Every ``EngineConfig`` field and its ``sglang``-mode default: a plain copy of
#: ``tracekit.engine.config.SGLANG_DEFAULTS``, for the options' help; vLLM mode's, but for
#: SGLang's pool sizes, its features on and vLLM's off.
SGLANG_MODE_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        **VLLM_MODE_DEFAULTS,
        "mode": "sglang",
        "num_blocks": 9585,
        "block_size": 1,
        "max_num_seqs": 2048,
        "max_num_batched_tokens": 16384,
        "enable_prefix_caching": False,
        "async_scheduling": False,
        "radix_cache": True,
        "chunked_prefill_size": 4096,
        "overlap_schedule": True,
    }
)


def default_text(field: str) -> str:
    """How an option's help states the default of ``field`` in both modes."""
    vllm, sglang = VLLM_MODE_DEFAULTS[field], SGLANG_MODE_DEFAULTS[field]
    if vllm == sglang:
        return f"default {vllm}"
    if field == "max_num_seqs":
        return f"default {vllm}; in sglang mode SGLang's, from the pool ({sglang} by default)"
    return f"default {vllm}; {sglang} in sglang mode"


@dataclass(frozen=True, slots=True)
class EngineOption:
    """How the command line offers one :class:`EngineConfig` field (its one declaration).

    The option's type is the field's: its values (:data:`ENGINE_CHOICES`), its range
    (:data:`ENGINE_RANGES`) or on/off. Its default is unset (the mode decides), or with
    ``shown`` the ``vllm``-mode default, shown in the help.

    Parameters
    ----------
    field
        The :class:`EngineConfig` field.
    flag
        The option's spelling: ``--name``, ``--on/--off`` for a switch, or ``--name`` of a
        flag (``is_flag``) that only turns the setting on.
    help
        The help text, with ``{default}`` for :func:`default_text` and ``{vllm}`` /
        ``{sglang}`` for the mode defaults.
    """

    field: str
    flag: str
    help: str | None = None
    shown: bool = False
    is_flag: bool = False

    @property
    def help_text(self) -> str | None:
        """The help with the defaults filled in."""
        if self.help is None:
            return None
        return self.help.format(
            default=default_text(self.field) if "{default}" in self.help else "",
            vllm=VLLM_MODE_DEFAULTS[self.field],
            sglang=SGLANG_MODE_DEFAULTS[self.field],
        )


#: The allowed values of every choice setting (``cost_model``'s are the presets of
#: ``tracekit.engine.clock``, looked up when the option is made).
ENGINE_CHOICES: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "mode": ENGINE_MODES,
        "vllm_version": VLLM_VERSIONS,
        "scheduling_policy": SCHEDULING_POLICIES,
        "clock": CLOCKS,
        "retraction_policy": RETRACTION_POLICIES,
    }
)

#: Every setting the command line offers, in the order of ``--help`` (``latency`` is the
#: ``--latency`` option of ``tracekit.cli.options``, which checks its value as it parses it).
#: ``full_sequence_must_fit`` has no option: it is vLLM's, always on.
ENGINE_OPTIONS: tuple[EngineOption, ...] = (
    EngineOption("mode", "--engine-mode", shown=True),
    EngineOption("num_blocks", "--num-blocks", "KV blocks ({default})."),
    EngineOption("block_size", "--block-size", "Tokens per block ({default})."),
    EngineOption("max_num_seqs", "--max-num-seqs", "Running limit ({default})."),
    EngineOption("max_num_batched_tokens", "--max-num-batched-tokens", "Token budget ({default})."),
    EngineOption("watermark", "--watermark", "Admission watermark ({vllm})."),
    EngineOption("max_model_len", "--max-model-len", "Longest sequence ({default})."),
    EngineOption(
        "long_prefill_token_threshold",
        "--long-prefill-token-threshold",
        "Cap on a long prefill's chunk ({default}; 0 = off, vLLM's default).",
    ),
    EngineOption(
        "vllm_version",
        "--vllm-version",
        "vLLM release whose scheduling rules the engine follows ({default}).",
    ),
    EngineOption("scheduling_policy", "--scheduling-policy", shown=True),
    EngineOption(
        "clock",
        "--clock",
        "steps: fixed step time; cost-model: modelled step times (see docs/engine.md).",
        shown=True,
    ),
    EngineOption("step_s", "--step-s", "Step time of the steps clock ({default})."),
    EngineOption("cost_model", "--cost-model", "Cost-model preset ({default})."),
    # SGLang mode: docs/engine.md, its SGLang mode section.
    EngineOption(
        "retraction_policy", "--retraction-policy", "SGLang mode: retraction policy ({default})."
    ),
    EngineOption(
        "radix_cache",
        "--radix-cache/--no-radix-cache",
        "SGLang mode: SGLang's radix cache (default on in sglang mode, as in SGLang).",
    ),
    EngineOption(
        "chunked_prefill_size",
        "--chunked-prefill-size",
        "SGLang mode: --chunked-prefill-size (default SGLang's for the cost model's GPU, "
        "{sglang} on the A6000; 0 = no chunking).",
    ),
    EngineOption(
        "overlap_schedule",
        "--overlap-schedule/--disable-overlap-schedule",
        "SGLang mode: SGLang's overlap event loop (default on, as SGLang runs; "
        "--disable-overlap-schedule is its normal loop).",
    ),
    EngineOption(
        "enable_priority_scheduling",
        "--enable-priority-scheduling/--no-enable-priority-scheduling",
        "SGLang mode: SGLang's priority scheduling, the waiting queue by priority then "
        "arrival (in record sim the same as --scheduling-policy priority); needed by "
        "--retraction-policy priority; off by default, as in SGLang.",
    ),
    EngineOption(
        "schedule_low_priority_values_first",
        "--schedule-low-priority-values-first",
        "SGLang mode: lower priority values are more important (SGLang's default: higher).",
        is_flag=True,
    ),
    EngineOption(
        "disable_priority_preemption",
        "--disable-priority-preemption",
        "SGLang mode: no preemption of running requests at admission under priority "
        "scheduling (SGLang preempts by default).",
        is_flag=True,
    ),
    EngineOption(
        "priority_scheduling_preemption_threshold",
        "--priority-scheduling-preemption-threshold",
        "SGLang mode: the priority difference a preemption at admission must exceed ({sglang}).",
    ),
    EngineOption("latency", "--latency"),
    # vLLM features: unset keeps the mode's default (on in vllm mode, as vLLM runs).
    EngineOption(
        "enable_prefix_caching",
        "--prefix-caching/--no-prefix-caching",
        "vLLM automatic prefix caching (default on in vllm mode; sglang mode refuses it).",
    ),
    EngineOption(
        "async_scheduling",
        "--async-scheduling/--no-async-scheduling",
        "vLLM async scheduling, one step ahead (default on in vllm mode, as on GPUs; "
        "sglang mode refuses it).",
    ),
)

#: Every ``tracekit.sglang.protocol.SglangConfig`` field and its resolved default
#: (``SglangConfig()``), which ``record sglang --help`` shows: a plain copy, which
#: ``tests/test_cli_lazy.py`` keeps equal to the dataclass's.
SGLANG_CONFIG_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        "kv_tokens": 9584,
        "max_running_requests": 2048,
        "chunked_prefill_size": 4096,
        "max_prefill_tokens": 16384,
        "max_context_len": 8192,
        "radix_cache": True,
        "retraction_policy": "length",
        "schedule_policy": "fcfs",
        "overlap_schedule": True,
        "enable_priority_scheduling": False,
        "schedule_low_priority_values_first": False,
        "disable_priority_preemption": False,
        "priority_scheduling_preemption_threshold": 10,
        "step_s": 0.02,
        "max_steps": 10_000_000,
    }
)
