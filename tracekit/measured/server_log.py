"""The engine configuration a ``vllm serve`` ran with, read from its start-up log.

``vllm serve`` (vLLM 0.32, 0.33) logs, at start-up:

- ``non-default args: {...}``: the options given on its command line, as a Python literal
  (``block_size``, ``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``,
  ``num_gpu_blocks_override``, ``enable_prefix_caching`` ...);
- ``Initializing a V1 LLM engine (vX.Y.Z) with config: ...``: the effective ``max_seq_len``,
  ``enable_prefix_caching`` and ``enable_chunked_prefill``;
- ``GPU KV cache size: N tokens`` (``CPU KV cache size`` on the CPU backend): the KV cache the
  engine allocated, ``num_blocks * block_size`` tokens;
- ``Chunked prefill is enabled with max_num_batched_tokens=N.`` (when that line is logged).

On the CPU backend (``device_config=cpu`` in the engine's config line) async scheduling is off
(vLLM's CPU platform turns it off). On a GPU (``device_config=cuda``) vLLM turns it on unless
an option or an incompatible feature turns it off (``VllmConfig.__post_init__``), and it logs a
warning only in the second case (``Async scheduling ... disabled``): without such a line, and
without ``async_scheduling`` among the non-default args, the reader says on.

:func:`read_vllm_server_log` turns them into the embedded engine's options
(:func:`tracekit.engine.config.make_engine_config` names). What the log does not state (a
``max_num_seqs`` left at its default, which depends on the device; a default ``block_size``) is
left out and listed in ``missing``, so the caller takes it from its options and says so.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError

__all__ = ["OPTIONS", "ServerLogConfig", "merge_engine_options", "read_vllm_server_log"]

#: The engine options a start-up log can give, in the order they are reported.
OPTIONS = (
    "block_size",
    "num_blocks",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "async_scheduling",
)

_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\) with config: (.*)$")
_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU) KV cache size: ([\d,]+) tokens")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
#: vLLM's warnings when it turns async scheduling off on a device that would have it on.
_ASYNC_OFF = re.compile(r"[Aa]sync scheduling (?:is disabled|will be disabled|not supported)")


@dataclass(frozen=True)
class ServerLogConfig:
    """What a ``vllm serve`` start-up log says about its engine.

    Attributes
    ----------
    path
        The log file.
    options
        Engine options found (``make_engine_config`` names), with :data:`OPTIONS` keys only.
    sources
        For each option, the log line it came from (``non-default args``, ``KV cache size`` ...).
    missing
        The :data:`OPTIONS` the log does not state.
    vllm_version
        From the engine's initialisation line, or None.
    kv_cache_tokens
        The KV cache size the engine logged, or None.
    """

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    vllm_version: str | None = None
    kv_cache_tokens: int | None = None

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary, for manifests and reports."""
        return {
            "path": str(self.path),
            "vllm_version": self.vllm_version,
            "options": self.options,
            "sources": self.sources,
            "missing": list(self.missing),
            "kv_cache_tokens": self.kv_cache_tokens,
        }


def _config_value(text: str, key: str) -> str | None:
    match = re.search(rf"\b{key}=([^,]+)", text)
    return match.group(1).strip() if match else None


def read_vllm_server_log(path: str | Path) -> ServerLogConfig:
    """Read the engine configuration of a ``vllm serve`` run from its start-up log.

    Raises
    ------
    ConfigError
        The file cannot be read, or it holds none of the start-up lines above (not a
        ``vllm serve`` log); one line naming the file and what to pass.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise ConfigError(f"--server-log {path}: cannot read it ({exc.strerror})") from None
    args: dict[str, Any] = {}
    engine: str | None = None
    version: str | None = None
    kv_tokens: int | None = None
    chunked: int | None = None
    async_off = False
    for line in lines:
        if _ASYNC_OFF.search(line):
            async_off = True
        if (m := _NON_DEFAULT.search(line)) and not args:
            try:
                value = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                value = None
            if isinstance(value, dict):
                args = value
        elif (m := _ENGINE.search(line)) and engine is None:
            version, engine = m.group(1), m.group(2)
        elif (m := _KV_TOKENS.search(line)) and kv_tokens is None:
            kv_tokens = int(m.group(1).replace(",", ""))
        elif (m := _CHUNKED.search(line)) and chunked is None:
            chunked = int(m.group(1))
    if not args and engine is None and kv_tokens is None:
        raise ConfigError(
            f"--server-log {path}: no vLLM start-up lines found (non-default args, the engine's "
            "config, KV cache size); pass the log vllm serve printed from its start, or give "
            "the engine options instead"
        )
    options: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(key: str, value: Any, source: str) -> None:
        if value is not None and key not in options:
            options[key] = value
            sources[key] = source

    for key in ("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        if isinstance(args.get(key), int):
            put(key, args[key], "non-default args")
    for key in ("enable_prefix_caching", "async_scheduling"):
        if isinstance(args.get(key), bool):
            put(key, args[key], "non-default args")
    if chunked is not None:
        put("max_num_batched_tokens", chunked, "Chunked prefill is enabled with ...")
    if engine is not None:
        seq_len = _config_value(engine, "max_seq_len")
        if seq_len and seq_len.isdigit():
            put("max_model_len", int(seq_len), "engine config max_seq_len")
        prefix = _config_value(engine, "enable_prefix_caching")
        if prefix in ("True", "False"):
            put("enable_prefix_caching", prefix == "True", "engine config")
        device = _config_value(engine, "device_config")
        if device == "cpu":
            # vLLM's CPU platform turns async scheduling off (vllm/platforms/cpu.py).
            put("async_scheduling", False, "engine config device_config=cpu")
        elif device == "cuda":
            # On unless vLLM said it turned it off (vllm/config/vllm.py).
            put(
                "async_scheduling",
                not async_off,
                "engine config device_config=cuda, "
                + ("a warning that async scheduling is disabled" if async_off else "no warning"),
            )
    if isinstance(args.get("num_gpu_blocks_override"), int):
        put("num_blocks", args["num_gpu_blocks_override"], "non-default args")
    elif kv_tokens is not None and "block_size" in options:
        put("num_blocks", kv_tokens // options["block_size"], "KV cache size / block_size")
    missing = tuple(key for key in OPTIONS if key not in options)
    ordered = {key: options[key] for key in OPTIONS if key in options}
    return ServerLogConfig(path, ordered, sources, missing, version, kv_tokens)


def merge_engine_options(
    explicit: dict[str, Any], log: ServerLogConfig | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Engine options from the command line over those of a start-up log.

    Returns the merged options (``None`` values of ``explicit`` are unset) and, per option
    set, where it came from (``option`` or ``server log: <line>``).
    """
    merged: dict[str, Any] = {}
    where: dict[str, str] = {}
    if log is not None:
        for key, value in log.options.items():
            merged[key] = value
            where[key] = f"server log: {log.sources[key]}"
    for key, value in explicit.items():
        if value is not None:
            merged[key] = value
            where[key] = "option"
    return merged, where
