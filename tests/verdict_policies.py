"""User policies (``module:Object``) that the verdict rule must judge right: the positive controls.

- :class:`BuiltinTwin` picks exactly the built-in rule's victim under another name: it must never
  come out beneficial or harmful.
- :class:`WorstVictim` is built to preempt badly: it evicts the running request that has done the
  most work (most computed tokens, the oldest on ties), so every preemption throws away as much
  KV as it can and delays the request nearest to finishing. It must come out harmful.

Both implement the typed contract and the legacy ``pick_victim`` (qualify's legacy-versus-typed
diff runs the candidate through both hosts).
"""

from __future__ import annotations

from typing import Any

from tracekit.hosts.preemption_policy import builtin_victim_id


class BuiltinTwin:
    """The built-in victim rule, as a user policy."""

    def select_victim(self, context: Any) -> str | None:
        return builtin_victim_id(context)

    def pick_victim(self, running: Any, policy: Any, **kwargs: Any) -> Any:
        # vLLM's FCFS rule: the tail of the running queue (the candidates come in its order).
        return running[-1]


def _worst(candidates: Any) -> Any:
    return max(candidates, key=lambda c: (c.num_computed_tokens, -c.arrival_time))


class WorstVictim:
    """Evicts the running request with the most computed tokens: the most work thrown away."""

    def select_victim(self, context: Any) -> str | None:
        return str(_worst(context.candidates).request_id)

    def pick_victim(self, running: Any, policy: Any, **kwargs: Any) -> Any:
        return _worst(running)
