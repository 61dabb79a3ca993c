"""Validate and render the extension manifests that describe a victim policy to engines.

Three manifest formats are understood, each with a JSON Schema in ``schemas/manifests/`` (read
from the package ``tracekit.schemas.manifests``, keyed by the schema's ``schema_version`` const):

- Extension Manifest ``0.2-experimental`` and ``0.3-experimental``: Extension Manager manifests
  for the typed ``vllm.preemption-policy.v1`` contract (docs/contracts.md, "Extension manifests");
- Bundle v1 (``1.0``): typed bundles read by pre-0.28 hosts' ``VictimSelector`` seam
  (docs/contracts.md, "Discovery order").

:func:`validate_manifest` checks the schema and then the rules a scheduler policy needs: exactly
one policy component (``vllm.preemption-policy.v1``, or ``vllm.scheduler.policy.v1`` in a
bundle) on the ``scheduler`` plane, a ``python_module`` carrier that names the same object, an
``implementation_ref`` that imports (validation may import; discovery never does) and declares
the contract's entry point, and in 0.3 the exclusive ``vllm.scheduler.preemption-policy`` claim
on ``vllm-process``. :func:`render_manifest` applies the Manager's render rules. Every problem is
one line naming the file, the field (a JSON pointer) and the fix.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

from tracekit.errors import ManifestError, ManifestReadError
from tracekit.hosts.victim_selector import (
    SCHEDULER_PLANE,
    SCHEDULER_POLICY_CONTRACT,
    VICTIM_SELECTOR_API_VERSION,
)
from tracekit.manifests.schema import (
    ManifestProblem,
    json_pointer,
    manifest_schemas,
    schema_problems,
)

__all__ = [
    "BUNDLE_SCHEMA_VERSION",
    "PREEMPTION_POLICY_CLAIM",
    "PREEMPTION_POLICY_CONTRACT",
    "QUALIFICATION_KEY",
    "ManifestCheck",
    "ManifestProblem",
    "RenderedActivation",
    "find_problems",
    "manifest_schemas",
    "render_manifest",
    "validate_manifest",
]

# The schema_version of a Bundle v1 manifest; every other version is an Extension Manifest.
BUNDLE_SCHEMA_VERSION = "1.0"

# The typed contract an Extension Manifest's policy component declares.
PREEMPTION_POLICY_CONTRACT = "vllm.preemption-policy.v1"

# The resource claim a 0.3 scheduler policy must make: one policy per vLLM process.
PREEMPTION_POLICY_CLAIM = {
    "resource": "vllm.scheduler.preemption-policy",
    "scope": "vllm-process",
    "mode": "exclusive",
}

# Manager-only runtime qualification; never passed to the engine.
QUALIFICATION_KEY = "_manager_runtime_qualification"


@dataclass(frozen=True, slots=True)
class ManifestCheck:
    """One rule a manifest passed, for the ``validate`` report."""

    pointer: str
    description: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.description}"


@dataclass(frozen=True, slots=True)
class RenderedActivation:
    """What enabling a manifest passes to the engine (the Manager's render rules).

    ``engine_args`` is ``("--preemption-policy", "<module>.<object>")`` for an Extension
    Manifest and empty for a Bundle v1 (its host discovers the component itself);
    ``environment`` maps declared variables to string values; ``additional_config`` is the
    manifest's, without the Manager-only ``_manager_runtime_qualification``.
    """

    extension_id: str
    extension_version: str
    schema_version: str
    engine_args: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)
    additional_config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (``engine_args`` as a list)."""
        return {
            "extension_id": self.extension_id,
            "extension_version": self.extension_version,
            "schema_version": self.schema_version,
            "engine_args": list(self.engine_args),
            "environment": dict(self.environment),
            "additional_config": dict(self.additional_config),
        }

    def format_text(self) -> str:
        """Engine arguments, ``KEY=value`` environment lines and the additional_config JSON.

        Values are shell-quoted where needed, so each section can be pasted into a shell.
        """
        lines = [f"# {self.extension_id} {self.extension_version} ({self.schema_version})"]
        lines.append("# engine arguments")
        lines.append(shlex.join(self.engine_args) if self.engine_args else "(none)")
        lines.append("# environment")
        lines.extend(f"{key}={shlex.quote(value)}" for key, value in self.environment.items())
        if not self.environment:
            lines.append("(none)")
        lines.append("# additional_config")
        lines.append(json.dumps(self.additional_config))
        return "\n".join(lines)


def find_problems(path: str | Path, *, resolve: bool = True) -> list[ManifestProblem]:
    """Every problem of the manifest at ``path`` (schema first, then the policy rules).

    Parameters
    ----------
    path
        A manifest JSON file.
    resolve
        Import each policy component's ``implementation_ref``. Rendering passes ``False``:
        enabling a manifest must not import the policy.

    Returns
    -------
    list of ManifestProblem
        Empty when the manifest is valid. Schema problems stop the check before the policy
        rules, which assume the schema's shape.

    Raises
    ------
    ManifestError
        The file cannot be read or is not JSON.
    """
    return _inspect(Path(path), resolve=resolve)[1]


def validate_manifest(path: str | Path, *, resolve: bool = True) -> list[ManifestCheck]:
    """Validate a manifest and list the rules it passed.

    Parameters
    ----------
    path
        A manifest JSON file (Extension Manifest 0.2/0.3 or Bundle v1).
    resolve
        Import the policy component's ``implementation_ref`` (see :func:`find_problems`).

    Returns
    -------
    list of ManifestCheck
        The schema check, then each scheduler-policy rule that passed.

    Raises
    ------
    ManifestError
        On the first problem, as one line: ``<file>: <pointer>: <what>; fix: <how>``, followed
        by ``[1 of N problems]`` when there are several.

    Examples
    --------
    >>> from importlib import resources
    >>> bundled = resources.files("bidkv.manifests") / "vllm-hust-extension-v0.3.json"
    >>> for check in validate_manifest(str(bundled), resolve=False):
    ...     print(check)
    /: matches extension-v0.3.schema.json (schema_version 0.3-experimental)
    /components/0: the only vllm.preemption-policy.v1 component, on plane scheduler
    /implementation/0: python_module carrier names the component's implementation_ref
    /resource_claims/0: exclusive vllm.scheduler.preemption-policy claim on vllm-process
    """
    checks, problems, _ = _inspect(Path(path), resolve=resolve)
    _raise_first(problems)
    return checks


def render_manifest(
    path: str | Path, overrides: Mapping[str, str] | None = None
) -> RenderedActivation:
    """Render what enabling a manifest passes to the engine.

    The rules: docs/contracts.md, "Render rules (tracekit.manifests.render_manifest)".

    The manifest is validated first, without importing the policy. Then:
    ``environment`` = ``activation.environment`` updated with ``overrides`` (declared keys only,
    string values); ``additional_config`` = ``activation.additional_config`` without
    ``_manager_runtime_qualification``; and for an Extension Manifest the one
    ``vllm.preemption-policy.v1`` component's ``module:object`` becomes
    ``--preemption-policy module.object``.

    Parameters
    ----------
    path
        A manifest JSON file.
    overrides
        The user's environment values, keyed by variables the manifest declares.

    Returns
    -------
    RenderedActivation

    Raises
    ------
    ManifestError
        The manifest is invalid, or an override names an undeclared key or is not a string.
    """
    path = Path(path)
    _, problems, document = _inspect(path, resolve=False)
    _raise_first(problems)
    activation = document.get("activation", {})
    environment = _environment(path, activation.get("environment", {}), overrides or {})
    additional_config = {
        key: value
        for key, value in activation.get("additional_config", {}).items()
        if key != QUALIFICATION_KEY
    }
    version = document["schema_version"]
    if version == BUNDLE_SCHEMA_VERSION:
        identity = (document["bundle_id"], document["bundle_version"])
        engine_args: tuple[str, ...] = ()
    else:
        identity = (document["extension_id"], document["extension_version"])
        index = _policy_component_indices(document, PREEMPTION_POLICY_CONTRACT)[0]
        reference = document["components"][index]["implementation_ref"]
        engine_args = ("--preemption-policy", reference.replace(":", "."))
    return RenderedActivation(*identity, version, engine_args, environment, additional_config)


def _environment(
    path: Path, declared: Mapping[str, str], overrides: Mapping[str, str]
) -> dict[str, str]:
    """The declared environment updated with the user's overrides (declared keys, strings)."""
    environment = dict(declared)
    for key, value in overrides.items():
        pointer = json_pointer(["activation", "environment", key])
        if key not in environment:
            names = ", ".join(environment) or "none"
            message = f"override {key!r} is not declared by the manifest"
            fix = f"override only declared keys ({names})"
            _raise_first([ManifestProblem(str(path), pointer, message, fix)])
        if not isinstance(value, str):
            message = f"override value {value!r} is not a string"
            fix = f'pass the value as a string, e.g. "{value}"'
            _raise_first([ManifestProblem(str(path), pointer, message, fix)])
        environment[key] = value
    return environment


def _raise_first(problems: Sequence[ManifestProblem]) -> None:
    if problems:
        more = f" [1 of {len(problems)} problems]" if len(problems) > 1 else ""
        error = ManifestError(f"{problems[0]}{more}")
        error.problems = list(problems)  # type: ignore[attr-defined]
        raise error


def _load(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ManifestReadError(
            f"{path}: cannot read the manifest ({reason}); fix: pass the path of a manifest "
            "JSON file"
        ) from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestReadError(
            f"{path}: line {error.lineno} column {error.colno}: not valid JSON ({error.msg}); "
            "fix: correct the JSON syntax"
        ) from error
    except RecursionError:
        raise ManifestReadError(
            f"{path}: JSON nested too deeply to read; fix: a manifest is a flat object of a few "
            "levels, pass one"
        ) from None


def _inspect(
    path: Path, *, resolve: bool
) -> tuple[list[ManifestCheck], list[ManifestProblem], dict[str, Any]]:
    """Run every check; return passed checks, problems and the parsed document."""
    document = _load(path)
    where = str(path)
    schema_file, problems = schema_problems(document, where)
    if problems:
        return [], problems, document if isinstance(document, dict) else {}
    version = document["schema_version"]
    checks = [ManifestCheck("", f"matches {schema_file} (schema_version {version})")]
    bundle = version == BUNDLE_SCHEMA_VERSION
    contract = SCHEDULER_POLICY_CONTRACT if bundle else PREEMPTION_POLICY_CONTRACT
    for check, problem in _policy_rules(document, contract, resolve=resolve):
        if problem is not None:
            problems.append(ManifestProblem(where, *problem))
        elif check is not None:
            checks.append(check)
    return checks, problems, document


Rule = tuple[ManifestCheck | None, tuple[str, str, str] | None]


def _policy_rules(document: dict[str, Any], contract: str, *, resolve: bool) -> Iterator[Rule]:
    """The scheduler-policy rules, after the schema passed; yields (check, problem) pairs."""
    indices = _policy_component_indices(document, contract)
    if not indices:
        yield (
            None,
            (
                "/components",
                f"no component declares the contract {contract!r}",
                f"add exactly one component whose contracts list {contract!r}",
            ),
        )
        return
    if len(indices) > 1:
        listed = ", ".join(f"/components/{i}" for i in indices)
        yield (
            None,
            (
                f"/components/{indices[1]}",
                f"{listed} all declare {contract!r}, but a scheduler policy is exclusive",
                "keep exactly one component with that contract",
            ),
        )
        return
    index = indices[0]
    component = document["components"][index]
    pointer = f"/components/{index}"
    if SCHEDULER_PLANE not in component["execution_planes"]:
        yield (
            None,
            (
                f"{pointer}/execution_planes",
                f"the policy component does not run on the {SCHEDULER_PLANE!r} plane",
                f'add "{SCHEDULER_PLANE}" to execution_planes',
            ),
        )
    else:
        yield (
            ManifestCheck(pointer, f"the only {contract} component, on plane {SCHEDULER_PLANE}"),
            None,
        )
    reference = component["implementation_ref"]
    for carrier_index, carrier in enumerate(document.get("implementation", [])):
        if carrier.get("type") != "python_module":
            continue
        named = f"{carrier['module']}:{carrier['object']}"
        carrier_pointer = f"/implementation/{carrier_index}"
        if named != reference:
            yield (
                None,
                (
                    carrier_pointer,
                    f"python_module carrier names {named!r} but "
                    f"{pointer}/implementation_ref is {reference!r}",
                    "make module and object name the same object as implementation_ref",
                ),
            )
        else:
            yield (
                ManifestCheck(
                    carrier_pointer,
                    "python_module carrier names the component's implementation_ref",
                ),
                None,
            )
    if resolve:
        yield _resolve_rule(f"{pointer}/implementation_ref", reference, contract)
    if document["schema_version"] == "0.3-experimental":
        yield from _claim_rules(document["resource_claims"])


def _policy_component_indices(document: dict[str, Any], contract: str) -> list[int]:
    return [
        index
        for index, component in enumerate(document.get("components", []))
        if contract in component["contracts"]
    ]


def _resolve_rule(pointer: str, reference: str, contract: str) -> Rule:
    """Import ``module:object`` and check the attribute the contract's host looks up."""
    module_name, _, attribute_path = reference.partition(":")
    try:
        target: Any = import_module(module_name)
    except Exception as error:
        return None, (
            pointer,
            f"cannot import module {module_name!r} ({type(error).__name__}: {error})",
            "install the distribution that provides it, or correct the module path before ':'",
        )
    for attribute in attribute_path.split("."):
        if not hasattr(target, attribute):
            return None, (
                pointer,
                f"module {module_name!r} has no attribute {attribute_path!r}",
                "correct the object name after ':'",
            )
        target = getattr(target, attribute)
    if contract == SCHEDULER_POLICY_CONTRACT:
        declared = getattr(target, "vllm_victim_selector_api_version", None)
        if declared != VICTIM_SELECTOR_API_VERSION:
            return None, (
                pointer,
                f"{reference} declares vllm_victim_selector_api_version "
                f"{declared!r}; the host requires {VICTIM_SELECTOR_API_VERSION}",
                f"set vllm_victim_selector_api_version = {VICTIM_SELECTOR_API_VERSION} "
                "on the class",
            )
        required = ("from_vllm_config", "pick_victim")
    else:
        required = ("select_victim",)
    missing = [name for name in required if not callable(getattr(target, name, None))]
    if missing:
        return None, (
            pointer,
            f"{reference} has no callable {', '.join(missing)}",
            f"point implementation_ref at a class implementing {contract}",
        )
    return ManifestCheck(pointer, f"{reference} imports and implements {contract}"), None


def _claim_rules(claims: list[dict[str, str]]) -> Iterator[Rule]:
    resource = PREEMPTION_POLICY_CLAIM["resource"]
    matches = [index for index, claim in enumerate(claims) if claim["resource"] == resource]
    expected = json.dumps(PREEMPTION_POLICY_CLAIM)
    if not matches:
        yield None, ("/resource_claims", f"no claim on {resource!r}", f"add {expected}")
        return
    if len(matches) > 1:
        yield (
            None,
            (
                f"/resource_claims/{matches[1]}",
                f"{resource!r} is claimed {len(matches)} times, and an exclusive claim "
                "conflicts with any other claim on it",
                "keep exactly one claim",
            ),
        )
        return
    index = matches[0]
    claim = claims[index]
    wrong = False
    for key in ("scope", "mode"):
        if claim[key] != PREEMPTION_POLICY_CLAIM[key]:
            wrong = True
            yield (
                None,
                (
                    f"/resource_claims/{index}/{key}",
                    f"the {resource!r} claim has {key} {claim[key]!r}",
                    f'set it to "{PREEMPTION_POLICY_CLAIM[key]}"',
                ),
            )
    if not wrong:
        yield (
            ManifestCheck(
                f"/resource_claims/{index}",
                f"exclusive {resource} claim on {PREEMPTION_POLICY_CLAIM['scope']}",
            ),
            None,
        )
