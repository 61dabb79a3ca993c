"""The sweep matrix's JSON Schema, and its errors as one line naming the file, key and fix.

The schema is ``schemas/sweep-matrix-v1.schema.json`` (installed as ``tracekit.schemas``). Each
of its nodes may say what a value must be (``x-expects``) and how to fix it (``x-fix``); a
jsonschema error becomes ``<file>: key '<key>' <problem>; <fix>`` from those. The checks that
need more than one value (strategy names, engine configurations, duplicates, files) are in
:mod:`tracekit.sweep.matrix`, with :class:`Checker` for their messages.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from tracekit.errors import ConfigError

__all__ = ["LABEL", "MATRIX_SCHEMA_FILE", "Checker", "matrix_schema", "show"]

MATRIX_SCHEMA_FILE = "sweep-matrix-v1.schema.json"

_KINDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a non-empty string",
    "array": "a list",
    "object": "a table",
    "boolean": "a boolean",
}


@functools.cache
def _schema_file() -> dict[str, Any]:
    text = resources.files("tracekit.schemas").joinpath(MATRIX_SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)


# Partition values become folder names: the schema's label pattern keeps them portable.
LABEL = re.compile(_schema_file()["$defs"]["label"]["pattern"])


@functools.cache
def matrix_schema(engine_fields: tuple[str, ...], policy_settings: tuple[str, ...]) -> Any:
    """The matrix schema with the keys of ``[[engines]]`` and ``[policy]`` filled in.

    Parameters
    ----------
    engine_fields
        ``EngineConfig``'s field names (their values are checked by ``EngineConfig``).
    policy_settings
        The production policy's setting names (each takes a value or a list of values).

    Returns
    -------
    jsonschema.Draft202012Validator
        A validator whose ``integer`` type refuses floats (TOML ``1.0`` is not a count).
    """
    schema = copy.deepcopy(_schema_file())
    properties = schema["properties"]
    engine = properties["engines"]["items"]["properties"]
    engine.update({name: {} for name in engine_fields})
    policy = properties["policy"]["properties"]
    policy.update({name: {"$ref": "#/$defs/setting"} for name in policy_settings})
    base = jsonschema.Draft202012Validator
    strict = base.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    validator = jsonschema.validators.extend(base, type_checker=strict)
    return validator(schema)


class Checker:
    """Checks of one matrix file that raise one-line :class:`ConfigError`.

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

    def schema(self, data: Mapping[str, Any], validator: Any) -> None:
        """Raise the first error of ``data`` against the matrix schema, if any."""
        errors = list(validator.iter_errors(data))
        if not errors:
            return
        order = list(validator.schema["properties"])
        first = min(errors, key=lambda e: _error_rank(e, order))
        raise self._schema_error(first, validator.schema, data)

    def _schema_error(
        self, error: ValidationError, root: Mapping[str, Any], data: Mapping[str, Any]
    ) -> ConfigError:
        parts = list(error.absolute_path)
        keyword, value, instance = error.validator, error.validator_value, error.instance
        if keyword == "required":
            missing = next(name for name in value if name not in instance)
            node = _node(root, [*parts, missing], data)
            return self.fail(_key([*parts, missing]), "is missing", node.get("x-fix", "add it"))
        node = _node(root, parts, data)
        key = _key(parts)
        fix = node.get("x-fix") or f"follow schemas/{MATRIX_SCHEMA_FILE}"
        if keyword == "additionalProperties":
            allowed = list(node.get("properties", {}))
            unknown = next(name for name in instance if name not in allowed)
            where = _key([*parts, unknown])
            return ConfigError(
                f"{self.path}: unknown key '{where}'; use one of {', '.join(allowed)}"
            )
        if keyword == "minItems" and value == 1 and instance == []:
            return self.fail(key, "is an empty list", fix)
        expects = node.get("x-expects")
        if keyword == "type" and expects is None:
            expects = _KINDS.get(value) if isinstance(value, str) else None
        if keyword == "minimum" and expects is None:
            return self.fail(key, f"must be at least {value}, got {instance}", fix)
        if keyword == "maximum" and expects is None:
            return self.fail(key, f"must be at most {value:g}, got {show(instance)}", fix)
        if keyword == "exclusiveMinimum" and expects is None:
            expects = f"a finite number > {value}"
        return self.fail(key, f"must be {expects or error.message}, got {show(instance)}", fix)

    def number(self, key: str, value: Any, *, positive: bool = False) -> float:
        """``value`` (already a number by the schema) as a finite float."""
        if not math.isfinite(value):
            need = "a finite number > 0" if positive else "a finite number"
            raise self.fail(key, f"must be {need}, got {value}", f"write {key} = 2.0")
        return float(value)

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


def _key(parts: Iterable[Any]) -> str:
    """``workloads[0].path`` for the instance path ``["workloads", 0, "path"]``."""
    key = ""
    for part in parts:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def _error_rank(error: ValidationError, order: list[str]) -> tuple[Any, ...]:
    """Sort key of the error reported first: top-level keys in schema order, shallow first."""
    path = list(error.absolute_path)
    if not path and error.validator == "additionalProperties":
        top = -2
    elif not path and error.validator == "required":
        top = -1
    else:
        name = path[0] if path else None
        top = order.index(name) if name in order else len(order)
    return (top, len(path), [str(p) for p in path])


def _node(root: Mapping[str, Any], parts: list[Any], document: Any) -> dict[str, Any]:
    """The schema node of the value at ``parts`` in ``document``.

    Follows ``properties`` and ``items``, ``$ref`` and ``if``/``then``/``else`` (choosing the
    branch the document's value takes), merging annotations: an outer node's win.
    """
    merged: dict[str, Any] = {}
    current: Mapping[str, Any] | None = root
    value = document
    remaining = list(parts)
    while current is not None:
        # Annotations of an outer node win over those of the node it refers to.
        merged = {**current, **merged}
        if "$ref" in current:
            name = current["$ref"].rsplit("/", 1)[-1]
            current = root["$defs"][name]
            merged.pop("$ref", None)
            continue
        if "if" in current:
            branch = "then" if _matches(current["if"], value) else "else"
            merged = {k: v for k, v in merged.items() if k not in ("if", "then", "else")}
            current = current.get(branch, {})
            continue
        if not remaining:
            return merged
        part = remaining.pop(0)
        child = merged.get("items", {}) if isinstance(part, int) else merged.get("properties", {})
        child = child if isinstance(part, int) else child.get(part, {})
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
        merged = {}
        current = child
    return merged


def _matches(schema: Mapping[str, Any], value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)
