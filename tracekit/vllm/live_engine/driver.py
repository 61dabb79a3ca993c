"""The vLLM side of ``tracekit record vllm --live``: the real engine on a tiny random model.

Runs inside the vLLM environment as ``python -m tracekit.vllm.live_engine.driver`` and speaks the
protocol of :mod:`tracekit.vllm.protocol` (scenarios in, ``hello`` / records / ``end`` out), plus
one ``output`` message per finished request, ``{"kind": "output", "run", "request_id",
"token_ids"}``, and one ``shape`` message after each step, ``{"kind": "shape", "run", "step",
"kv", "pairs", "cpu_s"}``: the context tokens its attention read, the query-key pairs of its
prefill chunks' attention (a chunk of ``n`` tokens after ``c`` cached ones attends to
``n * c + n * (n + 1) / 2`` pairs: quadratic in the chunk, which no total captures) and the
process CPU time of the step (``time.process_time``; with one compute thread it is the step's
length without the time other processes took the cores), none of which the steps table has.

Per scenario it builds an ``LLMEngine`` (V1, CPU platform, engine core in this process so the
scheduler is reachable) on the tiny Llama of :func:`write_live_model`, warms it up, puts the
typed-host shim (:class:`tracekit.vllm.hooks.SchedulerHooks`) on its scheduler, and then sends the
workload's requests at their arrival times on the wall clock (or all at once) while calling
``LLMEngine.step()``. Every step is timed around ``step()`` (schedule, model forward, sampling,
output processing): that is the step's ``duration_s``. Its make-up (prefill and decode tokens,
running and waiting requests, KV blocks) is read from the scheduler right after ``schedule()``.
Times are seconds on the wall clock from the start of the run. Decoding is greedy (temperature
0) with ``ignore_eos`` and ``max_tokens`` set to the output count the embedded engine's stop rule
gives (:func:`tracekit.engine.fake_model.stop_rule`), so every request produces exactly the
tokens the workload asks for and its recorded status is the embedded engine's.

Standard library, vLLM, and the project's standard-library parts only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from tracekit.engine.config import EngineConfig
from tracekit.engine.content import prompt_token_ids
from tracekit.engine.fake_model import split_tokens, stop_rule
from tracekit.engine.outputs import DecisionRecord, RequestRecord, StepRecord
from tracekit.engine.request import EngineRequest, RequestStatus
from tracekit.real_engine.serve import Emit, serve_scenarios
from tracekit.recording.state import final_state
from tracekit.recording.tiny_model import LIVE_FIRST_TOKEN, LIVE_MODEL_CONFIG, write_live_model
from tracekit.strategies import StrategySpec
from tracekit.vllm.driver import capture_policy_log
from tracekit.vllm.hooks import SchedulerHooks
from tracekit.vllm.protocol import (
    PROTOCOL_VERSION,
    Scenario,
    decision_to_wire,
    request_to_wire,
    step_to_wire,
)

__all__ = ["LiveBackend", "live_prompt", "main", "run_live_scenario"]

#: Requests and output tokens of the warm-up run before the clock starts (first steps compile
#: and allocate; they are not the engine's steady state).
WARMUP_REQUESTS = 4
WARMUP_TOKENS = 8


def live_prompt(request: EngineRequest, index: int) -> list[int]:
    """The prompt token ids of ``request`` (position ``index``) on the live model.

    The content model's ids (:func:`tracekit.engine.content.prompt_token_ids`: requests sharing
    content ids share tokens) folded into the model's vocabulary above the special tokens.
    """
    span = LIVE_MODEL_CONFIG["vocab_size"] - LIVE_FIRST_TOKEN
    ids = prompt_token_ids(
        index, request.prompt_tokens, request.content_ids, request.content_block_tokens
    )
    return [LIVE_FIRST_TOKEN + token % span for token in ids]


class LiveBackend:
    """vLLM's engine classes, imported once, and the live model folder.

    Parameters
    ----------
    model_parent
        Folder under which the live model is made (once per seed).
    """

    def __init__(self, model_parent: Path) -> None:
        import torch
        import vllm
        from vllm.engine.arg_utils import EngineArgs
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.sched.request_queue import SchedulingPolicy
        from vllm.v1.engine.llm_engine import LLMEngine
        from vllm.v1.request import RequestStatus as VllmStatus

        self.version = str(vllm.__version__)
        self.torch_version = str(torch.__version__)
        self.torch = torch
        self.EngineArgs = EngineArgs
        self.LLMEngine = LLMEngine
        self.TokensPrompt = TokensPrompt
        self.SamplingParams = SamplingParams
        self.RUNNING = VllmStatus.RUNNING
        self.PRIORITY = SchedulingPolicy.PRIORITY
        self.model_parent = model_parent

    def make_engine(self, config: EngineConfig, seed: int) -> tuple[Any, Path, dict[str, Any]]:
        """A fresh ``LLMEngine`` for ``config``, its model folder and the settings it got."""
        if config.mode != "vllm":
            raise ValueError(f"the live vLLM engine has no {config.mode!r} mode")
        if config.block_size % 32:
            raise ValueError(
                f"block_size {config.block_size}: vLLM's CPU attention backend needs a multiple "
                "of 32; pass --block-size 32"
            )
        model = write_live_model(self.model_parent, seed)
        settings = {
            "model": str(model),
            "dtype": "float32",
            "seed": seed,
            "block_size": config.block_size,
            # The engine's num_blocks counts vLLM's null block, as the override does.
            "num_gpu_blocks_override": config.num_blocks,
            "max_model_len": config.max_model_len,
            "max_num_seqs": config.max_num_seqs,
            "max_num_batched_tokens": config.max_num_batched_tokens,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": config.enable_prefix_caching,
            "scheduling_policy": config.scheduling_policy,
            "long_prefill_token_threshold": config.long_prefill_token_threshold,
            "scheduler_reserve_full_isl": config.full_sequence_must_fit,
            "watermark": config.watermark,
            # One step at a time, so that each timed step() is one schedule + one forward.
            "async_scheduling": False,
            "enforce_eager": True,
            # On the CPU backend this is the share of the machine's memory vLLM checks is free
            # at startup (0.92 by default fails beside other processes); the KV cache is sized
            # by num_gpu_blocks_override, and the model is a few MB.
            "gpu_memory_utilization": 0.05,
            "disable_log_stats": True,
        }
        engine = self.LLMEngine.from_engine_args(self.EngineArgs(**settings))
        return engine, model, settings

    def sampling(self, num_tokens: int) -> Any:
        """Greedy sampling of exactly ``num_tokens`` tokens."""
        return self.SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)


def _scheduler_of(engine: Any) -> Any:
    core = getattr(engine.engine_core, "engine_core", None)
    if core is None:
        raise RuntimeError(
            "the live driver needs vLLM's engine core in this process "
            "(VLLM_ENABLE_V1_MULTIPROCESSING=0)"
        )
    return core.scheduler


def _warm_up(backend: LiveBackend, engine: Any, config: EngineConfig) -> float:
    """Run short requests of several prompt lengths through ``engine``; return the seconds.

    The first steps of new batch shapes allocate and pick kernels (with a 4-request warm-up
    of one shape, a run's first step, a 100-token prefill, took 0.44 s and its third, 385
    prefill tokens and 5 decodes, 0.024 s), so the run's steps start warm.
    """
    started = time.perf_counter()
    longest = min(config.max_num_batched_tokens, config.max_model_len - WARMUP_TOKENS - 1)
    longest = min(longest, (config.num_usable_blocks - 1) * config.block_size - WARMUP_TOKENS)
    for i in range(WARMUP_REQUESTS):
        length = max(1, longest >> i)
        prompt = [LIVE_FIRST_TOKEN + (i * 7 + p) % 97 for p in range(length)]
        engine.add_request(
            f"warmup-{i}",
            backend.TokensPrompt(prompt_token_ids=prompt),
            backend.sampling(WARMUP_TOKENS),
        )
        # One at a time, so the full-length prefill runs alone at least once.
        while engine.has_unfinished_requests():
            engine.step()
    for i in range(WARMUP_REQUESTS):
        prompt = [LIVE_FIRST_TOKEN + (i * 11 + p) % 89 for p in range(16)]
        engine.add_request(
            f"warmup-batch-{i}",
            backend.TokensPrompt(prompt_token_ids=prompt),
            backend.sampling(WARMUP_TOKENS),
        )
    while engine.has_unfinished_requests():
        engine.step()
    if config.enable_prefix_caching:
        engine.reset_prefix_cache()
    return time.perf_counter() - started


class _StepProbe:
    """Wraps the scheduler's ``schedule()``: steps the hooks and reads each step's make-up."""

    def __init__(self, scheduler: Any, hooks: SchedulerHooks, kv_blocks_total: int) -> None:
        self.scheduler = scheduler
        self.hooks = hooks
        self.kv_blocks_total = kv_blocks_total
        self._schedule = scheduler.schedule
        scheduler.schedule = self.schedule
        self.step = 0
        self.now = 0.0
        self.record: StepRecord | None = None
        #: Context tokens the step's attention reads (the calibrated model's ``kv_tokens_read``).
        self.kv_tokens_read = 0
        #: Query-key pairs of the step's prefill chunks' causal attention.
        self.prefill_attention_pairs = 0
        #: request_id -> whether its first scheduling has been seen.
        self.first_scheduled: dict[str, float] = {}

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        hooks = self.hooks
        hooks.begin_step(self.step, self.now)
        output = self._schedule(*args, **kwargs)
        hooks.end_step()
        scheduler = self.scheduler
        scheduled = dict(output.num_scheduled_tokens)
        for request_id in scheduled:
            self.first_scheduled.setdefault(request_id, self.now)
        # num_computed_tokens has already advanced (Scheduler._update_after_schedule).
        requests = scheduler.requests
        prefill, decode, self.kv_tokens_read = split_tokens(scheduled, requests)
        pairs = 0
        for request_id, n in scheduled.items():
            r = requests[request_id]
            computed = r.num_computed_tokens
            produced = r.num_output_tokens
            if not (n == 1 and produced and computed == r.num_prompt_tokens + produced):
                pairs += n * (computed - n) + n * (n + 1) // 2
        self.prefill_attention_pairs = pairs
        num_running, num_waiting = scheduler.get_request_counts()
        free = int(scheduler.kv_cache_manager.block_pool.get_num_free_blocks())
        self.record = StepRecord(
            self.step,
            self.now,
            0.0,  # measured once step() returns
            int(num_running),
            int(num_waiting),
            self.kv_blocks_total - free,
            self.kv_blocks_total,
            prefill,
            decode,
            hooks.num_preempted_in_step,
            scheduled,
        )
        return output


def run_live_scenario(
    backend: LiveBackend,
    scenario: Scenario,
    emit: Emit,
    *,
    seed: int = 0,
    all_at_once: bool = False,
) -> dict[str, Any]:
    """Run one scenario on a fresh live engine, emitting its records; return its ``end``.

    Parameters
    ----------
    backend
        The imported vLLM.
    scenario
        Requests, configuration and strategy (the shim puts a policy in the loop).
    emit
        Receives each message as it is produced.
    seed
        The engine's seed and the seed of the model's random weights.
    all_at_once
        Send every request before the first step (arrival times are then all 0).
    """
    run = scenario.index
    config = scenario.config
    started_setup = time.perf_counter()

    def on_log(line: str) -> None:
        emit({"kind": "log", "run": run, "line": line})

    host = None
    if scenario.shim:
        host = StrategySpec(**scenario.strategy).make_host(scenario.host_path)  # type: ignore[arg-type]
    elif scenario.strategy.get("kind") != "builtin":
        raise ValueError("a strategy other than builtin runs through the shim (shim=True)")
    engine, model, settings = backend.make_engine(config, seed)
    try:
        warmup_s = _warm_up(backend, engine, config)
        scheduler = _scheduler_of(engine)

        def on_decision(record: DecisionRecord) -> None:
            emit({"kind": "decision", "run": run, "r": decision_to_wire(record)})

        with capture_policy_log(on_log):
            hooks = SchedulerHooks(
                scheduler,
                scheduling_policy=config.scheduling_policy,
                running_status=backend.RUNNING,
                priority_policy=backend.PRIORITY,
                host=host,
                on_decision=on_decision,
            )
            probe = _StepProbe(scheduler, hooks, config.num_usable_blocks)
            setup_s = time.perf_counter() - started_setup
            timing = _step_loop(backend, engine, scheduler, probe, scenario, emit, all_at_once)
    finally:
        del engine  # frees the KV cache before the next scenario builds its own
    return {
        "kind": "end",
        "run": run,
        "num_steps": timing.pop("num_steps"),
        "num_decisions": hooks.num_decisions,
        "end_s": timing["end_s"],
        "final_state": final_state(host, probe.step, timing["end_s"]),
        "vllm_config": {
            "version": backend.version,
            "torch": backend.torch_version,
            "engine_class": f"{backend.LLMEngine.__module__}.{backend.LLMEngine.__qualname__}",
            "engine_args": {k: v for k, v in settings.items() if k != "model"},
            "model": {"config_json": LIVE_MODEL_CONFIG, "folder": model.name, "seed": seed},
            "sampling": "greedy (temperature 0), ignore_eos, max_tokens = the stop rule's count",
            "env": {
                name: os.environ.get(name)
                for name in (
                    "HF_HUB_OFFLINE",
                    "VLLM_TARGET_DEVICE",
                    "VLLM_ENABLE_V1_MULTIPROCESSING",
                    "VLLM_CPU_OMP_THREADS_BIND",
                    "OMP_NUM_THREADS",
                )
            },
        },
        "builtin_rule_mismatches": hooks.builtin_rule_mismatches,
        "timing": {"setup_s": setup_s, "warmup_s": warmup_s, **timing},
        "all_at_once": all_at_once,
    }


class _Live:
    """One request's live state: its vLLM ``Request`` and measured times."""

    __slots__ = ("arrival_s", "first_token_s", "index", "request", "status", "stop", "vllm")

    def __init__(self, request: EngineRequest, index: int, arrival_s: float) -> None:
        self.request = request
        self.index = index
        self.arrival_s = arrival_s
        self.stop = 0
        self.status = ""
        self.vllm: Any = None
        self.first_token_s: float | None = None


