"""Admission of typed extension bundles (Bundle v1) for the legacy ``VictimSelector`` host.

A pre-0.28 vLLM-HUST host builds an immutable startup snapshot of *admitted* extension bundles
before the scheduler starts (docs/contracts.md, "Bundle admission"). Here the installed bundles
are found through the entry-point groups ``vllm.extension_bundles`` and
``vllm_hust.extension_bundles``: the entry-point name is the bundle id and its value names a
package whose JSON files are the static manifests (``org.vllm-hust.bidkv = bidkv.manifests``). Only
bundles on an explicit allow-list are admitted (the ``bundles`` argument, or the host's
``VLLM_EXTENSION_BUNDLES`` environment variable), so installing a distribution is inert.

Discovery reads manifest files with :mod:`importlib.resources` and never imports a component's
``implementation_ref``; that happens only after a component has been selected. Standard library
only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata, resources
from typing import Any

__all__ = [
    "ADMITTED_BUNDLES_ENV",
    "BUNDLE_SCHEMA_VERSION",
    "EXTENSION_BUNDLE_GROUPS",
    "HOST_API_VERSION",
    "AdmittedBundle",
    "AdmittedComponent",
    "BundleAdmissionError",
    "admitted_bundle_ids",
    "components_for",
    "resolve_admitted_bundles",
    "version_in_range",
]

# Entry-point groups under which distributions register their manifest packages.
EXTENSION_BUNDLE_GROUPS = ("vllm.extension_bundles", "vllm_hust.extension_bundles")

# Comma-separated bundle ids the host admits when no explicit list is passed.
ADMITTED_BUNDLES_ENV = "VLLM_EXTENSION_BUNDLES"

# The manifest format the host reads; Manager manifests (0.2/0.3-experimental) are skipped.
BUNDLE_SCHEMA_VERSION = "1.0"

# The host extension API version that ``host_api_range`` must admit.
HOST_API_VERSION = "1.0"

# The only isolation level the host supports; it is not a sandbox.
TRUSTED_IN_PROCESS = "trusted_in_process"

_CLAUSE = re.compile(r"(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)")


class BundleAdmissionError(RuntimeError):
    """An admitted bundle cannot be read; the host refuses to start."""


@dataclass(frozen=True, slots=True)
class AdmittedComponent:
    """One component of an admitted bundle, as the host's startup snapshot lists it."""

    bundle_id: str
    component_id: str
    contracts: tuple[str, ...]
    execution_planes: tuple[str, ...]
    implementation_ref: str
    source: str

    @property
    def qualified_id(self) -> str:
        """``<bundle_id>/<component_id>``, the value ``victim_selector_component`` names."""
        return f"{self.bundle_id}/{self.component_id}"


@dataclass(frozen=True, slots=True)
class AdmittedBundle:
    """An admitted Bundle v1 manifest (``source`` is ``<package>/<file name>``)."""

    bundle_id: str
    bundle_version: str
    host_api_range: str
    components: tuple[AdmittedComponent, ...]
    source: str


def version_in_range(version: str, version_range: str) -> bool:
    """Whether a dotted integer ``version`` satisfies every clause of ``version_range``.

    Clauses are comma-separated comparisons such as ``">=1,<2"``; missing trailing components
    count as zero, so ``"1.0"`` equals ``"1"``.

    Raises
    ------
    ValueError
        If a clause or the version is not of that form.

    Examples
    --------
    >>> version_in_range("1.0", ">=1,<2")
    True
    >>> version_in_range("2.0", ">=1,<2")
    False
    """
    if not re.fullmatch(r"\d+(?:\.\d+)*", version):
        raise ValueError(f"version {version!r} is not a dotted integer version")
    have = tuple(int(part) for part in version.split("."))
    for clause in version_range.split(","):
        match = _CLAUSE.fullmatch(clause.strip())
        if match is None:
            raise ValueError(
                f"version range clause {clause.strip()!r} in {version_range!r} is not "
                "of the form <op><version> with op in >=, <=, ==, !=, >, <"
            )
        operator, bound_text = match.groups()
        bound = tuple(int(part) for part in bound_text.split("."))
        width = max(len(have), len(bound))
        left = have + (0,) * (width - len(have))
        right = bound + (0,) * (width - len(bound))
        satisfied = {
            ">=": left >= right,
            "<=": left <= right,
            "==": left == right,
            "!=": left != right,
            ">": left > right,
            "<": left < right,
        }[operator]
        if not satisfied:
            return False
    return True


def admitted_bundle_ids(bundles: Iterable[str] | None = None) -> tuple[str, ...]:
    """The allow-list: ``bundles`` if given, else ``VLLM_EXTENSION_BUNDLES`` (comma-separated)."""
    if bundles is None:
        bundles = os.environ.get(ADMITTED_BUNDLES_ENV, "").split(",")
    elif isinstance(bundles, str):
        raise TypeError(f"bundles must be a collection of bundle ids, not the string {bundles!r}")
    admitted: list[str] = []
    for bundle_id in bundles:
        bundle_id = bundle_id.strip()
        if bundle_id and bundle_id not in admitted:
            admitted.append(bundle_id)
    return tuple(admitted)


