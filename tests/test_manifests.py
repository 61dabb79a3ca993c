"""Manifests: the bundled files, their JSON Schemas, the policy rules, rendering and the CLI.

Facts checked: docs/contracts.md, "Extension manifests" (Bundle v1, Extension Manifest 0.2/0.3
fields) and docs/contracts.md, "Render rules (tracekit.manifests.render_manifest)".
"""

from __future__ import annotations

import copy
import json
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from import_helpers import run_isolated

import bidkv
from bidkv.manifests import load_manifest, manifest_names
from tracekit.cli import cli
from tracekit.errors import ManifestError, TracekitError
from tracekit.manifests import (
    ManifestCheck,
    RenderedActivation,
    find_problems,
    manifest_schemas,
    render_manifest,
    validate_manifest,
)

V02 = "vllm-hust-extension-v0.2.json"
V03 = "vllm-hust-extension-v0.3.json"
V1 = "vllm-hust-extension-v1.json"
POLICY_QUALNAME = "bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy"
POLICY_REF = "bidkv.adapters.vllm_hust.selector:BidkvPreemptionPolicy"
SELECTOR_REF = "bidkv.adapters.vllm_hust.selector:BidkvVictimSelector"

# The environment the 0.2/0.3 manifests activate (docs/contracts.md, "Extension manifests").
POLICY_ENVIRONMENT = {
    "BIDKV_UTILITY_ENABLE": "1",
    "BIDKV_UTILITY_STRATEGY": "bidkv",
    "BIDKV_UTILITY_LIVENESS_PREEMPTIONS": "2",
    "BIDKV_UTILITY_CASCADE_GAIN_RATIO": "1.25",
}


def bundled(name: str) -> Path:
    return Path(str(resources.files("bidkv.manifests") / name))


@pytest.fixture
def write(tmp_path: Path):
    """Write a (mutated) manifest document to a file and return its path."""

    def write_manifest(document: Any, name: str = "manifest.json") -> Path:
        path = tmp_path / name
        path.write_text(document if isinstance(document, str) else json.dumps(document))
        return path

    return write_manifest


def problem_lines(path: Path, *, resolve: bool = True) -> list[str]:
    return [str(problem) for problem in find_problems(path, resolve=resolve)]


# -- the bundled manifests ----------------------------------------------------------------------


def test_bundled_manifest_files() -> None:
    assert manifest_names() == [V02, V03, V1]
    with pytest.raises(FileNotFoundError, match=r"no bundled manifest 'v9\.json'"):
        load_manifest("v9.json")


def test_manifest_versions_are_the_distribution_version() -> None:
    assert bidkv.__version__ == metadata.version("bidkv")
    assert load_manifest(V02)["extension_version"] == bidkv.__version__
    assert load_manifest(V03)["extension_version"] == bidkv.__version__
    assert load_manifest(V1)["bundle_version"] == bidkv.__version__


def test_extension_manifests_describe_an_in_process_scheduler_policy() -> None:
    for name, version in ((V02, "0.2-experimental"), (V03, "0.3-experimental")):
        document = load_manifest(name)
        assert document["schema_version"] == version
        assert document["extension_id"] == "org.vllm-hust.bidkv"
        assert document["kind"] == "scheduler_policy"
        assert document["lifecycle_owner"] == "vllm"
        assert document["host"] == {
            "provider": "vllm",
            "name": "vllm",
            "version_range": ">=0.28.1rc1.dev319,<0.29",
            "api_range": ">=1,<2",
        }
        assert document["runtime"] == {
            "type": "python",
            "process_scope": "scheduler",
            "isolation": "trusted_in_process",
        }
        assert document["protocols"] == [
            {"name": "vllm.preemption-policy", "version_range": ">=1,<2"}
        ]
        assert document["implementation"] == [
            {
                "type": "python_module",
                "module": "bidkv.adapters.vllm_hust.selector",
                "object": "BidkvPreemptionPolicy",
                "status": "active",
            }
        ]
        assert document["requires_services"] == []
        assert document["components"] == [
            {
                "component_id": "victim-selector",
                "contracts": ["vllm.preemption-policy.v1"],
                "execution_planes": ["scheduler"],
                "isolation": "trusted_in_process",
                "implementation_ref": POLICY_REF,
                "permissions": [],
            }
        ]
        assert document["activation"]["entry_points"] == []
        assert document["activation"]["environment"] == POLICY_ENVIRONMENT
    v03 = load_manifest(V03)
    assert v03["requires_extensions"] == []
    assert v03["resource_claims"] == [
        {
            "resource": "vllm.scheduler.preemption-policy",
            "scope": "vllm-process",
            "mode": "exclusive",
        }
    ]


