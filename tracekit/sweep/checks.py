"""Type checks for the sweep matrix: each failure is one line naming the file, key and fix."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError

__all__ = ["LABEL", "Checker", "show"]

# Partition values become folder names: keep them portable.
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Checker:
    """Type checks of one matrix file that raise one-line :class:`ConfigError`.

    Parameters
    ----------
    path
        The matrix file, named first in every message.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        """The error ``<file>: key '<key>' <problem>; <fix>`` (to raise)."""
        return ConfigError(f"{self.path}: key '{key}' {problem}; {fix}")

    def table(self, key: str, value: Any, allowed: Sequence[str], fix: str) -> dict[str, Any]:
        """``value`` as a table whose keys are all in ``allowed``."""
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, got {show(value)}", fix)
        unknown = [k for k in value if k not in allowed]
        if unknown:
            where = f"'{key}.{unknown[0]}'" if key else f"'{unknown[0]}'"
            raise ConfigError(f"{self.path}: unknown key {where}; use one of {', '.join(allowed)}")
        return value

    def integer(self, key: str, value: Any, minimum: int | None = None) -> int:
        """``value`` as an integer (not a boolean), at least ``minimum``."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, got {show(value)}", f"write {key} = 3")
        if minimum is not None and value < minimum:
            raise self.fail(
                key, f"must be at least {minimum}, got {value}", f"write {key} = {minimum}"
            )
        return value

    def number(self, key: str, value: Any, *, positive: bool = False) -> float:
        """``value`` as a finite float (``> 0`` when ``positive``)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {show(value)}", f"write {key} = 2.0")
        if not math.isfinite(value) or (positive and value <= 0):
            need = "a finite number > 0" if positive else "a finite number"
            raise self.fail(key, f"must be {need}, got {value}", f"write {key} = 2.0")
        return float(value)

    def string(self, key: str, value: Any, example: str) -> str:
        """``value`` as a stripped, non-empty string."""
        if not isinstance(value, str) or not value.strip():
            raise self.fail(
                key, f"must be a non-empty string, got {show(value)}", f"write {key} = {example}"
            )
        return value.strip()

    def label(self, key: str, value: Any) -> str:
        """``value`` as a folder-safe label (a partition value)."""
        text = self.string(key, value, '"small-cache"')
        if not LABEL.match(text):
            raise self.fail(
                key,
                f"{text!r} is not a folder-safe label",
                "use letters, digits, '_', '.' and '-' (at most 64, starting with a letter or "
                "digit)",
            )
        return text

    def items(self, key: str, value: Any, example: str) -> list[Any]:
        """``value`` as a non-empty list."""
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list, got {show(value)}", f"write {key} = [{example}]")
        if not value:
            raise self.fail(key, "is an empty list", f"give at least one value, e.g. [{example}]")
        return value

    def unique(
        self,
        key: str,
        values: Sequence[Any],
        shown: Sequence[Any] | None = None,
        fix: str = "remove the duplicate",
    ) -> None:
        """Fail on the first value of ``values`` that repeats an earlier one.

        ``shown`` gives the names to print for the values (default: the values themselves).
        """
        seen: dict[Any, int] = {}
        names = shown if shown is not None else values
        for index, value in enumerate(values):
            marker = json.dumps(value, sort_keys=True, default=str)
            if marker in seen:
                first = seen[marker]
                raise self.fail(
                    f"{key}[{index}]",
                    f"({names[index]!r}) repeats {key}[{first}] ({names[first]!r})",
                    fix,
                )
            seen[marker] = index


def show(value: Any) -> str:
    """A found value for a message: its TOML kind and its repr (``a string 'x'``)."""
    kind = {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(type(value))
    return f"{kind or type(value).__name__} {value!r}" if not isinstance(value, dict) else "a table"
