"""The messages between the real-SGLang recorder and its driver: one JSON object per line.

Standard library only. The recorder writes one **scenario** per line to the driver's standard
input (:func:`scenario_message`); the driver (:mod:`tracekit.sglang.driver`) answers with, in
order:

``hello`` (once, after importing SGLang)
    ``protocol``, ``sglang_version``, ``torch_version``, ``python``, ``import_s``.
``step`` (per run, one per scheduler iteration that ran a batch)
    parsed by :func:`step_from_wire` into a :class:`SglangStep`.
``request`` (per run, right after the step in which the request finished or was rejected)
    ``request_id``, ``arrival_step``, ``first_step``, ``first_token_step``, ``finish_step``,
    ``output_tokens``, ``finish_reason`` (SGLang's class name: ``FINISH_MATCHED_TOKEN`` at the
    target length, ``FINISH_LENGTH`` at ``max_tokens``; or ``rejected``), ``retractions``.
``end`` (per run)
    ``num_steps``, ``end_step``, ``sglang_config`` (read back from SGLang's objects), ``timing``.
``error`` (instead of ``end`` when a run fails)
    ``message``, ``traceback``.

Every message but ``hello`` carries ``run``, the scenario's index. The step records are kept
whole, in this form, in the bundle's ``sglang-steps.jsonl`` for the step-by-step comparison of
the engine's SGLang mode with real SGLang.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tracekit.engine.config import RETRACTION_POLICIES, RetractionPolicyName

__all__ = [
    "PROTOCOL_VERSION",
    "Candidate",
    "Retraction",
    "ScheduledReq",
    "SglangConfig",
    "SglangStep",
    "scenario_message",
    "step_from_wire",
]

PROTOCOL_VERSION = 1



#: SGLang ``--schedule-policy`` values the recorder drives.
SchedulePolicyName = Literal["fcfs", "lpm"]
SCHEDULE_POLICIES: tuple[str, ...] = get_args(SchedulePolicyName)

@dataclass(frozen=True, slots=True)
class SglangConfig:
    """The SGLang configuration of one recorded run (page size 1: a block is a token).

    Parameters
    ----------
    kv_tokens
        Size of the KV token pool (``MHATokenToKVPool`` / ``TokenToKVPoolAllocator``).
    max_running_requests
        ``--max-running-requests``; ``ReqToTokenPool`` gets one row more.
    chunked_prefill_size
        ``--chunked-prefill-size`` (``None``: no chunking).
    max_prefill_tokens
        ``--max-prefill-tokens``: the prefill token budget of one step (``PrefillAdder``).
    max_context_len
        ``--context-length``; a prompt of this length or more is rejected.
    radix_cache
        False for ``--disable-radix-cache``.
    retraction_policy
        ``--retraction-policy``: ``length`` (SGLang's default) or ``priority`` (which turns on
        ``--enable-priority-scheduling`` with lower values first and priority preemption off).
    schedule_policy
        ``--schedule-policy``: ``fcfs`` or ``lpm`` (longest prefix match; needs the cache).
    step_s
        Seconds per step of the steps clock that turns arrival times into step indices.
    max_steps
        Stop a run that has not ended after this many step indices.
    """

    kv_tokens: int = 4096
    max_running_requests: int = 64
    chunked_prefill_size: int | None = 512
    max_prefill_tokens: int = 4096
    max_context_len: int = 4096
    radix_cache: bool = True
    retraction_policy: RetractionPolicyName = "length"
    schedule_policy: SchedulePolicyName = "fcfs"
    step_s: float = 0.02
    max_steps: int = 10_000_000

    def __post_init__(self) -> None:
        for name in ("kv_tokens", "max_running_requests", "max_prefill_tokens", "max_context_len"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.chunked_prefill_size is not None and self.chunked_prefill_size <= 0:
            raise ValueError("chunked_prefill_size must be positive or None")
        if self.retraction_policy not in RETRACTION_POLICIES:
            raise ValueError(
                f"retraction_policy must be length or priority, not {self.retraction_policy!r}"
            )
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(f"schedule_policy must be fcfs or lpm, not {self.schedule_policy!r}")
        if not self.step_s > 0:
            raise ValueError(f"step_s must be positive, got {self.step_s!r}")


def scenario_message(
    index: int,
    config: SglangConfig,
    requests: Iterable[Sequence[Any]],
) -> dict[str, Any]:
    """One scenario for the driver.

    Parameters
    ----------
    index
        The run's index; every answer carries it as ``run``.
    config
        The SGLang configuration.
    requests
        ``(request_id, arrival_s, prompt_tokens, output_tokens, max_tokens, priority,
        prefix_hash_ids or None)`` each, in input order (the driver sorts by arrival, then
        position; the position also picks the request's own prompt tokens).
    """
    rows = []
    for r in requests:
        rid, arrival_s, prompt, output, max_tokens, priority, hashes = r
        rows.append(
            [
                str(rid),
                float(arrival_s),
                int(prompt),
                int(output),
                int(max_tokens),
                int(priority),
                None if hashes is None else [int(h) for h in hashes],
            ]
        )
    return {
        "kind": "scenario",
        "protocol": PROTOCOL_VERSION,
        "run": index,
        "config": dataclasses.asdict(config),
        "requests": rows,
    }


@dataclass(frozen=True, slots=True)
class ScheduledReq:
    """One request of a step's batch."""

    request_id: str
    # Tokens computed in the step: the prefill chunk, or 1 when decoding.
    new_tokens: int
    # Prefill: tokens already in KV before the step (a radix-cache hit, or the request's own
    # earlier chunks); 0 when decoding.
    cached_tokens: int
    # Output tokens the request had before the step.
    output_tokens: int
    # True when the request continues its own chunked prefill (cached_tokens are its chunks).
    continued_chunk: bool = False

    @property
    def radix_hit_tokens(self) -> int:
        """Tokens of a prefill served from the radix cache (0 for a continued chunk)."""
        return 0 if self.continued_chunk else self.cached_tokens


@dataclass(frozen=True, slots=True)
class Candidate:
    """A request of the running batch when a retraction started."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    priority: int | None
    retractions: int


@dataclass(frozen=True, slots=True)
class Retraction:
    """One call of ``ScheduleBatch.retract_decode`` (one or more victims)."""

    # The running batch in its order when check_decode_mem failed.
    candidates: tuple[Candidate, ...]
    # _get_decode_retraction_order: most to least preferred to keep (victims pop from the end).
    keep_order: tuple[str, ...]
    # In the order retracted.
    victims: tuple[str, ...]
    aborted: tuple[str, ...]
    kept: tuple[str, ...]
    new_token_ratio_before: float
    new_token_ratio_after: float
    free_tokens_before: int
    tokens_gained: int
    # Index of each victim in the waiting queue right after it was put back.
    waiting_positions: tuple[int, ...]
    waiting_len: int


@dataclass(frozen=True, slots=True)
class SglangStep:
    """One scheduler iteration that ran a batch."""

    step: int
    mode: Literal["prefill", "decode"]
    reqs: tuple[ScheduledReq, ...]
    retractions: tuple[Retraction, ...]
    arrived: tuple[str, ...]
    # The waiting queue, running batch and chunked request after the step's outputs.
    waiting: tuple[str, ...]
    running: tuple[str, ...]
    chunked: str | None
    finished: tuple[str, ...]
    # new_token_ratio after the step (after its decay or retraction reset).
    new_token_ratio: float
    # Why admission stopped (an ``AddReqResult`` name, ``batch_full``, ``budget``) or None.
    admission_stop: str | None
    # new_token_ratio that admission used, or None when no admission ran.
    admission_ratio: float | None
    # Token pool after scheduling (before outputs): free, and held only by the radix tree.
    free_tokens: int
    evictable_tokens: int

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens prefilled in the step."""
        return sum(r.new_tokens for r in self.reqs) if self.mode == "prefill" else 0

    @property
    def num_decode_tokens(self) -> int:
        """Tokens decoded in the step."""
        return len(self.reqs) if self.mode == "decode" else 0

    @property
    def victims(self) -> tuple[str, ...]:
        """Every request retracted in the step, in order."""
        return tuple(v for r in self.retractions for v in r.victims)


def _retraction(raw: Mapping[str, Any]) -> Retraction:
    return Retraction(
        candidates=tuple(Candidate(*c) for c in raw["candidates"]),
        keep_order=tuple(raw["keep_order"]),
        victims=tuple(raw["victims"]),
        aborted=tuple(raw.get("aborted", ())),
        kept=tuple(raw["kept"]),
        new_token_ratio_before=float(raw["new_token_ratio_before"]),
        new_token_ratio_after=float(raw["new_token_ratio_after"]),
        free_tokens_before=int(raw["free_tokens_before"]),
        tokens_gained=int(raw["tokens_gained"]),
        waiting_positions=tuple(int(p) for p in raw["waiting_positions"]),
        waiting_len=int(raw["waiting_len"]),
    )


def step_from_wire(message: Mapping[str, Any]) -> SglangStep:
    """Parse a ``step`` message; ``ValueError`` on a malformed one."""
    if message.get("kind") != "step":
        raise ValueError(f"expected a step message, got kind {message.get('kind')!r}")
    try:
        admission = message.get("admission") or {}
        mode = message["mode"]
        if mode not in ("prefill", "decode"):
            raise ValueError(f"unknown step mode {mode!r}")
        return SglangStep(
            step=int(message["step"]),
            mode=mode,
            reqs=tuple(
                ScheduledReq(str(r[0]), int(r[1]), int(r[2]), int(r[3]), bool(r[4]))
                for r in message["reqs"]
            ),
            retractions=tuple(_retraction(r) for r in message.get("retractions", ())),
            arrived=tuple(message.get("arrived", ())),
            waiting=tuple(message["waiting"]),
            running=tuple(message["running"]),
            chunked=message.get("chunked"),
            finished=tuple(message.get("finished", ())),
            new_token_ratio=float(message["new_token_ratio"]),
            admission_stop=admission.get("stop"),
            admission_ratio=(
                None if "new_token_ratio" not in admission else float(admission["new_token_ratio"])
            ),
            free_tokens=int(message["free_tokens"]),
            evictable_tokens=int(message.get("evictable_tokens", 0)),
        )
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"malformed step message ({error!r}): {dict(message)}") from error