def test_bundle_manifest_has_the_bundle_v1_shape() -> None:
    document = load_manifest(V1)
    assert document["schema_version"] == "1.0"
    assert document["bundle_id"] == "org.vllm-hust.bidkv"
    assert document["host_api_range"] == ">=1,<2"
    (component,) = document["components"]
    assert component == {
        "component_id": "victim-selector",
        "contracts": ["vllm.scheduler.policy.v1"],
        "execution_planes": ["scheduler"],
        "isolation": "trusted_in_process",
        "implementation_ref": SELECTOR_REF,
        "permissions": [],
    }
    assert document["activation"]["entry_points"] == [
        {"group": "vllm.victim_selector", "name": "bidkv"}
    ]
    assert document["activation"]["additional_config"]["victim_selector_plugin"] == "bidkv"


@pytest.mark.parametrize("name", [V02, V03, V1])
def test_bundled_manifests_are_valid(name: str) -> None:
    checks = validate_manifest(bundled(name))
    assert all(isinstance(check, ManifestCheck) for check in checks)
    pointers = [check.pointer for check in checks]
    expected = {
        V02: ["", "/components/0", "/implementation/0", "/components/0/implementation_ref"],
        V03: [
            "",
            "/components/0",
            "/implementation/0",
            "/components/0/implementation_ref",
            "/resource_claims/0",
        ],
        V1: ["", "/components/0", "/components/0/implementation_ref"],
    }[name]
    assert pointers == expected


def test_validation_report_lines() -> None:
    assert [str(check) for check in validate_manifest(bundled(V1))] == [
        "/: matches bundle-v1.schema.json (schema_version 1.0)",
        "/components/0: the only vllm.scheduler.policy.v1 component, on plane scheduler",
        f"/components/0/implementation_ref: {SELECTOR_REF} imports and implements "
        "vllm.scheduler.policy.v1",
    ]


# -- the schemas --------------------------------------------------------------------------------


