"""The SGLang side of the real-SGLang recorder: drive SGLang 0.5.23's scheduling objects on a CPU.

Runs inside the SGLang environment (``scripts/install-sglang-cpu.sh``) as ``python -m
tracekit.sglang.driver``. It imports the standard library, SGLang (with its torch) and two
standard-library tracekit modules shared with the vLLM driver, the tiny model and the driver's
side of the line protocol (:mod:`tracekit.real_engine.serve`); not the engine, so refactors of
``tracekit.engine`` do not reach it. It reads scenarios (one JSON object a line, see
:mod:`tracekit.sglang.protocol`) from standard input, runs each on fresh SGLang objects, and
writes its records as JSON lines on the original standard output (everything else that writes
there, SGLang's logging included, goes to standard error).

What is real and what is reproduced
-----------------------------------
Real SGLang objects, built with no model, no weights and no GPU: ``ServerArgs`` published with
``set_global_server_args_for_scheduler``, ``ModelConfig.from_server_args`` on a config-only model
folder, ``ReqToTokenPool``, a tiny ``MHATokenToKVPool`` (1 layer, 1 head of size 1) behind
``TokenToKVPoolAllocator``, the radix cache SGLang builds by default (``UnifiedRadixCache``, as
``mem_cache/registry.py`` ``default_radix_cache_factory`` does, disabled for
``--disable-radix-cache``), ``Req``, ``ScheduleBatch.init_new``, ``SchedulePolicy``, a fresh
``PrefillAdder`` each step and ``NewTokenRatioTracker``. Every admission, memory check,
retraction, prefix match and cache insertion is SGLang's own method.

Reproduced (``Scheduler.__init__`` needs a model runner): the glue of the scheduler's
non-overlap event loop, method by method from ``srt/managers/scheduler.py`` of 0.5.23, with the
features this recorder leaves off (overlap, speculative decoding, disaggregation, DP attention,
LoRA, HiCache, mamba/SWA, dLLM, grammars, mixed chunk, priority preemption) removed. Each
function below names the SGLang function it follows. Model outputs are fake: one token per
request per step that completes its prefill or decodes; the token is the end-of-sequence token
when the request reaches its target output length, so SGLang's own ``Req.update_finish_state``
finishes it (``max_new_tokens`` is the request's ``max_tokens``).
"""

from __future__ import annotations

import argparse
import collections
import importlib.abc
import importlib.machinery
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from tracekit.real_engine.serve import Emit, serve_scenarios
from tracekit.recording.tiny_model import write_tiny_model

__all__ = ["PROTOCOL_VERSION", "SglangBackend", "main", "prompt_token_ids", "run_scenario"]

#: Must equal :data:`tracekit.sglang.protocol.PROTOCOL_VERSION` (a test checks it).
PROTOCOL_VERSION = 2

EOS_TOKEN = 2  # sampled at the target output length
SAMPLED_TOKEN = 5  # every other sampled token
#: Tokens of one Mooncake prefix block (``hash_ids``: 512 tokens a block).
HASH_BLOCK_TOKENS = 512
_HASH_BASE = 1 << 33  # block h holds _HASH_BASE + h * 512 + j, j in 0..511
_UNIQUE_BASE = 1 << 45  # request i's own tokens: _UNIQUE_BASE + i * 2**24 + j


def prompt_token_ids(
    input_index: int, prompt_tokens: int, prefix_hash_ids: list[int] | None
) -> list[int]:
    """The prompt's token ids: shared Mooncake blocks first, then tokens of the request's own.

    Block ``h`` of ``prefix_hash_ids`` is 512 tokens that depend only on ``h``, so requests with
    equal leading hash ids share a prompt prefix token for token (a radix-cache hit), and two
    different blocks differ from their first token. Positions past the blocks (or every position
    without hash ids) are unique to the request. Token ids are 64-bit integers above the
    vocabulary: the radix tree keys on them, and nothing embeds them.
    """
    ids: list[int] = []
    for h in prefix_hash_ids or ():
        if len(ids) >= prompt_tokens:
            break
        start = _HASH_BASE + int(h) * HASH_BLOCK_TOKENS
        ids.extend(range(start, start + HASH_BLOCK_TOKENS))
    del ids[prompt_tokens:]
    own = _UNIQUE_BASE + input_index * (1 << 24)
    ids.extend(range(own + len(ids), own + prompt_tokens))
    return ids


# --------------------------------------------------------------------------------------------
# Import-time set-up: torchvision stub and standard output.


class _StubModule(types.ModuleType):
    """A module whose every attribute is another stub (callable, usable as a decorator)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        child = _StubModule(f"{self.__name__}.{name}")
        setattr(self, name, child)
        return child

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _StubModule(f"{self.__name__}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``import torchvision`` (and its submodules) with stubs.

    ``sglang.srt.configs`` imports torchvision at module level (``deepseek_ocr.py``,
    ``multimodal/internvl_utils.py``) for vision models this recorder never builds. PyPI's
    torchvision is a CUDA build that fails beside the CPU torch, so none is installed.
    """

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _install_torchvision_stub() -> None:
    # transformers decides once, when its import_utils is first imported, whether torchvision is
    # available; import it before the stub exists so that it says no (it would otherwise parse
    # the stub's version).
    import transformers.utils.import_utils  # noqa: F401

    if not any(isinstance(f, _TorchvisionStub) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionStub())