def _step_loop(
    backend: LiveBackend,
    engine: Any,
    scheduler: Any,
    probe: _StepProbe,
    scenario: Scenario,
    emit: Emit,
    all_at_once: bool,
) -> dict[str, Any]:
    run = scenario.index
    config = scenario.config
    order = sorted(range(len(scenario.requests)), key=lambda i: (scenario.requests[i].arrival_s, i))
    pending = [
        _Live(scenario.requests[i], i, 0.0 if all_at_once else scenario.requests[i].arrival_s)
        for i in order
    ]
    live: dict[str, _Live] = {}
    num_steps = 0
    step_s = 0.0
    wall_start = time.time()
    start = time.perf_counter()
    end_s = 0.0

    def finish(item: _Live, record: RequestRecord) -> None:
        emit({"kind": "request", "run": run, "r": request_to_wire(record)})

    next_arrival = 0
    while next_arrival < len(pending) or engine.has_unfinished_requests():
        now = time.perf_counter() - start
        while next_arrival < len(pending) and pending[next_arrival].arrival_s <= now:
            item = pending[next_arrival]
            next_arrival += 1
            request = item.request
            if request.prompt_tokens >= config.max_model_len:
                # vLLM refuses such a prompt on input, as the embedded engine records it.
                finish(item, _record(item, RequestStatus.REJECTED, 0, None, None, item.arrival_s))
                continue
            item.stop, item.status = stop_rule(
                request.prompt_tokens,
                request.output_tokens,
                request.max_tokens,
                config.max_model_len,
            )
            engine.add_request(
                request.request_id,
                backend.TokensPrompt(prompt_token_ids=live_prompt(request, item.index)),
                backend.sampling(item.stop),
                arrival_time=wall_start + item.arrival_s,
                priority=request.priority,
            )
            item.vllm = scheduler.requests[request.request_id]
            live[request.request_id] = item
        if not engine.has_unfinished_requests():
            if next_arrival < len(pending):
                time.sleep(max(0.0, pending[next_arrival].arrival_s - now))
            continue
        probe.step = num_steps
        step_start = time.perf_counter()
        probe.now = step_start - start
        probe.record = None
        cpu_start = time.process_time()
        outputs = engine.step()
        step_end = time.perf_counter()
        cpu_s = time.process_time() - cpu_start
        end_s = step_end - start
        record = probe.record
        if record is not None:
            record.duration_s = step_end - step_start
            step_s += record.duration_s
            num_steps += 1
            emit({"kind": "step", "run": run, "r": step_to_wire(record)})
            emit(
                {
                    "kind": "shape",
                    "run": run,
                    "step": record.step,
                    "kv": probe.kv_tokens_read,
                    "pairs": probe.prefill_attention_pairs,
                    "cpu_s": cpu_s,
                }
            )
        for output in outputs:
            item = live.get(output.request_id)
            if item is None:
                continue
            tokens = list(output.outputs[0].token_ids)
            if item.first_token_s is None and tokens:
                item.first_token_s = end_s
            if output.finished:
                del live[output.request_id]
                emit(
                    {
                        "kind": "output",
                        "run": run,
                        "request_id": output.request_id,
                        "token_ids": tokens,
                    }
                )
                first = probe.first_scheduled.get(output.request_id)
                finish(
                    item,
                    _record(
                        item,
                        item.status,
                        len(tokens),
                        first,
                        item.first_token_s,
                        end_s,
                        probe.hooks.recomputed_tokens.get(output.request_id, 0),
                    ),
                )
    return {"num_steps": num_steps, "end_s": end_s, "step_s": step_s, "wall_s": end_s}