def test_schemas_are_draft_2020_12_and_keyed_by_version() -> None:
    schemas = manifest_schemas()
    assert {version: file for version, (file, _) in schemas.items()} == {
        "0.2-experimental": "extension-v0.2.schema.json",
        "0.3-experimental": "extension-v0.3.schema.json",
        "1.0": "bundle-v1.schema.json",
    }
    files = [
        entry
        for entry in resources.files("tracekit.schemas.manifests").iterdir()
        if entry.name.endswith(".schema.json")
    ]
    assert len(files) == 4  # the three above and common.schema.json
    for entry in files:
        schema = json.loads(entry.read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


def test_schemas_are_the_top_level_schemas_folder() -> None:
    top_level = Path(__file__).resolve().parents[1] / "schemas" / "manifests"
    for version, (file, schema) in manifest_schemas().items():
        assert json.loads((top_level / file).read_text()) == schema, version


def v02() -> dict[str, Any]:
    return copy.deepcopy(load_manifest(V02))


def v03() -> dict[str, Any]:
    return copy.deepcopy(load_manifest(V03))


def v1() -> dict[str, Any]:
    return copy.deepcopy(load_manifest(V1))


def test_v02_may_not_carry_v03_fields(write) -> None:
    document = v02()
    document["resource_claims"] = v03()["resource_claims"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /resource_claims: field not allowed by extension-v0.2.schema.json; fix: "
        "remove it (or change schema_version to a format that has it)"
    ]


def test_missing_required_field(write) -> None:
    document = v03()
    del document["extension_id"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /extension_id: required field is missing; fix: add it (required by "
        "extension-v0.3.schema.json)"
    ]


def test_v03_requires_its_claims(write) -> None:
    document = v03()
    del document["resource_claims"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /resource_claims: required field is missing; fix: add it (required by "
        "extension-v0.3.schema.json)"
    ]


def test_unknown_field_in_a_bundle(write) -> None:
    document = v1()
    document["components"][0]["priority"] = 1
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/0/priority: field not allowed by bundle-v1.schema.json; fix: "
        "remove it (or change schema_version to a format that has it)"
    ]


@pytest.mark.parametrize(
    ("mutate", "pointer", "fix"),
    [
        (
            lambda d: d.update(kind="policy"),
            "/kind",
            'use one of "in_process_plugin", "scheduler_policy", "kv_connector", '
            '"kv_service_adapter", "control_plane_extension", "runtime_bridge"',
        ),
        (
            lambda d: d["components"][0].update(implementation_ref=POLICY_QUALNAME),
            "/components/0/implementation_ref",
            "match the pattern",
        ),
        (
            lambda d: d["activation"]["environment"].update(BIDKV_UTILITY_ENABLE=1),
            "/activation/environment/BIDKV_UTILITY_ENABLE",
            "use a JSON string",
        ),
        (
            lambda d: d["components"][0].update(isolation="subprocess"),
            "/components/0/isolation",
            'use one of "trusted_in_process"',
        ),
        (lambda d: d.update(implementation=[]), "/implementation", "list at least 1 item(s)"),
        (
            lambda d: d["implementation"][0].pop("object"),
            "/implementation/0/object",
            "add it (required by extension-v0.2.schema.json)",
        ),
        (
            lambda d: d["host"].update(version_range="latest"),
            "/host/version_range",
            "match the pattern",
        ),
    ],
)
def test_schema_errors_name_the_field_and_the_fix(write, mutate, pointer: str, fix: str) -> None:
    document = v02()
    mutate(document)
    path = write(document)
    (line,) = problem_lines(path)
    assert line.startswith(f"{path}: {pointer}: ")
    assert f"; fix: {fix}" in line


def test_unknown_schema_version(write) -> None:
    document = v02()
    document["schema_version"] = "0.4-experimental"
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /schema_version: unknown schema_version '0.4-experimental'; fix: set "
        "schema_version to one of 0.2-experimental, 0.3-experimental, 1.0"
    ]
    del document["schema_version"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /schema_version: schema_version is missing; fix: set schema_version to one "
        "of 0.2-experimental, 0.3-experimental, 1.0"
    ]


def test_not_an_object(write) -> None:
    path = write([v02()])
    assert problem_lines(path) == [
        f"{path}: /: expected a JSON object, found list; fix: write the manifest as one JSON object"
    ]


def test_unreadable_files_raise(write, tmp_path: Path) -> None:
    path = write('{"schema_version": "1.0",\n  "bundle_id": }')
    with pytest.raises(ManifestError) as raised:
        validate_manifest(path)
    assert str(raised.value) == (
        f"{path}: line 2 column 16: not valid JSON (Expecting value); fix: correct the JSON syntax"
    )
    missing = tmp_path / "missing.json"
    with pytest.raises(ManifestError) as raised:
        validate_manifest(missing)
    assert str(raised.value) == (
        f"{missing}: cannot read the manifest (No such file or directory); fix: pass the path "
        "of a manifest JSON file"
    )
    assert isinstance(raised.value, TracekitError)


# -- the policy rules ---------------------------------------------------------------------------


def test_exactly_one_policy_component_is_required(write) -> None:
    document = v02()
    document["components"][0]["contracts"] = ["vllm.scheduler.policy.v1"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components: no component declares the contract 'vllm.preemption-policy.v1'; "
        "fix: add exactly one component whose contracts list 'vllm.preemption-policy.v1'"
    ]
    document = v02()
    del document["components"]  # optional in the 0.2 schema, required by the policy rule
    path = write(document)
    assert problem_lines(path)[0].startswith(f"{path}: /components: no component declares")


def test_a_second_policy_component_is_rejected(write) -> None:
    document = v03()
    second = dict(document["components"][0], component_id="second-selector")
    document["components"].append(second)
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/1: /components/0, /components/1 all declare "
        "'vllm.preemption-policy.v1', but a scheduler policy is exclusive; fix: keep exactly "
        "one component with that contract"
    ]


def test_bundle_policy_contract_is_the_scheduler_policy(write) -> None:
    document = v1()
    document["components"][0]["contracts"] = ["vllm.preemption-policy.v1"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components: no component declares the contract 'vllm.scheduler.policy.v1'; "
        "fix: add exactly one component whose contracts list 'vllm.scheduler.policy.v1'"
    ]


def test_policy_component_runs_on_the_scheduler_plane(write) -> None:
    document = v1()
    document["components"][0]["execution_planes"] = ["worker"]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/0/execution_planes: the policy component does not run on the "
        "'scheduler' plane; fix: add \"scheduler\" to execution_planes"
    ]


