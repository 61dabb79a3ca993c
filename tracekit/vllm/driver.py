"""The vLLM side of ``tracekit record vllm``: drive the real v1 ``Scheduler`` with fake outputs.

Runs inside the vLLM environment (``scripts/install-vllm-cpu.sh``) as ``python -m
tracekit.vllm.driver``, with the project root on ``PYTHONPATH``; it imports only the standard
library, vLLM (inside :class:`VllmBackend`) and the project's standard-library parts (``bidkv``,
``tracekit.engine``, ``tracekit.hosts``, ``tracekit.strategies``). It reads scenarios
(:class:`tracekit.vllm.protocol.Scenario`, one JSON line each) from standard input or
``--scenarios FILE``, runs them one after the other in this one process (importing vLLM takes
about 10 s), and streams records back as JSON lines (see :mod:`tracekit.vllm.protocol`).

The loop around the scheduler follows the embedded engine's (``tracekit.engine.engine``): the
same clock (``tracekit.engine.clock``: a request arriving at ``arrival_s`` is added before the
first step whose index is at least ``arrival_s / step_s`` on the steps clock), the same rejection
of prompts of ``max_model_len`` tokens or more (vLLM refuses them before the scheduler), and fake
model outputs: one sampled token per scheduled request whose prefill is complete, none for a
partial chunk. The sampled token is a stop token (``SamplingParams.stop_token_ids``) when the
request reaches its target output length without reaching ``max_tokens`` or ``max_model_len``,
so vLLM's own ``check_stop`` finishes it as the embedded engine does (FINISHED_STOPPED at the
target, FINISHED_LENGTH_CAPPED at the caps). No model weights, tokenizer or hub access: the model
is a folder with a tiny ``config.json`` that the driver writes itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from tracekit.engine.clock import make_clock
from tracekit.engine.config import EngineConfig
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest
from tracekit.recording.state import final_state
from tracekit.strategies import StrategySpec
from tracekit.vllm.hooks import SchedulerHooks
from tracekit.vllm.protocol import (
    PROTOCOL_VERSION,
    Scenario,
    decision_to_wire,
    request_to_wire,
    step_to_wire,
)

__all__ = ["TINY_MODEL_CONFIG", "VllmBackend", "main", "run_scenario"]

#: The model the scheduler is configured for: a config only (no weights, no tokenizer).
TINY_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    # Large enough for any max_model_len a workload asks for.
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
PROMPT_TOKEN = 3  # every prompt token (prefix caching is off, so ids do not matter)
SAMPLED_TOKEN = 5  # every sampled token but the last
STOP_TOKEN = 7  # sampled at the target output length; a stop token of every request

Emit = Callable[[dict[str, Any]], None]


class VllmBackend:
    """vLLM's classes, imported once, and the builders of schedulers, requests and outputs.

    Parameters
    ----------
    model_dir
        Folder for the tiny config-only model (created if missing).
    """

    def __init__(self, model_dir: Path) -> None:
        import torch
        import vllm
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.sched.request_queue import SchedulingPolicy
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus
        from vllm.v1.structured_output import StructuredOutputManager

        self.torch = torch
        self.version = str(vllm.__version__)
        self.package = _distribution_of(vllm)
        self.torch_version = str(torch.__version__)
        self.CacheConfig = CacheConfig
        self.ModelConfig = ModelConfig
        self.SchedulerConfig = SchedulerConfig
        self.VllmConfig = VllmConfig
        self.SamplingParams = SamplingParams
        self.Scheduler = Scheduler
        self.FullAttentionSpec = FullAttentionSpec
        self.KVCacheConfig = KVCacheConfig
        self.KVCacheGroupSpec = KVCacheGroupSpec
        self.ModelRunnerOutput = ModelRunnerOutput
        self.Request = Request
        self.StructuredOutputManager = StructuredOutputManager
        self.RUNNING = RequestStatus.RUNNING
        self.PRIORITY = SchedulingPolicy.PRIORITY
        self.status_names = {
            RequestStatus.FINISHED_STOPPED: "finished_stopped",
            RequestStatus.FINISHED_LENGTH_CAPPED: "finished_length_capped",
        }
        self.model_dir = write_tiny_model(model_dir)
        self._model_configs: dict[int, Any] = {}

    def make_scheduler(self, config: EngineConfig) -> tuple[Any, dict[str, Any]]:
        """A fresh ``Scheduler`` for ``config`` and the vLLM configuration it runs with."""
        if config.mode != "vllm":
            raise ValueError(f"the real vLLM scheduler has no {config.mode!r} mode")
        max_model_len = config.max_model_len
        model_config = self._model_configs.get(max_model_len)
        if model_config is None:
            model_config = self.ModelConfig(
                model=str(self.model_dir),
                skip_tokenizer_init=True,
                max_model_len=max_model_len,
                dtype="float32",
            )
            self._model_configs[max_model_len] = model_config
        scheduler_config = self.SchedulerConfig(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=max_model_len,
            enable_chunked_prefill=True,
            async_scheduling=False,
            policy=config.scheduling_policy,
            watermark=config.watermark,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
            scheduler_reserve_full_isl=config.full_sequence_must_fit,
            is_encoder_decoder=False,
        )
        cache_config = self.CacheConfig(block_size=config.block_size, enable_prefix_caching=False)
        vllm_config = self.VllmConfig(
            scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config
        )
        spec = self.FullAttentionSpec(
            block_size=config.block_size,
            num_kv_heads=1,
            head_size=1,
            dtype=self.torch.float32,
        )
        kv_cache_config = self.KVCacheConfig(
            num_blocks=config.num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[self.KVCacheGroupSpec(["layer"], spec)],
        )
        cache_config.num_gpu_blocks = config.num_blocks
        scheduler = self.Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            block_size=config.block_size,
            log_stats=True,
            structured_output_manager=self.StructuredOutputManager(vllm_config),
        )
        return scheduler, self.describe(vllm_config, kv_cache_config)

    def describe(self, vllm_config: Any, kv_cache_config: Any) -> dict[str, Any]:
        """The configuration the real scheduler runs with, read back from vLLM's objects."""
        sc = vllm_config.scheduler_config
        cc = vllm_config.cache_config
        scheduler_fields = (
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_num_scheduled_tokens",
            "enable_chunked_prefill",
            "async_scheduling",
            "policy",
            "watermark",
            "long_prefill_token_threshold",
            "scheduler_reserve_full_isl",
        )
        return {
            "version": self.version,
            "package": self.package,
            "torch": self.torch_version,
            "scheduler_class": f"{self.Scheduler.__module__}.{self.Scheduler.__qualname__}",
            "scheduler_config": {
                name: _plain(getattr(sc, name, None)) for name in scheduler_fields
            },
            "max_model_len": vllm_config.model_config.max_model_len,
            "cache_config": {
                "block_size": cc.block_size,
                "enable_prefix_caching": cc.enable_prefix_caching,
                "num_gpu_blocks": cc.num_gpu_blocks,
            },
            "kv_cache": {
                "num_blocks": kv_cache_config.num_blocks,
                "groups": "one full-attention group (FullAttentionSpec, 1 KV head, head size 1)",
            },
            "model": {
                "config_json": TINY_MODEL_CONFIG,
                "weights": None,
                "skip_tokenizer_init": True,
            },
            "speculative_decoding": None,
            "kv_connector": None,
            "env": {
                name: os.environ.get(name)
                for name in ("HF_HUB_OFFLINE", "VLLM_TARGET_DEVICE", "VLLM_CACHE_ROOT")
            },
            "fake_outputs": (
                "one sampled token per scheduled request whose prefill is complete; the stop "
                "token at the target output length unless max_tokens or max_model_len ends it"
            ),
        }

    def make_request(self, request: EngineRequest) -> Any:
        """A vLLM ``Request`` for ``request`` (prompt ids are one repeated token)."""
        params = self.SamplingParams(
            max_tokens=request.max_tokens, ignore_eos=True, stop_token_ids=[STOP_TOKEN]
        )
        return self.Request(
            request_id=request.request_id,
            prompt_token_ids=[PROMPT_TOKEN] * request.prompt_tokens,
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(request.arrival_s),
            priority=request.priority,
        )

    def model_output(self, req_ids: list[str], sampled: list[list[int]]) -> Any:
        """The fake ``ModelRunnerOutput`` of one step."""
        return self.ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(getattr(value, "value", value))


