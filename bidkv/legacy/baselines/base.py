"""Common types of the legacy victim strategies (the ``select_victims`` API).

See docs/bidkv-core.md, "The legacy strategies (select_victims)".

A strategy receives the running requests of one pressure event and the number of tokens to free,
and returns actions ordered from most to least expendable. Every strategy of one event sees the
same candidate list, which keeps comparisons between strategies fair.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

__all__ = [
    "ACTION_TYPES",
    "BaselineCandidate",
    "BaselineContext",
    "BaselineStrategy",
    "CompressionAction",
    "act_until_freed",
    "latest_per_request",
]

_Item = TypeVar("_Item")

ActionType = Literal["evict", "compress"]
ACTION_TYPES: tuple[ActionType, ...] = ("evict", "compress")
"""The two action types: evict the whole request, or compress part of it."""


@dataclass(frozen=True)
class BaselineCandidate:
    """Snapshot of one running request, as the legacy adapters build it.

    Published as ``bidkv.RequestState``, the original's name; called ``BaselineCandidate`` here
    so that it is not mistaken for the engine's mutable ``RequestState`` in tracekit.

    Parameters
    ----------
    request_id : str
        The request.
    current_tokens : int
        Tokens the adapter tracks for it (prompt + generated; 0 when untracked).
    priority : float, optional
        Eviction order key for preempt-evict (lowest goes first); adapters set ``-arrival_ms``.
    arrival_time_ms : float, optional
        Arrival time, monotonic milliseconds.
    deadline_ms : float or None, optional
        SLO deadline, monotonic milliseconds; ``None`` when there is none.
    token_ids : tuple of int, optional
        The tokens, for scoring; may be empty.
    num_prompt_tokens : int, optional
        Prompt length.
    num_computed_tokens : int, optional
        Prompt plus output tokens computed so far.
    max_output_tokens : int, optional
        Output limit; 0 when unknown.
    num_preemptions : int, optional
        Times the request has been preempted.
    private_tokens : int, optional
        SGLang radix-tree tokens no other request shares; 0 when unknown.

    Notes
    -----
    No field is validated: adapters pass what the engine reports, including untracked requests
    with ``current_tokens == 0``; each strategy decides which candidates it can use.
    """

    request_id: str
    current_tokens: int
    priority: float = 0.0
    arrival_time_ms: float = 0.0
    deadline_ms: float | None = None
    token_ids: tuple[int, ...] = ()
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    max_output_tokens: int = 0
    num_preemptions: int = 0
    private_tokens: int = 0


@dataclass(frozen=True)
class CompressionAction:
    """One decision of a strategy: evict or compress one request.

    Parameters
    ----------
    request_id : str
        The request acted on.
    action_type : {"evict", "compress"}
        Evict the whole request, or compress part of it.
    target_tokens : int
        Tokens this action frees; must be > 0.
    metadata : dict, optional
        Strategy-specific details (always includes ``strategy``).

    Raises
    ------
    ValueError
        For an unknown ``action_type`` or ``target_tokens <= 0``.
    """

    request_id: str
    action_type: ActionType
    target_tokens: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.action_type not in ACTION_TYPES:
            raise ValueError(f"action_type must be 'evict' or 'compress', got {self.action_type!r}")
        if not self.target_tokens > 0:
            raise ValueError(f"target_tokens must be > 0, got {self.target_tokens}")


@runtime_checkable
class BaselineContext(Protocol):
    """What a framework adapter offers a strategy driver (structural).

    A driver asks it for the candidates and the KV occupancy of the current pressure event.
    """

    def get_active_requests(self) -> list[BaselineCandidate]:
        """Return a snapshot of every running request.

        Returns
        -------
        list of BaselineCandidate
            The candidates of the current pressure event.
        """
        ...

    def get_kv_stats(self) -> tuple[int, int]:
        """Return KV occupancy.

        Returns
        -------
        tuple of int
            ``(used_tokens, max_tokens)``.
        """
        ...


class BaselineStrategy(ABC):
    """A victim strategy of the ``select_victims`` API.

    Subclasses give a registry :attr:`name` and implement :meth:`select_victims`. Every shipped
    strategy returns ``[]`` when ``needed_tokens <= 0`` or there are no candidates, never returns
    a request twice, and stops adding actions once their ``target_tokens`` reach
    ``needed_tokens``.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Name under which the strategy is registered."""

    @abstractmethod
    def select_victims(
        self,
        candidates: Sequence[BaselineCandidate],
        needed_tokens: int,
        **kwargs: Any,
    ) -> list[CompressionAction]:
        """Choose the requests to act on.

        Parameters
        ----------
        candidates : sequence of BaselineCandidate
            Running requests of this pressure event. Should a request id appear twice, its last
            snapshot is used, at the position of its first appearance.
        needed_tokens : int
            Tokens to free.
        **kwargs
            Strategy-specific options.

        Returns
        -------
        list of CompressionAction
            Ordered from most to least expendable; may free fewer tokens than needed when the
            candidates cannot.
        """


def latest_per_request(candidates: Sequence[BaselineCandidate]) -> list[BaselineCandidate]:
    """Keep one snapshot per request id: the last one, at the first one's position.

    Mirrors the bid pool (a later submission replaces a request's bids) so that no strategy can
    name the same request twice.

    Parameters
    ----------
    candidates : sequence of BaselineCandidate
        Possibly with repeated ids.

    Returns
    -------
    list of BaselineCandidate
        Unique by ``request_id``.
    """
    by_id: dict[str, BaselineCandidate] = {}
    for request in candidates:
        by_id[request.request_id] = request
    return list(by_id.values())


def act_until_freed(
    ordered: Iterable[_Item],
    needed_tokens: int,
    action: Callable[[_Item, int], CompressionAction],
) -> list[CompressionAction]:
    """One action per item, in order, until the actions' ``target_tokens`` reach ``needed_tokens``.

    The stopping rule every shipped strategy shares. ``action(item, still_needed)`` makes an
    item's action (``still_needed`` lets a strategy trim its last action).
    """
    actions: list[CompressionAction] = []
    freed = 0
    for item in ordered:
        if freed >= needed_tokens:
            break
        act = action(item, needed_tokens - freed)
        actions.append(act)
        freed += act.target_tokens
    return actions
