"""``run_conformance``: failures and rollback through the legacy and typed hosts.

The checks: docs/diff.md, "Conformance: tracekit diff --conformance [--strategy ...]".

The shipped policy passes every check. Each check is then shown to fail when the behaviour it
guards is broken: policy faces that swallow or reword configuration errors or ignore the
configuration, a host that ignores its disable switch or loads a plugin nobody configured, a
controller that does not disable a failing policy, a legacy host that swallows exceptions.
The broken policy classes live in this module and are loaded by name, as engines load them.
"""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from types import SimpleNamespace
from typing import Any

import pytest

from bidkv.adapters.vllm_hust.config import STRATEGIES, BidkvSelectorConfig
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvVictimSelector
from tracekit.conformance import ConformanceReport, ConformanceTargets, run_conformance
from tracekit.engine import hosts as engine_hosts
from tracekit.errors import ConfigError
from tracekit.hosts import victim_selector
from tracekit.hosts.preemption_policy import PreemptionPolicyController, builtin_victim_id

MODULE = __name__
BUNDLE_EPS = (
    EntryPoint(name="org.vllm-hust.bidkv", value="bidkv.manifests", group="vllm.extension_bundles"),
)


# The policy's defaults and the host's admission, not the developer's shell (conftest.py).
pytestmark = pytest.mark.usefixtures("no_bidkv_environment")


# -- broken policy faces, loaded by name --------------------------------------------------------


class SwallowingSelector(BidkvVictimSelector):
    """A legacy face that swallows configuration errors and starts with the defaults."""

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> SwallowingSelector:
        try:
            return cls(BidkvSelectorConfig.from_vllm_config(vllm_config))
        except ValueError:
            return cls(BidkvSelectorConfig())


class SwallowingPolicy(BidkvPreemptionPolicy):
    """The same bug on the typed face."""

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> SwallowingPolicy:
        try:
            return cls(BidkvSelectorConfig.from_vllm_config(vllm_config))
        except ValueError:
            return cls(BidkvSelectorConfig())


class RewordingSelector(BidkvVictimSelector):
    """Fails startup, but with another message than the typed face."""

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> RewordingSelector:
        try:
            return cls(BidkvSelectorConfig.from_vllm_config(vllm_config))
        except ValueError as error:
            raise ValueError(f"invalid BidKV configuration: {error}") from None


class ConfigBlindSelector(BidkvVictimSelector):
    """Ignores additional_config: starts with the defaults (the policy switched off)."""

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> ConfigBlindSelector:
        return cls(BidkvSelectorConfig())


def plugin(cls: str) -> EntryPoint:
    return EntryPoint(name="bidkv", value=f"{MODULE}:{cls}", group="vllm.victim_selector")


def with_plugin(cls: str) -> ConformanceTargets:
    return ConformanceTargets(entry_points=(plugin(cls), *BUNDLE_EPS))


def by_name(report: ConformanceReport) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


def failed(report: ConformanceReport) -> set[str]:
    return {c.name for c in report.failed()}


# -- the shipped policy --------------------------------------------------------------------------


CHECKS = [
    "startup/valid",
    "startup/negative-completion-weight",
    "startup/kv-gate-above-one",
    "startup/unknown-strategy",
    "rollback/disable-switch",
    "rollback/manifest-removed-legacy-plugin",
    "rollback/manifest-removed-builtin",
    "rollback/manifest-removed-component-fails-closed",
    "rollback/typed-invalid-selection",
    "rollback/typed-exception",
    "rollback/legacy-no-isolation",
]


def test_the_shipped_policy_passes_every_check_for_every_strategy() -> None:
    report = run_conformance(["all"])
    assert report.strategies == list(STRATEGIES)
    assert [c.name for c in report.checks] == [f"{s}/{name}" for s in STRATEGIES for name in CHECKS]
    assert report.failed() == []
    assert (report.passed, report.exit_code) == (True, 0)