def _distribution_of(module: Any) -> str:
    """``vllm-cpu`` or ``vllm``: the distribution that installed ``module``."""
    from importlib import metadata

    for name in ("vllm-cpu", "vllm"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        location = Path(str(dist.locate_file("vllm")))
        if location.resolve() == Path(module.__file__).resolve().parent:
            return name
    return "vllm"


def write_tiny_model(folder: Path) -> Path:
    """Write the config-only model folder (idempotent); return it."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.json"
    text = json.dumps(TINY_MODEL_CONFIG, indent=1, sort_keys=True)
    if not config.is_file() or config.read_text("utf-8") != text:
        tmp = folder / f".config.json.{os.getpid()}"
        tmp.write_text(text, "utf-8")
        os.replace(tmp, config)
    return folder


class _Tracked:
    """The driver's bookkeeping for one request in the scheduler."""

    __slots__ = ("first_scheduled_s", "first_token_s", "index", "request", "vllm")

    def __init__(self, request: EngineRequest, index: int, vllm_request: Any) -> None:
        self.request = request
        self.index = index
        self.vllm = vllm_request
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None


@contextlib.contextmanager
def capture_policy_log(emit_line: Callable[[str], None]) -> Iterator[None]:
    """Send the policy's log lines (logger ``vllm`` itself and ``vllm.preemption_policy``).

    vLLM's own modules log to ``vllm.<module>`` loggers; their lines are left out, so the bundle's
    ``policy.log`` holds what ``tracekit record sim`` would write for the same policy. vLLM's own
    handlers stay (they write to standard error, which the recorder keeps for error messages).
    """
    logger = logging.getLogger("vllm")

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            emit_line(self.format(record))

    handler = _Handler(logging.INFO)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    handler.addFilter(lambda r: r.name == "vllm" or r.name.startswith("vllm.preemption_policy"))
    saved_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved_level)