# --------------------------------------------------------------------------------------------
# SGLang's objects.


class SglangBackend:
    """SGLang's classes, imported once (about 15 s), and builders of fresh scheduling state."""

    def __init__(self, model_dir: Path) -> None:
        t0 = time.perf_counter()
        _install_torchvision_stub()
        import sglang
        import torch
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.managers import schedule_batch, schedule_policy
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
            NewTokenRatioTracker,
        )
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.import_s = time.perf_counter() - t0
        self.torch = torch
        self.version = str(sglang.__version__)
        self.torch_version = str(torch.__version__)
        self.ModelConfig = ModelConfig
        self.Req = schedule_batch.Req
        self.ScheduleBatch = schedule_batch.ScheduleBatch
        self.SchedulePolicy = schedule_policy.SchedulePolicy
        self.PrefillAdder = schedule_policy.PrefillAdder
        self.AddReqResult = schedule_policy.AddReqResult
        self.NewTokenRatioTracker = NewTokenRatioTracker
        self.TokenToKVPoolAllocator = TokenToKVPoolAllocator
        self.CacheInitParams = CacheInitParams
        self.release_kv_cache = release_kv_cache
        self.checkpoint_kv_cache = checkpoint_kv_cache
        self.MHATokenToKVPool = MHATokenToKVPool
        self.ReqToTokenPool = ReqToTokenPool
        self.ComponentType = ComponentType
        self.UnifiedRadixCache = UnifiedRadixCache
        self.SamplingParams = SamplingParams
        self.ServerArgs = ServerArgs
        self.set_global_server_args_for_scheduler = set_global_server_args_for_scheduler
        self.SpeculativeAlgorithm = SpeculativeAlgorithm
        self.model_dir = write_tiny_model(model_dir)


# --------------------------------------------------------------------------------------------
# One scenario.