def test_carrier_must_name_the_component_object(write) -> None:
    document = v02()
    document["implementation"][0]["object"] = "BidkvVictimSelector"
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /implementation/0: python_module carrier names '{SELECTOR_REF}' but "
        f"/components/0/implementation_ref is '{POLICY_REF}'; fix: make module and object name "
        "the same object as implementation_ref"
    ]


def test_implementation_ref_must_import(write) -> None:
    document = v1()
    document["components"][0]["implementation_ref"] = "tk_no_such_pkg.policy:Policy"
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/0/implementation_ref: cannot import module 'tk_no_such_pkg.policy' "
        "(ModuleNotFoundError: No module named 'tk_no_such_pkg'); fix: install the distribution "
        "that provides it, or correct the module path before ':'"
    ]
    assert problem_lines(path, resolve=False) == []


def test_implementation_ref_must_name_an_attribute(write) -> None:
    document = v02()
    document["components"][0]["implementation_ref"] = "bidkv.adapters.vllm_hust.selector:Nope"
    document["implementation"][0]["object"] = "Nope"
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/0/implementation_ref: module 'bidkv.adapters.vllm_hust.selector' "
        "has no attribute 'Nope'; fix: correct the object name after ':'"
    ]


def test_bundle_implementation_must_declare_the_legacy_api_version(write) -> None:
    # The 0.2.1 original pointed its bundle at a class without the attribute (docs/policy.md,
    # "Deliberate differences from the original"),
    # so the legacy host could not load it. Our validator catches that.
    document = v1()
    document["components"][0]["implementation_ref"] = POLICY_REF
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/0/implementation_ref: {POLICY_REF} declares "
        "vllm_victim_selector_api_version None; the host requires 1; fix: set "
        "vllm_victim_selector_api_version = 1 on the class"
    ]


def test_extension_implementation_must_select_victims(write) -> None:
    document = v02()
    document["components"][0]["implementation_ref"] = "json:JSONDecoder"
    document["implementation"][0].update(module="json", object="JSONDecoder")
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /components/0/implementation_ref: json:JSONDecoder has no callable "
        "select_victim; fix: point implementation_ref at a class implementing "
        "vllm.preemption-policy.v1"
    ]


def test_v03_claim_is_required(write) -> None:
    document = v03()
    document["resource_claims"] = [
        {"resource": "vllm.runtime.observer", "scope": "vllm-process", "mode": "shared"}
    ]
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /resource_claims: no claim on 'vllm.scheduler.preemption-policy'; fix: add "
        '{"resource": "vllm.scheduler.preemption-policy", "scope": "vllm-process", "mode": '
        '"exclusive"}'
    ]


def test_v03_claim_scope_and_mode(write) -> None:
    document = v03()
    document["resource_claims"][0].update(scope="vllm-engine", mode="shared")
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /resource_claims/0/scope: the 'vllm.scheduler.preemption-policy' claim has "
        "scope 'vllm-engine'; fix: set it to \"vllm-process\"",
        f"{path}: /resource_claims/0/mode: the 'vllm.scheduler.preemption-policy' claim has "
        "mode 'shared'; fix: set it to \"exclusive\"",
    ]


def test_v03_claim_only_once(write) -> None:
    document = v03()
    document["resource_claims"].append(dict(document["resource_claims"][0]))
    path = write(document)
    assert problem_lines(path) == [
        f"{path}: /resource_claims/1: 'vllm.scheduler.preemption-policy' is claimed 2 times, "
        "and an exclusive claim conflicts with any other claim on it; fix: keep exactly one claim"
    ]


def test_validate_raises_the_first_problem_and_counts_the_rest(write) -> None:
    document = v03()
    document["resource_claims"][0].update(scope="vllm-engine", mode="shared")
    path = write(document)
    with pytest.raises(ManifestError) as raised:
        validate_manifest(path)
    assert str(raised.value) == (
        f"{path}: /resource_claims/0/scope: the 'vllm.scheduler.preemption-policy' claim has "
        "scope 'vllm-engine'; fix: set it to \"vllm-process\" [1 of 2 problems]"
    )
    assert [problem.pointer for problem in raised.value.problems] == [
        "/resource_claims/0/scope",
        "/resource_claims/0/mode",
    ]


