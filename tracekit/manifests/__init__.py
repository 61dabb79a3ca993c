"""Extension manifests: validation against their JSON Schemas and the policy rules, and rendering.

:mod:`~tracekit.manifests.schema` is the one reader of ``schemas/manifests/``;
:mod:`~tracekit.manifests.validate` applies the policy rules on top and renders activations.
``docs/contracts.md`` describes the formats.
"""

# The package's names are validate's: its __all__ is the one list of them.
from tracekit.manifests.validate import *  # noqa: F403
from tracekit.manifests.validate import __all__ as __all__
