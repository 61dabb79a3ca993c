"""Static extension manifests that describe the BidKV policy to engines and extension managers.

This package is the value of the ``org.vllm-hust.bidkv`` entry point in the groups
``vllm.extension_bundles`` and ``vllm_hust.extension_bundles``. Its JSON files describe one
in-process scheduler policy:

- ``vllm-hust-extension-v0.2.json`` (``0.2-experimental``) and ``vllm-hust-extension-v0.3.json``
  (``0.3-experimental``, adds the exclusive ``vllm.scheduler.preemption-policy`` resource claim):
  Extension Manager manifests for the typed ``vllm.preemption-policy.v1`` contract, rendered as
  ``--preemption-policy bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy``.
- ``vllm-hust-extension-v1.json`` (Bundle v1, ``1.0``): the ``vllm.scheduler.policy.v1``
  component ``org.vllm-hust.bidkv/victim-selector`` for pre-0.28 hosts' ``VictimSelector`` seam.

Discovery must stay inert: importing this package, listing and reading its manifests never
imports the policy module (``bidkv.adapters.vllm_hust.selector``). Standard library only.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["load_manifest", "manifest_names"]


def manifest_names() -> list[str]:
    """The file names of the bundled manifests, sorted.

    Examples
    --------
    >>> for name in manifest_names():
    ...     print(name)
    vllm-hust-extension-v0.2.json
    vllm-hust-extension-v0.3.json
    vllm-hust-extension-v1.json
    """
    return sorted(
        entry.name for entry in resources.files(__name__).iterdir() if entry.name.endswith(".json")
    )


def load_manifest(name: str) -> dict[str, Any]:
    """Parse one bundled manifest by file name.

    Raises
    ------
    FileNotFoundError
        If ``name`` is not one of :func:`manifest_names`.
    """
    if name not in manifest_names():
        raise FileNotFoundError(
            f"no bundled manifest {name!r}; available: {', '.join(manifest_names())}"
        )
    document: dict[str, Any] = json.loads(
        resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    )
    return document
