"""The JSON Schemas of the extension manifests, and their errors as one-line problems.

The schemas are declared once, in ``schemas/manifests/`` (installed as
``tracekit.schemas.manifests``). Each top-level schema names the manifest version it validates as
its ``schema_version`` const; ``common.schema.json`` holds the shared definitions they ``$ref``.
This module is the only reader of those files (:mod:`tracekit.manifests` applies the policy rules
on top).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema
import referencing
from jsonschema.exceptions import ValidationError

__all__ = [
    "SCHEMA_PACKAGE",
    "ManifestProblem",
    "json_pointer",
    "manifest_schemas",
    "schema_problems",
]

SCHEMA_PACKAGE = "tracekit.schemas.manifests"


@dataclass(frozen=True, slots=True)
class ManifestProblem:
    """One failed rule: the file, the JSON pointer of the field, what is wrong and the fix."""

    path: str
    pointer: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.pointer or '/'}: {self.message}; fix: {self.fix}"


@functools.cache
def manifest_schemas() -> dict[str, tuple[str, dict[str, Any]]]:
    """``schema_version`` -> (schema file name, schema), from ``tracekit.schemas.manifests``.

    A schema file declares the version it validates as ``properties.schema_version.const``;
    files without one (shared definitions) are only used to resolve ``$ref``.
    """
    schemas = {}
    for entry in resources.files(SCHEMA_PACKAGE).iterdir():
        if not entry.name.endswith(".schema.json"):
            continue
        schema = json.loads(entry.read_text(encoding="utf-8"))
        version = schema.get("properties", {}).get("schema_version", {}).get("const")
        if version is not None:
            schemas[version] = (entry.name, schema)
    return schemas


@functools.cache
def _registry() -> referencing.Registry[Any]:
    resources_ = []
    for entry in resources.files(SCHEMA_PACKAGE).iterdir():
        if entry.name.endswith(".schema.json"):
            schema = json.loads(entry.read_text(encoding="utf-8"))
            resources_.append((schema["$id"], referencing.Resource.from_contents(schema)))
    return referencing.Registry().with_resources(resources_)


def schema_problems(document: object, path: str) -> tuple[str, list[ManifestProblem]]:
    """Check a parsed manifest against the schema of its ``schema_version``.

    Parameters
    ----------
    document
        The parsed JSON.
    path
        The file name to put in each problem.

    Returns
    -------
    tuple of (str, list of ManifestProblem)
        The schema file used (``""`` when none applies) and the problems, sorted by field; an
        empty list means the document matches.
    """
    schemas = manifest_schemas()
    if not isinstance(document, dict):
        found = type(document).__name__
        return "", [
            ManifestProblem(
                path,
                "",
                f"expected a JSON object, found {found}",
                "write the manifest as one JSON object",
            )
        ]
    version = document.get("schema_version")
    if version not in schemas:
        message = (
            f"unknown schema_version {version!r}"
            if "schema_version" in document
            else "schema_version is missing"
        )
        known = ", ".join(sorted(schemas))
        return "", [
            ManifestProblem(
                path, "/schema_version", message, f"set schema_version to one of {known}"
            )
        ]
    schema_file, schema = schemas[version]
    validator = jsonschema.Draft202012Validator(schema, registry=_registry())
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (list(map(str, e.path)), str(e.validator))
    )
    return schema_file, [_schema_problem(path, schema_file, error) for error in errors]


def json_pointer(parts: Sequence[object]) -> str:
    """An RFC 6901 JSON pointer for a path of keys and indices."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def _declared_properties(schema: Mapping[str, Any]) -> set[str]:
    """Property names a schema declares itself or through its ``$ref`` chain."""
    names = set(schema.get("properties", {}))
    if "$ref" in schema:
        names |= _declared_properties(_registry().resolver().lookup(schema["$ref"]).contents)
    return names


def _schema_problem(path: str, schema_file: str, error: ValidationError) -> ManifestProblem:
    """One line for one JSON Schema error, with a fix derived from the failed keyword."""
    parts = list(error.absolute_path)
    keyword = error.validator
    value = error.validator_value
    if keyword == "required" and isinstance(error.instance, dict):
        missing = [name for name in value if name not in error.instance]
        parts.append(missing[0])
        return ManifestProblem(
            path,
            json_pointer(parts),
            "required field is missing",
            f"add it (required by {schema_file})",
        )
    if keyword in ("additionalProperties", "unevaluatedProperties") and isinstance(
        error.instance, dict
    ):
        allowed = _declared_properties(error.schema)
        extra = sorted(name for name in error.instance if name not in allowed)
        if extra:
            parts.append(extra[0])
        return ManifestProblem(
            path,
            json_pointer(parts),
            f"field not allowed by {schema_file}",
            "remove it (or change schema_version to a format that has it)",
        )
    return ManifestProblem(
        path, json_pointer(parts), error.message, _fix(keyword, value, schema_file)
    )


def _fix(keyword: object, value: Any, schema_file: str) -> str:
    """How to satisfy one failed JSON Schema keyword."""
    if keyword == "const":
        return f"set it to {json.dumps(value)}"
    if keyword == "enum":
        return f"use one of {', '.join(json.dumps(choice) for choice in value)}"
    if keyword == "type":
        return f"use a JSON {value}"
    if keyword == "pattern":
        return f"match the pattern {value}"
    if keyword == "minItems":
        return f"list at least {value} item(s)"
    if keyword == "minLength":
        return "use a non-empty string"
    if keyword == "uniqueItems":
        return "remove the duplicate items"
    return f"follow {schema_file}"
