"""The engine's side of the step-time boundary: a step's make-up, its model, the models' source.

Standard library only.

The engine builds a :class:`StepShape` for every scheduled step and asks a
:class:`StepTimeModel` how long it lasts. It times one kind itself, its own roofline cost model
(``roofline[:<preset>]``); every other ``EngineConfig.latency`` spelling is resolved by the
process's :class:`StepTimeModelSource`, which ``tracekit.latency`` installs when it is imported
(:func:`install_step_time_source`), or a model is handed to ``make_clock(model=...)``. Nothing
here or anywhere in the engine imports ``tracekit.latency``: that package implements these
protocols and imports the engine, so imports flow one way
(docs/latency.md, "The step-time boundary").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tracekit.errors import ConfigError

__all__ = [
    "PrefillChunk",
    "StepShape",
    "StepTimeModel",
    "StepTimeModelSource",
    "check_step_time_spelling",
    "install_step_time_source",
    "installed_step_time_source",
    "resolve_step_time_model",
]


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """One prefill (or recomputation) chunk scheduled in a step.

    Parameters
    ----------
    num_tokens
        Tokens the step schedules for the request (the chunk), at least 1.
    num_computed_tokens
        Tokens of the request already in the KV cache before the step (the chunk's prefix).
    """

    num_tokens: int
    num_computed_tokens: int = 0

    def __post_init__(self) -> None:
        if self.num_tokens < 1 or self.num_computed_tokens < 0:
            raise ValueError(
                "a prefill chunk needs num_tokens >= 1 and num_computed_tokens >= 0, got "
                f"{self.num_tokens} and {self.num_computed_tokens}"
            )


@dataclass(frozen=True, slots=True)
class StepShape:
    """The make-up of one scheduled step, and its totals.

    Parameters
    ----------
    prefill_chunks
        The prefill chunks, in scheduling order.
    decode_contexts
        For every decoding sequence (one new token each), the tokens already in its KV cache
        before the step.

    Attributes
    ----------
    num_prefill_tokens
        Sum of the chunks' tokens.
    num_prefill_computed_tokens
        Sum of the chunks' prefixes (KV already cached before the step).
    num_decode_seqs
        Decoding sequences (also the step's decode tokens).
    num_decode_context_tokens
        Sum of the decoding sequences' contexts before the step.
    num_scheduled_tokens
        Prefill plus decode tokens.
    num_sequences
        Scheduled requests (chunks plus decoding sequences).
    kv_tokens_read
        Context after the step summed over every scheduled request: the KV the step's attention
        reads. This is the engine's ``kv_tokens_read`` (``docs/engine.md``).

    Notes
    -----
    The engine counts a scheduled request as decoding when it schedules exactly its one missing
    token after having produced output; every other scheduled request (prompt chunks,
    recomputation after a preemption) is a prefill chunk.
    """

    prefill_chunks: tuple[PrefillChunk, ...] = ()
    decode_contexts: tuple[int, ...] = ()
    num_prefill_tokens: int = field(init=False)
    num_prefill_computed_tokens: int = field(init=False)
    num_decode_seqs: int = field(init=False)
    num_decode_context_tokens: int = field(init=False)
    num_scheduled_tokens: int = field(init=False)
    num_sequences: int = field(init=False)
    kv_tokens_read: int = field(init=False)

    def __post_init__(self) -> None:
        chunks = tuple(self.prefill_chunks)
        contexts = tuple(self.decode_contexts)
        if any(c < 0 for c in contexts):
            raise ValueError(f"decode contexts must be >= 0, got {min(contexts)}")
        prefill = sum(c.num_tokens for c in chunks)
        prefix = sum(c.num_computed_tokens for c in chunks)
        decode_ctx = sum(contexts)
        put = object.__setattr__
        put(self, "prefill_chunks", chunks)
        put(self, "decode_contexts", contexts)
        put(self, "num_prefill_tokens", prefill)
        put(self, "num_prefill_computed_tokens", prefix)
        put(self, "num_decode_seqs", len(contexts))
        put(self, "num_decode_context_tokens", decode_ctx)
        put(self, "num_scheduled_tokens", prefill + len(contexts))
        put(self, "num_sequences", len(chunks) + len(contexts))
        put(self, "kv_tokens_read", prefix + prefill + decode_ctx + len(contexts))

    @classmethod
    def of(
        cls,
        prefill: Iterable[tuple[int, int]] = (),
        decode: Iterable[int] = (),
    ) -> StepShape:
        """Build a shape from ``(num_tokens, num_computed_tokens)`` pairs and decode contexts.

        Examples
        --------
        >>> s = StepShape.of(prefill=[(512, 0), (100, 1000)], decode=[40, 60])
        >>> s.num_prefill_tokens, s.num_decode_seqs, s.num_sequences, s.kv_tokens_read
        (612, 2, 4, 1714)
        """
        return cls(tuple(PrefillChunk(t, c) for t, c in prefill), tuple(decode))

    @property
    def is_empty(self) -> bool:
        """Whether nothing is scheduled."""
        return self.num_sequences == 0


@runtime_checkable
class StepTimeModel(Protocol):
    """A step-time model: the length of one scheduled step, in seconds.

    ``step_time_s`` is called once per scheduled step with the step's make-up; it must be
    deterministic (same shape, same answer) and return a positive, finite number. A step with
    nothing scheduled is never passed to it: the engine keeps its own idle rule. ``name`` appears
    in the engine's errors. ``describe()`` returns a JSON-serialisable mapping with at least
    ``kind`` and ``name``, recorded in manifests and report headers so that a reader knows where
    the times came from (the engine itself never calls it).

    A model whose time depends only on a step's five totals may also define
    ``step_time_totals_s(num_prefill_chunks, num_prefill_tokens, num_prefill_computed_tokens,
    num_decode_seqs, num_decode_context_tokens)``, equal to ``step_time_s`` of every shape with
    those totals: the engine clock then calls it without building a :class:`StepShape`
    (``tests/test_latency_clock.py`` checks the two agree for every model of
    ``tracekit.latency``).

    A model fitted to measured per-request latencies may also define
    ``request_overheads_s(prompt_tokens, output_tokens) -> (before, after)``: a request's time
    outside the step loop before its first token and from its first token to its last (HTTP,
    tokenising, streaming). The engine adds them to its request records (first token and finish
    times), not to its clock: they delay each request alone and leave the schedule as it is, as
    ``tracekit accuracy`` adds them (docs/latency.md, "Measured error").
    """

    name: str

    def step_time_s(self, shape: StepShape) -> float:
        """Length of the step, seconds."""
        ...

    def describe(self) -> dict[str, Any]:
        """What produced the times, for manifests and report headers."""
        ...


class StepTimeModelSource(Protocol):
    """Turns a ``--latency`` spelling into a step-time model (``tracekit.latency`` is one)."""

    def check(self, spelling: str) -> None:
        """Refuse a spelling no model could be built from, cheaply (no model is built).

        Raises
        ------
        ConfigError
            One line naming the problem and the fix.
        """
        ...

    def model(self, spelling: str) -> StepTimeModel:
        """The model of ``spelling``, built once per process.

        Raises
        ------
        ConfigError
            As :meth:`check`, and whatever building the model finds (a missing package, an
            unknown system).
        """
        ...


_installed: StepTimeModelSource | None = None


def install_step_time_source(source: StepTimeModelSource | None) -> None:
    """Make ``source`` resolve this process's ``EngineConfig.latency`` spellings.

    It replaces any source installed before; None uninstalls (the engine then times only
    ``roofline`` and models handed to it).
    """
    global _installed
    _installed = source


def installed_step_time_source() -> StepTimeModelSource | None:
    """The source :func:`install_step_time_source` installed, or None."""
    return _installed


def _no_source(spelling: str) -> ConfigError:
    return ConfigError(
        f"--latency {spelling!r}: no step-time model source is installed in this process; "
        "import tracekit.latency (it installs one) or hand the model to make_clock(model=...)"
    )


def check_step_time_spelling(spelling: str) -> None:
    """:meth:`StepTimeModelSource.check` of the installed source.

    Raises
    ------
    ConfigError
        The source refuses the spelling, or no source is installed.
    """
    source = installed_step_time_source()
    if source is None:
        raise _no_source(spelling)
    source.check(spelling)


def resolve_step_time_model(spelling: str) -> StepTimeModel:
    """:meth:`StepTimeModelSource.model` of the installed source.

    Raises
    ------
    ConfigError
        The source cannot build the model, or no source is installed.
    """
    source = installed_step_time_source()
    if source is None:
        raise _no_source(spelling)
    return source.model(spelling)
