"""Extension manifests: validation against their JSON Schemas and the policy rules, and rendering.

:mod:`~tracekit.manifests.schema` is the one reader of ``schemas/manifests/``;
:mod:`~tracekit.manifests.validate` applies the policy rules on top and renders activations.
``docs/contracts.md`` describes the formats.
"""

from tracekit.manifests.validate import (
    BUNDLE_SCHEMA_VERSION,
    PREEMPTION_POLICY_CLAIM,
    PREEMPTION_POLICY_CONTRACT,
    QUALIFICATION_KEY,
    ManifestCheck,
    ManifestProblem,
    RenderedActivation,
    find_problems,
    manifest_schemas,
    render_manifest,
    validate_manifest,
)

__all__ = [
    "BUNDLE_SCHEMA_VERSION",
    "PREEMPTION_POLICY_CLAIM",
    "PREEMPTION_POLICY_CONTRACT",
    "QUALIFICATION_KEY",
    "ManifestCheck",
    "ManifestProblem",
    "RenderedActivation",
    "find_problems",
    "manifest_schemas",
    "render_manifest",
    "validate_manifest",
]
