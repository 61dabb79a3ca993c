"""Rollback conformance: a failing policy inside the embedded engine, on both host paths.

docs/contracts.md, "The controller and its counters": on the typed path, an invalid selection or an
exception is logged once and the controller restores the built-in policy for the rest of the
engine process (``failures == 1``, ``invalid_selections`` 1 for an invalid id and 0 for an
exception, ``enabled`` false, no later call), and the engine keeps running. The legacy
``VictimSelector`` host has no failure isolation: the same exception stops the engine.

The real policy is loaded as the typed host loads it and wrapped so that its ``fail_at``-th call
returns an unknown id or raises; everything else is the policy's own decision.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any, Literal

from tracekit.conformance.report import Check
from tracekit.engine import EngineConfig, EngineRequest, run_engine
from tracekit.engine import hosts as engine_hosts
from tracekit.hosts import preemption_policy as typed_host

__all__ = [
    "JUNK_ID",
    "InjectedFailure",
    "captured_logs",
    "check_legacy_no_isolation",
    "check_typed_rollback",
    "default_engine_config",
    "default_workload",
]

# What the broken policy returns on its failing call: an id no candidate has.
JUNK_ID = "<no-such-request>"

FailureMode = Literal["invalid", "exception"]


class InjectedFailure(RuntimeError):
    """The failure the conformance wrapper injects (never raised by a real policy)."""


def default_workload() -> list[EngineRequest]:
    """Thirty requests that keep 14 KV blocks under pressure (deterministic, no randomness)."""
    return [
        EngineRequest(
            f"c{i:02d}",
            0.5 * i,
            10 + (i * 37) % 110,
            5 + (i * 53) % 55,
            60,
            i % 3,
        )
        for i in range(30)
    ]


def default_engine_config() -> EngineConfig:
    """A small engine (13 usable blocks of 16 tokens, 6 sequences) that preempts often."""
    # max_model_len must fit the usable KV cache: (14 - 1) * 16 tokens.
    return EngineConfig(
        num_blocks=14,
        max_num_seqs=6,
        max_num_batched_tokens=64,
        max_model_len=208,
        clock="steps",
        step_s=1.0,
    )


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def captured_logs() -> Iterator[list[logging.LogRecord]]:
    """Collect the ``vllm`` loggers' records (policy, hosts) instead of printing them.

    The checks provoke failures on purpose; their error lines and tracebacks are evidence for
    the checks, not output for the operator.
    """
    logger = logging.getLogger("vllm")
    handler = _ListHandler()
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


class _FailOnCall:
    """Delegates to ``policy``; its ``fail_at``-th call returns :data:`JUNK_ID` or raises."""

    def __init__(self, policy: Any, fail_at: int, mode: FailureMode) -> None:
        self.policy = policy
        self.fail_at = fail_at
        self.mode = mode
        self.calls = 0

    def _fail_now(self) -> bool:
        self.calls += 1
        if self.calls == self.fail_at and self.mode == "exception":
            raise InjectedFailure(f"injected failure on call {self.fail_at}")
        return self.calls == self.fail_at

    def select_victim(self, context: Any) -> str | None:
        """Typed face."""
        if self._fail_now():
            return JUNK_ID
        return self.policy.select_victim(context)

    def pick_victim(self, running: Sequence[Any], policy: Any, **kwargs: Any) -> Any:
        """Legacy face."""
        if self._fail_now():
            return SimpleNamespace(request_id=JUNK_ID)
        return self.policy.pick_victim(running, policy, **kwargs)

    def get_last_decision(self) -> Any:
        """The wrapped policy's last decision (so the recorded reasons stay the policy's)."""
        getter = getattr(self.policy, "get_last_decision", None)
        return getter() if callable(getter) else None


def check_typed_rollback(
    name: str,
    typed_policy: str,
    settings: dict[str, Any],
    mode: FailureMode,
    *,
    workload: Sequence[EngineRequest],
    engine_config: EngineConfig,
    fail_at: int,
) -> Check:
    """Run the workload through a typed host whose policy fails on call ``fail_at``.

    Parameters
    ----------
    name
        The check's name.
    typed_policy
        Qualified name the typed host loads (``--preemption-policy``).
    settings
        The policy's ``additional_config``.
    mode
        ``invalid`` (an unknown id) or ``exception``.
    workload, engine_config
        The embedded-engine run; it must make more than ``fail_at`` decisions.
    fail_at
        The failing call (1-based).

    Returns
    -------
    Check
        Passed when the failing decision applied the built-in victim with outcome ``mode``,
        every later decision is ``disabled`` with the built-in victim, the counters are
        ``calls == fail_at, failures == 1, invalid_selections == (mode == "invalid")``,
        ``enabled`` is false, and every request finished.
    """
    try:
        policy = typed_host.load_policy(typed_policy, SimpleNamespace(additional_config=settings))
    except Exception as error:
        return Check(name, False, f"the typed host failed to start: {error!r}")
    host = engine_hosts.TypedHost(_FailOnCall(policy, fail_at, mode))
    try:
        with captured_logs() as records:
            result = run_engine(workload, engine_config, host, check_consistency=True)
    except Exception as error:
        return Check(name, False, f"the engine stopped: {type(error).__name__}: {error}")
    # The host logs the failure once, at ERROR
    # (docs/contracts.md, "The controller and its counters").
    logged = [r for r in records if r.levelno >= logging.ERROR and "disabling it" in r.getMessage()]
    decisions = result.decisions
    stats = host.controller.export_stats()
    problems = []
    if len(decisions) <= fail_at:
        problems.append(f"the workload made only {len(decisions)} decisions (need > {fail_at})")
    else:
        failing = decisions[fail_at - 1]
        if failing.outcome != mode or failing.victim_id != failing.builtin_victim_id:
            problems.append(
                f"call {fail_at}: outcome {failing.outcome!r} victim {failing.victim_id!r}, "
                f"expected {mode!r} with the built-in {failing.builtin_victim_id!r}"
            )
        earlier = {d.outcome for d in decisions[: fail_at - 1]}
        if not earlier <= {"selected", "abstained"}:
            problems.append(f"outcomes before the failure: {sorted(earlier)}")
        later = decisions[fail_at:]
        wrong = [
            d.seq for d in later if d.outcome != "disabled" or d.victim_id != d.builtin_victim_id
        ]
        if wrong:
            problems.append(
                f"{len(wrong)} later decision(s) not 'disabled' with the built-in victim "
                f"(first seq {wrong[0]})"
            )
    expected = {
        "calls": fail_at,
        "failures": 1,
        "invalid_selections": int(mode == "invalid"),
        "enabled": False,
    }
    counters = {key: stats.get(key) for key in expected}
    if counters != expected:
        problems.append(f"controller stats {counters}, expected {expected}")
    if len(logged) != 1:
        problems.append(f"the failure was logged {len(logged)} times at ERROR, expected once")
    unfinished = [r.request_id for r in result.requests if not r.status.startswith("finished")]
    if len(result.requests) != len(workload) or unfinished:
        problems.append(
            f"{len(result.requests)} of {len(workload)} requests recorded, "
            f"{len(unfinished)} unfinished"
        )
    if problems:
        return Check(name, False, "; ".join(problems))
    return Check(
        name,
        True,
        f"call {fail_at} {mode}: built-in victim applied, then {len(decisions) - fail_at} "
        f"decisions 'disabled' with the built-in victim; stats {counters}; logged once; "
        f"{len(workload)} requests finished",
    )


def check_legacy_no_isolation(
    name: str,
    settings: dict[str, Any],
    selector_factory: Callable[[dict[str, Any]], Any],
    *,
    workload: Sequence[EngineRequest],
    engine_config: EngineConfig,
    fail_at: int,
) -> Check:
    """Run the workload through a legacy host whose selector raises on call ``fail_at``.

    Parameters
    ----------
    name
        The check's name.
    settings
        The policy's ``additional_config``.
    selector_factory
        Builds the legacy selector from ``settings`` (through ``get_victim_selector``).
    workload, engine_config, fail_at
        As for :func:`check_typed_rollback`.

    Returns
    -------
    Check
        Passed when the injected exception stops the engine: a legacy host has no rollback, so
        an operator who needs one must run the typed host.
    """
    try:
        selector = selector_factory(settings)
    except Exception as error:
        return Check(name, False, f"the legacy host failed to start: {error!r}")
    host = engine_hosts.LegacyHost(_FailOnCall(selector, fail_at, "exception"))
    try:
        run_engine(workload, engine_config, host)
    except InjectedFailure:
        return Check(
            name,
            True,
            f"the exception of call {fail_at} stopped the engine (the legacy host has no "
            "failure isolation; rollback exists on the typed path only)",
        )
    except Exception as error:
        return Check(name, False, f"the engine stopped with another error: {error!r}")
    return Check(
        name,
        False,
        f"the run completed although pick_victim raised on call {fail_at}: this legacy host "
        "swallows policy failures",
    )
