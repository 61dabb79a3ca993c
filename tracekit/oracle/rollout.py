"""Hindsight rollouts: try every candidate of a victim decision on a fork of the engine.

A decision is evaluated from a fork taken at the start of the step that makes it
(:class:`~tracekit.engine.engine.EngineRun` ``prepare()`` then ``fork()``). The fork's host is a
:class:`ScriptedHost`: it repeats the victims already chosen earlier in that step, applies the
candidate under test, and then applies the built-in rule for every later decision (the
"recorded rule"). The fork runs for a **window** and is scored by an objective.

**The window** (docs/oracle.md, "Horizon"): the built-in candidate is rolled out first, until
every candidate of the decision (the running queue) has finished, or ``horizon`` steps,
whichever comes first; its length ``W`` in steps is then the window of every other candidate,
so all candidates of one decision are scored over the same steps.

**Objectives**, over the requests live at the fork point (running or waiting) or arriving in the
window:

- ``recomputed``: computed tokens discarded by preemptions in the window (what is recomputed).
- ``e2e``: sum of end-to-end times; a request unfinished at the window's end counts its time so
  far plus its remaining output tokens at the window's mean step time (a lower bound).
- ``slo``: SLO misses: TTFT over ``ttft_s`` or TPOT over ``tpot_s``; an unfinished request
  counts when its elapsed time already breaks a target (a lower bound).

Lower is better for every objective.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracekit.defaults import (
    DEFAULT_TPOT_S,
    DEFAULT_TTFT_S,
    OBJECTIVES,
    ORACLE_HORIZON,
    Objective,
)
from tracekit.engine.config import EngineConfig
from tracekit.engine.engine import EngineRun, FinishedRequests
from tracekit.engine.fake_model import stop_rule
from tracekit.engine.hosts import VictimChoice
from tracekit.engine.outputs import RequestRecord
from tracekit.engine.request import EngineRequest, RequestStatus, SchedulerRequest
from tracekit.hosts.preemption_policy import PreemptionContext, builtin_victim_id

__all__ = [
    "OBJECTIVES",
    "DEFAULT_SETTINGS",
    "CandidateScore",
    "GreedyOracleHost",
    "Objective",
    "OracleSettings",
    "ScriptedHost",
    "evaluate_at",
    "run_objective",
    "run_greedy_oracle",
]


@dataclass(frozen=True, slots=True)
class OracleSettings:
    """How candidates are scored.

    Parameters
    ----------
    objective
        ``recomputed``, ``e2e`` or ``slo`` (lower is better).
    horizon
        Most steps a rollout runs after the decision's step starts.
    ttft_s, tpot_s
        SLO targets of the ``slo`` objective (seconds).
    """

    objective: Objective = "recomputed"
    horizon: int = ORACLE_HORIZON
    ttft_s: float = DEFAULT_TTFT_S
    tpot_s: float = DEFAULT_TPOT_S


#: The default settings (their fields are the CLI defaults).
DEFAULT_SETTINGS = OracleSettings()


@dataclass(frozen=True, slots=True)
class CandidateScore:
    """One candidate of one decision, rolled out."""

    victim_id: str
    score: float
    window_steps: int


class ScriptedHost:
    """Plays ``victims`` for the first decisions it is asked, then the built-in rule."""

    __slots__ = ("calls", "victims")

    def __init__(self, victims: Sequence[str] = ()) -> None:
        self.victims = tuple(victims)
        self.calls = 0

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """The next scripted victim, or the built-in one when the script is over."""
        index = self.calls
        self.calls += 1
        if index < len(self.victims):
            return VictimChoice(self.victims[index], "selected")
        return VictimChoice(builtin_victim_id(context), "builtin")


def _live(run: EngineRun) -> list[SchedulerRequest]:
    return run.live_requests()


def _score(
    settings: OracleSettings,
    finished: Iterable[RequestRecord],
    live: Iterable[SchedulerRequest],
    base_recomputed: int,
    t_start: float,
    t_end: float,
    steps: int,
    unmade: Sequence[EngineRequest] = (),
    max_model_len: int = 0,
) -> float:
    """The objective over a window (see the module docstring).

    ``unmade`` are waiting requests a fork has not made states for (never scheduled).
    """
    objective = settings.objective
    if unmade and objective != "recomputed":
        # Never scheduled, nothing computed: a fresh state reads the same (first token None).
        extra = []
        for request in unmade:
            state = SchedulerRequest(request, 0)
            state.stop_output_tokens = stop_rule(
                request.prompt_tokens, request.output_tokens, request.max_tokens, max_model_len
            )[0]
            extra.append(state)
        live = [*live, *extra]
    if objective == "recomputed":
        total = sum(r.recomputed_tokens for r in finished) + sum(s.recomputed_tokens for s in live)
        return float(total - base_recomputed)
    step_s = (t_end - t_start) / steps if steps else 0.0
    if objective == "e2e":
        total = 0.0
        for r in finished:
            if r.status != RequestStatus.REJECTED and r.finish_s is not None:
                total += r.finish_s - r.arrival_s
        for s in live:
            remaining = max(s.stop_output_tokens - s.num_output_tokens, 1)
            total += (t_end - s.arrival_s) + remaining * step_s
        return total
    misses = 0
    ttft_s, tpot_s = settings.ttft_s, settings.tpot_s
    for r in finished:
        if r.status == RequestStatus.REJECTED or r.first_token_s is None or r.finish_s is None:
            misses += 1
            continue
        tpot = (
            (r.finish_s - r.first_token_s) / (r.num_output_tokens - 1)
            if r.num_output_tokens > 1
            else 0.0
        )
        misses += (r.first_token_s - r.arrival_s) > ttft_s or tpot > tpot_s
    for s in live:
        if s.first_token_s is None:
            misses += (t_end - s.arrival_s) > ttft_s
        elif s.num_output_tokens > 1:
            misses += (t_end - s.first_token_s) / (s.num_output_tokens - 1) > tpot_s or (
                s.first_token_s - s.arrival_s
            ) > ttft_s
        else:
            misses += (s.first_token_s - s.arrival_s) > ttft_s
    return float(misses)


def _rollout(
    snapshot: EngineRun,
    victims: Sequence[str],
    settings: OracleSettings,
    *,
    steps: int | None,
    watch: frozenset[str],
) -> tuple[float, int]:
    """Fork ``snapshot`` with ``victims`` scripted and run it; ``(score, steps run)``.

    ``steps=None``: run until every id in ``watch`` has finished, or ``settings.horizon``.
    """
    finished = FinishedRequests()
    base = sum(s.recomputed_tokens for s in _live(snapshot))
    fork = snapshot.fork(ScriptedHost(victims), collect=False, observer=finished)
    t_start = fork.now
    limit = settings.horizon if steps is None else steps
    done_ids: set[str] = set()
    run = 0
    while run < limit:
        if not fork.step():
            break
        run += 1
        if steps is None:
            done_ids.update(r.request_id for r in finished.requests[len(done_ids) :])
            if watch <= done_ids:
                break
    score = _score(
        settings,
        finished.requests,
        _live(fork),
        base,
        t_start,
        fork.now,
        run,
        fork.unmade_arrivals(),
        fork.config.max_model_len,
    )
    return score, run


def evaluate_at(
    snapshot: EngineRun,
    prior: Sequence[str],
    candidates: Sequence[str],
    builtin_id: str,
    settings: OracleSettings,
) -> list[CandidateScore]:
    """Score every candidate of the decision ``snapshot`` is about to make.

    Parameters
    ----------
    snapshot
        A run prepared at the start of the decision's step (it is forked, never advanced).
    prior
        The victims already chosen earlier in that step, in order.
    candidates
        The decision's candidate ids, in running-queue order.
    builtin_id
        The built-in victim of the decision (rolled out first: it fixes the window).
    settings
        Objective and horizon.

    Returns
    -------
    list of CandidateScore
        In ``candidates`` order.
    """
    # The requests the choice affects first: the candidates (the waiting queue of an
    # overloaded engine may not drain for thousands of steps).
    watch = frozenset(candidates)
    prior = tuple(prior)
    first, window = _rollout(snapshot, (*prior, builtin_id), settings, steps=None, watch=watch)
    scores = {builtin_id: CandidateScore(builtin_id, first, window)}
    for victim in candidates:
        if victim not in scores:
            score, run = _rollout(snapshot, (*prior, victim), settings, steps=window, watch=watch)
            scores[victim] = CandidateScore(victim, score, run)
    return [scores[c] for c in candidates]


def best_of(scores: Sequence[CandidateScore], builtin_id: str) -> CandidateScore:
    """The lowest score; ties go to the built-in victim, then to queue order."""
    low = min(s.score for s in scores)
    tied = [s for s in scores if s.score == low]
    return next((s for s in tied if s.victim_id == builtin_id), tied[0])


def run_objective(requests: Sequence[RequestRecord], settings: OracleSettings) -> float:
    """The objective of a whole finished run (every request finished)."""
    if not requests:
        return 0.0
    end = max((r.finish_s or 0.0) for r in requests)
    return _score(settings, requests, (), 0, 0.0, end, 1)


class GreedyOracleHost:
    """The greedy oracle: at every decision, the candidate whose rollout scores best.

    Bound to its :class:`EngineRun` by :func:`run_greedy_oracle`, which snapshots the run at
    the start of every step so the host can fork it mid-step.
    """

    def __init__(self, settings: OracleSettings) -> None:
        self.settings = settings
        self.snapshot: EngineRun | None = None
        self.prior: list[str] = []
        self.calls = 0

    def choose_victim(self, context: PreemptionContext) -> VictimChoice:
        """Roll out every candidate from the step's snapshot; apply the best."""
        assert self.snapshot is not None, "run_greedy_oracle sets the snapshot"
        builtin = builtin_victim_id(context)
        candidates = [c.request_id for c in context.candidates]
        scores = evaluate_at(self.snapshot, self.prior, candidates, builtin, self.settings)
        best = best_of(scores, builtin)
        self.prior.append(best.victim_id)
        self.calls += 1
        outcome = "builtin" if best.victim_id == builtin else "selected"
        return VictimChoice(best.victim_id, outcome, best.victim_id)  # type: ignore[arg-type]


def run_greedy_oracle(
    requests: Sequence[EngineRequest], config: EngineConfig, settings: OracleSettings
) -> EngineRun:
    """Run the workload closed-loop with :class:`GreedyOracleHost`; the finished run."""
    host = GreedyOracleHost(settings)
    run = EngineRun(requests, config, host)
    while run.prepare():
        # The snapshot's own host is never asked: every fork of it gets a ScriptedHost.
        host.snapshot = run.fork(ScriptedHost(), collect=False)
        host.prior = []
        run.step()
    return run
