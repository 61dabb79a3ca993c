"""The legacy ``VictimSelector`` host: discovery order, typed bundles, checks and the built-in rule.

Rules: docs/contracts.md, "The legacy host: VictimSelector". Selector plug-ins and bundle
packages are fakes injected through ``entry_points=`` and ``bundles=``, so these tests do not
depend on what is installed (``test_entry_points.py`` covers the installed package).
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import types
import uuid
from importlib.metadata import EntryPoint
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from import_helpers import run_isolated

from tracekit.hosts import HostContract, PreemptionPolicyController
from tracekit.hosts.bundles import (
    BundleAdmissionError,
    admitted_bundle_ids,
    resolve_admitted_bundles,
    version_in_range,
)
from tracekit.hosts.preemption_policy import PreemptionCandidate, PreemptionContext
from tracekit.hosts.victim_selector import (
    VICTIM_SELECTOR_API_VERSION,
    NoOpVictimSelector,
    SchedulingPolicy,
    VictimSelector,
    VictimSelectorHost,
    VictimSelectorMaterializationError,
    get_victim_selector,
    infer_kv_utilization_from_scheduler,
)

FAKES = "tk_fake_selectors"
LEGACY_GROUP = "vllm.victim_selector"
BUNDLE_GROUP = "vllm.extension_bundles"
HUST_BUNDLE_GROUP = "vllm_hust.extension_bundles"


# -- fake selectors ---------------------------------------------------------------------------


class GoodSelector:
    vllm_victim_selector_api_version = 1

    def __init__(self, vllm_config: Any = None) -> None:
        self.vllm_config = vllm_config
        self.calls: list[tuple[list[Any], Any, float | None, float | None]] = []

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> GoodSelector:
        return cls(vllm_config)

    def pick_victim(self, running, policy, *, kv_utilization=None, now_s=None):
        self.calls.append((list(running), policy, kv_utilization, now_s))
        return running[0]

    def emit_observability_log(self, logger, scheduler_name):
        logger.info("[%s] calls=%d", scheduler_name, len(self.calls))

    def export_metrics(self) -> dict[str, Any]:
        return {"calls": len(self.calls)}


class TypedSelector(GoodSelector):
    """Materialized through a typed bundle component."""


class OtherTypedSelector(GoodSelector):
    """A second typed provider."""


class LegacySelector(GoodSelector):
    """Loaded through the ``vllm.victim_selector`` entry point."""


class NoVersionSelector(GoodSelector):
    vllm_victim_selector_api_version = None


class StringVersionSelector(GoodSelector):
    vllm_victim_selector_api_version = "1"


class NoFactorySelector(GoodSelector):
    from_vllm_config = None


class FailingSelector(GoodSelector):
    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> FailingSelector:
        raise ValueError("utility_completion_weight must be non-negative")


class NotASelector:
    vllm_victim_selector_api_version = 1

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> object:
        return object()


class StrangerSelector(GoodSelector):
    """Returns a request object that is equal to, but not one of, the running requests."""

    def pick_victim(self, running, policy, *, kv_utilization=None, now_s=None):
        first = running[0]
        return PreemptionCandidate(*(getattr(first, f) for f in first.__slots__))


class RaisingSelector(GoodSelector):
    def pick_victim(self, running, policy, *, kv_utilization=None, now_s=None):
        raise KeyError("boom")


@pytest.fixture(autouse=True)
def fake_selectors(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType(FAKES)
    for cls in (
        GoodSelector,
        TypedSelector,
        OtherTypedSelector,
        LegacySelector,
        NoVersionSelector,
        StringVersionSelector,
        NoFactorySelector,
        FailingSelector,
        NotASelector,
        StrangerSelector,
        RaisingSelector,
    ):
        setattr(module, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, FAKES, module)
    monkeypatch.delenv("VLLM_EXTENSION_BUNDLES", raising=False)
    return module


def config(**additional_config: Any) -> SimpleNamespace:
    return SimpleNamespace(additional_config=additional_config)


def plugin(name: str, cls: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"{FAKES}:{cls}", group=LEGACY_GROUP)


LEGACY_EPS = [plugin("good", "LegacySelector"), plugin("alpha", "GoodSelector")]


def component(component_id: str, cls: str, **overrides: Any) -> dict[str, Any]:
    return {
        "component_id": component_id,
        "contracts": ["vllm.scheduler.policy.v1"],
        "execution_planes": ["scheduler"],
        "isolation": "trusted_in_process",
        "implementation_ref": f"{FAKES}:{cls}",
        "permissions": [],
        **overrides,
    }


def bundle_manifest(bundle_id: str, *components: dict[str, Any], **overrides: Any) -> dict:
    return {
        "schema_version": "1.0",
        "bundle_id": bundle_id,
        "bundle_version": "1.2.3",
        "host_api_range": ">=1,<2",
        "components": list(components),
        **overrides,
    }


@pytest.fixture
def make_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a manifest package to disk and return its entry point (name = bundle id)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(
        bundle_id: str,
        *manifests: dict[str, Any],
        group: str = BUNDLE_GROUP,
        files: dict[str, str] | None = None,
    ) -> EntryPoint:
        package = f"tk_bundle_{uuid.uuid4().hex[:12]}"
        directory = tmp_path / package
        directory.mkdir()
        (directory / "__init__.py").write_text("")
        for index, manifest in enumerate(manifests):
            (directory / f"manifest-{index}.json").write_text(json.dumps(manifest))
        for name, text in (files or {}).items():
            (directory / name).write_text(text)
        return EntryPoint(name=bundle_id, value=package, group=group)

    return make


def candidate(request_id: str, priority: int = 0, arrival_time: float = 0.0) -> PreemptionCandidate:
    return PreemptionCandidate(request_id, priority, arrival_time, 0, 0, 10, 0, 128)


def context(
    *candidates: PreemptionCandidate, policy: str = "fcfs", kv: float = 0.5, now: float = 3.0
) -> PreemptionContext:
    return PreemptionContext(tuple(candidates), policy, candidates[0].request_id, kv, now)


# -- the built-in rule --------------------------------------------------------------------------


def test_noop_fcfs_preempts_the_running_tail() -> None:
    running = [candidate("a"), candidate("b"), candidate("c")]
    assert NoOpVictimSelector().pick_victim(running, SchedulingPolicy.FCFS) is running[2]


def test_noop_priority_preempts_largest_priority_then_latest_arrival() -> None:
    # Larger priority value = less important; ties broken by the later arrival.
    running = [
        candidate("a", 1, 5.0),
        candidate("b", 3, 1.0),
        candidate("c", 3, 2.0),
        candidate("d", 0, 9.0),
    ]
    assert NoOpVictimSelector().pick_victim(running, SchedulingPolicy.PRIORITY).request_id == "c"


def test_noop_priority_full_tie_keeps_the_first_in_running_order() -> None:
    running = [candidate("a", 2, 1.0), candidate("b", 2, 1.0)]
    assert NoOpVictimSelector().pick_victim(running, SchedulingPolicy.PRIORITY) is running[0]


def test_noop_accepts_the_policy_value_and_rejects_unknown_policies() -> None:
    running = [candidate("a", 5), candidate("b", 1)]
    assert NoOpVictimSelector().pick_victim(running, "priority").request_id == "a"
    with pytest.raises(ValueError, match="'lifo' is not a valid SchedulingPolicy"):
        NoOpVictimSelector().pick_victim(running, "lifo")


def test_noop_rejects_an_empty_running_list() -> None:
    with pytest.raises(ValueError, match="empty running list"):
        NoOpVictimSelector().pick_victim([], SchedulingPolicy.FCFS)


def test_noop_is_a_victim_selector_with_no_metrics(caplog: pytest.LogCaptureFixture) -> None:
    selector = NoOpVictimSelector.from_vllm_config(None)
    assert isinstance(selector, VictimSelector)
    assert NoOpVictimSelector.vllm_victim_selector_api_version == VICTIM_SELECTOR_API_VERSION == 1
    assert selector.export_metrics() == {}
    with caplog.at_level(logging.DEBUG):
        selector.emit_observability_log(logging.getLogger("test"), "Scheduler")
    assert caplog.records == []


def test_scheduling_policy_values() -> None:
    assert [p.value for p in SchedulingPolicy] == ["fcfs", "priority"]
    assert SchedulingPolicy["FCFS"] is SchedulingPolicy("fcfs")


def test_protocol_requires_all_four_members() -> None:
    assert isinstance(GoodSelector(), VictimSelector)
    partial = SimpleNamespace(
        pick_victim=lambda *a, **k: None, export_metrics=dict, from_vllm_config=lambda c: None
    )
    assert not isinstance(partial, VictimSelector)


# -- discovery order ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vllm_config", [config(), SimpleNamespace(additional_config=None), SimpleNamespace()]
)
def test_nothing_configured_gives_the_builtin_selector(vllm_config: Any) -> None:
    assert type(get_victim_selector(vllm_config, entry_points=LEGACY_EPS)) is NoOpVictimSelector


def test_disabled_bypass_wins_and_discovers_nothing() -> None:
    # Every path is configured and would fail: the bypass must not touch any of them.
    broken = [
        EntryPoint("good", "tk_no_such_module:X", LEGACY_GROUP),
        EntryPoint("org.example.a", "tk_no_such_package", BUNDLE_GROUP),
    ]
    vllm_config = config(
        victim_selector_plugin_disabled=True,
        victim_selector_plugin="good",
        victim_selector_component="org.example.a/policy",
    )
    selector = get_victim_selector(vllm_config, entry_points=broken, bundles=["org.example.a"])
    assert type(selector) is NoOpVictimSelector
    assert "tk_no_such_module" not in sys.modules


def test_legacy_plugin_is_loaded_from_its_entry_point() -> None:
    vllm_config = config(victim_selector_plugin=" good ")
    selector = get_victim_selector(vllm_config, entry_points=LEGACY_EPS)
    assert type(selector) is LegacySelector
    assert selector.vllm_config is vllm_config


def test_legacy_plugin_load_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="vllm.victim_selector"):
        get_victim_selector(config(victim_selector_plugin="good"), entry_points=LEGACY_EPS)
    assert (
        caplog.records[-1]
        .getMessage()
        .startswith("Loaded victim selector plugin 'good' distribution=unknown==unknown source=")
    )
    assert caplog.records[-1].getMessage().endswith(f"{__file__} api_version=1")


def test_entry_points_of_other_groups_are_ignored() -> None:
    other = [EntryPoint("good", f"{FAKES}:LegacySelector", "vllm.general_plugins")]
    with pytest.raises(ValueError) as raised:
        get_victim_selector(config(victim_selector_plugin="good"), entry_points=other)
    assert str(raised.value) == (
        "Requested victim selector plugin 'good' is not installed; available plugins: none"
    )


def test_missing_legacy_plugin_lists_the_available_ones() -> None:
    with pytest.raises(ValueError) as raised:
        get_victim_selector(config(victim_selector_plugin="bidkv"), entry_points=LEGACY_EPS)
    assert str(raised.value) == (
        "Requested victim selector plugin 'bidkv' is not installed; available plugins: alpha, good"
    )


def test_duplicate_legacy_plugins_fail() -> None:
    duplicates = [*LEGACY_EPS, plugin("good", "GoodSelector")]
    with pytest.raises(
        RuntimeError,
        match=r"^Multiple victim selector entry points are "
        r"registered as 'good'",
    ):
        get_victim_selector(config(victim_selector_plugin="good"), entry_points=duplicates)


@pytest.mark.parametrize("value", ["", "   ", 3, ["good"]])
def test_legacy_plugin_name_must_be_a_non_empty_string(value: Any) -> None:
    with pytest.raises(ValueError, match="victim_selector_plugin must be a non-empty string"):
        get_victim_selector(config(victim_selector_plugin=value), entry_points=LEGACY_EPS)


@pytest.mark.parametrize(
    ("cls", "cause_type", "cause_message"),
    [
        (
            "NoVersionSelector",
            TypeError,
            "plugin declares victim-selector API version None; expected 1",
        ),
        (
            "StringVersionSelector",
            TypeError,
            "plugin declares victim-selector API version '1'; expected 1",
        ),
        ("NoFactorySelector", TypeError, "plugin does not define a callable from_vllm_config()"),
        ("NotASelector", TypeError, "plugin does not implement the VictimSelector protocol"),
        ("FailingSelector", ValueError, "utility_completion_weight must be non-negative"),
        ("Missing", AttributeError, f"module '{FAKES}' has no attribute 'Missing'"),
    ],
)
def test_legacy_load_failures_fail_startup_with_the_root_cause(
    cls: str, cause_type: type, cause_message: str
) -> None:
    with pytest.raises(RuntimeError) as raised:
        get_victim_selector(config(victim_selector_plugin="x"), entry_points=[plugin("x", cls)])
    assert type(raised.value) is RuntimeError
    assert str(raised.value) == (
        f"Failed to load requested victim selector plugin 'x': {cause_message}"
    )
    assert type(raised.value.__cause__) is cause_type
    assert str(raised.value.__cause__) == cause_message


# -- typed bundles ------------------------------------------------------------------------------


def test_one_admitted_provider_is_materialized_and_wins_over_legacy(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    vllm_config = config(victim_selector_plugin="good")
    selector = get_victim_selector(
        vllm_config, entry_points=[bundle, *LEGACY_EPS], bundles=["org.example.a"]
    )
    assert type(selector) is TypedSelector
    assert selector.vllm_config is vllm_config


def test_typed_load_is_logged(make_bundle, caplog: pytest.LogCaptureFixture) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    with caplog.at_level(logging.INFO, logger="vllm.victim_selector"):
        get_victim_selector(config(), entry_points=[bundle], bundles=["org.example.a"])
    assert caplog.records[-1].getMessage() == (
        f"Loaded typed victim selector component=org.example.a/policy source={__file__} "
        "api_version=1"
    )


def test_installed_but_unadmitted_bundles_are_inert(make_bundle) -> None:
    # Rollback: without admission the legacy entry point is used, and without it the built-in.
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    eps = [bundle, *LEGACY_EPS]
    assert type(get_victim_selector(config(), entry_points=eps)) is NoOpVictimSelector
    selector = get_victim_selector(
        config(victim_selector_plugin="good"), entry_points=eps, bundles=[]
    )
    assert type(selector) is LegacySelector


def test_admission_is_read_from_the_environment(make_bundle, monkeypatch) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    monkeypatch.setenv("VLLM_EXTENSION_BUNDLES", " org.example.b , org.example.a,")
    assert admitted_bundle_ids() == ("org.example.b", "org.example.a")
    monkeypatch.setenv("VLLM_EXTENSION_BUNDLES", "org.example.a")
    assert type(get_victim_selector(config(), entry_points=[bundle])) is TypedSelector


def test_qualified_component_selects_among_several_providers(make_bundle) -> None:
    first = make_bundle(
        "org.example.a",
        bundle_manifest(
            "org.example.a",
            component("first", "TypedSelector"),
            component("second", "OtherTypedSelector"),
        ),
    )
    selector = get_victim_selector(
        config(victim_selector_component="org.example.a/second"),
        entry_points=[first],
        bundles=["org.example.a"],
    )
    assert type(selector) is OtherTypedSelector


def test_several_providers_without_a_selection_fail(make_bundle) -> None:
    first = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    second = make_bundle(
        "org.example.b",
        bundle_manifest("org.example.b", component("policy", "GoodSelector")),
        group=HUST_BUNDLE_GROUP,
    )
    with pytest.raises(VictimSelectorMaterializationError) as raised:
        get_victim_selector(
            config(victim_selector_plugin="good"),
            entry_points=[first, second, *LEGACY_EPS],
            bundles=["org.example.b", "org.example.a"],
        )
    assert str(raised.value) == (
        "multiple admitted scheduler-policy providers require an explicit "
        "victim_selector_component: ['org.example.a/policy', 'org.example.b/policy']"
    )


def test_components_of_other_contracts_or_planes_are_not_providers(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a",
        bundle_manifest(
            "org.example.a",
            component("worker", "TypedSelector", execution_planes=["worker"]),
            component("kv", "TypedSelector", contracts=["vllm.kv-connector.v1"]),
        ),
    )
    selector = get_victim_selector(
        config(victim_selector_plugin="good"),
        entry_points=[bundle, *LEGACY_EPS],
        bundles=["org.example.a"],
    )
    assert type(selector) is LegacySelector


def test_selected_component_must_be_admitted_and_legacy_is_not_tried(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    vllm_config = config(
        victim_selector_component="org.example.a/other", victim_selector_plugin="good"
    )
    with pytest.raises(VictimSelectorMaterializationError) as raised:
        get_victim_selector(
            vllm_config, entry_points=[bundle, *LEGACY_EPS], bundles=["org.example.a"]
        )
    assert str(raised.value) == (
        "victim_selector_component selects no admitted scheduler-policy provider: "
        "'org.example.a/other'; available providers: ['org.example.a/policy'] (admitted "
        "bundles: ['org.example.a']; admit a bundle with bundles=[...] or VLLM_EXTENSION_BUNDLES)"
    )
    with pytest.raises(VictimSelectorMaterializationError, match=r"available providers: \[\]"):
        get_victim_selector(
            config(victim_selector_component="org.example.a/policy", victim_selector_plugin="good"),
            entry_points=[bundle, *LEGACY_EPS],
        )


@pytest.mark.parametrize(
    ("cls", "message", "cause_type"),
    [
        (
            "NoVersionSelector",
            "scheduler-policy component 'org.example.a/policy' declares API version None; "
            "expected 1",
            None,
        ),
        (
            "StringVersionSelector",
            "scheduler-policy component 'org.example.a/policy' declares API version '1'; "
            "expected 1",
            None,
        ),
        (
            "NoFactorySelector",
            "scheduler-policy component 'org.example.a/policy' does not expose a callable "
            "from_vllm_config",
            None,
        ),
        (
            "NotASelector",
            "scheduler-policy component 'org.example.a/policy' returned an object that does not "
            "implement VictimSelector",
            None,
        ),
        (
            "FailingSelector",
            "scheduler-policy component 'org.example.a/policy' failed to initialize",
            ValueError,
        ),
        (
            "Missing",
            f"failed to import scheduler-policy implementation '{FAKES}:Missing' of component "
            "'org.example.a/policy'",
            AttributeError,
        ),
    ],
)
def test_typed_materialization_failures_fail_closed(
    make_bundle, cls: str, message: str, cause_type: type | None
) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", cls))
    )
    with pytest.raises(VictimSelectorMaterializationError) as raised:
        get_victim_selector(
            config(victim_selector_plugin="good"),
            entry_points=[bundle, *LEGACY_EPS],
            bundles=["org.example.a"],
        )
    assert str(raised.value) == message
    assert type(raised.value.__cause__) is (cause_type or type(None))


def test_typed_factory_failure_chains_the_same_root_cause_as_legacy(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "FailingSelector"))
    )
    with pytest.raises(VictimSelectorMaterializationError) as typed:
        get_victim_selector(config(), entry_points=[bundle], bundles=["org.example.a"])
    with pytest.raises(RuntimeError) as legacy:
        get_victim_selector(
            config(victim_selector_plugin="x"), entry_points=[plugin("x", "FailingSelector")]
        )
    assert isinstance(typed.value, RuntimeError)
    assert type(typed.value.__cause__) is type(legacy.value.__cause__) is ValueError
    assert str(typed.value.__cause__) == str(legacy.value.__cause__)


def test_typed_import_failure_chains_the_import_error(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a",
        bundle_manifest(
            "org.example.a", component("policy", "X", implementation_ref="tk_no_such_module:X")
        ),
    )
    with pytest.raises(VictimSelectorMaterializationError) as raised:
        get_victim_selector(
            config(victim_selector_plugin="good"),
            entry_points=[bundle, *LEGACY_EPS],
            bundles=["org.example.a"],
        )
    assert type(raised.value.__cause__) is ModuleNotFoundError
    assert str(raised.value.__cause__) == "No module named 'tk_no_such_module'"


# -- bundle admission ---------------------------------------------------------------------------


def test_manager_manifests_in_the_package_are_skipped(make_bundle) -> None:
    extension = {"schema_version": "0.3-experimental", "extension_id": "org.example.a"}
    bundle = make_bundle(
        "org.example.a",
        extension,
        bundle_manifest("org.example.a", component("policy", "TypedSelector")),
        files={"notes.txt": "x"},
    )
    (resolved,) = resolve_admitted_bundles(["org.example.a"], entry_points=[bundle])
    assert resolved.bundle_id == "org.example.a"
    assert resolved.bundle_version == "1.2.3"
    assert resolved.source == f"{bundle.value}/manifest-1.json"
    assert [c.qualified_id for c in resolved.components] == ["org.example.a/policy"]


def test_the_same_package_under_both_groups_is_one_bundle(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("policy", "TypedSelector"))
    )
    twin = EntryPoint(bundle.name, bundle.value, HUST_BUNDLE_GROUP)
    selector = get_victim_selector(config(), entry_points=[bundle, twin], bundles=["org.example.a"])
    assert type(selector) is TypedSelector


def test_admitted_bundles_must_not_be_a_single_string() -> None:
    with pytest.raises(TypeError, match=r"not the string 'org\.example\.a'"):
        admitted_bundle_ids("org.example.a")


def test_nothing_admitted_reads_no_entry_point() -> None:
    broken = [EntryPoint("org.example.a", "tk_no_such_package", BUNDLE_GROUP)]
    assert resolve_admitted_bundles([], entry_points=broken) == ()


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (
            bundle_manifest(
                "org.example.a", component("p", "TypedSelector", isolation="subprocess")
            ),
            "/components/0/isolation: expected 'trusted_in_process', the only isolation the host "
            "supports; found 'subprocess'",
        ),
        (
            bundle_manifest(
                "org.example.a", component("p", "TypedSelector", permissions=["network"])
            ),
            "/components/0/permissions: the host grants no permissions; expected [], found "
            "['network']",
        ),
        (
            bundle_manifest(
                "org.example.a", component("p", "TypedSelector"), host_api_range=">=2,<3"
            ),
            "/host_api_range '>=2,<3' excludes host API 1.0",
        ),
        (
            bundle_manifest("org.example.a", component("p", "TypedSelector"), host_api_range="^1"),
            "/host_api_range: version range clause '^1' in '^1' is not of the form",
        ),
        (
            bundle_manifest(
                "org.example.a",
                {"component_id": 7, "isolation": "trusted_in_process", "permissions": []},
            ),
            "/components/0: field 'component_id' must be a str; found 7",
        ),
    ],
)
def test_invalid_admitted_bundles_stop_startup(make_bundle, manifest: dict, message: str) -> None:
    bundle = make_bundle("org.example.a", manifest)
    with pytest.raises(BundleAdmissionError) as raised:
        get_victim_selector(config(), entry_points=[bundle], bundles=["org.example.a"])
    assert str(raised.value).startswith(f"{bundle.value}/manifest-0.json: {message}")


def test_admitted_bundle_must_be_installed(make_bundle) -> None:
    bundle = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("p", "TypedSelector"))
    )
    with pytest.raises(BundleAdmissionError) as raised:
        resolve_admitted_bundles(["org.example.z"], entry_points=[bundle])
    assert str(raised.value) == (
        "admitted bundle 'org.example.z' is not installed (no entry point of that name in "
        "vllm.extension_bundles or vllm_hust.extension_bundles); installed bundles: "
        "['org.example.a']"
    )


def test_bundle_registered_by_two_packages_fails(make_bundle) -> None:
    first = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("p", "TypedSelector"))
    )
    second = make_bundle(
        "org.example.a", bundle_manifest("org.example.a", component("p", "GoodSelector"))
    )
    with pytest.raises(BundleAdmissionError, match="registered by several packages"):
        resolve_admitted_bundles(["org.example.a"], entry_points=[first, second])


@pytest.mark.parametrize(
    "manifests",
    [
        (),
        (bundle_manifest("org.example.other", component("p", "TypedSelector")),),
        (
            bundle_manifest("org.example.a", component("p", "TypedSelector")),
            bundle_manifest("org.example.a", component("q", "TypedSelector")),
        ),
    ],
)
def test_package_must_ship_exactly_one_bundle_manifest(make_bundle, manifests) -> None:
    bundle = make_bundle("org.example.a", *manifests)
    with pytest.raises(BundleAdmissionError, match="must ship exactly one Bundle v1 manifest"):
        resolve_admitted_bundles(["org.example.a"], entry_points=[bundle])


def test_unreadable_manifest_in_an_admitted_package_fails(make_bundle) -> None:
    bundle = make_bundle("org.example.a", files={"broken.json": "{"})
    with pytest.raises(BundleAdmissionError) as raised:
        resolve_admitted_bundles(["org.example.a"], entry_points=[bundle])
    assert str(raised.value) == f"{bundle.value}/broken.json: not a readable JSON manifest"
    assert isinstance(raised.value.__cause__, json.JSONDecodeError)


@pytest.mark.parametrize(
    ("version", "version_range", "expected"),
    [
        ("1.0", ">=1,<2", True),
        ("1", ">=1.0,<2", True),
        ("2.0", ">=1,<2", False),
        ("0.9", ">=1,<2", False),
        ("1.5", "==1.5", True),
        ("1.5", "!=1.5", False),
        ("1.0", "> 0.9 , <= 1", True),
    ],
)
def test_version_in_range(version: str, version_range: str, expected: bool) -> None:
    assert version_in_range(version, version_range) is expected


# -- the host driver ----------------------------------------------------------------------------


def test_legacy_host_calls_pick_victim_once_per_decision() -> None:
    host = VictimSelectorHost(GoodSelector())
    ctx = context(candidate("a"), candidate("b"), policy="priority", kv=0.75, now=12.5)
    assert host.select_victim(ctx) == "a"
    assert host.select_victim(ctx) == "a"
    running, policy, kv, now = host.selector.calls[0]
    assert running == list(ctx.candidates)
    assert all(r is c for r, c in zip(running, ctx.candidates, strict=True))
    assert (policy, kv, now) == (SchedulingPolicy.PRIORITY, 0.75, 12.5)
    assert host.export_stats() == {"policy_name": f"{__name__}.GoodSelector", "calls": 2}


def test_legacy_host_with_the_builtin_selector() -> None:
    host = VictimSelectorHost.from_vllm_config(config(victim_selector_plugin_disabled=True))
    fcfs = context(candidate("a", 9, 1.0), candidate("b", 0, 2.0))
    priority = context(candidate("a", 9, 1.0), candidate("b", 0, 2.0), policy="priority")
    assert [host.select_victim(fcfs), host.select_victim(priority)] == ["b", "a"]
    assert host.export_stats() == {
        "policy_name": "tracekit.hosts.victim_selector.NoOpVictimSelector",
        "calls": 2,
    }


def test_legacy_host_rejects_a_victim_that_is_not_running() -> None:
    host = VictimSelectorHost(StrangerSelector())
    with pytest.raises(RuntimeError, match="which is not one of the running requests"):
        host.select_victim(context(candidate("a"), candidate("b")))


def test_legacy_host_has_no_failure_isolation() -> None:
    host = VictimSelectorHost(RaisingSelector())
    with pytest.raises(KeyError, match="boom"):
        host.select_victim(context(candidate("a")))
    assert host.calls == 1


def test_both_hosts_satisfy_the_host_contract() -> None:
    assert isinstance(VictimSelectorHost(NoOpVictimSelector()), HostContract)
    assert isinstance(PreemptionPolicyController(None), HostContract)
    assert not isinstance(NoOpVictimSelector(), HostContract)


def test_infer_kv_utilization_from_scheduler() -> None:
    scheduler = SimpleNamespace(kv_cache_manager=SimpleNamespace(usage=0.25))
    assert infer_kv_utilization_from_scheduler(scheduler) == 0.25
    assert infer_kv_utilization_from_scheduler(SimpleNamespace()) is None


STDLIB_ONLY = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class RefuseNonStdlib:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("bidkv", "tracekit") or top[0] == "_":
                return None
            raise ImportError(f"tracekit.hosts imported a non-stdlib module: {name}")

    sys.meta_path.insert(0, RefuseNonStdlib())
    import tracekit.hosts
    for module in pkgutil.iter_modules(tracekit.hosts.__path__, "tracekit.hosts."):
        importlib.import_module(module.name)
    print(sorted(m for m in sys.modules if m.startswith("tracekit.hosts.")))
    """
)


def test_hosts_import_with_the_standard_library_only(tmp_path: Path) -> None:
    result = run_isolated(STDLIB_ONLY, tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "'tracekit.hosts.victim_selector'" in result.stdout
    assert "'tracekit.hosts.bundles'" in result.stdout