# -- rendering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [V02, V03])
def test_render_extension_manifest(name: str) -> None:
    rendered = render_manifest(bundled(name))
    assert rendered == RenderedActivation(
        "org.vllm-hust.bidkv",
        bidkv.__version__,
        load_manifest(name)["schema_version"],
        ("--preemption-policy", POLICY_QUALNAME),
        POLICY_ENVIRONMENT,
        {},
    )
    assert list(rendered.environment) == list(POLICY_ENVIRONMENT)


def test_render_bundle_manifest() -> None:
    rendered = render_manifest(bundled(V1))
    assert rendered.engine_args == ()
    assert rendered.environment == {"BIDKV_UTILITY_ENABLE": "1", "BIDKV_UTILITY_STRATEGY": "bidkv"}
    assert rendered.additional_config == {
        "victim_selector_plugin": "bidkv",
        "enable_utility_victim_selection": True,
        "utility_strategy": "bidkv",
    }


def test_render_drops_the_manager_runtime_qualification(write) -> None:
    document = v02()
    document["activation"]["additional_config"] = {
        "_manager_runtime_qualification": {
            "accelerator": "ascend",
            "functional_compatibility": {"status": "passed"},
        },
        "utility_kv_gate": 0.8,
    }
    assert render_manifest(write(document)).additional_config == {"utility_kv_gate": 0.8}


def test_render_applies_declared_overrides_in_place() -> None:
    rendered = render_manifest(bundled(V03), {"BIDKV_UTILITY_LIVENESS_PREEMPTIONS": "0"})
    assert list(rendered.environment.items()) == [
        ("BIDKV_UTILITY_ENABLE", "1"),
        ("BIDKV_UTILITY_STRATEGY", "bidkv"),
        ("BIDKV_UTILITY_LIVENESS_PREEMPTIONS", "0"),
        ("BIDKV_UTILITY_CASCADE_GAIN_RATIO", "1.25"),
    ]
    # The manifest itself is not modified.
    assert render_manifest(bundled(V03)).environment == POLICY_ENVIRONMENT


def test_render_rejects_undeclared_or_non_string_overrides() -> None:
    path = bundled(V02)
    with pytest.raises(ManifestError) as raised:
        render_manifest(path, {"BIDKV_UTILITY_KV_GATE": "0.9"})
    assert str(raised.value) == (
        f"{path}: /activation/environment/BIDKV_UTILITY_KV_GATE: override "
        "'BIDKV_UTILITY_KV_GATE' is not declared by the manifest; fix: override only declared "
        "keys (BIDKV_UTILITY_ENABLE, BIDKV_UTILITY_STRATEGY, BIDKV_UTILITY_LIVENESS_PREEMPTIONS, "
        "BIDKV_UTILITY_CASCADE_GAIN_RATIO)"
    )
    with pytest.raises(ManifestError) as raised:
        render_manifest(path, {"BIDKV_UTILITY_ENABLE": 0})  # type: ignore[dict-item]
    assert str(raised.value) == (
        f"{path}: /activation/environment/BIDKV_UTILITY_ENABLE: override value 0 is not a "
        'string; fix: pass the value as a string, e.g. "0"'
    )


def test_render_refuses_an_invalid_manifest_but_does_not_import(write) -> None:
    document = v02()
    document["components"][0]["implementation_ref"] = "tk_no_such_pkg.policy:Policy"
    document["implementation"][0].update(module="tk_no_such_pkg.policy", object="Policy")
    assert render_manifest(write(document)).engine_args == (
        "--preemption-policy",
        "tk_no_such_pkg.policy.Policy",
    )
    document["components"][0]["contracts"] = ["vllm.scheduler.policy.v1"]
    with pytest.raises(ManifestError, match="/components: no component declares"):
        render_manifest(write(document))


def test_render_does_not_import_the_policy(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from tracekit.manifests import render_manifest\n"
        "from importlib import resources\n"
        f"render_manifest(str(resources.files('bidkv.manifests') / {V03!r}))\n"
        "print('bidkv.adapters.vllm_hust.selector' in sys.modules,"
        " 'bidkv.adapters.vllm_hust.policy' in sys.modules)\n"
    )
    result = run_isolated(script, tmp_path, check=True)
    assert result.stdout == "False False\n"


