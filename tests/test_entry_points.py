"""The installed distribution's entry points, read through ``importlib.metadata``.

``pyproject.toml`` registers the legacy selector (``vllm.victim_selector: bidkv``) and the static
manifests (``vllm.extension_bundles`` and ``vllm_hust.extension_bundles``:
``org.vllm-hust.bidkv = bidkv.manifests``). Discovering the manifests must stay inert: it must
not import the policy module (docs/contracts.md, "Bundle admission").
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
from import_helpers import run_isolated

import bidkv
from tracekit.hosts.bundles import EXTENSION_BUNDLE_GROUPS, resolve_admitted_bundles
from tracekit.hosts.victim_selector import NoOpVictimSelector, get_victim_selector

BUNDLE_ID = "org.vllm-hust.bidkv"
SELECTOR_MODULE = "bidkv.adapters.vllm_hust.selector"


# The policy's defaults and the host's admission, not the developer's shell (conftest.py).
pytestmark = pytest.mark.usefixtures("no_bidkv_environment")


def named(group: str, name: str) -> list[metadata.EntryPoint]:
    return [ep for ep in metadata.entry_points(group=group) if ep.name == name]


def test_distribution_metadata() -> None:
    distribution = metadata.distribution("bidkv")
    assert distribution.version == bidkv.__version__
    assert distribution.requires is None or all(
        "extra ==" in requirement for requirement in distribution.requires
    )  # the policy library has no runtime dependencies


def test_legacy_selector_entry_point() -> None:
    (entry_point,) = named("vllm.victim_selector", "bidkv")
    assert entry_point.value == f"{SELECTOR_MODULE}:BidkvVictimSelector"
    assert entry_point.dist is not None and entry_point.dist.name == "bidkv"
    from bidkv.adapters.vllm_hust.selector import BidkvVictimSelector

    assert entry_point.load() is BidkvVictimSelector
    assert BidkvVictimSelector.vllm_victim_selector_api_version == 1


@pytest.mark.parametrize("group", ["vllm.extension_bundles", "vllm_hust.extension_bundles"])
def test_manifest_entry_points(group: str) -> None:
    assert group in EXTENSION_BUNDLE_GROUPS
    (entry_point,) = named(group, BUNDLE_ID)
    assert entry_point.value == "bidkv.manifests"


def test_manifest_discovery_does_not_import_the_policy(tmp_path: Path) -> None:
    # A fresh interpreter outside the work tree (-I: no cwd, no PYTHONPATH), so only the
    # installed distribution is seen.
    script = f"""
import json, sys
from importlib import metadata, resources
names = {{}}
for group in ("vllm.extension_bundles", "vllm_hust.extension_bundles"):
    for ep in metadata.entry_points(group=group):
        if ep.name == {BUNDLE_ID!r}:
            package = ep.load()
            files = sorted(e.name for e in resources.files(package).iterdir()
                           if e.name.endswith(".json"))
            names[group] = [json.loads(resources.files(package).joinpath(f).read_text())
                            ["schema_version"] for f in files]
from tracekit.hosts.bundles import resolve_admitted_bundles
(bundle,) = resolve_admitted_bundles([{BUNDLE_ID!r}])
print(json.dumps({{
    "names": names,
    "components": [c.qualified_id for c in bundle.components],
    "imported": sorted(m for m in sys.modules if m.startswith("bidkv.adapters.vllm_hust.")),
}}))
"""
    result = run_isolated(script, tmp_path, check=True)
    report = json.loads(result.stdout)
    versions = ["0.2-experimental", "0.3-experimental", "1.0"]
    assert report["names"] == {
        "vllm.extension_bundles": versions,
        "vllm_hust.extension_bundles": versions,
    }
    assert report["components"] == [f"{BUNDLE_ID}/victim-selector"]
    # The hosts share vLLM's built-in victim rule with the policy (its one copy); nothing of the
    # policy itself is imported.
    assert report["imported"] == ["bidkv.adapters.vllm_hust.builtin"]


def test_installed_bundle_is_inert_until_admitted() -> None:
    assert type(get_victim_selector(SimpleNamespace(additional_config={}))) is NoOpVictimSelector


def test_installed_bundle_resolves_to_the_shipped_manifest() -> None:
    (bundle,) = resolve_admitted_bundles([BUNDLE_ID])
    assert bundle.source == "bidkv.manifests/vllm-hust-extension-v1.json"
    assert bundle.bundle_version == bidkv.__version__
    (component,) = bundle.components
    assert component.implementation_ref == f"{SELECTOR_MODULE}:BidkvVictimSelector"


def test_installed_legacy_and_typed_paths_load_the_selector() -> None:
    from bidkv.adapters.vllm_hust.selector import BidkvVictimSelector

    legacy = get_victim_selector(
        SimpleNamespace(additional_config={"victim_selector_plugin": "bidkv"})
    )
    typed = get_victim_selector(
        SimpleNamespace(
            additional_config={"victim_selector_component": f"{BUNDLE_ID}/victim-selector"}
        ),
        bundles=[BUNDLE_ID],
    )
    assert type(legacy) is BidkvVictimSelector
    assert type(typed) is BidkvVictimSelector
    assert legacy is not typed
