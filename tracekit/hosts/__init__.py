"""Engine side of the victim-policy contracts, emulated with the standard library only.

Two engine hosts load a victim policy (docs/contracts.md):

- :mod:`tracekit.hosts.preemption_policy`: the typed ``vllm.preemption-policy.v1`` contract
  (current vLLM-HUST). ``--preemption-policy package.module.Class`` is loaded by
  :func:`load_policy`, and a :class:`PreemptionPolicyController` per engine process counts calls,
  applies the built-in victim on abstention, disables a failing policy, and never raises on a
  context that breaks the contract (:func:`context_problem`, :func:`fallback_victim_id`).
- :mod:`tracekit.hosts.victim_selector`: the legacy ``VictimSelector`` contract (pre-0.28
  vLLM-HUST), discovered by :func:`get_victim_selector` from an admitted typed Bundle v1
  component (:mod:`tracekit.hosts.bundles`) or a ``vllm.victim_selector`` entry point, and
  driven per decision by :class:`VictimSelectorHost`.

Both hosts satisfy :class:`HostContract` (:mod:`tracekit.hosts.contract`), the one interface the
replay engine calls. Nothing in this package imports a third-party module, so engines and the
embedded engine can use it without the ``tracekit`` extra.
"""

from tracekit.hosts.bundles import (
    AdmittedBundle,
    AdmittedComponent,
    BundleAdmissionError,
    resolve_admitted_bundles,
)
from tracekit.hosts.contract import HostContract
from tracekit.hosts.preemption_policy import (
    PREEMPTION_POLICY_API_VERSION,
    PolicyOutcome,
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicy,
    PreemptionPolicyController,
    PreemptionPolicyStats,
    SchedulingPolicyName,
    builtin_victim,
    builtin_victim_id,
    context_problem,
    fallback_victim_id,
    load_policy,
)
from tracekit.hosts.victim_selector import (
    VICTIM_SELECTOR_API_VERSION,
    NoOpVictimSelector,
    SchedulingPolicy,
    VictimSelector,
    VictimSelectorHost,
    VictimSelectorMaterializationError,
    get_victim_selector,
)

__all__ = [
    "PREEMPTION_POLICY_API_VERSION",
    "VICTIM_SELECTOR_API_VERSION",
    "AdmittedBundle",
    "AdmittedComponent",
    "BundleAdmissionError",
    "HostContract",
    "NoOpVictimSelector",
    "PolicyOutcome",
    "PreemptionCandidate",
    "PreemptionContext",
    "PreemptionPolicy",
    "PreemptionPolicyController",
    "PreemptionPolicyStats",
    "SchedulingPolicy",
    "SchedulingPolicyName",
    "VictimSelector",
    "VictimSelectorHost",
    "VictimSelectorMaterializationError",
    "builtin_victim",
    "builtin_victim_id",
    "context_problem",
    "fallback_victim_id",
    "get_victim_selector",
    "load_policy",
    "resolve_admitted_bundles",
]