def test_check_details_name_the_observed_behaviour() -> None:
    checks = by_name(run_conformance(["bidkv"], {"utility_cascade_gain_ratio": 2.0}))
    assert checks["bidkv/startup/negative-completion-weight"].detail == (
        "startup fails on all three paths with ValueError: "
        "utility_completion_weight must be non-negative"
    )
    assert "utility_kv_gate must be in [0, 1]" in checks["bidkv/startup/kv-gate-above-one"].detail
    assert "no-such-strategy" in checks["bidkv/startup/unknown-strategy"].detail
    rollback = checks["bidkv/rollback/typed-invalid-selection"].detail
    assert "'calls': 3, 'failures': 1, 'invalid_selections': 1, 'enabled': False" in rollback
    assert "logged once" in rollback
    exception = checks["bidkv/rollback/typed-exception"].detail
    assert "'invalid_selections': 0" in exception
    assert "BidkvVictimSelector" in checks["bidkv/rollback/manifest-removed-legacy-plugin"].detail


def test_report_renders_and_serialises() -> None:
    report = run_conformance(["pe"], {"utility_seed": 7})
    data = json.loads(json.dumps(report.to_dict()))
    assert set(data) == {
        "format",
        "version",
        "passed",
        "exit_code",
        "strategies",
        "policy_config",
        "checks",
    }
    assert (data["format"], data["passed"], data["exit_code"]) == ("tracekit.conformance", True, 0)
    assert data["policy_config"] == {"utility_seed": 7}
    assert set(data["checks"][0]) == {"name", "passed", "detail"}
    lines = report.render_text().splitlines()
    assert all(line.startswith("ok   pe/") for line in lines[:-1])
    assert lines[-1] == f"conformance: {len(CHECKS)} of {len(CHECKS)} checks passed (exit 0)"


