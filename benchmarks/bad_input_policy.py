"""The bad-input suite's random ``--policy-config`` documents, judged against the documentation.

Seeded documents (``random.Random(seed)``), most of them JSON objects of one to four settings,
some of them broken JSON: known settings, near misses and aliases of them, and unknown keys;
values inside, on and beyond each documented range, of every wrong type, huge integers, 1e400,
``NaN`` and ``Infinity`` literals, long and odd strings. Each is given to what the command line
does with ``--policy-config`` for ``--strategy bidkv`` (``parse_policy_config``, then
``resolve_strategy``), in this process: the settings parser itself, thousands a second.

Whether a document should be taken is decided independently of the code, from the settings
table of docs/policy.md (:data:`DOCUMENTED`) and the rules around it (no coercion, no repeated
key, a configuration must not contradict ``--strategy bidkv``). Categories:

- ``clear``: refused as documented, one line (``ConfigError``) naming ``--policy-config``;
- ``valid``: a document within the documentation, taken (not a failure);
- ``silent``: taken although the documentation refuses it;
- ``wrong-exit``: refused although the documentation takes it;
- ``unclear``: refused in more than one line, or without naming ``--policy-config``;
- ``traceback``: another exception escaped.

Damage is a change to the parsed document made by resolving it.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INT64 = 2**63 - 1
#: docs/policy.md, "Settings": setting -> (kind, check of a value of that kind).
DOCUMENTED: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "enable_utility_victim_selection": ("bool", lambda v: True),
    "utility_strategy": ("str", lambda v: True),  # the strategy rules, below
    "utility_kill_switch": ("bool", lambda v: True),
    "utility_completion_weight": ("number", lambda v: v >= 0),
    "utility_preempt_weight": ("number", lambda v: v >= 0),
    "utility_kv_gate": ("number", lambda v: 0 <= v <= 1),
    "utility_cooldown_s": ("number", lambda v: v >= 0),
    "utility_min_running": ("int", lambda v: 1 <= v <= INT64),
    "utility_liveness_preemptions": ("int", lambda v: 0 <= v <= INT64),
    "utility_cascade_gain_ratio": ("number", lambda v: v >= 1),
    "utility_snapshot_enabled": ("bool", lambda v: True),
    "utility_snapshot_top_k": ("int", lambda v: 1 <= v <= INT64),
    "utility_snapshot_history_size": ("int", lambda v: 1 <= v <= 2**31 - 1),
    "utility_epsilon": ("number", lambda v: v > 0),
    "utility_default_max_tokens": ("int", lambda v: 1 <= v <= INT64),
    "utility_seed": ("int", lambda v: -INT64 - 1 <= v <= INT64),
    "utility_liveness_mode": ("str", lambda v: v.strip().lower() in ("abstain", "barrier")),
    "utility_slo_s": ("number", lambda v: v > 0),
}
#: Names of the bidkv strategy (utility_strategy must not contradict --strategy bidkv).
BIDKV_NAMES = ("bidkv",)

_NEAR = ["utility_kv_gat", "utility_kvgate", "kv_gate", "Utility_Seed", "utility_seed ",
         "utility_enabled", "enabled", "seed", "utility-kv-gate", "utility_slo", "strategy",
         "utility_preempt_wieght", "UTILITY_EPSILON", "", " ", "utility_", "__proto__",
         "constructor", "utility_kv_gate\u200b", "\u202eutility_seed"]  # fmt: skip
_JUNK_KEYS = ["colour", "x", "1", "null", "true", "<script>", "a" * 300, "\x00", "é", "🙂"]


def _literal(rng: random.Random, kind: str, check: Callable[[Any], bool]) -> str:
    """A JSON value's text for a setting of ``kind``: valid, on a bound, beyond, or wrong."""
    pick = rng.random()
    if pick < 0.3:  # the right kind, any value (in or out of range)
        if kind == "bool":
            return rng.choice(["true", "false"])
        if kind == "int":
            return str(rng.choice([0, 1, -1, 2, 5, 31, 2**31 - 1, 2**31, INT64, INT64 + 1,
                                   -INT64 - 1, -INT64 - 2, rng.randint(-10**6, 10**6),
                                   10 ** rng.randint(1, 30)]))  # fmt: skip
        if kind == "number":
            return rng.choice(["0", "0.0", "-0.0", "1", "0.5", "1.0", "1.5", "-1", "-0.01",
                               "1e-300", "5e-324", "1e300", "1.7976931348623157e308",
                               repr(rng.uniform(-2, 3)), repr(rng.uniform(0, 1)),
                               str(rng.randint(0, 100))])  # fmt: skip
        return json.dumps(rng.choice(["bidkv", "BIDKV", " bidkv ", "pe", "lcf", "abstain",
                                      "barrier", " Barrier", "nope", "", "bid kv"]))  # fmt: skip
    if pick < 0.55:  # overflow and non-finite
        return rng.choice(["1e400", "-1e400", "1e309", "Infinity", "-Infinity", "NaN",
                           "1" + "0" * rng.randint(19, 400), "-1" + "0" * rng.randint(19, 400),
                           "9" * 4400])  # fmt: skip
    # wrong types
    return rng.choice(['"7"', '"1.5"', '"true"', '"yes"', "null", "[]", "[1]", "{}",
                       '{"a": 1}', "true", "false", "1.5", "2.0", "0", "1", '""',
                       json.dumps("\u202e"), json.dumps("<script>")])  # fmt: skip


