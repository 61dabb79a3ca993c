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
from typing import Any, Literal

from tracekit.defaults import SCHEDULE_POLICIES, SchedulePolicyName
from tracekit.engine.config import (
    RETRACTION_POLICIES,
    SGLANG_DEFAULTS,
    EngineConfig,
    RetractionPolicyName,
)

__all__ = [
    "PROTOCOL_VERSION",
    "SCENARIO_PRE_FEATURE_SETTINGS",
    "Candidate",
    "Retraction",
    "ScheduledReq",
    "SglangConfig",
    "SglangStep",
    "scenario_message",
    "step_from_wire",
    "unordered_requeue",
]

#: 2: overlap scheduling, the priority options, ``ignore_eos`` per request, priority
#: preemptions at admission in the step records.
PROTOCOL_VERSION = 2

#: SGLang ``--schedule-policy`` values the recorder drives.

#: What a recorded scenario that lacks the overlap and priority options was recorded with
#: (protocol 1): the normal loop; priority scheduling, lower values first and no priority
#: preemption exactly with ``--retraction-policy priority``; no chunking for an unset chunk.
SCENARIO_PRE_FEATURE_SETTINGS: dict[str, Any] = {
    "overlap_schedule": False,
    "schedule_low_priority_values_first": True,
    "disable_priority_preemption": True,
}

# SglangConfig field -> the EngineConfig field it is (page size 1: a KV token is a block). The
# SGLang-only settings have one name in both; kv_tokens, max_running_requests,
# max_prefill_tokens and max_context_len are the engine's pool, running cap, token budget and
# model length under SGLang's names.
_SHARED = {
    "max_running_requests": "max_num_seqs",
    "max_prefill_tokens": "max_num_batched_tokens",
    "max_context_len": "max_model_len",
}
_SAME = (
    "chunked_prefill_size",
    "radix_cache",
    "retraction_policy",
    "overlap_schedule",
    "enable_priority_scheduling",
    "schedule_low_priority_values_first",
    "disable_priority_preemption",
    "priority_scheduling_preemption_threshold",
    "step_s",
)
#: The pool of SGLang mode's default, in tokens (its blocks less the null block, page size 1).
_DEFAULT_KV_TOKENS = (SGLANG_DEFAULTS["num_blocks"] - 1) * SGLANG_DEFAULTS["block_size"]


