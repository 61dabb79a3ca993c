"""Experiment mode: the legacy BidKV adapter's scheduler hooks around the vLLM step.

The original BidKV experiments (docs/experiments.md, "Experiment mode in the engine") did not choose
victims through a policy contract: a monkey-patch of vLLM's ``Scheduler.schedule`` re-ordered the
queues and preempted requests itself before every call of the native ``schedule()``, whose own
FCFS preemption then took the tail of the (re-ordered) running queue. :class:`ExperimentHooks`
reproduces those hooks, and :class:`HookedVllmScheduler` calls them at the one point where the
patch ran: before each step, in this order:

1. **admission order**: every strategy but ``preempt-evict`` stable-sorts the waiting queue by
   prompt length (shortest first);
2. **priority cache**: every ``refresh_interval_s`` (3 s) of engine time since the last attempt,
   with at least 2 running, ``select_victims`` ranks the running requests; the i-th action gets
   priority ``i``, every other running request ``len(actions) + 100`` (skipped for PE/PE-SJF);
3. **proactive preemption** (static-random, largest-first): one victim, the first running request
   with the strictly smallest cached priority, when 5 s have passed since the last one, something
   waits, at least 3 run and KV usage is at least 0.90;
4. **SRPT preemption** (static-random, largest-first): the running request with the most
   remaining output (at least 10 outputs, fewer than 2 preemptions) when 1.5 s have passed since
   the last one, something waits, at least 3 run, KV usage is at least 0.80 and its remaining
   output is at least 1.2 times the cheapest waiting request's prompt plus ``max_tokens``;
5. **running order**: the running queue is stable-sorted by cached priority, highest first (an
   uncached request counts as +inf and goes to the front), so that vLLM's FCFS victim, the tail,
   is the most expendable; without a cache yet, by a keep score. ``bidkv`` re-orders only when the
   mean prompt of the running requests is at most 500 and KV usage is at least 0.95 (the
   original's ``BIDKV_KV_GATE``); PE/PE-SJF never re-order.

Then the native step runs unchanged. Proactive and SRPT preemptions go through the engine's one
preemption primitive (``VllmScheduler._preempt``) and are reported as decisions with outcome
``selected`` and ``decision_reason`` ``proactive`` / ``srpt`` (no requesting request); the native
step's preemptions keep outcome ``builtin``. As in vLLM, where the patch preempted outside
``schedule()``, a hook preemption does not stop that step from admitting waiting requests.

Deliberate differences, each documented in ``docs/experiments.md``: cooldowns and the refresh
interval run on engine time (the original used wall time, ``time.monotonic()``); "never fired
yet" is ``-inf`` (the original's 0.0 on a monotonic clock had the same effect); a strategy that
raises propagates (the original swallowed the exception and kept its stale cache); the
``static-random`` strategy is seeded per refresh from the run's seed. Reproduced on purpose: a
candidate's ``current_tokens`` is its prompt plus output so far, the length of the adapter's
tracked token list, which a preemption does not reset, and ``bidkv`` ranks at most 20
candidates (the original solver's ``max_bids_per_solve``; both in
docs/experiments.md, "Experiment mode in the engine").

:class:`HookedVllmScheduler` (:mod:`tracekit.experiment.scheduler`) is the scheduler that calls
these hooks. ``run_engine(..., scheduler_factory=hooks.make_scheduler)`` runs them; the engine
never imports either module.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from tracekit.defaults import LEGACY_STRATEGIES
from tracekit.engine.base import DecisionCallback
from tracekit.engine.config import EngineConfig
from tracekit.engine.hosts import BuiltinHost, VictimHost
from tracekit.engine.request import SchedulerRequest
from tracekit.experiment.scheduler import HookedVllmScheduler
from tracekit.strategies import CompressionAction, StaticRandomStrategy
from tracekit.strategies import LegacyRequest as StrategyRequest
from tracekit.strategies import legacy_strategy_registry as create_default_registry

__all__ = [
    "LEGACY_STRATEGIES",
    "STRATEGY_PLANS",
    "ExperimentHooks",
    "HookPlan",
    "HookSettings",
    "HookStats",
    "HookedVllmScheduler",
    "VictimStrategy",
    "keep_score",
]


#: Decision reasons of the hook preemptions (free text in the trace's decisions table).
PROACTIVE = "proactive"
SRPT = "srpt"


class VictimStrategy(Protocol):
    """A legacy ``select_victims`` strategy (``bidkv.legacy.baselines``)."""

    def select_victims(
        self, candidates: Sequence[StrategyRequest], needed_tokens: int, **kwargs: Any
    ) -> list[CompressionAction]:
        """Actions ordered from most to least expendable."""
        ...


@dataclass(frozen=True, slots=True)
class HookPlan:
    """Which hooks a strategy runs (the table of docs/experiments.md#experiment-mode-in-the-engine).

    Parameters
    ----------
    sjf_admission
        Sort the waiting queue by prompt length before every step.
    priority_cache
        Refresh the priority cache from ``select_victims``.
    proactive
        Run proactive preemption.
    srpt
        Run SRPT preemption.
    reorder
        Running-queue re-order: ``never``, ``always`` or ``gated`` (bidkv's prompt and KV gates).
    """

    sjf_admission: bool
    priority_cache: bool
    proactive: bool
    srpt: bool
    reorder: Literal["never", "always", "gated"]


#: Strategy name -> its hooks (the table of docs/experiments.md, "Experiment mode in the engine").
STRATEGY_PLANS: dict[str, HookPlan] = {
    "preempt-evict": HookPlan(False, False, False, False, "never"),
    "preempt-evict-sjf": HookPlan(True, False, False, False, "never"),
    "static-random": HookPlan(True, True, True, True, "always"),
    "largest-first": HookPlan(True, True, True, True, "always"),
    "bidkv": HookPlan(True, True, False, False, "gated"),
}


@dataclass(frozen=True, slots=True)
class HookSettings:
    """The hooks' constants; the defaults are the original's.

    See docs/experiments.md, "Experiment mode in the engine".

    Parameters
    ----------
    refresh_interval_s
        Engine seconds between two attempts to refresh the priority cache.
    proactive_cooldown_s, proactive_kv_threshold, proactive_min_running
        Proactive preemption: time since the last one, least KV usage, least running requests.
    srpt_cooldown_s, srpt_kv_threshold, srpt_min_running
        SRPT preemption: the same three gates.
    srpt_min_output_tokens, srpt_max_preemptions, srpt_gain
        SRPT victims have at least this many outputs and fewer than this many preemptions, and
        fire only when their remaining output is at least ``srpt_gain`` times the cheapest
        waiting request's prompt plus ``max_tokens``.
    bidkv_kv_gate, bidkv_max_mean_prompt
        ``bidkv`` re-orders the running queue only at KV usage >= ``bidkv_kv_gate``
        (``BIDKV_KV_GATE``) and mean running prompt <= ``bidkv_max_mean_prompt``.
    non_victim_offset
        Cached priority of running requests that ``select_victims`` did not return:
        ``len(actions) + non_victim_offset``.
    bidkv_ranked_cap
        Most ``bidkv`` actions kept per refresh: the original solver ranked only its top
        ``max_bids_per_solve = 20`` bids; ``None`` keeps the full ranking of our
        strategy.
    client_max_in_flight
        Not a hook: emulates the original client's thread pool (docs/experiments.md,
        "Summary figures"), which let at
        most this many requests be in the engine (arrived and unfinished) at once; later
        arrivals wait, first come first served, until one finishes. Latencies still count from
        the scheduled arrival. None (default) sends every request at its arrival time.
    """

    refresh_interval_s: float = 3.0
    proactive_cooldown_s: float = 5.0
    proactive_kv_threshold: float = 0.90
    proactive_min_running: int = 3
    srpt_cooldown_s: float = 1.5
    srpt_kv_threshold: float = 0.80
    srpt_min_running: int = 3
    srpt_min_output_tokens: int = 10
    srpt_max_preemptions: int = 2
    srpt_gain: float = 1.2
    bidkv_kv_gate: float = 0.95
    bidkv_max_mean_prompt: float = 500.0
    non_victim_offset: int = 100
    bidkv_ranked_cap: int | None = 20
    client_max_in_flight: int | None = None

    def __post_init__(self) -> None:
        cap = self.client_max_in_flight
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise ValueError(f"client_max_in_flight must be None or an integer >= 1; found {cap!r}")

    def as_dict(self) -> dict[str, Any]:
        """The settings as a JSON-compatible dictionary."""
        return asdict(self)


@dataclass(slots=True)
class HookStats:
    """What the hooks did in one run (adapter metrics and more; docs/experiments.md#recorded-runs).

    ``total_evictions`` and ``total_tokens_freed`` follow the adapter's ``record_eviction``:
    proactive preemptions count the victim's computed tokens, SRPT ones its remaining output.
    """

    schedule_calls: int = 0
    admission_sorts: int = 0
    refresh_attempts: int = 0
    cache_refreshes: int = 0
    proactive_preemptions: int = 0
    srpt_preemptions: int = 0
    cache_reorders: int = 0
    keep_score_reorders: int = 0
    total_evictions: int = 0
    total_tokens_freed: int = 0
    strategy_seeds: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The counters (without the per-refresh seeds) as a dictionary."""
        counters = asdict(self)
        counters["strategy_seeds_drawn"] = len(counters.pop("strategy_seeds"))
        return counters


def keep_score(request: SchedulerRequest) -> float:
    """The fallback keep score of a running request (higher = keep; running re-order).

    ``(0.1 + c²) · (computed + 1) / max(1, max_tokens - out) · (1 + 2P)`` where
    ``out = max(0, computed - prompt)`` and ``c = min(1, out / max_tokens)``.
    """
    computed = request.num_computed_tokens
    max_tokens = request.max_tokens
    output = max(0, computed - request.num_prompt_tokens)
    remaining = max(1, max_tokens - output)
    completion = min(1.0, output / max_tokens)
    return (
        (0.1 + completion * completion)
        * (computed + 1)
        / remaining
        * (1.0 + 2.0 * request.num_preemptions)
    )


class ExperimentHooks:
    """The legacy adapter's hooks for one strategy and one run.

    See docs/experiments.md, "Experiment mode in the engine".

    Parameters
    ----------
    strategy_name
        One of :data:`LEGACY_STRATEGIES`.
    strategy
        The ``select_victims`` strategy; by default the one of that name from
        ``bidkv.legacy.baselines.registry.create_default_registry()``.
    settings
        The hooks' constants.
    seed
        Seeds the generator that draws one seed per priority refresh for ``static-random``
        (the original's strategy kept one unseeded generator across calls).

    Raises
    ------
    ValueError
        For an unknown strategy name.
    """

    def __init__(
        self,
        strategy_name: str,
        strategy: VictimStrategy | None = None,
        *,
        settings: HookSettings | None = None,
        seed: int = 0,
    ) -> None:
        if strategy_name not in STRATEGY_PLANS:
            known = ", ".join(LEGACY_STRATEGIES)
            raise ValueError(f"strategy must be one of {known}; found {strategy_name!r}")
        self.strategy_name = strategy_name
        self.plan = STRATEGY_PLANS[strategy_name]
        self.strategy: VictimStrategy = (
            strategy if strategy is not None else create_default_registry().get(strategy_name)
        )
        self.settings = settings if settings is not None else HookSettings()
        self.seed = seed
        self.stats = HookStats()
        self._rng = random.Random(seed)
        # request_id -> cached priority (lower = more expendable); empty until the first refresh.
        self.priority_cache: dict[str, float] = {}
        # Engine times of the last refresh attempt and of the last hook preemptions.
        self.last_refresh_s = -math.inf
        self.last_proactive_s = -math.inf
        self.last_srpt_s = -math.inf
        # request_id -> engine time (ms) the hooks first saw it (the adapter's arrival stamp).
        self.first_seen_ms: dict[str, float] = {}
        # request_id -> engine time (s) the emulated client sent it: its arrival, or later when
        # the client's in-flight cap held it (the original runner's latency origin).
        self.sent_s: dict[str, float] = {}
        self._unseen: list[str] = []
        self._scheduler_made = False

    # ----------------------------------------------------------------------------- engine side
    def make_scheduler(
        self, config: EngineConfig, host: VictimHost | None, on_decision: DecisionCallback | None
    ) -> HookedVllmScheduler:
        """The scheduler that calls these hooks: ``run_engine``'s ``scheduler_factory``.

        ``run_engine`` calls it once per run; ``host`` None is the built-in rule.
        """
        if self._scheduler_made:
            raise ValueError("an ExperimentHooks object serves one run; make a new one per run")
        self._scheduler_made = True
        victim_host = host if host is not None else BuiltinHost()
        return HookedVllmScheduler(config, victim_host, self, on_decision)

    def on_arrival(self, request: SchedulerRequest, sent_s: float) -> None:
        """Note a request the client sent at ``sent_s``; its first sighting is the next step."""
        self.sent_s[request.request_id] = sent_s
        self._unseen.append(request.request_id)

    def before_schedule(self, scheduler: HookedVllmScheduler, step: int, now: float) -> None:
        """Run every hook in the patch's order, before the native step at ``now``."""
        self.stats.schedule_calls += 1
        if self._unseen:
            now_ms = now * 1000.0
            for request_id in self._unseen:
                self.first_seen_ms.setdefault(request_id, now_ms)
            self._unseen.clear()
        self.reorder_waiting(scheduler)
        self.refresh_priority_cache(scheduler, now)
        self.proactive_preempt(scheduler, step, now)
        self.srpt_preempt(scheduler, step, now)
        self.reorder_running(scheduler)

    # ----------------------------------------------------------------------------- the hooks
    def reorder_waiting(self, scheduler: HookedVllmScheduler) -> bool:
        """Shortest-prompt-first admission; returns whether it sorted."""
        waiting = scheduler.waiting
        if not self.plan.sjf_admission or len(waiting) <= 1:
            return False
        waiting.sort(key=_prompt_tokens)
        self.stats.admission_sorts += 1
        return True

    def refresh_priority_cache(self, scheduler: HookedVllmScheduler, now: float) -> bool:
        """Rebuild the priority cache from ``select_victims``.

        The interval runs from the last *attempt*: the original stamped the time before its
        strategy and running-count checks. Returns whether the cache was rebuilt.
        """
        if now - self.last_refresh_s < self.settings.refresh_interval_s:
            return False
        self.last_refresh_s = now
        self.stats.refresh_attempts += 1
        running = scheduler.running
        if not self.plan.priority_cache or len(running) < 2:
            return False
        candidates = [self._strategy_request(r, now) for r in running]
        needed = sum(c.current_tokens for c in candidates) or 1
        kwargs: dict[str, Any] = {}
        if isinstance(self.strategy, StaticRandomStrategy):
            kwargs["seed"] = self._rng.getrandbits(32)
            self.stats.strategy_seeds.append(kwargs["seed"])
        actions = self.strategy.select_victims(candidates, needed, **kwargs)
        cap = self.settings.bidkv_ranked_cap
        if self.strategy_name == "bidkv" and cap is not None:
            actions = actions[:cap]
        cache = {action.request_id: float(i) for i, action in enumerate(actions)}
        keep = float(len(actions) + self.settings.non_victim_offset)
        for request in running:
            cache.setdefault(request.request_id, keep)
        self.priority_cache = cache
        self.stats.cache_refreshes += 1
        return True

    def proactive_preempt(
        self, scheduler: HookedVllmScheduler, step: int, now: float
    ) -> SchedulerRequest | None:
        """Preempt the running request with the lowest cached priority (proactive preemption)."""
        settings = self.settings
        if now - self.last_proactive_s < settings.proactive_cooldown_s:
            return None
        running = scheduler.running
        if not len(scheduler.waiting) or len(running) < settings.proactive_min_running:
            return None
        if scheduler.block_pool.get_usage() < settings.proactive_kv_threshold:
            return None
        cache = self.priority_cache
        if not self.plan.proactive or not cache:
            return None
        victim = None
        best = math.inf
        for request in running:
            priority = cache.get(request.request_id, math.inf)
            if priority < best:  # strictly smaller: the first of equals wins
                best, victim = priority, request
        if victim is None:
            return None
        freed = victim.num_computed_tokens
        scheduler.preempt_outside_step(victim, step, now, PROACTIVE)
        self.last_proactive_s = now
        stats = self.stats
        stats.proactive_preemptions += 1
        if freed > 0:  # the adapter's record_eviction ignores zero
            stats.total_evictions += 1
            stats.total_tokens_freed += freed
        return victim

    def srpt_preempt(
        self, scheduler: HookedVllmScheduler, step: int, now: float
    ) -> SchedulerRequest | None:
        """Preempt a long-remaining running request for a cheap waiting one (SRPT preemption)."""
        settings = self.settings
        if not self.plan.srpt or now - self.last_srpt_s < settings.srpt_cooldown_s:
            return None
        running = scheduler.running
        waiting = scheduler.waiting
        if not len(waiting) or len(running) < settings.srpt_min_running:
            return None
        if scheduler.block_pool.get_usage() < settings.srpt_kv_threshold:
            return None
        best_waiting_cost = min(r.num_prompt_tokens + r.max_tokens for r in waiting)
        victim = None
        worst_remaining = 0
        for request in running:
            # Outputs as the original counted them: computed tokens beyond the prompt.
            output = max(0, request.num_computed_tokens - request.num_prompt_tokens)
            if output < settings.srpt_min_output_tokens:
                continue
            if request.num_preemptions >= settings.srpt_max_preemptions:
                continue
            remaining = max(0, request.max_tokens - output)
            if remaining > worst_remaining:
                worst_remaining, victim = remaining, request
        if victim is None or worst_remaining < best_waiting_cost * settings.srpt_gain:
            return None
        scheduler.preempt_outside_step(victim, step, now, SRPT)
        self.last_srpt_s = now
        stats = self.stats
        stats.srpt_preemptions += 1
        stats.total_evictions += 1
        stats.total_tokens_freed += worst_remaining
        return victim

    def reorder_running(self, scheduler: HookedVllmScheduler) -> str | None:
        """Put the most expendable running request at the tail (running re-order).

        Returns ``"cache"`` or ``"keep-score"`` when it re-ordered, else None.
        """
        plan = self.plan
        running = scheduler.running
        if plan.reorder == "never" or len(running) <= 1:
            return None
        if plan.reorder == "gated":
            mean_prompt = sum(r.num_prompt_tokens for r in running) / len(running)
            if mean_prompt > self.settings.bidkv_max_mean_prompt:
                return None
            if scheduler.block_pool.get_usage() < self.settings.bidkv_kv_gate:
                return None
        cache = self.priority_cache
        if cache:
            # Highest priority first; uncached requests (+inf) stay in front; ties keep order.
            running.sort(key=lambda r: -cache.get(r.request_id, math.inf))
            self.stats.cache_reorders += 1
            return "cache"
        running.sort(key=lambda r: -keep_score(r))
        self.stats.keep_score_reorders += 1
        return "keep-score"

    # ----------------------------------------------------------------------------- helpers
    def _strategy_request(self, request: SchedulerRequest, now: float) -> StrategyRequest:
        """The adapter's ``RequestState`` of one running request (priority cache).

        ``current_tokens`` is the tracked token count, prompt plus output so far: the adapter
        starts tracking a request when it first sees it running and appends every sampled
        token, and never resets it on preemption. Only its length matters to the
        strategies (largest-first scores positions), so the token ids are zeros.
        """
        arrival_ms = self.first_seen_ms.setdefault(request.request_id, now * 1000.0)
        current = request.num_prompt_tokens + request.num_output_tokens
        return StrategyRequest(
            request_id=request.request_id,
            current_tokens=current,
            priority=-arrival_ms,
            arrival_time_ms=arrival_ms,
            deadline_ms=arrival_ms + 120_000.0,
            token_ids=(0,) * current,
            num_prompt_tokens=request.num_prompt_tokens,
            num_computed_tokens=request.num_computed_tokens,
            max_output_tokens=request.max_tokens,
            num_preemptions=request.num_preemptions,
        )

    def export_metrics(self) -> dict[str, Any]:
        """The run's hook counters, strategy and settings (for a trace's ``final_state``)."""
        return {
            "strategy": self.strategy_name,
            "seed": self.seed,
            **self.stats.as_dict(),
        }


def _prompt_tokens(request: SchedulerRequest) -> int:
    return request.num_prompt_tokens