class _Run:
    """The state of one run: SGLang's objects and the scheduler fields the loop reads.

    Follows the parts of ``Scheduler.__init__`` (``scheduler.py``) that the loop below uses:
    ``init_memory_pool_and_cache`` (pools, allocator, tree cache), ``self.policy =
    SchedulePolicy(...)``, ``self.new_token_ratio_tracker = NewTokenRatioTracker.from_config()``,
    ``self.waiting_queue = []``, ``self.running_batch = ScheduleBatch(reqs=[],
    batch_is_full=False)``, ``self.chunked_req = None``, ``self.last_batch = None``.
    """

    def __init__(self, sg: SglangBackend, config: dict[str, Any]) -> None:
        self.sg = sg
        self.config = config
        torch = sg.torch
        self.kv_tokens = int(config["kv_tokens"])
        self.max_running_requests = int(config["max_running_requests"])
        # 0 (or None) is --chunked-prefill-size -1: PrefillAdder's rem_chunk_tokens is None.
        chunk = config.get("chunked_prefill_size")
        self.chunked_prefill_size = int(chunk) if chunk else None
        self.max_prefill_tokens = int(config["max_prefill_tokens"])
        self.max_context_len = int(config["max_context_len"])
        # TpModelWorker.get_worker_info: the longest request and the longest prompt (a prompt
        # of max_req_input_len tokens or more is refused, validate_input_length).
        self.max_req_len = min(self.max_context_len - 1, self.kv_tokens - 1)
        self.max_req_input_len = self.max_req_len - 5
        # Scheduler.__init__: the priority options as SGLang reads them (get_schedule()), and
        # init_schedule_policy: enable_priority_preemption.
        self.enable_priority_scheduling = bool(config["enable_priority_scheduling"])
        self.schedule_low_priority_values_first = bool(config["schedule_low_priority_values_first"])
        self.priority_scheduling_preemption_threshold = int(
            config["priority_scheduling_preemption_threshold"]
        )
        self.enable_priority_preemption = self.enable_priority_scheduling and not bool(
            config["disable_priority_preemption"]
        )
        # event_loop_overlap (SGLang's default) or event_loop_normal (--disable-overlap-schedule).
        self.enable_overlap = bool(config["overlap_schedule"])
        server_args = sg.ServerArgs(
            model_path=str(sg.model_dir),
            device="cpu",
            attention_backend="torch_native",
            skip_tokenizer_init=True,
            page_size=1,
            disable_radix_cache=not config["radix_cache"],
            retraction_policy=config["retraction_policy"],
            schedule_policy=config["schedule_policy"],
            chunked_prefill_size=(
                -1 if self.chunked_prefill_size is None else self.chunked_prefill_size
            ),
            max_prefill_tokens=self.max_prefill_tokens,
            max_running_requests=self.max_running_requests,
            context_length=self.max_context_len,
            # (--retraction-policy priority requires --enable-priority-scheduling:
            # arg_groups/validation_hook.py checks it when ServerArgs resolves.)
            enable_priority_scheduling=self.enable_priority_scheduling,
            disable_priority_preemption=bool(config["disable_priority_preemption"]),
            schedule_low_priority_values_first=self.schedule_low_priority_values_first,
            priority_scheduling_preemption_threshold=(
                self.priority_scheduling_preemption_threshold
            ),
            # The loop is this driver's (below); the flag is what ScheduleBatch objects read.
            disable_overlap_schedule=not self.enable_overlap,
        )
        sg.set_global_server_args_for_scheduler(server_args)
        self.server_args = server_args
        self.model_config = sg.ModelConfig.from_server_args(server_args)
        # Scheduler.init_memory_pool_and_cache: one request row more than max_running_requests
        # (the chunked request's), as the model runner sizes req_to_token_pool.
        self.req_to_token_pool = sg.ReqToTokenPool(
            size=self.max_running_requests + 1,
            max_context_len=self.max_context_len + 4,
            device="cpu",
            enable_memory_saver=False,
        )
        kv_pool = sg.MHATokenToKVPool(
            size=self.kv_tokens,
            page_size=1,
            dtype=torch.float32,
            head_num=1,
            head_dim=1,
            layer_num=1,
            device="cpu",
            enable_memory_saver=False,
        )
        self.allocator = sg.TokenToKVPoolAllocator(
            size=self.kv_tokens,
            dtype=torch.float32,
            device="cpu",
            kvcache=kv_pool,
            need_sort=False,
        )
        # mem_cache/registry.py default_radix_cache_factory -> create_unified_radix_cache: a
        # UnifiedRadixCache with the FULL component, disabled under --disable-radix-cache.
        params = sg.CacheInitParams(
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=1,
            disable=not config["radix_cache"],
        )
        params.tree_components = (sg.ComponentType.FULL,)
        self.tree_cache = sg.UnifiedRadixCache(params)
        self.policy = sg.SchedulePolicy(
            config["schedule_policy"],
            self.tree_cache,
            False,  # enable_hierarchical_cache
            self.enable_priority_scheduling,
            self.schedule_low_priority_values_first,
        )
        self.ratio = sg.NewTokenRatioTracker.from_config()
        self.waiting_queue: list[Any] = []
        self.entry_counter = 0
        self.running_batch = sg.ScheduleBatch(reqs=[], batch_is_full=False)
        self.chunked_req: Any = None
        self.last_batch: Any = None
        self.spec_algorithm = sg.SpeculativeAlgorithm.NONE
        # event_loop_overlap: enable_skip_finishing_decode and the result queue of
        # (batch copy, step index) not yet processed (the step stands for the forward's result).
        self.enable_skip_finishing_decode = self.enable_overlap
        self.result_queue: collections.deque[tuple[Any, int]] = collections.deque()
        # Per-step observations (reset by the loop).
        self.retractions: list[dict[str, Any]] = []
        self.admission: dict[str, Any] | None = None
        self.continued_chunk: str | None = None
        self.aborted: list[Any] = []  # requests retract_decode aborted in this step
        # Running requests preempted at admission, with the KV tokens each held.
        self.preempted: list[tuple[Any, int]] = []
        # Wall and thread CPU time spent building those records inside the timed loop, taken
        # out of loop_s / loop_cpu_s (SGLang's own work is what they measure).
        self.untimed_s = 0.0
        self.untimed_cpu_s = 0.0

    def pause(self) -> tuple[float, float]:
        """Start a stretch of the recorder's own work inside the timed loop."""
        return time.perf_counter(), time.thread_time()

    def resume(self, paused: tuple[float, float]) -> None:
        """End it: its time is not SGLang's."""
        self.untimed_s += time.perf_counter() - paused[0]
        self.untimed_cpu_s += time.thread_time() - paused[1]

    # ---- scheduler.py: _add_request_to_queue ------------------------------------------------

    def add_request_to_queue(self, req: Any) -> None:
        """``Scheduler._add_request_to_queue`` (no disaggregation): append, stamp the entry time.

        SGLang stamps ``time_stats.wait_queue_entry_time`` with ``time.perf_counter()``; with
        ``--enable-priority-scheduling`` FCFS sorts the queue by ``(priority, that time)``
        (``SchedulePolicy._sort_by_priority_and_fcfs``). The stamp here is a counter: the same
        order as the wall clock, without its ties, and the same in every run.
        """
        self.entry_counter += 1
        req.time_stats.set_wait_queue_entry_time(float(self.entry_counter))
        self.waiting_queue.append(req)

    # ---- scheduler.py: get_next_batch_to_run ------------------------------------------------

    def get_next_batch_to_run(self) -> Any:
        """``Scheduler.get_next_batch_to_run`` (non-overlap, no dLLM/HiSparse/DP attention)."""
        reqs_to_exclude = []
        if self.chunked_req is not None:
            # Move the chunked request out of the batch so that only finished prefills merge.
            reqs_to_exclude.append(self.chunked_req)
            # stash_chunked_request -> checkpoint_kv_cache: keep the chunk's KV (in the tree)
            # so that the next round continues from it.
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                self.sg.checkpoint_kv_cache(self.chunked_req, self.tree_cache)
        last_batch = self.last_batch
        if last_batch is not None and last_batch.forward_mode.is_extend():
            if last_batch.chunked_req is not None:
                reqs_to_exclude.append(last_batch.chunked_req)
            last_bs = last_batch.batch_size()
            last_batch.filter_batch(reqs_to_exclude=reqs_to_exclude)
            if last_batch.batch_size() < last_bs:
                self.running_batch.batch_is_full = False
            # Merge the new batch into the running batch.
            if not last_batch.is_empty() and last_batch is not self.running_batch:
                if self.running_batch.is_empty():
                    self.running_batch = last_batch
                else:
                    self.running_batch.merge_batch(last_batch)
        running_bs = self.running_batch.batch_size()
        self.running_batch.filter_batch()
        if self.running_batch.batch_size() < running_bs:
            self.running_batch.batch_is_full = False

        new_batch = self.get_new_batch_prefill()
        if new_batch is not None:
            return new_batch  # run prefill first if possible
        if not self.running_batch.is_empty():
            decode_batch = self.update_running_batch(self.running_batch)
            if decode_batch is not None and not decode_batch.is_empty():
                return decode_batch
        return None

    # ---- scheduler.py: _get_new_batch_prefill_raw -------------------------------------------

    def get_num_allocatable_reqs(self, running_bs: int, num_held_rows: int = 0) -> int:
        """``Scheduler.get_num_allocatable_reqs`` (pp size 1, no beams)."""
        pp_budget = self.max_running_requests - running_bs
        row_budget = max(self.req_to_token_pool.available_size() + num_held_rows, 0)
        return min(pp_budget, row_budget)

    def get_new_batch_prefill(self) -> Any:
        """``Scheduler._get_new_batch_prefill_raw`` (no grammar, LoRA, HiCache, mamba, mixed)."""
        sg = self.sg
        running_batch = self.running_batch
        if self.enable_priority_preemption:
            # Reset batch_is_full to try preemption with a prefill adder.
            running_batch.batch_is_full = False
        if running_batch.is_empty():
            running_batch.batch_is_full = False
        if (
            running_batch.batch_is_full or len(self.waiting_queue) == 0
        ) and self.chunked_req is None:
            return None
        running_bs = len(running_batch.reqs)
        if (
            self.get_num_allocatable_reqs(running_bs) <= 0
            and self.chunked_req is None
            and not self.enable_priority_preemption
        ):
            running_batch.batch_is_full = True
            return None
        # Get priority queue (SchedulePolicy.calc_priority: FCFS keeps order, or sorts by
        # priority then entry time with priority scheduling; LPM sorts by the longest prefix
        # match in the tree). processed_tokens only feeds HRRN, which is not offered.
        self.policy.calc_priority(self.waiting_queue, running_batch, processed_tokens=0)
        adder = sg.PrefillAdder(
            1,  # page_size
            self.tree_cache,
            self.allocator,
            running_batch,
            self.ratio.current,
            self.max_prefill_tokens,
            self.chunked_prefill_size,
            0,  # num_mixed_decode_tokens (mixed chunk off)
            self.priority_scheduling_preemption_threshold,
            max_prefill_bs=0,
            max_running_requests=self.max_running_requests,
            prefill_max_requests=None,
            prefill_delayer_single_pass=None,
            dllm_config=None,
            waiting_queue_len=len(self.waiting_queue),
            prefill_tile_block_m=64,  # the fallback for non-Triton attention backends
        )
        self.continued_chunk = None if self.chunked_req is None else self.chunked_req.rid
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            adder.chunked_req_limit = self.policy.shortest_prefill_chunk_limit(
                self.chunked_req, self.waiting_queue, adder.rem_chunk_tokens or 0, 1
            )
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        stop_reason = None
        for req in self.waiting_queue:
            if adder.budget_state() == sg.AddReqResult.OTHER:
                stop_reason = "budget"
                break
            running_bs = len(running_batch.reqs)
            num_held_rows = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= self.get_num_allocatable_reqs(running_bs, num_held_rows):
                running_batch.batch_is_full = True
            if running_batch.batch_is_full:
                if not self.enable_priority_preemption:
                    stop_reason = "batch_full"
                    break
                paused = self.pause()
                before = len(adder.preempt_list)
                held = {r.rid: int(r.kv.kv_committed_len) for r in running_batch.reqs}
                self.resume(paused)
                if not adder.preempt_to_schedule(req):
                    stop_reason = "batch_full"
                    break
                # preempt_list is extended from a set: record the order it holds, and the KV
                # each victim gave back.
                paused = self.pause()
                self.preempted.extend((r, held[r.rid]) for r in adder.preempt_list[before:])
                self.resume(paused)
            req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(
                req,
                has_chunked_req=(self.chunked_req is not None),
                truncation_align_size=None,  # Scheduler: None for a plain Llama
            )
            if res != sg.AddReqResult.CONTINUE:
                if res == sg.AddReqResult.NO_TOKEN:
                    running_batch.batch_is_full = len(adder.can_run_list) > 0 or (
                        not running_batch.is_empty()
                    )
                stop_reason = res.name.lower()
                break
        can_run_list = adder.can_run_list
        paused = self.pause()
        self.admission = {
            "stop": stop_reason,
            "new_token_ratio": self.ratio.current,
            "waiting_order": [r.rid for r in self.waiting_queue],
        }
        self.resume(paused)
        if len(can_run_list) == 0:
            # Preemption already released these requests; requeue them even though the
            # request they made room for was not admitted.
            for req in adder.preempt_list:
                self.add_request_to_queue(req)
            return None
        can_run_set = set(can_run_list)
        self.waiting_queue = [x for x in self.waiting_queue if x not in can_run_set]
        for req in adder.preempt_list:
            self.add_request_to_queue(req)
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        new_batch = sg.ScheduleBatch.init_new(
            can_run_list,
            self.req_to_token_pool,
            self.allocator,
            self.tree_cache,
            self.model_config,
            self.enable_overlap,
            self.spec_algorithm,
            chunked_req=self.chunked_req,
        )
        new_batch.prepare_for_extend()
        new_batch.decoding_reqs = None
        return new_batch

    # ---- scheduler.py: update_running_batch -------------------------------------------------

    def reqs_finishing_inflight(self, batch: Any) -> list[Any]:
        """``Scheduler._reqs_finishing_inflight``: the queued result commits their last output.

        Only under overlap (``enable_skip_finishing_decode``), with the one unprocessed result.
        """
        if not self.enable_skip_finishing_decode or not self.result_queue:
            return []
        assert len(self.result_queue) == 1
        queued_reqs = set(self.result_queue[0][0].reqs)
        return [
            req
            for req in batch.reqs
            if req in queued_reqs
            and req.beam_group is None
            and req.next_output_finishes_by_length()
        ]

    def update_running_batch(self, batch: Any) -> Any:
        """``Scheduler.update_running_batch``: None skips decode this step."""
        initial_bs = batch.batch_size()
        finishing_reqs = self.reqs_finishing_inflight(batch)
        batch.filter_batch(reqs_to_exclude=finishing_reqs)
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        kv_full_retract_flag = not batch.check_decode_mem()
        if kv_full_retract_flag and finishing_reqs:
            # The queued result frees the finishing requests' KV at the end of this step;
            # decode the rest next step instead of retracting them.
            batch.batch_is_full = False
            return None
        if kv_full_retract_flag:
            # ScheduleBatch.retract_decode picks its victims in _get_decode_retraction_order;
            # record the candidate batch and that order before it runs.
            paused = self.pause()
            candidates = [_req_view(r) for r in batch.reqs]
            order = [batch.reqs[i].rid for i in batch._get_decode_retraction_order(batch.reqs)]
            self.resume(paused)
            old_available = self.allocator.available_size()
            old_ratio = self.ratio.current
            retracted, new_ratio, to_abort = batch.retract_decode()
            self.ratio.current = new_ratio
            # _add_request_to_queue(req, is_retracted=True): waiting_queue.append.
            positions = []
            for req in retracted:
                self.add_request_to_queue(req)
                positions.append(len(self.waiting_queue) - 1)
            paused = self.pause()
            self.retractions.append(
                {
                    "candidates": candidates,
                    "keep_order": order,
                    "victims": [r.rid for r in retracted],
                    "aborted": [r.rid for r in to_abort],
                    "kept": [r.rid for r in batch.reqs],
                    "new_token_ratio_before": old_ratio,
                    "new_token_ratio_after": new_ratio,
                    "free_tokens_before": old_available,
                    "tokens_gained": self.allocator.available_size() - old_available,
                    "waiting_positions": positions,
                    "waiting_len": len(self.waiting_queue),
                }
            )
            self.resume(paused)
            # Scheduler.send_abort_output: the request ends (its KV is already released).
            self.aborted.extend(to_abort)
        else:
            self.ratio.decay_step()
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return batch
        batch.prepare_for_decode()
        return batch

    # ---- batch_result_processor.py: process_batch_result_prefill / _decode -------------------

    def process_batch_result(self, batch: Any, targets: dict[str, int]) -> list[Any]:
        """Fake outputs, then ``process_batch_result_prefill`` / ``_decode``'s bookkeeping.

        Returns the requests that finished.
        """
        finished = []
        if batch.forward_mode.is_extend():
            for req in batch.reqs:
                if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                    # A retracted request (overlap: retracted after this batch launched).
                    continue
                if req.inflight_middle_chunks <= 0:
                    req.output_ids.append(self._next_token(req, targets))
                    req.update_finish_state()
                    if req.finished():
                        self.sg.release_kv_cache(req, self.tree_cache, checkpoint=True)
                        finished.append(req)
                    else:
                        # checkpoint_kv_cache: cache_unfinished_req (insert into the tree).
                        self.sg.checkpoint_kv_cache(req, self.tree_cache)
                else:
                    # A chunked request's prefill is not finished.
                    req.inflight_middle_chunks -= 1
        else:
            for req in batch.reqs:
                if req.finished() or req.is_retracted:
                    # Overlap only: finished or retracted after this batch launched; the
                    # over-allocated token is freed with the request's KV.
                    continue
                req.output_ids.append(self._next_token(req, targets))
                req.update_finish_state(1)
                if req.finished():
                    # _handle_finish_state_updated_req -> release_kv_cache.
                    self.sg.release_kv_cache(req, self.tree_cache, checkpoint=True)
                    finished.append(req)
        return finished

    @staticmethod
    def _next_token(req: Any, targets: dict[str, int]) -> int:
        return EOS_TOKEN if len(req.output_ids) + 1 >= targets[req.rid] else SAMPLED_TOKEN

    def on_idle(self) -> None:
        """``Scheduler.on_idle``: reset ``new_token_ratio`` when fully idle."""
        if (
            self.running_batch.is_empty()
            and self.chunked_req is None
            and (self.last_batch is None or self.last_batch.is_empty())
        ):
            self.ratio.reset()