@dataclass(frozen=True, slots=True)
class SglangConfig:
    """The SGLang configuration of one recorded run, spelled as SGLang spells it (page size 1).

    The engine's SGLang mode under SGLang's names, derived from :class:`EngineConfig`: every
    field is an :class:`EngineConfig` field (:meth:`engine_config`, :meth:`from_engine_config`),
    its defaults are SGLang mode's (:data:`tracekit.engine.config.SGLANG_DEFAULTS`: SGLang
    0.5.23's own), and it is checked by building that :class:`EngineConfig`, so both types
    accept the same values. Construction resolves the unset fields (``max_running_requests``,
    ``chunked_prefill_size``) to SGLang's defaults.

    Parameters
    ----------
    kv_tokens
        Size of the KV token pool (``MHATokenToKVPool`` / ``TokenToKVPoolAllocator``).
    max_running_requests
        ``--max-running-requests``; ``ReqToTokenPool`` gets one row more. Unset: SGLang's
        derived default (:func:`tracekit.engine.config.sglang_max_running_requests`).
    chunked_prefill_size
        ``--chunked-prefill-size``; 0 (or None in a scenario of protocol 1) turns chunking off
        (SGLang's -1). Unset: SGLang's default on the A6000 (4,096).
    max_prefill_tokens
        ``--max-prefill-tokens``: the prefill token budget of one step (``PrefillAdder``).
    max_context_len
        ``--context-length``; a prompt of this length or more is rejected.
    radix_cache
        False for ``--disable-radix-cache``.
    retraction_policy
        ``--retraction-policy``: ``length`` (SGLang's default) or ``priority`` (which needs
        ``enable_priority_scheduling``, as SGLang checks).
    schedule_policy
        ``--schedule-policy``: ``fcfs`` or ``lpm`` (longest prefix match; needs the cache; the
        engine models ``fcfs`` only).
    overlap_schedule
        The overlap event loop (``event_loop_overlap``, SGLang's default); False is
        ``--disable-overlap-schedule`` (``event_loop_normal``).
    enable_priority_scheduling
        ``--enable-priority-scheduling`` (required by ``retraction_policy="priority"``).
    schedule_low_priority_values_first
        ``--schedule-low-priority-values-first`` (off: a larger value is more important).
    disable_priority_preemption
        ``--disable-priority-preemption`` (off: priority scheduling preempts at admission).
    priority_scheduling_preemption_threshold
        ``--priority-scheduling-preemption-threshold`` (10).
    step_s
        Seconds per step of the steps clock that turns arrival times into step indices.
    max_steps
        Stop a run that has not ended after this many step indices.
    """

    kv_tokens: int = _DEFAULT_KV_TOKENS
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = SGLANG_DEFAULTS["max_num_batched_tokens"]
    max_context_len: int = SGLANG_DEFAULTS["max_model_len"]
    radix_cache: bool = SGLANG_DEFAULTS["radix_cache"]
    retraction_policy: RetractionPolicyName = SGLANG_DEFAULTS["retraction_policy"]
    schedule_policy: SchedulePolicyName = "fcfs"
    overlap_schedule: bool = SGLANG_DEFAULTS["overlap_schedule"]
    enable_priority_scheduling: bool = SGLANG_DEFAULTS["enable_priority_scheduling"]
    schedule_low_priority_values_first: bool = SGLANG_DEFAULTS["schedule_low_priority_values_first"]
    disable_priority_preemption: bool = SGLANG_DEFAULTS["disable_priority_preemption"]
    priority_scheduling_preemption_threshold: int = SGLANG_DEFAULTS[
        "priority_scheduling_preemption_threshold"
    ]
    step_s: float = 0.02
    max_steps: int = 10_000_000

    def __post_init__(self) -> None:
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(f"schedule_policy must be fcfs or lpm, not {self.schedule_policy!r}")
        if self.retraction_policy not in RETRACTION_POLICIES:
            raise ValueError(
                f"retraction_policy must be length or priority, not {self.retraction_policy!r}"
            )
        if not isinstance(self.max_steps, int) or self.max_steps <= 0:
            raise ValueError(f"max_steps must be a positive integer, got {self.max_steps!r}")
        for name in ("kv_tokens", "max_prefill_tokens", "max_context_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        # One check of every value, the engine's; it also resolves the unset ones.
        engine = self._engine(self.max_running_requests, self.chunked_prefill_size)
        object.__setattr__(self, "max_running_requests", engine.max_num_seqs)
        object.__setattr__(self, "chunked_prefill_size", engine.chunked_prefill_size)

    def _engine(self, running: int | None, chunk: int | None) -> EngineConfig:
        settings: dict[str, Any] = {"mode": "sglang", "clock": "steps", "block_size": 1}
        settings["num_blocks"] = self.kv_tokens + 1  # the engine's null block
        for name, field in _SHARED.items():
            settings[field] = getattr(self, name)
        for name in _SAME:
            settings[name] = getattr(self, name)
        settings["max_num_seqs"] = running
        settings["chunked_prefill_size"] = chunk
        return EngineConfig(**settings)

    def engine_config(self) -> EngineConfig:
        """The engine configuration this is (SGLang mode, page size 1, the steps clock).

        Raises ``ValueError`` for ``schedule_policy="lpm"``, which the engine does not model.
        """
        if self.schedule_policy != "fcfs":
            raise ValueError(
                f"schedule_policy {self.schedule_policy!r} is recorded but not modelled by the "
                "engine (fcfs only)"
            )
        return self._engine(self.max_running_requests, self.chunked_prefill_size)

    @classmethod
    def from_engine_config(cls, config: EngineConfig, **recorder: Any) -> SglangConfig:
        """The SGLang configuration of an SGLang-mode engine configuration.

        ``recorder``: ``max_steps`` (the recorder's own). Raises ``ValueError`` unless
        ``config`` is SGLang mode with page size 1.
        """
        if config.mode != "sglang" or config.block_size != 1:
            raise ValueError(
                f"an SGLang recording needs mode 'sglang' and block_size 1; found mode "
                f"{config.mode!r}, block_size {config.block_size}"
            )
        values = {name: getattr(config, field) for name, field in _SHARED.items()}
        values |= {name: getattr(config, name) for name in _SAME}
        return cls(kv_tokens=config.num_usable_blocks, **values, **recorder)

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> SglangConfig:
        """A scenario's ``config``; one of protocol 1 keeps the settings of its time."""
        settings = dict(raw)
        if "overlap_schedule" not in settings:
            settings = {**SCENARIO_PRE_FEATURE_SETTINGS, **settings}
            settings["enable_priority_scheduling"] = settings.get("retraction_policy") == "priority"
        if settings.get("chunked_prefill_size") is None:
            settings["chunked_prefill_size"] = 0  # protocol 1: unset was no chunking
        return cls(**settings)


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
        prefix_hash_ids or None[, ignore_eos])`` each, in input order (the driver sorts by
        arrival, then position; the position also picks the request's own prompt tokens).
        ``ignore_eos`` (default False) is the request's sampling parameter of that name.
    """
    rows = []
    for r in requests:
        rid, arrival_s, prompt, output, max_tokens, priority, hashes = r[:7]
        ignore_eos = bool(r[7]) if len(r) > 7 else False
        rows.append(
            [
                str(rid),
                float(arrival_s),
                int(prompt),
                int(output),
                int(max_tokens),
                int(priority),
                None if hashes is None else [int(h) for h in hashes],
                ignore_eos,
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
    # KV tokens the request held (``kv_committed_len``); None in protocol 1, where it was
    # prompt + outputs - 1 (the normal loop's).
    kv_tokens: int | None = None

    @property
    def held_tokens(self) -> int:
        """KV tokens held: what a retraction frees and what is computed again."""
        if self.kv_tokens is not None:
            return self.kv_tokens
        return self.prompt_tokens + max(self.output_tokens - 1, 0)


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
    # Running requests preempted at admission for a more important arrival
    # (PrefillAdder.preempt_to_schedule), in the order they were put back in the waiting
    # queue, and the KV tokens each held.
    preempted: tuple[tuple[str, int], ...] = ()

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

    @property
    def preempted_ids(self) -> tuple[str, ...]:
        """Every request preempted at admission in the step, in requeue order."""
        return tuple(rid for rid, _ in self.preempted)

    @property
    def admissions(self) -> tuple[ScheduledReq, ...]:
        """The requests of a prefill taken from the waiting queue (not a continuing chunk)."""
        if self.mode != "prefill":
            return ()
        return tuple(r for r in self.reqs if not r.continued_chunk)


def unordered_requeue(
    waiting: Sequence[str], preempted: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A step's waiting queue and preemptions with the order SGLang left to chance taken out.

    ``PrefillAdder.preempt_to_schedule`` (``schedule_policy.py``) puts the requests it preempts
    for one arrival in a ``set`` and requeues them in its order: ``Req`` has no ``__hash__`` of
    its own, so that is an order of object addresses, which changes from run to run (even within
    one process; PYTHONHASHSEED does not reach it). Returns the queue with the preempted
    requests' places refilled in sorted order, and the preempted ids sorted: two runs that
    differ only in that order compare equal. (``retract_decode``'s victims are a list, in
    retraction order: nothing to take out there.)
    """
    if len(preempted) < 2:
        return tuple(waiting), tuple(preempted)
    group = set(preempted)
    ordered = iter(sorted(r for r in waiting if r in group))
    return tuple(next(ordered) if r in group else r for r in waiting), tuple(sorted(preempted))


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
            preempted=tuple((str(p[0]), int(p[1])) for p in message.get("preempted", ())),
        )
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"malformed step message ({error!r}): {dict(message)}") from error