@pytest.mark.parametrize(
    ("strategies", "config", "message"),
    [
        (["no-such"], None, "unknown"),
        (["builtin"], None, "conformance checks the production policy"),
        (["bidkv"], {"utility_kv_gate": 3}, "utility_kv_gate"),
        (["bidkv"], {"no_such_setting": 1}, "unknown setting"),
    ],
)
def test_invalid_input_is_a_config_error(
    strategies: list[str], config: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        run_conformance(strategies, config)


# -- every check fails when its behaviour is broken ------------------------------------------


def test_a_legacy_face_that_swallows_config_errors_fails_startup_checks() -> None:
    report = run_conformance(["bidkv"], targets=with_plugin("SwallowingSelector"))
    assert failed(report) == {
        "bidkv/startup/negative-completion-weight",
        "bidkv/startup/kv-gate-above-one",
        "bidkv/startup/unknown-strategy",
        # The entry point now names another class than the shipped bundle's component, so
        # removing the manifest would also change the policy.
        "bidkv/rollback/manifest-removed-legacy-plugin",
    }
    detail = by_name(report)["bidkv/startup/kv-gate-above-one"].detail
    assert detail == "legacy entry point started with an invalid configuration"
    assert report.exit_code == 1


def test_a_typed_face_that_swallows_config_errors_fails_startup_checks() -> None:
    targets = ConformanceTargets(typed_policy=f"{MODULE}.SwallowingPolicy")
    report = run_conformance(["bidkv"], targets=targets)
    assert failed(report) == {
        "bidkv/startup/negative-completion-weight",
        "bidkv/startup/kv-gate-above-one",
        "bidkv/startup/unknown-strategy",
    }
    assert by_name(report)["bidkv/startup/unknown-strategy"].detail.startswith("typed started")


def test_a_different_root_cause_fails_startup_checks() -> None:
    report = run_conformance(["bidkv"], targets=with_plugin("RewordingSelector"))
    check = by_name(report)["bidkv/startup/negative-completion-weight"]
    assert not check.passed
    assert check.detail.startswith(
        "different root causes: legacy entry point: ValueError: "
        "invalid BidKV configuration: utility_completion_weight"
    )


def test_a_face_that_ignores_the_configuration_fails_the_valid_startup_check() -> None:
    report = run_conformance(["bidkv"], targets=with_plugin("ConfigBlindSelector"))
    check = by_name(report)["bidkv/startup/valid"]
    assert not check.passed
    assert "the paths do not run the same configuration" in check.detail


def test_a_host_that_ignores_the_disable_switch_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = victim_selector.get_victim_selector

    def ignoring_switch(vllm_config: Any, **kw: Any) -> Any:
        ac = dict(vllm_config.additional_config)
        ac.pop(victim_selector.VICTIM_SELECTOR_DISABLED_KEY, None)
        return real(SimpleNamespace(additional_config=ac), **kw)

    monkeypatch.setattr(victim_selector, "get_victim_selector", ignoring_switch)
    report = run_conformance(["bidkv"])
    assert failed(report) == {"bidkv/rollback/disable-switch"}
    assert "not the built-in selector" in by_name(report)["bidkv/rollback/disable-switch"].detail


def test_a_missing_entry_point_fails_the_legacy_rollback() -> None:
    report = run_conformance(["bidkv"], targets=ConformanceTargets(entry_points=BUNDLE_EPS))
    check = by_name(report)["bidkv/rollback/manifest-removed-legacy-plugin"]
    assert not check.passed
    assert "is not installed" in check.detail


def test_a_host_that_loads_an_unconfigured_plugin_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = victim_selector.get_victim_selector

    def plugin_by_default(vllm_config: Any, **kw: Any) -> Any:
        ac = {victim_selector.VICTIM_SELECTOR_PLUGIN_CONFIG_KEY: "bidkv"}
        ac.update(vllm_config.additional_config)
        return real(SimpleNamespace(additional_config=ac), **{**kw, "entry_points": None})

    monkeypatch.setattr(victim_selector, "get_victim_selector", plugin_by_default)
    report = run_conformance(["bidkv"])
    assert "bidkv/rollback/manifest-removed-builtin" in failed(report)


def test_a_host_that_does_not_fail_closed_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = victim_selector.get_victim_selector

    def fail_open(vllm_config: Any, **kw: Any) -> Any:
        try:
            return real(vllm_config, **kw)
        except victim_selector.VictimSelectorMaterializationError:
            return victim_selector.NoOpVictimSelector()

    monkeypatch.setattr(victim_selector, "get_victim_selector", fail_open)
    report = run_conformance(["bidkv"])
    check = by_name(report)["bidkv/rollback/manifest-removed-component-fails-closed"]
    assert not check.passed
    assert "NoOpVictimSelector" in check.detail


def test_a_controller_that_keeps_a_failing_policy_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def count_only(self: PreemptionPolicyController, reason: str, **kw: Any) -> None:
        self.stats.failures += 1  # and keeps calling the broken policy

    monkeypatch.setattr(PreemptionPolicyController, "_disable", count_only)
    report = run_conformance(["bidkv"])
    assert failed(report) == {
        "bidkv/rollback/typed-invalid-selection",
        "bidkv/rollback/typed-exception",
    }
    detail = by_name(report)["bidkv/rollback/typed-invalid-selection"].detail
    assert "not 'disabled' with the built-in victim" in detail
    assert "logged 0 times" in detail


def test_a_legacy_host_that_swallows_exceptions_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    class Forgiving(engine_hosts.LegacyHost):
        def choose_victim(self, context: Any) -> engine_hosts.VictimChoice:
            try:
                return super().choose_victim(context)
            except Exception:
                return engine_hosts.VictimChoice(builtin_victim_id(context), "builtin")

    monkeypatch.setattr(engine_hosts, "LegacyHost", Forgiving)
    report = run_conformance(["bidkv"])
    assert failed(report) == {"bidkv/rollback/legacy-no-isolation"}


def test_a_workload_too_short_for_the_failure_fails_the_rollback_checks() -> None:
    report = run_conformance(["pe"], fail_at=1000)
    detail = by_name(report)["pe/rollback/typed-exception"].detail
    assert "the workload made only" in detail