def run_scenario(backend: VllmBackend, scenario: Scenario, emit: Emit) -> dict[str, Any]:
    """Run one scenario on a fresh real scheduler, emitting its records; return its ``end``.

    Parameters
    ----------
    backend
        The imported vLLM.
    scenario
        Requests, configuration and strategy.
    emit
        Receives each message (a dict) as it is produced.

    Returns
    -------
    dict
        The ``end`` message.
    """
    run = scenario.index
    config = scenario.config
    started = time.perf_counter()
    scheduler, vllm_config = backend.make_scheduler(config)

    def on_decision(record: DecisionRecord) -> None:
        emit({"kind": "decision", "run": run, "r": decision_to_wire(record)})

    def on_log(line: str) -> None:
        emit({"kind": "log", "run": run, "line": line})

    with capture_policy_log(on_log):
        host = None
        if scenario.shim:
            strategy = StrategySpec(**scenario.strategy)
            host = strategy.make_host(scenario.host_path)  # type: ignore[arg-type]
        elif scenario.strategy.get("kind") != "builtin":
            raise ValueError("a strategy other than builtin runs through the shim (shim=True)")
        hooks = SchedulerHooks(
            scheduler,
            scheduling_policy=config.scheduling_policy,
            running_status=backend.RUNNING,
            priority_policy=backend.PRIORITY,
            host=host,
            on_decision=on_decision,
        )
        setup_s = time.perf_counter() - started
        num_steps, end_s, scheduler_s = _loop(backend, scheduler, hooks, scenario, emit)
    wall_s = time.perf_counter() - started
    return {
        "kind": "end",
        "run": run,
        "num_steps": num_steps,
        "num_decisions": hooks.num_decisions,
        "end_s": end_s,
        "final_state": final_state(host, num_steps, end_s),
        "vllm_config": vllm_config,
        "builtin_rule_mismatches": hooks.builtin_rule_mismatches,
        "timing": {"setup_s": setup_s, "wall_s": wall_s, "scheduler_s": scheduler_s},
    }


