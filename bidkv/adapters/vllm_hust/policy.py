"""``BidkvPreemptionPolicy``: the victim policy a vLLM-HUST host loads by qualified name.

The host calls :meth:`BidkvPreemptionPolicy.select_victim` when a running request's KV allocation
fails (``vllm.preemption-policy.v1``, docs/contracts.md). The policy returns a candidate's id or
``None`` to abstain (the host then applies its built-in victim). Decisions follow the shipped
0.2.1 code (V4, docs/policy.md, "The bidkv decision") unless ``utility_liveness_mode="barrier"``
selects the V3 behaviour (docs/policy.md, "Barrier mode (V3)"). Log lines keep the original's
formats on the ``"vllm"`` logger, because external analysers count them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from bidkv.adapters.vllm_hust.builtin import builtin_victim
from bidkv.adapters.vllm_hust.config import BidkvSelectorConfig
from bidkv.adapters.vllm_hust.decision import (
    DecisionRules,
    DecisionState,
    Step,
    decide,
    gate_reasons,
)
from bidkv.adapters.vllm_hust.metrics import DEFAULT_STATE_LIMIT, DecisionRecorder
from bidkv.adapters.vllm_hust.scoring import (
    ScanResult,
    UtilityCandidateScore,
    best_record_with_id,
    last_with_id,
    rank_candidates,
)
from bidkv.adapters.vllm_hust.strategies import StrategyInputs, strategy_row

__all__ = ["BidkvPreemptionPolicy", "BidkvVictimSelector"]

_LOGGER = logging.getLogger("vllm")
_UTILITY, _LIVENESS, _CASCADE = Step.UTILITY, Step.LIVENESS, Step.CASCADE

# One decision: (candidates, scheduling policy, kv usage, now, context) -> victim object or None.
_Decide = Callable[[Sequence[Any], Any, Any, float, Any], Any]


class _LegacyContext:
    """The context :meth:`BidkvPreemptionPolicy.pick_victim` builds for legacy hosts."""

    __slots__ = (
        "builtin_victim_id",
        "candidates",
        "kv_cache_usage",
        "now",
        "requesting_request_id",
        "scheduling_policy",
    )

    def __init__(self, candidates: tuple[Any, ...], policy: str, kv: float, now: float) -> None:
        self.candidates = candidates
        self.scheduling_policy = policy
        self.kv_cache_usage = kv
        self.now = now
        # Legacy hosts name no requester, so the cascade rule never fires on this path.
        self.requesting_request_id = ""
        self.builtin_victim_id = None


def _rid(candidate: Any) -> str:
    return str(getattr(candidate, "request_id", ""))


class BidkvPreemptionPolicy:
    """BidKV utility-ranked preemption victim policy.

    Parameters
    ----------
    config
        The settings; ``None`` reads them from the ``BIDKV_UTILITY_*`` environment. An invalid
        configuration raises ``ValueError`` here, so the engine fails at startup.

    Notes
    -----
    Strategies (``utility_strategy``), in force only while the main switch is on and the kill
    switch off (otherwise ``pe``):

    - ``bidkv``: victim = the candidate maximising ``U = r / (delta + epsilon)`` after the
      gates; liveness and cascade guards abstain (``None``).
    - ``pe`` / ``preempt-evict``, ``pe-sjf`` / ``preempt-evict-sjf``: the built-in victim.
    - ``static-random``: uniform choice from a ``random.Random(utility_seed)``.
    - ``largest-first``: most ``num_computed_tokens``.
    - ``sglang-default``: SGLang's retraction order.
    - ``slack-aware``: most slack before ``arrival_time + utility_slo_s``.
    - ``lcf`` / ``least-computed-first``, ``mcf`` / ``most-computed-first``: least (most)
      ``num_computed_tokens`` other than the requester, last-admitted on ties (vLLM PR #53723).

    State that grows with the number of requests (liveness offsets, per-request preemption
    counts) lives in tables that forget their least recently touched id beyond
    :attr:`state_table_limit` ids.
    """

    # Hosts name a policy f"{type(policy).__module__}.{__qualname__}" in their stats and metric
    # labels, and analysers match that against the --preemption-policy engines load: report the
    # public module, as the original (defined there) did.
    __module__ = "bidkv.adapters.vllm_hust.selector"

    vllm_preemption_policy_api_version = 1
    #: Bound of the per-request tables; below it the tables behave as unbounded dicts.
    state_table_limit: int = DEFAULT_STATE_LIMIT

    def __init__(self, config: BidkvSelectorConfig | None = None) -> None:
        if config is None:
            config = BidkvSelectorConfig.from_env()
        config.validate()
        self.config = config
        #: The strategy in force (aliases resolved; ``pe`` when switched off).
        self.strategy = config.resolved_strategy if config.utility_enabled else "pe"
        # The strategy table's row decides the call (docs/policy.md, "Strategies"); bidkv's rule
        # needs the policy's state, every other row is its victim function.
        self._row = row = strategy_row(self.strategy)
        assert row is not None  # the configuration was validated against the same table
        self._decide: _Decide = self._pick_bidkv if row.victim is None else self._pick_row
        self._log_format = (
            None if row.log is None else f"[BidKV] {row.log} | kv_util=%.2f | running=%d"
        )
        # Our own generator: reproducible, and never disturbs the process-wide ``random`` state.
        self._rng = random.Random(config.utility_seed)
        # What the table's victim functions read; the per-call fields are set on each call.
        self._inputs = StrategyInputs(None, None, 0.0, self._rng, config.utility_slo_s)
        # Settings read on every call, copied out of the dataclass once.
        self._wc = config.utility_completion_weight
        self._wp = config.utility_preempt_weight
        self._eps = config.utility_epsilon
        self._default_max_tokens = config.utility_default_max_tokens
        self._rules = DecisionRules.from_config(config)
        self._liveness = config.utility_liveness_preemptions
        self._barrier = config.utility_liveness_mode == "barrier"
        self._slo_s = config.utility_slo_s
        self._snapshots = config.utility_snapshot_enabled
        self._top_k = config.utility_snapshot_top_k
        # Whether the last bidkv decision fell back at a gate (its record says "strategy").
        self._gate_fell_back = False
        self._state = DecisionState(self.state_table_limit)
        self._metrics = DecisionRecorder(
            config.utility_snapshot_history_size,
            config.utility_snapshot_enabled,
            config.utility_snapshot_top_k,
            self.state_table_limit,
        )
        _LOGGER.info(
            "[BidKV] INIT | enabled=%s | strategy=%s | kv_gate=%.2f | min_running=%d | "
            "completion_w=%.2f | preempt_w=%.2f | liveness_preemptions=%d | "
            "cascade_gain_ratio=%.2f",
            config.enable_utility_victim_selection,
            config.utility_strategy,
            config.utility_kv_gate,
            config.utility_min_running,
            config.utility_completion_weight,
            config.utility_preempt_weight,
            config.utility_liveness_preemptions,
            config.utility_cascade_gain_ratio,
        )

    # -- host entry points ------------------------------------------------------------------

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> BidkvPreemptionPolicy:
        """Build the policy from a vLLM config (environment, then ``additional_config``).

        Parameters
        ----------
        vllm_config
            Any object; its ``additional_config`` attribute overrides the environment.

        Returns
        -------
        BidkvPreemptionPolicy
            A policy of the class this is called on.

        Raises
        ------
        ValueError
            For an invalid setting (the engine fails at startup).
        """
        return cls(BidkvSelectorConfig.from_vllm_config(vllm_config))

    def select_victim(self, context: Any) -> str | None:
        """Choose the victim for one failed KV allocation, or abstain.

        Parameters
        ----------
        context
            A ``PreemptionContext`` or any object with ``candidates`` (host order),
            ``scheduling_policy``, ``kv_cache_usage``, ``now`` and optionally
            ``requesting_request_id``.

        Returns
        -------
        str or None
            A candidate's ``request_id``; ``None`` only from the ``bidkv`` strategy's liveness
            and cascade guards in ``abstain`` mode.

        Raises
        ------
        ValueError
            If there are no candidates (the host never calls with none).
        """
        candidates = context.candidates
        if not candidates:
            raise ValueError("running is empty, cannot pick victim")
        now = context.now
        if now is None:
            now = time.monotonic()
        elif now.__class__ is not float:
            now = float(now)
        self._gate_fell_back = False
        victim = self._decide(
            candidates, context.scheduling_policy, context.kv_cache_usage, now, context
        )
        return None if victim is None else victim.request_id

    def pick_victim(
        self,
        running: Sequence[Any],
        policy: Any,
        *,
        kv_utilization: float | None = None,
        now_s: float | None = None,
    ) -> Any:
        """Legacy ``VictimSelector`` entry point (docs/policy.md, "Loading").

        Parameters
        ----------
        running
            The running requests, in queue order.
        policy
            A ``SchedulingPolicy`` enum (its ``value``) or a name such as ``"FCFS"``.
        kv_utilization
            KV usage in [0, 1]; ``None`` counts as ``0.0``.
        now_s
            Decision time; ``time.monotonic()`` when ``None``.

        Returns
        -------
        object
            The victim request object itself; on an abstention, the policy's own default victim.
        """
        policy_value = getattr(policy, "value", None)
        if policy_value is None:
            policy_value = str(getattr(policy, "name", policy)).lower()
        now = time.monotonic() if now_s is None else float(now_s)
        context = _LegacyContext(tuple(running), policy_value, kv_utilization or 0.0, now)
        selected = self.select_victim(context)
        if selected is None:
            return builtin_victim(running, policy_value)
        return next(c for c in running if c.request_id == selected)

    # -- metrics ----------------------------------------------------------------------------

    def export_metrics(self) -> dict[str, Any]:
        """Return the decision counters (docs/policy.md, "Counters, snapshots, logs").

        Returns
        -------
        dict
            ``total_preemptions, total_tokens_freed, kv_pressure_events,
            consecutive_preempt_ratio, preemptions_per_request_p95, preempted_req_ids,
            strategy_hit_rate, utility_strategy_hits, default_strategy_hits,
            liveness_fallback_hits, liveness_epochs, cascade_guard_hits, policy_abstentions``.
        """
        return self._metrics.export()

    def get_recent_snapshots(self, limit: int = 10) -> list[dict[str, Any]]:
        """Return the last ``limit`` decision snapshots, oldest first.

        Parameters
        ----------
        limit
            Maximum number of snapshots; ``<= 0`` gives ``[]``.

        Returns
        -------
        list of dict
            Empty unless ``utility_snapshot_enabled``.
        """
        return self._metrics.recent_snapshots(limit)

    def emit_observability_log(self, logger: logging.Logger, scheduler_name: str) -> None:
        """Log the counters and the latest decision (legacy-protocol method).

        See docs/policy.md, "Counters, snapshots, logs".

        Parameters
        ----------
        logger
            Where to log (INFO; the snapshot at DEBUG).
        scheduler_name
            Label printed in brackets.
        """
        self._metrics.emit_log(logger, scheduler_name)

    def get_last_decision(self) -> dict[str, Any] | None:
        """The last decision record, or ``None`` before the first decision.

        Keys (docs/policy.md#counters-snapshots-logs) ``timestamp_s``, ``policy``, ``used_utility``,
        ``kv_utilization``, ``running_size``, ``selected_victim_id``, ``default_victim_id``,
        ``decision_reason``. Hosts and recorders read ``decision_reason`` from here.

        Returns
        -------
        dict or None
            A new dictionary; changing it does not change the policy.
        """
        return self._metrics.last_decision()

    def last_decision_reason(self) -> str | None:
        """Why the last decision went as it did, finer than the record's ``decision_reason``.

        ``strategy`` (the configured strategy chose), ``gate_fallback`` (a bidkv gate --
        min_running, kv_gate or cooldown -- returned the default victim), ``liveness_abstain``,
        ``cascade_abstain``, ``liveness_fallback`` (barrier mode), or ``disabled`` (switched off
        or kill-switched: the default victim); ``None`` before the first decision.

        Returns
        -------
        str or None
            The reason; traces record it per decision.
        """
        decision = self._metrics.last_decision()
        if decision is None:
            return None
        if not self.config.utility_enabled:
            return "disabled"
        if self._gate_fell_back:
            return "gate_fallback"
        return str(decision["decision_reason"])

    @property
    def liveness_offsets(self) -> dict[str, int]:
        """A copy of the liveness offsets (request id -> preemption count at its last epoch)."""
        return dict(self._state.offsets)

    @property
    def preemptions_per_request(self) -> dict[str, int]:
        """A copy of the recorded decisions per victim id (bounded like the offsets)."""
        return dict(self._metrics.preemptions_per_request)

    # -- strategies -------------------------------------------------------------------------

    def _pick_row(
        self, candidates: Sequence[Any], policy: Any, kv: Any, now: float, context: Any
    ) -> Any:
        row = self._row
        assert row is not None  # set for every strategy that picks by a table row
        inputs = self._inputs
        inputs.scheduling_policy = policy
        inputs.now = now
        if row.needs_requester:
            inputs.requester = getattr(context, "requesting_request_id", "")
        victim, log_values = row.victim(candidates, inputs)  # type: ignore[misc]
        if self._log_format is not None:
            _LOGGER.info(
                self._log_format,
                getattr(victim, "request_id", "?"),
                *log_values,
                kv or 0.0,
                len(candidates),
            )
        # Another strategy's choice counts as a strategy ("utility") hit, as in the original.
        default = victim if row.default_hit else builtin_victim(candidates, policy)
        self._metrics.record(
            victim, not row.default_hit, policy, kv, now, _rid(default), len(candidates)
        )
        return victim

    # -- bidkv --------------------------------------------------------------------------------

    def _pick_bidkv(
        self, candidates: Sequence[Any], policy: Any, kv: Any, now: float, context: Any
    ) -> Any:
        metrics = self._metrics
        rules = self._rules
        gate = rules.kv_gate
        if gate > 0 and kv is not None and kv >= gate:
            metrics.kv_pressure_events += 1
        default = builtin_victim(candidates, policy)
        n = len(candidates)
        requester = getattr(context, "requesting_request_id", "")
        state = self._state
        decision = decide(rules, candidates, n, kv, now, requester, state.last_pick, state.offsets)
        step, scan, relative = decision
        if scan is None:
            return self._gate_fallback(default, n, policy, kv, now)
        # Full records are built (and sorted) only for snapshots.
        ranked: Sequence[UtilityCandidateScore] = ()
        if self._snapshots:
            ranked = rank_candidates(
                candidates, self._wc, self._wp, self._eps, self._default_max_tokens, self._top_k
            )
        if self._barrier:
            return self._pick_bidkv_barrier(
                candidates, policy, kv, now, default, requester, step, scan, ranked
            )
        state.commit(rules, decision, now)
        if step is _UTILITY:
            self._utility_pick(scan[1], scan[2:7], False, _rid(default), policy, kv, now, n, ranked)
            return scan[1]
        metrics.policy_abstentions += 1
        if step is _LIVENESS:
            metrics.liveness_fallback_hits += 1
            metrics.liveness_epochs += 1
            _LOGGER.warning(
                "[BidKV] LIVENESS_ABSTAIN | utility_victim=%s | "
                "builtin_victim=%s | threshold=%d | epoch=%d | "
                "relative_preemptions=%d | kv_util=%.2f | running=%d",
                scan[2],
                default.request_id,
                rules.liveness_preemptions,
                metrics.liveness_epochs,
                relative,
                kv or 0.0,
                n,
            )
            reason = "liveness_abstain"
        else:
            metrics.cascade_guard_hits += 1
            _LOGGER.info(
                "[BidKV] CASCADE_ABSTAIN | utility_victim=%s | "
                "builtin_victim=%s | requester=%s | gain_ratio=%.2f | "
                "kv_util=%.2f | running=%d",
                scan[2],
                default.request_id,
                requester,
                rules.cascade_gain_ratio,
                kv or 0.0,
                n,
            )
            reason = "cascade_abstain"
        metrics.record(default, False, policy, kv, now, _rid(default), n, reason, ranked)
        return None

    def _pick_bidkv_barrier(
        self,
        candidates: Sequence[Any],
        policy: Any,
        kv: Any,
        now: float,
        default: Any,
        requester: Any,
        step: Step,
        scan: ScanResult,
        ranked: Sequence[UtilityCandidateScore],
    ) -> Any:
        # V3 (docs/policy.md, "Barrier mode (V3)"): an epoch barrier over every candidate (the
        # rules carry no V4 bound in this mode), and a cascade rule that selects the requester.
        # Never abstains.
        metrics = self._metrics
        n = len(candidates)
        threshold = self._liveness
        if threshold > 0 and n > 1:
            min_relative = self._min_relative_preemptions(candidates, threshold)
            if min_relative is not None:
                chosen = last_with_id(candidates, requester)
                if chosen is None:
                    chosen = default
                metrics.liveness_fallback_hits += 1
                metrics.liveness_epochs += 1
                # Offsets advance for every candidate, written in ranking order as V3 did.
                for s in rank_candidates(
                    candidates, self._wc, self._wp, self._eps, self._default_max_tokens
                ):
                    self._state.offsets.put(s.request_id, s.num_preemptions)
                _LOGGER.warning(
                    "[BidKV] LIVENESS_FALLBACK | victim=%s (progress barrier) | "
                    "threshold=%d | epoch=%d | min_relative_preemptions=%d | "
                    "kv_util=%.2f | running=%d",
                    chosen.request_id,
                    threshold,
                    metrics.liveness_epochs,
                    min_relative,
                    kv or 0.0,
                    n,
                )
                metrics.record(
                    chosen, False, policy, kv, now, _rid(default), n, "liveness_fallback", ranked
                )
                return chosen

        victim = scan[1]
        summary = scan[2:7]
        cascade = step is _CASCADE
        if cascade:
            # V3 prefers the requester: preempting it ends the host's retry loop after one victim.
            metrics.cascade_guard_hits += 1
            r = best_record_with_id(
                candidates, requester, self._wc, self._wp, self._eps, self._default_max_tokens
            )
            assert r is not None  # the scan found the requester among the candidates
            summary = (r.request_id, r.utility, r.tokens_freed, r.completion, r.num_preemptions)
            victim = last_with_id(candidates, requester)
        self._state.last_pick = now  # the cooldown timer starts only on utility picks
        self._utility_pick(victim, summary, cascade, _rid(default), policy, kv, now, n, ranked)
        return victim

    def _utility_pick(
        self,
        victim: Any,
        summary: tuple[str, float, int, float, int],
        cascade_guard: bool,
        default_id: str,
        policy: Any,
        kv: Any,
        now: float,
        n: int,
        ranked: Sequence[UtilityCandidateScore],
    ) -> None:
        # summary = (id, U, r, completion, num_preemptions) of the ranked record picked.
        # Logger.info makes the same check; testing first skips packing the arguments on the
        # most frequent decision.
        if _LOGGER.isEnabledFor(logging.INFO):
            _LOGGER.info(
                "[BidKV] UTILITY_ACTIVE | victim=%s | U=%.4f | r=%d tok | "
                "completion=%.2f | preemptions=%d | kv_util=%.2f | running=%d | "
                "cascade_guard=%s",
                *summary,
                kv or 0.0,
                n,
                cascade_guard,
            )
        self._metrics.record(victim, True, policy, kv, now, default_id, n, "strategy", ranked)

    def _gate_fallback(self, default: Any, n: int, policy: Any, kv: Any, now: float) -> Any:
        _LOGGER.info(
            "[BidKV] FALLBACK | victim=%s (default) | reason=%s | kv_util=%.2f | running=%d",
            default.request_id,
            gate_reasons(self._rules, n, kv),
            kv or 0.0,
            n,
        )
        self._metrics.record(default, False, policy, kv, now, _rid(default), n)
        self._gate_fell_back = True
        return default

    def _min_relative_preemptions(self, candidates: Sequence[Any], threshold: int) -> int | None:
        # The smallest relative preemption count, or None as soon as one is below the threshold.
        offsets = self._state.offsets
        ids = [_rid(c) for c in candidates]
        if len(set(ids)) != len(ids):
            # V3 kept one count per id, that of the id's last record in ranking order.
            relative_by_id = {
                s.request_id: max(0, s.num_preemptions - offsets.touch_get(s.request_id, 0))
                for s in rank_candidates(
                    candidates, self._wc, self._wp, self._eps, self._default_max_tokens
                )
            }
            smallest_value = min(relative_by_id.values())
            return smallest_value if smallest_value >= threshold else None
        smallest: int | None = None
        for c in candidates:
            p = max(int(getattr(c, "num_preemptions", 0) or 0), 0)
            relative = max(0, p - offsets.touch_get(_rid(c), 0))
            if relative < threshold:
                return None
            if smallest is None or relative < smallest:
                smallest = relative
        return smallest


class BidkvVictimSelector(BidkvPreemptionPolicy):
    """The legacy-host face of :class:`BidkvPreemptionPolicy` (docs/policy.md, "Loading").

    Identical behaviour; it also declares ``vllm_victim_selector_api_version = 1`` so that a
    pre-0.28 host accepts it (the original's alias lacked it and could not be loaded there).
    """

    __module__ = "bidkv.adapters.vllm_hust.selector"  # see BidkvPreemptionPolicy

    vllm_victim_selector_api_version = 1
