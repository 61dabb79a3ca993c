"""The reference path: every decision through the typed host controller, as an engine would.

Per run and strategy there is one fresh policy (``StrategySpec.make_policy()``) behind one fresh
:class:`~tracekit.hosts.preemption_policy.PreemptionPolicyController`, and each rebuilt context is
passed to it in ``seq`` order. The controller does the counting, the built-in fallback and the
disabling of a policy that raises or returns something that is not a candidate id, exactly as the
host does; this module only records what it reports. It is the path for user policies and the
reference the fast path is checked against.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import (
    PolicyOutcome,
    PreemptionContext,
    PreemptionPolicyController,
    decision_reason_of,
)
from tracekit.recording.rows import raw_result_fields
from tracekit.replay.contexts import Chunk, build_contexts
from tracekit.replay.table import OUTCOME, RAW_TYPE, REASON
from tracekit.strategies import StrategySpec

__all__ = [
    "RESULT_COLUMNS",
    "Failure",
    "PlainStrategy",
    "policy_logs",
    "replay_plain",
    "scrub",
]

# What each path reports per decision and strategy, before the shared derived columns:
# the applied victim as its candidate row in the chunk (the first row with its id), the
# controller's outcome, the kind of raw result, the policy's reason, and the raw result where it
# is not the applied victim's id (what an invalid selection returned).
RESULT_COLUMNS: tuple[str, ...] = (
    "applied_row",
    "outcome",
    "raw_result_type",
    "decision_reason",
    "raw_other",
)
# The reference path's columns before the applied id is located among the candidates.
_PLAIN_SCHEMA: dict[str, Any] = {
    "applied_victim_id": pl.String,
    "outcome": pl.String,
    "raw_result_type": pl.String,
    "decision_reason": pl.String,
    "raw_other": pl.String,
}

# Contexts built at once: bounds the Python objects alive whatever the chunk size.
_CONTEXT_BATCH = 4096
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def scrub(text: str) -> str:
    """``text`` without memory addresses (``<object at 0x7f...>``), so outputs are reproducible."""
    return _ADDRESS.sub("", text)


@dataclass(frozen=True, slots=True)
class Failure:
    """A policy disabled by the controller: where, and the reason the controller logged."""

    run_id: str
    strategy: str
    seq: int
    outcome: str
    message: str


class _ControllerErrors(logging.Handler):
    """Keeps the controller's one error line per disabled policy instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        text = str(args[1]) if len(args) > 1 else record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{text}: {type(exc).__name__}: {exc}"
        self.messages.append(scrub(text))


_errors = _ControllerErrors()


@contextlib.contextmanager
def policy_logs() -> Iterator[None]:
    """Silence the policies' per-decision log lines and capture the controller's errors.

    The production policy logs every decision on the ``vllm`` logger (liveness lines as
    warnings), which would flood the console over millions of replayed decisions; the
    controller's error when it disables a policy is kept and reported as a :class:`Failure`.
    """
    policy_logger = logging.getLogger("vllm")
    controller_logger = logging.getLogger("vllm.preemption_policy")
    saved = (policy_logger.level, controller_logger.propagate)
    policy_logger.setLevel(logging.ERROR)
    controller_logger.addHandler(_errors)
    controller_logger.propagate = False
    try:
        yield
    finally:
        controller_logger.removeHandler(_errors)
        controller_logger.propagate = saved[1]
        policy_logger.setLevel(saved[0])
        _errors.messages.clear()