def _loop(
    backend: VllmBackend, scheduler: Any, hooks: SchedulerHooks, scenario: Scenario, emit: Emit
) -> tuple[int, float, float]:
    """The step loop (the embedded engine's ``run_engine`` around the real scheduler)."""
    run = scenario.index
    config = scenario.config
    clock = make_clock(config)
    max_model_len = config.max_model_len
    usable = config.num_blocks - 1
    block_pool = scheduler.kv_cache_manager.block_pool
    order = sorted(range(len(scenario.requests)), key=lambda i: scenario.requests[i].arrival_s)
    pending = deque((i, scenario.requests[i]) for i in order)
    live: dict[str, _Tracked] = {}
    status_names = backend.status_names
    perf = time.perf_counter
    num_steps = 0
    end_s = scheduler_s = 0.0

    def finish(record: RequestRecord) -> None:
        emit({"kind": "request", "run": run, "r": request_to_wire(record)})

    while True:
        while pending and clock.is_visible(pending[0][1].arrival_s):
            index, request = pending.popleft()
            if request.prompt_tokens >= max_model_len:
                # vLLM refuses such a prompt on input; it never reaches the scheduler.
                finish(_record(request, index, None, None, float(request.arrival_s), "rejected"))
                continue
            vllm_request = backend.make_request(request)
            scheduler.add_request(vllm_request)
            live[request.request_id] = _Tracked(request, index, vllm_request)
        if not scheduler.has_unfinished_requests():
            if not pending:
                break
            clock.jump_to(pending[0][1].arrival_s)
            continue

        now = clock.now
        hooks.begin_step(clock.step, now)
        t0 = perf()
        out = scheduler.schedule()
        scheduler_s += perf() - t0
        hooks.end_step()
        scheduled = dict(out.num_scheduled_tokens)
        req_ids = list(scheduled)
        sampled: list[list[int]] = []
        prefill = decode = kv_read = 0
        for rid in req_ids:
            tracked = live[rid]
            vreq = tracked.vllm
            num_new = scheduled[rid]
            # num_computed_tokens has already advanced (Scheduler._update_after_schedule).
            computed = vreq.num_computed_tokens
            num_tokens = vreq.num_tokens
            num_output = vreq.num_output_tokens
            if num_new == 1 and num_output and computed == num_tokens:
                decode += 1
            else:
                prefill += num_new
            kv_read += computed
            if tracked.first_scheduled_s is None:
                tracked.first_scheduled_s = now
            if computed >= num_tokens:
                produced = num_output + 1
                request = tracked.request
                capped = num_tokens + 1 >= max_model_len or produced >= request.max_tokens
                stop = produced >= request.output_tokens and not capped
                sampled.append([STOP_TOKEN if stop else SAMPLED_TOKEN])
            else:
                sampled.append([])  # a partial (chunked) prefill samples nothing
        num_running, num_waiting = scheduler.get_request_counts()
        kv_blocks_used = usable - block_pool.get_num_free_blocks()
        duration = clock.duration(prefill + decode, len(scheduled), kv_read)
        end = now + duration
        step = StepRecord(
            clock.step,
            now,
            duration,
            num_running,
            num_waiting,
            kv_blocks_used,
            usable,
            prefill,
            decode,
            hooks.num_preempted_in_step,
            scheduled,
        )
        output = backend.model_output(req_ids, sampled)
        t0 = perf()
        scheduler.update_from_output(out, output)
        scheduler_s += perf() - t0
        emit({"kind": "step", "run": run, "r": step_to_wire(step)})
        for rid in req_ids:
            tracked = live[rid]
            vreq = tracked.vllm
            if tracked.first_token_s is None and vreq.num_output_tokens:
                tracked.first_token_s = end
            if vreq.is_finished():
                del live[rid]
                finish(
                    _record(
                        tracked.request,
                        tracked.index,
                        tracked.first_scheduled_s,
                        tracked.first_token_s,
                        end,
                        status_names.get(vreq.status, str(vreq.status).lower()),
                        vreq.num_output_tokens,
                        vreq.num_preemptions,
                        hooks.recomputed_tokens.get(rid, 0),
                    )
                )
        num_steps += 1
        end_s = end
        clock.advance(duration)
    return num_steps, end_s, scheduler_s


def _record(
    request: EngineRequest,
    input_index: int,
    first_scheduled_s: float | None,
    first_token_s: float | None,
    finish_s: float,
    status: str,
    num_output_tokens: int = 0,
    num_preemptions: int = 0,
    recomputed_tokens: int = 0,
) -> RequestRecord:
    return RequestRecord(
        request_id=request.request_id,
        arrival_s=float(request.arrival_s),
        prompt_tokens=request.prompt_tokens,
        output_tokens=request.output_tokens,
        max_tokens=request.max_tokens,
        priority=request.priority,
        num_output_tokens=num_output_tokens,
        first_scheduled_s=first_scheduled_s,
        first_token_s=first_token_s,
        finish_s=finish_s,
        status=status,
        num_preemptions=num_preemptions,
        recomputed_tokens=recomputed_tokens,
        input_index=input_index,
    )


def _protocol_channel() -> TextIO:
    """Keep the real standard output for messages; send everything else printed to stderr."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1 << 16)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tracekit.vllm.driver [--scenarios FILE] [--model-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m tracekit.vllm.driver")
    parser.add_argument("--scenarios", help="JSON-lines file of scenarios (default: stdin)")
    parser.add_argument("--model-dir", help="folder for the tiny config-only model")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    cache_root = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    model_dir = Path(args.model_dir or Path(cache_root) / "bidkv-tiny-llama")
    channel = _protocol_channel()

    def emit(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message, separators=(",", ":"), default=str) + "\n")

    started = time.perf_counter()
    backend = VllmBackend(model_dir)
    emit(
        {
            "kind": "hello",
            "protocol": PROTOCOL_VERSION,
            "vllm_version": backend.version,
            "vllm_package": backend.package,
            "torch_version": backend.torch_version,
            "python": sys.version.split()[0],
            "import_s": time.perf_counter() - started,
        }
    )
    channel.flush()
    source = open(args.scenarios, encoding="utf-8") if args.scenarios else sys.stdin  # noqa: SIM115
    with source:
        for line in source:
            if not line.strip():
                continue
            run = -1
            try:
                message = json.loads(line)
                run = int(message.get("run", -1))
                scenario = Scenario.from_wire(message)
                emit(run_scenario(backend, scenario, emit))
            except Exception as exc:
                emit(
                    {
                        "kind": "error",
                        "run": run,
                        "message": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    }
                )
            channel.flush()
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
