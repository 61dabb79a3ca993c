"""The result of ``tracekit diff --conformance``: named checks, each passed or failed.

Exit codes: 0 when every check passes, 1 otherwise; invalid input (an unknown strategy, a bad
``--policy-config``) raises :class:`tracekit.errors.ConfigError` before a report exists
(status 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracekit.trace.text import text_table

__all__ = ["FORMAT", "Check", "ConformanceReport"]

FORMAT = "tracekit.conformance"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Check:
    """One conformance check.

    Attributes
    ----------
    name
        ``<strategy>/<group>/<check>``, e.g. ``bidkv/startup/negative-completion-weight``.
    passed
        Whether the behaviour matched the reference.
    detail
        What was observed (on failure: what differed).
    """

    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(slots=True)
class ConformanceReport:
    """Every check of a conformance run.

    Attributes
    ----------
    strategies
        The strategies checked.
    policy_config
        The extra settings applied to every strategy.
    checks
        In run order.
    """

    strategies: list[str]
    policy_config: dict[str, Any]
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every check passed."""
        return all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when every check passed, 1 otherwise."""
        return 0 if self.passed else 1

    def failed(self) -> list[Check]:
        """The failed checks."""
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (schema in ``docs/diff.md``)."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "strategies": self.strategies,
            "policy_config": self.policy_config,
            "checks": [c.to_dict() for c in self.checks],
        }

    def render_text(self) -> str:
        """One line per check, then a summary line."""
        rows = [(f"{'ok  ' if c.passed else 'FAIL'} {c.name}", c.detail) for c in self.checks]
        lines = [line.rstrip() for line in text_table(rows)]
        failed = len(self.failed())
        lines.append(
            f"conformance: {len(self.checks) - failed} of {len(self.checks)} checks passed"
            + (f", {failed} failed (exit 1)" if failed else " (exit 0)")
        )
        return "\n".join(lines)