def resolve_admitted_bundles(
    bundles: Iterable[str] | None = None,
    *,
    entry_points: Iterable[metadata.EntryPoint] | None = None,
) -> tuple[AdmittedBundle, ...]:
    """Read the Bundle v1 manifest of every admitted bundle.

    Parameters
    ----------
    bundles
        Admitted bundle ids; ``None`` reads ``VLLM_EXTENSION_BUNDLES``.
    entry_points
        Entry points to search instead of the installed ones (tests inject them); only those in
        :data:`EXTENSION_BUNDLE_GROUPS` are used.

    Returns
    -------
    tuple of AdmittedBundle
        In allow-list order. Empty when nothing is admitted (no entry point is read then).

    Raises
    ------
    BundleAdmissionError
        An admitted id is not installed or registered by two packages, or its package has no
        valid Bundle v1 manifest for it (wrong ``bundle_id``, host API range, isolation or
        permissions).
    """
    admitted = admitted_bundle_ids(bundles)
    if not admitted:
        return ()
    packages = _bundle_packages(entry_points)
    resolved = []
    for bundle_id in admitted:
        if bundle_id not in packages:
            installed = sorted(packages) or "none"
            raise BundleAdmissionError(
                f"admitted bundle {bundle_id!r} is not installed (no entry point of that name in "
                f"{' or '.join(EXTENSION_BUNDLE_GROUPS)}); installed bundles: {installed}"
            )
        modules = packages[bundle_id]
        if len(modules) > 1:
            raise BundleAdmissionError(
                f"bundle {bundle_id!r} is registered by several packages {sorted(modules)}; "
                "uninstall the duplicate distribution"
            )
        resolved.append(_read_bundle(bundle_id, next(iter(modules))))
    return tuple(resolved)


def components_for(
    bundles: Sequence[AdmittedBundle], contract: str, plane: str
) -> tuple[AdmittedComponent, ...]:
    """The admitted components that implement ``contract`` on execution plane ``plane``."""
    return tuple(
        component
        for bundle in bundles
        for component in bundle.components
        if contract in component.contracts and plane in component.execution_planes
    )


def _bundle_packages(
    entry_points: Iterable[metadata.EntryPoint] | None,
) -> dict[str, set[str]]:
    """Bundle id -> manifest package names, over both entry-point groups."""
    if entry_points is None:
        found: list[metadata.EntryPoint] = []
        for group in EXTENSION_BUNDLE_GROUPS:
            found.extend(metadata.entry_points(group=group))
        entry_points = found
    packages: dict[str, set[str]] = {}
    for entry_point in entry_points:
        if entry_point.group in EXTENSION_BUNDLE_GROUPS:
            packages.setdefault(entry_point.name, set()).add(entry_point.module)
    return packages


def _read_bundle(bundle_id: str, package: str) -> AdmittedBundle:
    """Find and check the one Bundle v1 manifest for ``bundle_id`` in ``package``."""
    try:
        files = sorted(
            (entry for entry in resources.files(package).iterdir() if entry.name.endswith(".json")),
            key=lambda entry: entry.name,
        )
    except (ImportError, TypeError) as error:
        raise BundleAdmissionError(
            f"cannot read the manifest package {package!r} registered for bundle {bundle_id!r}"
        ) from error
    matches = []
    for entry in files:
        source = f"{package}/{entry.name}"
        try:
            document = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise BundleAdmissionError(f"{source}: not a readable JSON manifest") from error
        if (
            isinstance(document, dict)
            and document.get("schema_version") == BUNDLE_SCHEMA_VERSION
            and document.get("bundle_id") == bundle_id
        ):
            matches.append((source, document))
    if len(matches) != 1:
        found = [source for source, _ in matches] or "none"
        raise BundleAdmissionError(
            f"package {package!r} must ship exactly one Bundle v1 manifest (schema_version "
            f"{BUNDLE_SCHEMA_VERSION!r}) with bundle_id {bundle_id!r}; found: {found}"
        )
    source, document = matches[0]
    return _parse_bundle(document, source)


def _parse_bundle(document: dict[str, Any], source: str) -> AdmittedBundle:
    """Check the fields the host relies on and build the :class:`AdmittedBundle`."""
    bundle_id = document["bundle_id"]
    bundle_version = _field(document, "bundle_version", str, source)
    host_api_range = _field(document, "host_api_range", str, source)
    try:
        compatible = version_in_range(HOST_API_VERSION, host_api_range)
    except ValueError as error:
        raise BundleAdmissionError(f"{source}: /host_api_range: {error}") from error
    if not compatible:
        raise BundleAdmissionError(
            f"{source}: /host_api_range {host_api_range!r} excludes host API {HOST_API_VERSION}"
        )
    raw_components = _field(document, "components", list, source)
    components = []
    for index, raw in enumerate(raw_components):
        where = f"{source}: /components/{index}"
        if not isinstance(raw, dict):
            raise BundleAdmissionError(f"{where}: expected an object")
        if raw.get("isolation") != TRUSTED_IN_PROCESS:
            raise BundleAdmissionError(
                f"{where}/isolation: expected {TRUSTED_IN_PROCESS!r}, the only isolation the "
                f"host supports; found {raw.get('isolation')!r}"
            )
        if raw.get("permissions") != []:
            raise BundleAdmissionError(
                f"{where}/permissions: the host grants no permissions; expected [], found "
                f"{raw.get('permissions')!r}"
            )
        components.append(
            AdmittedComponent(
                bundle_id=bundle_id,
                component_id=_field(raw, "component_id", str, where),
                contracts=tuple(_field(raw, "contracts", list, where)),
                execution_planes=tuple(_field(raw, "execution_planes", list, where)),
                implementation_ref=_field(raw, "implementation_ref", str, where),
                source=source,
            )
        )
    return AdmittedBundle(bundle_id, bundle_version, host_api_range, tuple(components), source)


def _field(document: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = document.get(name)
    if not isinstance(value, kind):
        raise BundleAdmissionError(
            f"{where}: field {name!r} must be a {kind.__name__}; found {value!r}"
        )
    return value