class PlainStrategy:
    """One strategy behind its own controller, rebuilt fresh for every run.

    Parameters
    ----------
    spec
        The strategy.
    label
        Its name in the outputs.
    """

    def __init__(self, spec: StrategySpec, label: str) -> None:
        self.spec = spec
        self.label = label
        self.failures: list[Failure] = []
        self._last: tuple[PolicyOutcome, object] = ("builtin", None)
        self._policy: Any = None
        self._controller: PreemptionPolicyController | None = None
        self._run_id = ""

    def start_run(self, run_id: str) -> None:
        """A fresh policy and controller, as a new engine process would load them."""
        self._run_id = run_id
        try:
            policy = self.spec.make_policy()
            self._controller = PreemptionPolicyController(
                policy, None, on_call=self._observe, check_thread=False
            )
        except Exception as exc:  # a user policy's constructor may raise anything
            raise ConfigError(
                f"--strategy {self.spec.name}: cannot build the policy "
                f"({type(exc).__name__}: {scrub(str(exc))}); it must implement "
                "select_victim(context) and build without arguments or from_vllm_config(None)"
            ) from None
        # Kept after the controller drops a failed policy, to read its last decision.
        self._policy = self._controller.policy

    def _observe(self, outcome: PolicyOutcome, raw: object, victim: str) -> None:
        self._last = (outcome, raw)

    def decide(self, context: PreemptionContext, seq: int, out: list[list[Any]]) -> None:
        """Pass ``context`` to the controller and append its result to the columns ``out``."""
        controller = self._controller
        assert controller is not None
        victim = controller.select_victim(context)
        outcome, raw = self._last
        raw_result, raw_type = raw_result_fields(raw, outcome not in ("disabled", "builtin"))
        if raw_type == "other":
            raw_result = scrub(raw_result or "")
        reason: str | None = None
        if outcome in ("selected", "abstained"):
            # As the recorders read it (tracekit.engine.hosts.TypedHost).
            reason = decision_reason_of(self._policy)
        elif outcome in ("invalid", "exception"):
            message = _errors.messages.pop() if _errors.messages else outcome
            self.failures.append(Failure(self._run_id, self.label, seq, outcome, message))
        other = raw_result if outcome == "invalid" else None
        for column, value in zip(out, (victim, outcome, raw_type, reason, other), strict=True):
            column.append(value)


def replay_plain(chunk: Chunk, strategies: list[PlainStrategy]) -> list[pl.DataFrame]:
    """Every decision of ``chunk`` through every strategy's controller, in ``seq`` order.

    Parameters
    ----------
    chunk
        The decisions.
    strategies
        Their state carries over from the previous chunk of the same run.

    Returns
    -------
    list of pl.DataFrame
        Per strategy, :data:`RESULT_COLUMNS` with one row per decision.
    """
    columns: list[list[list[Any]]] = [[[] for _ in _PLAIN_SCHEMA] for _ in strategies]
    seqs = chunk.decisions["seq"].to_list()
    for start in range(0, chunk.size, _CONTEXT_BATCH):
        stop = min(start + _CONTEXT_BATCH, chunk.size)
        for seq, context in zip(seqs[start:stop], build_contexts(chunk, start, stop), strict=True):
            # Strategies in the given order per decision, as engines side by side would see it.
            for strategy, out in zip(strategies, columns, strict=True):
                strategy.decide(context, seq, out)
    # The controller only ever applies a candidate's id: find its (first) row.
    first = chunk.candidates.select("dec", "request_id", "first_row").unique(
        subset=["dec", "request_id"], keep="first", maintain_order=True
    )
    index = pl.int_range(chunk.size, dtype=pl.Int64, eager=True).alias("dec")
    results = []
    for cols in columns:
        frame = pl.DataFrame(dict(zip(_PLAIN_SCHEMA, cols, strict=True)), schema=_PLAIN_SCHEMA)
        located = frame.with_columns(index).join(
            first,
            left_on=["dec", "applied_victim_id"],
            right_on=["dec", "request_id"],
            how="left",
            maintain_order="left",
        )
        reason = located["decision_reason"]
        if set(reason.drop_nulls().unique().to_list()) <= set(REASON.categories.to_list()):
            reason = reason.cast(REASON)  # else a user policy's own reasons: kept as strings
        results.append(
            located.select(
                pl.col("first_row").alias("applied_row"),
                pl.col("outcome").cast(OUTCOME),
                pl.col("raw_result_type").cast(RAW_TYPE),
                reason,
                "raw_other",
            )
        )
    return results