def _record(
    item: _Live,
    status: str,
    num_output_tokens: int,
    first_scheduled_s: float | None,
    first_token_s: float | None,
    finish_s: float,
    recomputed_tokens: int = 0,
) -> RequestRecord:
    request = item.request
    vllm_request = item.vllm
    return RequestRecord(
        request_id=request.request_id,
        arrival_s=item.arrival_s,
        prompt_tokens=request.prompt_tokens,
        output_tokens=request.output_tokens,
        max_tokens=request.max_tokens,
        priority=request.priority,
        num_output_tokens=num_output_tokens,
        first_scheduled_s=first_scheduled_s,
        first_token_s=first_token_s,
        finish_s=finish_s,
        status=status,
        num_preemptions=0 if vllm_request is None else int(vllm_request.num_preemptions),
        recomputed_tokens=recomputed_tokens,
        input_index=item.index,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tracekit.vllm.live_engine.driver [--scenarios FILE] [--seed N]``.

    ``--all-at-once`` sends every request before the first step.
    """
    parser = argparse.ArgumentParser(prog="python -m tracekit.vllm.live_engine.driver")
    parser.add_argument("--scenarios", help="JSON-lines file of scenarios (default: stdin)")
    parser.add_argument("--model-parent", help="folder under which the live model is made")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--all-at-once", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    # The engine core in this process: its scheduler is where the shim and the probe sit.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # Request ids as the workload gives them (vLLM appends random characters otherwise).
    os.environ["VLLM_DISABLE_REQUEST_ID_RANDOMIZATION"] = "1"
    # An explicit KV-cache budget (GiB; the cache itself is num_gpu_blocks_override blocks):
    # without it vLLM's CPU worker asks for gpu_memory_utilization of the memory node minus its
    # own resident size, which is negative on a node of 8.7 GiB, and refuses to start.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cache_root = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    model_parent = Path(args.model_parent or cache_root)

    def open_backend() -> tuple[LiveBackend, dict[str, Any]]:
        backend = LiveBackend(model_parent)
        return backend, {"vllm_version": backend.version, "torch_version": backend.torch_version}

    return serve_scenarios(
        args.scenarios,
        open_backend,
        lambda backend, message, emit: run_live_scenario(
            backend,
            Scenario.from_wire(message),
            emit,
            seed=args.seed,
            # Per scenario (record_vllm_live sends it), or for every one (--all-at-once).
            all_at_once=args.all_at_once or bool(message.get("all_at_once", False)),
        ),
        protocol=PROTOCOL_VERSION,
        json_default=str,
    )


if __name__ == "__main__":
    sys.exit(main())