def _req_view(req: Any) -> list[Any]:
    """A candidate: ``[rid, prompt, outputs, priority, retractions, KV tokens committed]``."""
    return [
        req.rid,
        len(req.origin_input_ids),
        len(req.output_ids),
        req.priority,
        req.retraction_count,
        int(req.kv.kv_committed_len),
    ]


def run_scenario(sg: SglangBackend, scenario: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """Run one scenario on fresh SGLang objects; emit its ``step`` and ``request`` records.

    Arrivals follow the embedded engine's steps clock: a request arriving at ``arrival_s`` joins
    the waiting queue (``Scheduler._add_request_to_queue``: appended) before the first step whose
    index is at least ``arrival_s / step_s``, in arrival order (ties in input order). Each loop
    iteration that runs a batch takes one step index; one that runs none takes none. When
    nothing runs, waits, is chunked or is in flight, the step index jumps to the next arrival;
    two iterations in a row at one step index that run nothing mean nothing can run before the
    next arrival either. The loop is ``Scheduler.event_loop_overlap`` (the default) or
    ``event_loop_normal`` (``overlap_schedule`` false). Returns the ``end`` message's payload.
    """
    t0 = time.perf_counter()
    config = scenario["config"]
    run = _Run(sg, config)
    setup_s = time.perf_counter() - t0
    step_s = float(config["step_s"])
    max_steps = int(config.get("max_steps") or 10_000_000)
    rows = sorted(enumerate(scenario["requests"]), key=lambda x: (float(x[1][1]), x[0]))
    pending = iter(rows)
    upcoming = next(pending, None)
    targets: dict[str, int] = {}
    info: dict[str, dict[str, Any]] = {}
    step = 0
    num_steps = 0
    loop_s = 0.0
    # CPU time of this thread over the same spans: what a loaded machine leaves comparable.
    loop_cpu_s = 0.0
    # The step records' time between those spans (the recorder's, not SGLang's).
    step_record_s = step_record_cpu_s = 0.0
    total = len(rows)
    done = 0
    carried: list[str] = []  # arrivals not yet reported with a step
    stalled_at = -1

    def report(finished: list[Any], finish_step: int) -> None:
        nonlocal done
        for req in finished:
            done += 1
            emit(
                {
                    "kind": "request",
                    "run": scenario["run"],
                    "request_id": req.rid,
                    "arrival_step": info[req.rid]["arrival_step"],
                    "first_step": info[req.rid]["first_step"],
                    "first_token_step": info[req.rid]["first_token_step"],
                    # The step whose result finished it (under overlap, processed one
                    # iteration later).
                    "finish_step": finish_step,
                    "output_tokens": len(req.output_ids),
                    # FINISH_MATCHED_TOKEN, FINISH_LENGTH, or FINISH_ABORT (retract_decode
                    # aborts a last request that cannot fit, setting to_finish).
                    "finish_reason": type(req.finished_reason or req.to_finish).__name__,
                    "retractions": req.retraction_count,
                }
            )

    def first_tokens(batch: Any, batch_step: int) -> None:
        """Note the step of each request's first output (after ``process_batch_result``)."""
        for req in batch.reqs:
            if req.output_ids and info[req.rid]["first_token_step"] is None:
                info[req.rid]["first_token_step"] = batch_step

    while done < total:
        if step >= max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
        # Arrivals: Scheduler.ingest_requests -> handle_generate_request -> _add_request_to_queue.
        arrived = []
        while upcoming is not None and _first_step(float(upcoming[1][1]), step_s) <= step:
            index, row = upcoming
            rid, _arrival, prompt, output, max_tokens, priority, hashes = row[:7]
            ignore_eos = bool(row[7]) if len(row) > 7 else False
            upcoming = next(pending, None)
            if int(prompt) >= run.max_req_input_len:
                # Scheduler.handle_generate_request -> validate_input_length aborts it. (SGLang
                # then queues it as a one-token request that finishes, aborted, at its first
                # prefill; here it leaves at once, as in the engine: docs/sglang-recorder.md,
                # "Limits".)
                done += 1
                emit(
                    {
                        "kind": "request",
                        "run": scenario["run"],
                        "request_id": rid,
                        "arrival_step": step,
                        "first_step": None,
                        "first_token_step": None,
                        "finish_step": step,
                        "output_tokens": 0,
                        "finish_reason": "rejected",
                        "retractions": 0,
                    }
                )
                continue
            req = _make_req(sg, run, index, rid, prompt, max_tokens, priority, hashes, ignore_eos)
            targets[rid] = int(output)
            info[rid] = {
                "arrival_step": step,
                "retractions": 0,
                "first_step": None,
                "first_token_step": None,
            }
            run.add_request_to_queue(req)
            arrived.append(rid)
        idle = (
            not run.waiting_queue
            and run.running_batch.is_empty()
            and run.chunked_req is None
            and (run.last_batch is None or run.last_batch.is_empty())
        )
        if idle and upcoming is not None:
            step = max(step + 1, _first_step(float(upcoming[1][1]), step_s))
            continue
        carried.extend(arrived)
        run.retractions = []
        run.admission = None
        run.continued_chunk = None
        run.aborted = []
        run.preempted = []
        free_before = run.allocator.available_size()
        evictable_before = _evictable(run)
        t, t_cpu = time.perf_counter(), time.thread_time()
        batch = run.get_next_batch_to_run()
        # (The step record is the recorder's work, not SGLang's: out of the timed loop.)
        loop_s += time.perf_counter() - t
        loop_cpu_s += time.thread_time() - t_cpu
        t, t_cpu = time.perf_counter(), time.thread_time()
        record: dict[str, Any] | None = None
        if batch is not None:
            record = {
                "kind": "step",
                "run": scenario["run"],
                "step": step,
                "arrived": carried,
                "free_tokens_before": free_before,
                "evictable_tokens_before": evictable_before,
            }
            carried = []
            # The step as scheduled (after admission and retraction, before outputs).
            record["free_tokens"] = run.allocator.available_size()
            record["evictable_tokens"] = _evictable(run)
            record["running"] = [r.rid for r in run.running_batch.reqs]
            record.update(_describe_batch(run, batch))
        finished = list(run.aborted)
        finish_step = step
        processed: tuple[Any, int] | None = None
        step_record_s += time.perf_counter() - t
        step_record_cpu_s += time.thread_time() - t_cpu
        t, t_cpu = time.perf_counter(), time.thread_time()
        if run.enable_overlap:
            # Scheduler.event_loop_overlap: launch this batch (a copy queued for its result),
            # then process the last batch's result; on_idle only when neither exists.
            # (SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP is off, no grammar: overlap is never
            # disabled for a batch.)
            if batch is not None:
                run.result_queue.append((batch.copy(), step))
            if run.last_batch is not None:
                done_batch, finish_step = run.result_queue.popleft()
                finished += run.process_batch_result(done_batch, targets)
                processed = (done_batch, finish_step)
            elif batch is None:
                run.on_idle()
        elif batch is not None:
            # Scheduler.event_loop_normal: run the batch and process its result.
            finished += run.process_batch_result(batch, targets)
            processed = (batch, step)
        else:
            # event_loop_normal with no batch -> on_idle.
            run.on_idle()
        run.last_batch = batch
        loop_s += time.perf_counter() - t
        loop_cpu_s += time.thread_time() - t_cpu
        if processed is not None:
            first_tokens(*processed)
        if record is None:
            # An iteration that runs no batch takes no step index; twice in a row at one step
            # means nothing can run before the next arrival.
            report(finished, finish_step)
            if stalled_at == step and done < total:
                if upcoming is None:
                    raise RuntimeError(
                        "requests can never be scheduled (too large for the KV pool?): "
                        + ", ".join(r.rid for r in run.waiting_queue)
                    )
                step = max(step + 1, _first_step(float(upcoming[1][1]), step_s))
            stalled_at = step
            continue
        stalled_at = -1
        record["retractions"] = run.retractions
        record["preempted"] = [[r.rid, kv] for r, kv in run.preempted]
        record["admission"] = run.admission
        record["new_token_ratio"] = run.ratio.current
        record["waiting"] = [r.rid for r in run.waiting_queue]
        record["chunked"] = None if run.chunked_req is None else run.chunked_req.rid
        record["free_tokens_after"] = run.allocator.available_size()
        record["finished"] = [r.rid for r in finished]
        for retraction in run.retractions:
            for rid in retraction["victims"]:
                info[rid]["retractions"] += 1
        for entry in record["reqs"]:
            if info[entry[0]]["first_step"] is None:
                info[entry[0]]["first_step"] = step
        emit(record)
        # (retract_decode's aborts finish in this step; the processed result's in its own.)
        report(list(run.aborted), step)
        report(finished[len(run.aborted) :], finish_step)
        num_steps += 1
        step += 1
    return {
        "num_steps": num_steps,
        "end_step": step,
        "sglang_config": _describe_config(run),
        "timing": {
            "setup_s": setup_s,
            # SGLang's own work in the loop (the recorder's records inside it taken out), and
            # those records' time.
            "loop_s": loop_s - run.untimed_s,
            "loop_cpu_s": loop_cpu_s - run.untimed_cpu_s,
            "recorder_s": run.untimed_s + step_record_s,
            "recorder_cpu_s": run.untimed_cpu_s + step_record_cpu_s,
            "wall_s": time.perf_counter() - t0,
        },
    }


def _first_step(arrival_s: float, step_s: float) -> int:
    """The first step that sees an arrival: ``StepsClock.visible_step``'s expression, to the bit.

    (A tolerance here once put an arrival a float's noise past a step's start, such as a
    windowed trace's 20.050000000000068 s, one step earlier than the engine does.)
    """
    return math.ceil(arrival_s / step_s)


def _evictable(run: _Run) -> int:
    size = getattr(run.tree_cache, "evictable_size", None)
    try:
        return int(size()) if callable(size) else 0
    except Exception:
        return 0


def _make_req(
    sg: SglangBackend,
    run: _Run,
    index: int,
    rid: str,
    prompt: int,
    max_tokens: int,
    priority: int,
    hashes: list[int] | None,
    ignore_eos: bool = False,
) -> Any:
    """A ``Req`` as ``Scheduler.handle_generate_request`` builds it (no tokenizer, no stream).

    ``ignore_eos``: the sampling parameter (``bench_serving`` sends it by default): the end of
    sequence is ignored, the request runs to ``max_new_tokens``, and ``PrefillAdder`` reserves
    its whole remaining output.
    """
    from array import array

    params = sg.SamplingParams(max_new_tokens=int(max_tokens), ignore_eos=bool(ignore_eos))
    params.normalize(None)
    req = sg.Req(
        rid,
        "",
        array("q", prompt_token_ids(index, int(prompt), hashes)),
        params,
        eos_token_ids={EOS_TOKEN},
        vocab_size=None,
        priority=int(priority),
    )
    req.tokenizer = None
    # Scheduler.handle_generate_request -> init_req_max_new_tokens: clip max_new_tokens so
    # that input + output fit the longest request, then the empty pool (the allocator's own
    # max_new_tokens_for_memory).
    input_len = len(req.origin_input_ids)
    max_new = max(0, min(params.max_new_tokens, run.max_req_len - input_len - 1))
    max_new = run.allocator.max_new_tokens_for_memory(
        input_len,
        max_new,
        token_capacity=run.kv_tokens,
        sliding_window_size=None,
        chunk_size=run.chunked_prefill_size,
    )
    params.max_new_tokens = max(0, max_new)
    return req


def _describe_batch(run: _Run, batch: Any) -> dict[str, Any]:
    """What the step runs: ``[rid, new tokens, cached prefix tokens, output tokens]`` each."""
    if batch.forward_mode.is_extend():
        # ScheduleBatch.prepare_for_extend sets extend_lens and prefix_lens: a radix-cache hit,
        # or the request's own earlier chunks when it continues a chunked prefill (last field 1).
        reqs = [
            [r.rid, int(extend), int(prefix), len(r.output_ids), int(r.rid == run.continued_chunk)]
            for r, extend, prefix in zip(
                batch.reqs, batch.extend_lens, batch.prefix_lens, strict=True
            )
        ]
        return {"mode": "prefill", "reqs": reqs}
    return {"mode": "decode", "reqs": [[r.rid, 1, 0, len(r.output_ids), 0] for r in batch.reqs]}


def _describe_config(run: _Run) -> dict[str, Any]:
    sa = run.server_args
    return {
        "version": run.sg.version,
        "torch": run.sg.torch_version,
        "kv_tokens": run.kv_tokens,
        "max_running_requests": run.max_running_requests,
        "chunked_prefill_size": run.chunked_prefill_size,
        "max_prefill_tokens": run.max_prefill_tokens,
        "context_length": run.max_context_len,
        "radix_cache": not sa.disable_radix_cache,
        "tree_cache_class": type(run.tree_cache).__name__,
        "retraction_policy": sa.retraction_policy,
        "schedule_policy": sa.schedule_policy,
        "enable_priority_scheduling": sa.enable_priority_scheduling,
        "schedule_low_priority_values_first": sa.schedule_low_priority_values_first,
        "disable_priority_preemption": sa.disable_priority_preemption,
        "priority_scheduling_preemption_threshold": sa.priority_scheduling_preemption_threshold,
        "enable_priority_preemption": run.enable_priority_preemption,
        # The loop this driver runs (on a CPU SGLang itself would disable overlap).
        "event_loop": "overlap" if run.enable_overlap else "normal",
        "new_token_ratio": {"init": run.ratio.init, "min": run.ratio.min, "decay": run.ratio.decay},
        "retract_decode_steps": int(os.environ.get("SGLANG_RETRACT_DECODE_STEPS", "20")),
    }


# --------------------------------------------------------------------------------------------
# Process.


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tracekit.sglang.driver [--check | --scenarios FILE]``."""
    parser = argparse.ArgumentParser(prog="tracekit.sglang.driver")
    parser.add_argument("--scenarios", help="read scenarios from FILE instead of stdin")
    parser.add_argument("--check", action="store_true", help="import SGLang, build, and exit")
    parser.add_argument("--model-dir", help="folder for the config-only model")
    args = parser.parse_args(argv)
    model_dir = Path(args.model_dir or Path(tempfile.gettempdir()) / "bidkv-sglang-tiny-llama")

    def open_backend() -> tuple[SglangBackend, dict[str, Any]]:
        sg = SglangBackend(model_dir)
        return sg, {"sglang_version": sg.version, "torch_version": sg.torch_version}

    def run_one(sg: SglangBackend, scenario: dict[str, Any], emit: Emit) -> dict[str, Any]:
        return {"kind": "end", "run": scenario.get("run"), **run_scenario(sg, scenario, emit)}

    return serve_scenarios(
        args.scenarios,
        open_backend,
        run_one,
        protocol=PROTOCOL_VERSION,
        buffering=1,
        check=(lambda sg: _Run(sg, _CHECK_CONFIG)) if args.check else None,
    )


_CHECK_CONFIG = {
    "kv_tokens": 256,
    "max_running_requests": 4,
    "chunked_prefill_size": 64,
    "max_prefill_tokens": 256,
    "max_context_len": 256,
    "radix_cache": True,
    "retraction_policy": "priority",
    "schedule_policy": "fcfs",
    "overlap_schedule": True,
    "enable_priority_scheduling": True,
    "schedule_low_priority_values_first": False,
    "disable_priority_preemption": False,
    "priority_scheduling_preemption_threshold": 10,
    "step_s": 1.0,
}

if __name__ == "__main__":
    sys.exit(main())
