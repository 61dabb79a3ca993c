"""The bidkv/tracekit boundary: tracekit reaches the policy through ``tracekit.strategies`` only.

``bidkv`` never imports ``tracekit``. In ``tracekit``, only ``strategies.py`` imports the policy's
modules; the exceptions below are listed with their reason, so that a new one is a decision.
Inside ``bidkv``, the production policy and the original bid path (``bidkv.legacy``) never import
each other.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from import_helpers import imported_modules

ROOT = Path(__file__).resolve().parents[1]

# Imports of bidkv outside tracekit/strategies.py that are allowed, by file.
ALLOWED = {
    # The distribution's one version string, re-exported as tracekit.__version__.
    "*": set(),
    "tracekit/__init__.py": {"bidkv._version"},
}


def test_only_tracekit_strategies_imports_the_policy() -> None:
    offending = {}
    for path in sorted((ROOT / "tracekit").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name == "tracekit/strategies.py":
            continue
        allowed = ALLOWED["*"] | ALLOWED.get(name, set())
        found = {
            m for m in imported_modules(path) if m.split(".")[0] == "bidkv" and m not in allowed
        }
        if found:
            offending[name] = sorted(found)
    assert offending == {}


def test_bidkv_never_imports_tracekit() -> None:
    for path in sorted((ROOT / "bidkv").rglob("*.py")):
        assert not {m for m in imported_modules(path) if m.split(".")[0] == "tracekit"}, path


def test_the_production_policy_and_the_legacy_bid_path_never_import_each_other() -> None:
    # docs/bidkv-core.md: bidkv.legacy holds the original bid path, bidkv.adapters.vllm_hust the
    # production policy. Neither reaches the other, not even through the top-level bidkv names.
    for path in sorted((ROOT / "bidkv" / "adapters" / "vllm_hust").rglob("*.py")):
        found = {m for m in imported_modules(path) if m == "bidkv" or m.startswith("bidkv.legacy")}
        assert not found, path
    for path in sorted((ROOT / "bidkv" / "legacy").rglob("*.py")):
        found = {m for m in imported_modules(path) if m.startswith("bidkv.adapters")}
        assert not found, path


def test_loading_the_production_policy_loads_no_legacy_module() -> None:
    # What an engine does: load the policy by its qualified name and call it. The legacy modules
    # stay unloaded, while a top-level legacy name loads them.
    code = textwrap.dedent(
        """
        import importlib, sys
        from types import SimpleNamespace
        module, _, name = "bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy".rpartition(".")
        policy_class = getattr(importlib.import_module(module), name)
        from bidkv.adapters.vllm_hust.selector import BidkvSelectorConfig
        policy = policy_class(BidkvSelectorConfig(enable_utility_victim_selection=True))
        candidates = tuple(
            SimpleNamespace(request_id=f"r{i}", priority=0, arrival_time=float(i),
                            num_prompt_tokens=10, num_output_tokens=i, num_computed_tokens=10 + i,
                            num_preemptions=0, max_tokens=16)
            for i in range(4)
        )
        context = SimpleNamespace(candidates=candidates, scheduling_policy="fcfs",
                                  requesting_request_id="r0", kv_cache_usage=0.99, now=1.0,
                                  builtin_victim_id="r3")
        policy.select_victim(context)
        print(sorted(m for m in sys.modules if m.startswith("bidkv.legacy")))
        import bidkv
        bidkv.BidKVConfig
        print("bidkv.legacy.bid_config" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "True"]


def test_a_dynamic_import_counts(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('import importlib\nimportlib.import_module("bidkv.manifests")\n')
    assert "bidkv.manifests" in imported_modules(source)


def test_strategies_hands_out_the_policy_rule_by_public_names() -> None:
    from tracekit.strategies import DecisionRules, decision_rules, resolve_strategy

    # A recording's configuration: other keys and nulls are ignored, the rest is the policy's.
    rules = decision_rules(
        {"utility_strategy": "pe-lifo", "utility_kv_gate": 0.5, "utility_epsilon": None}
    )
    assert rules == DecisionRules(kv_gate=0.5)
    spec = resolve_strategy("bidkv", {"utility_cooldown_s": 2.0})
    assert spec.rule == "bidkv"
    assert spec.decision_rules() == DecisionRules(cooldown_s=2.0)
    assert resolve_strategy("bidkv", {"utility_kill_switch": True}).rule == "pe"
    assert resolve_strategy("builtin").rule == "builtin"
    assert resolve_strategy("preempt-evict").rule == "pe"