def _broken(rng: random.Random) -> str:
    """A ``--policy-config`` text that is not a JSON object of settings."""
    good = '{"utility_kv_gate": 0.5}'
    return rng.choice([
        "", "   ", "{", "}", "{bad", good[:-1], good + ",", '{"utility_kv_gate": 0.5,}',
        "{'utility_kv_gate': 0.5}", "[]", "[1, 2]", "null", "1", '"x"', "true", "NaN",
        '{"utility_kv_gate": 0.5, "utility_kv_gate": 0.6}', "[" * 3000 + "]" * 3000,
        '{"a": ' * 2000 + "1" + "}" * 2000, "\ufeff" + good, good + " trailing", "@",
        "@/nonexistent/policy.json", '{"utility_seed": ' + "9" * 5000 + "}",
    ])  # fmt: skip


def random_document(rng: random.Random) -> str:
    """One ``--policy-config`` text."""
    if rng.random() < 0.1:
        return _broken(rng)
    names = list(DOCUMENTED)
    pairs = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.8:
            name = rng.choice(names)
            kind, check = DOCUMENTED[name]
            pairs.append((name, _literal(rng, kind, check)))
        else:
            name = rng.choice(_NEAR if roll < 0.92 else _JUNK_KEYS)
            pairs.append((name, _literal(rng, "number", lambda v: True)))
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}"


def documented(text: str) -> bool:
    """Whether docs/policy.md takes ``text`` as ``--policy-config`` of ``--strategy bidkv``."""
    if not text.strip() or text.startswith("@"):
        return False
    seen: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen.extend(k for k, _ in items)
        return dict(items)

    try:
        value = json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict) or len(seen) != len(set(seen)):
        return False
    for name, item in value.items():
        if name not in DOCUMENTED:
            return False
        kind, check = DOCUMENTED[name]
        if kind == "bool":
            ok = isinstance(item, bool)
        elif kind == "int":
            ok = isinstance(item, int) and not isinstance(item, bool) and check(item)
        elif kind == "number":
            if isinstance(item, bool) or not isinstance(item, int | float):
                ok = False
            else:
                try:
                    number = float(item)
                except OverflowError:
                    return False
                ok = math.isfinite(number) and check(number)
        else:
            ok = isinstance(item, str) and check(item)
        if not ok:
            return False
    strategy = value.get("utility_strategy")
    if strategy is not None and strategy.strip().lower() not in BIDKV_NAMES:
        return False  # unknown, or another strategy than --strategy bidkv
    return value.get("enable_utility_victim_selection") is not False


@dataclass
class PolicyCounts:
    """The counts per category, and the first few documents of each failing one."""

    counts: Counter[str]
    damage: int
    examples: dict[str, list[str]]


def judge(text: str) -> tuple[str, bool, str]:
    """The category of ``text``, whether resolving it changed the parsed document, and why."""
    from tracekit.errors import ConfigError
    from tracekit.strategies import parse_policy_config, resolve_strategy

    expected = documented(text)
    parsed: Any = None
    try:
        parsed = parse_policy_config(text)
        before = copy.deepcopy(parsed)
        resolve_strategy("bidkv", parsed)
        changed = parsed != before
    except ConfigError as error:
        message = str(error)
        if expected:
            return "wrong-exit", False, message
        clear = "\n" not in message and ("--policy-config" in message or "policy" in message)
        return ("clear" if clear else "unclear"), False, message
    except Exception as error:
        return "traceback", False, f"{type(error).__name__}: {error}"[:300]
    return ("valid" if expected else "silent"), changed, ""


def run_policy_documents(count: int, seed: int = 20261) -> PolicyCounts:
    """Judge ``count`` seeded documents."""
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    damage = 0
    for _ in range(count):
        text = random_document(rng)
        category, changed, why = judge(text)
        counts[category] += 1
        damage += changed
        if category not in ("clear", "valid") and len(examples.setdefault(category, [])) < 5:
            examples[category].append(f"{text[:120]!r}: {why[:200]}")
    return PolicyCounts(counts, damage, examples)