def test_rendered_text_and_json() -> None:
    rendered = RenderedActivation(
        "org.example.policy",
        "1.0.0",
        "0.2-experimental",
        ("--preemption-policy", "pkg.mod.Policy"),
        {"A": "1", "B": "two words"},
        {"k": [1, 2]},
    )
    assert rendered.format_text() == (
        "# org.example.policy 1.0.0 (0.2-experimental)\n"
        "# engine arguments\n"
        "--preemption-policy pkg.mod.Policy\n"
        "# environment\n"
        "A=1\n"
        "B='two words'\n"
        "# additional_config\n"
        '{"k": [1, 2]}'
    )
    assert rendered.to_dict() == {
        "extension_id": "org.example.policy",
        "extension_version": "1.0.0",
        "schema_version": "0.2-experimental",
        "engine_args": ["--preemption-policy", "pkg.mod.Policy"],
        "environment": {"A": "1", "B": "two words"},
        "additional_config": {"k": [1, 2]},
    }
    empty = RenderedActivation("org.example.b", "1.0", "1.0", ())
    assert empty.format_text().splitlines()[1:] == [
        "# engine arguments",
        "(none)",
        "# environment",
        "(none)",
        "# additional_config",
        "{}",
    ]


# -- the command line ---------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_validate_prints_the_passed_rules() -> None:
    path = bundled(V03)
    result = invoke("manifest", "validate", str(path))
    assert result.exit_code == 0
    assert result.output == (
        "ok /: matches extension-v0.3.schema.json (schema_version 0.3-experimental)\n"
        "ok /components/0: the only vllm.preemption-policy.v1 component, on plane scheduler\n"
        "ok /implementation/0: python_module carrier names the component's implementation_ref\n"
        f"ok /components/0/implementation_ref: {POLICY_REF} imports and implements "
        "vllm.preemption-policy.v1\n"
        "ok /resource_claims/0: exclusive vllm.scheduler.preemption-policy claim on "
        "vllm-process\n"
        f"{path}: valid\n"
    )


def test_cli_validate_fails_with_one_line(write) -> None:
    document = v03()
    document["resource_claims"][0]["mode"] = "shared"
    path = write(document)
    result = invoke("manifest", "validate", str(path))
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {path}: /resource_claims/0/mode: the 'vllm.scheduler.preemption-policy' claim "
        "has mode 'shared'; fix: set it to \"exclusive\"\n"
    )


def test_cli_validate_missing_file(tmp_path: Path) -> None:
    result = invoke("manifest", "validate", str(tmp_path / "none.json"))
    assert result.exit_code == 2
    assert len(result.output.splitlines()) == 1
    assert result.output.startswith("Error: ")


def test_cli_render_text() -> None:
    result = invoke(
        "manifest", "render", str(bundled(V02)), "--env", "BIDKV_UTILITY_CASCADE_GAIN_RATIO=1.5"
    )
    assert result.exit_code == 0
    assert result.output == (
        f"# org.vllm-hust.bidkv {bidkv.__version__} (0.2-experimental)\n"
        "# engine arguments\n"
        f"--preemption-policy {POLICY_QUALNAME}\n"
        "# environment\n"
        "BIDKV_UTILITY_ENABLE=1\n"
        "BIDKV_UTILITY_STRATEGY=bidkv\n"
        "BIDKV_UTILITY_LIVENESS_PREEMPTIONS=2\n"
        "BIDKV_UTILITY_CASCADE_GAIN_RATIO=1.5\n"
        "# additional_config\n"
        "{}\n"
    )


def test_cli_render_json() -> None:
    result = invoke("manifest", "render", str(bundled(V1)), "--json")
    assert result.exit_code == 0
    assert json.loads(result.output) == render_manifest(bundled(V1)).to_dict()


def test_cli_render_errors() -> None:
    path = bundled(V02)
    result = invoke("manifest", "render", str(path), "--env", "BIDKV_OTHER=1")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {path}: /activation/environment/BIDKV_OTHER: ")
    assert len(result.output.splitlines()) == 1
    result = CliRunner().invoke(cli, ["manifest", "render", str(path), "--env", "NOEQUALS"])
    assert result.exit_code == 2
    assert "Invalid value for '--env': expected KEY=VALUE, got 'NOEQUALS'" in result.output


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize(
    "command", [[], ["manifest"], ["manifest", "validate"], ["manifest", "render"]]
)
def test_cli_help(command: list[str], flag: str) -> None:
    result = invoke(*command, flag)
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")
    if command:
        assert f"Usage: cli {' '.join(command)}" in result.output


def test_cli_manifest_group_lists_its_commands() -> None:
    output = invoke("manifest", "--help").output
    assert "  render    " in output
    assert "  validate  " in output
