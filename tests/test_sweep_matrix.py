"""Sweep matrices: parsing, expansion into runs and cells, and every validation error."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sweep_helpers import PAPER, SAMPLE, SMOKE, TINY, write_matrix

from tracekit.errors import ConfigError
from tracekit.sweep import load_matrix, plan_sweep
from tracekit.sweep.matrix import DEFAULT_ENGINE


def plan_of(tmp_path: Path, text: str):
    return plan_sweep(load_matrix(write_matrix(tmp_path, text)))


def test_smoke_matrix_expands_into_runs_cells_and_partitions() -> None:
    plan = plan_sweep(load_matrix(SMOKE))
    matrix = plan.matrix
    assert matrix.strategies == ("builtin", "pe", "bidkv")
    assert (matrix.rate_unit, matrix.rates) == ("scale", (1.0, 2.0))
    assert (matrix.repeats, matrix.repeat_kind, matrix.seed) == (3, "windows", 0)
    assert [p.settings for p in matrix.policy] == [
        {"utility_preempt_weight": 0.3},
        {"utility_preempt_weight": 1.0},
    ]
    # builtin: 2 rates x 3 repeats; pe and bidkv: 2 rates x 3 repeats x 2 policy points.
    assert len(plan.runs) == 6 + 12 + 12
    assert sum(r.strategy == "builtin" for r in plan.runs) == 6
    # A cell per (workload, rate, engine, policy point); each holds 3 strategies x 3 repeats.
    assert len(plan.cells) == 4
    assert all(len(c.runs) == 9 for c in plan.cells)
    assert plan.cells[0].label == "azure_conv_sample|rate=1.0|small|utility_preempt_weight=0.3"
    first = plan.runs[0]
    assert first.path == (
        "runs/workload=azure_conv_sample/rate=1.0/strategy=builtin/config=small/repeat=0"
    )
    # The baseline belongs to both policy points' cells; production runs to one.
    assert len(first.cells) == 2
    bidkv = next(r for r in plan.runs if r.strategy == "bidkv")
    label = matrix.policy[0].label
    assert bidkv.config == f"small+{label}" and label.startswith("p") and len(label) == 9
    assert bidkv.run.strategy.settings["utility_preempt_weight"] == 0.3
    assert len({r.path for r in plan.runs}) == len({r.run_id for r in plan.runs}) == 30
    # Windows: disjoint thirds of the 120 requests, re-based to 0, same seed.
    windows = [r.run.workload for r in plan.runs if r.strategy == "builtin" and r.rate == 1.0]
    assert sum(w.num_requests for w in windows) == 120
    assert {r.seed for r in plan.runs} == {0}
    assert str(first.run.workload.source) == "../../traces/azure-llm-2023/azure_conv_sample.csv"


def test_engines_and_policy_grid_form_a_cartesian_product(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        TINY
        + """
[[engines]]
num_blocks = 400
max_model_len = 4608

[policy]
utility_preempt_weight = [0.3, 1.0]
utility_kv_gate = [0.0, 0.5, 0.9]
utility_cooldown_s = 0.5
""",
    )
    matrix = plan.matrix
    assert matrix.engines[0].label == "small"
    assert matrix.engines[1].label.startswith("e") and len(matrix.engines[1].label) == 9
    assert len(matrix.policy) == 6
    combos = {(p.settings["utility_preempt_weight"], p.settings["utility_kv_gate"])
              for p in matrix.policy}  # fmt: skip
    assert combos == {(w, g) for w in (0.3, 1.0) for g in (0.0, 0.5, 0.9)}
    assert all(p.settings["utility_cooldown_s"] == 0.5 for p in matrix.policy)
    # bidkv: 2 engines x 6 points; builtin (no settings): once per engine.
    assert sum(r.strategy == "bidkv" for r in plan.runs) == 12
    assert sum(r.strategy == "builtin" for r in plan.runs) == 2
    assert len(plan.cells) == 12
    assert {r.config for r in plan.runs if r.strategy == "builtin"} == {
        e.label for e in matrix.engines
    }
    assert len({r.run_id for r in plan.runs}) == 14


def test_seed_repeats_reseed_runs_and_policies(tmp_path: Path) -> None:
    text = 'seed = 7\nrepeats = { count = 3, kind = "seeds" }\n' + TINY
    plan = plan_of(tmp_path, text.replace('"bidkv"]', '"static-random"]'))
    runs = [r for r in plan.runs if r.strategy == "static-random"]
    assert [r.seed for r in runs] == [7, 8, 9]
    assert [r.run.strategy.settings["utility_seed"] for r in runs] == [7, 8, 9]
    # Seed repeats replay the whole workload each time, so only the seeds tell them apart.
    assert {r.run.workload.num_requests for r in runs} == {60}
    assert len({r.run_id for r in plan.runs}) == 6


def test_policy_grid_may_pin_the_policy_seed(tmp_path: Path) -> None:
    text = 'repeats = { count = 2, kind = "seeds" }\n' + TINY + "\n[policy]\nutility_seed = [5]\n"
    plan = plan_of(tmp_path, text.replace('["builtin", "bidkv"]', '["static-random"]'))
    assert [r.run.strategy.settings["utility_seed"] for r in plan.runs] == [5, 5]
    assert [r.seed for r in plan.runs] == [0, 1]


def test_rate_rps_scales_arrivals_to_the_target_mean_rate(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "rate_rps = [2.0, 5.7]\n" + TINY)
    assert plan.matrix.rate_unit == "rps"
    for loaded in plan.workloads:
        workload = loaded.workload
        assert workload.num_requests / workload.duration_s == pytest.approx(loaded.rate, rel=1e-9)
        assert workload.options["rate_rps"] == loaded.rate
        assert workload.options["rate_scale"] == loaded.rate_scale
    assert [r.rate for r in plan.runs] == [2.0, 2.0, 5.7, 5.7]
    assert plan.runs[0].path.split("/")[2] == "rate=2.0"


def test_shorthands_and_defaults(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, f'strategies = ["builtin"]\nrepeats = 2\nworkloads = ["{SAMPLE}"]\n')
    matrix = plan.matrix
    assert (matrix.repeats, matrix.repeat_kind) == (2, "windows")
    assert matrix.rates == (1.0,) and matrix.rate_unit == "scale"
    assert [(e.label, e.config) for e in matrix.engines] == [("default", DEFAULT_ENGINE)]
    assert matrix.candidate is None and matrix.host == "typed"
    assert matrix.name == "matrix"
    assert [r.path.split("/")[4] for r in plan.runs] == ["config=default"] * 2


def test_named_workloads_and_loader_options(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        TINY.replace(
            "limit = 60", 'limit = 60\nname = "conv"\nwindow = [10, 100]\npriority_seed = 3'
        ),
    )
    workload = plan.runs[0].run.workload
    assert workload.name == "conv" and plan.runs[0].workload == "conv"
    assert workload.options["window"] == [10.0, 100.0]
    assert workload.options["priority_seed"] == 3


def test_the_paper_matrix_has_the_original_shape() -> None:
    plan = plan_sweep(load_matrix(PAPER))
    matrix = plan.matrix
    assert matrix.strategies == ("pe", "pe-sjf", "static-random", "largest-first", "bidkv")
    assert (matrix.rate_unit, matrix.rates) == ("rps", (2.0, 3.8, 5.7))
    assert (matrix.repeats, matrix.repeat_kind) == (3, "windows")
    assert len(plan.runs) == 45 and len(plan.cells) == 3
    assert dataclasses.asdict(matrix.engines[0].config) == dataclasses.asdict(DEFAULT_ENGINE)


WORKLOAD = f'[[workloads]]\npath = "{SAMPLE}"\nlimit = 60\n'
STRATS = 'strategies = ["builtin", "bidkv"]\n'

ERRORS = [
    # (matrix text, a fragment the one-line message must contain)
    ("strategies = [", "not valid TOML"),
    (STRATS + "strategy = 1\n" + WORKLOAD, "unknown key 'strategy'"),
    (STRATS, "key 'workloads' is missing"),
    (WORKLOAD, "key 'strategies' is missing"),
    ("strategies = []\n" + WORKLOAD, "key 'strategies' is an empty list"),
    ('strategies = "bidkv"\n' + WORKLOAD, "key 'strategies' must be a list"),
    ('strategies = ["bidkvv"]\n' + WORKLOAD, "key 'strategies[0]' names unknown strategy"),
    (
        'strategies = ["pe", "preempt-evict"]\n' + WORKLOAD,
        "key 'strategies[1]' ('pe') repeats strategies[0]",
    ),
    ('strategies = ["nosuch_module_x:Policy"]\n' + WORKLOAD, "key 'strategies[0]'"),
    ("strategies = [1]\n" + WORKLOAD, "key 'strategies[0]' must be a non-empty string"),
    (STRATS + 'candidate = "largest-first"\n' + WORKLOAD, "key 'candidate'"),
    (STRATS + 'host = "grpc"\n' + WORKLOAD, "key 'host' must be 'typed' or 'legacy'"),
    (STRATS + "seed = 1.5\n" + WORKLOAD, "key 'seed' must be an integer"),
    (STRATS + "seed = 1.0\n" + WORKLOAD, "key 'seed' must be an integer"),
    (STRATS + "rate_rps = [nan]\n" + WORKLOAD, "key 'rate_rps[0]' must be a finite number > 0"),
    (STRATS + "rate_scale = [1.0]\nrate_rps = [2.0]\n" + WORKLOAD, "key 'rate_rps' and"),
    (
        STRATS + "rate_scale = [-1.0]\n" + WORKLOAD,
        "key 'rate_scale[0]' must be a finite number > 0",
    ),
    (STRATS + 'rate_scale = ["fast"]\n' + WORKLOAD, "key 'rate_scale[0]' must be a number"),
    (
        STRATS + "rate_scale = [1.0, 1]\n" + WORKLOAD,
        "key 'rate_scale[1]' (1.0) repeats rate_scale[0]",
    ),
    (STRATS + "rate_rps = []\n" + WORKLOAD, "key 'rate_rps' is an empty list"),
    (STRATS + "repeats = { count = 0 }\n" + WORKLOAD, "key 'repeats.count' must be at least 1"),
    (STRATS + 'repeats = { kind = "bootstrap" }\n' + WORKLOAD, "key 'repeats.kind'"),
    (STRATS + "repeats = { times = 3 }\n" + WORKLOAD, "unknown key 'repeats.times'"),
    (STRATS + "repeats = true\n" + WORKLOAD, "key 'repeats' must be an integer"),
    (STRATS + "[[workloads]]\nlimit = 3\n", "key 'workloads[0].path' is missing"),
    (STRATS + '[[workloads]]\npath = "no/such.csv"\n', "key 'workloads[0].path' names no file"),
    (STRATS + WORKLOAD + "rate = 2\n", "unknown key 'workloads[0].rate'"),
    (STRATS + WORKLOAD.replace("60", "true"), "key 'workloads[0].limit' must be an integer"),
    (STRATS + WORKLOAD + "window = [100, 10]\n", "key 'workloads[0].window'"),
    (STRATS + WORKLOAD + "window = 10\n", "key 'workloads[0].window' must be [start_s, end_s]"),
    (STRATS + WORKLOAD + 'options = "x"\n', "key 'workloads[0].options' must be a table"),
    (STRATS + WORKLOAD + 'name = "a b"\n', "key 'workloads[0].name'"),
    (STRATS + "workloads = [3]\n", "key 'workloads[0]' must be a table"),
    (STRATS + "[[engines]]\nnum_block = 10\n" + WORKLOAD, "unknown key 'engines[0].num_block'"),
    (
        STRATS + "[[engines]]\nnum_blocks = 1\n" + WORKLOAD,
        "key 'engines[0]' is invalid: num_blocks",
    ),
    (STRATS + '[[engines]]\nclock = "sundial"\n' + WORKLOAD, "key 'engines[0]' is invalid: clock"),
    (STRATS + '[[engines]]\nlabel = "a/b"\n' + WORKLOAD, "key 'engines[0].label'"),
    (STRATS + "engines = []\n" + WORKLOAD, "key 'engines' is an empty list"),
    (
        STRATS + '[[engines]]\nlabel = "a"\n[[engines]]\nlabel = "b"\n' + WORKLOAD,
        "key 'engines[1]' ('b') repeats engines[0] ('a'); give each entry different settings",
    ),
    (
        STRATS
        + '[[engines]]\nlabel = "a"\n[[engines]]\nlabel = "a"\nwatermark = 0.01\n'
        + WORKLOAD,
        "key 'engines[1]' ('a') repeats engines[0] ('a')",
    ),
    (STRATS + WORKLOAD + "[policy]\nutility_weight = [1]\n", "unknown key 'policy.utility_weight'"),
    (
        STRATS + WORKLOAD + '[policy]\nutility_strategy = ["pe"]\n',
        "key 'policy.utility_strategy' is set by each strategy",
    ),
    (
        STRATS + WORKLOAD + "[policy]\nutility_preempt_weight = []\n",
        "key 'policy.utility_preempt_weight' is an empty list",
    ),
    (
        STRATS + WORKLOAD + "[policy]\nutility_kv_gate = [0.5, 2.0]\n",
        "key 'policy' point utility_kv_gate=2.0: utility_kv_gate must be in [0, 1]",
    ),
    (
        STRATS + WORKLOAD + "[policy]\nutility_kv_gate = [0.5, 0.5]\n",
        "key 'policy.utility_kv_gate[1]' (0.5) repeats",
    ),
    (
        STRATS + WORKLOAD + "[policy]\nutility_kv_gate = [[0.5]]\n",
        "key 'policy.utility_kv_gate[0]' must be a scalar",
    ),
    (STRATS + WORKLOAD + "[slo]\nttft_s = -1\n", "key 'slo.ttft_s' must be a finite number > 0"),
    (STRATS + WORKLOAD + "[slo]\nttft = 1\n", "unknown key 'slo.ttft'"),
]


@pytest.mark.parametrize(("text", "fragment"), ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_every_matrix_error_is_one_line_naming_file_key_and_fix(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = write_matrix(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        plan_sweep(load_matrix(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert fragment in message
    assert "; " in message  # the fix


PLAN_ERRORS = [
    # Detected while loading the workloads and cutting repeats.
    (STRATS + WORKLOAD + 'options = { bucket = "spread" }\n', "key 'workloads[0]': "),
    (
        STRATS + WORKLOAD + '[[workloads]]\npath = "' + str(SAMPLE) + '"\nlimit = 30\n',
        "has the name 'azure_conv_sample'",
    ),
    (
        "repeats = 40\n" + STRATS + WORKLOAD + "window = [0, 2]\n",
        "key 'repeats': workloads[0] at rate 1.0",
    ),
]


@pytest.mark.parametrize(
    ("text", "fragment"), PLAN_ERRORS, ids=["loader-option", "same-name", "windows"]
)
def test_workload_errors_are_reported_against_the_matrix(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = write_matrix(tmp_path, text)
    matrix = load_matrix(path)
    with pytest.raises(ConfigError) as caught:
        plan_sweep(matrix)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and fragment in message


def test_rate_rps_needs_a_workload_with_a_duration(tmp_path: Path) -> None:
    trace = tmp_path / "burst.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0,12,5\n", "utf-8")
    path = write_matrix(
        tmp_path, f'strategies = ["builtin"]\nrate_rps = [2.0]\nworkloads = ["{trace}"]\n'
    )
    with pytest.raises(ConfigError, match="key 'rate_rps': workload workloads\\[0\\] has all"):
        plan_sweep(load_matrix(path))


def test_the_matrix_schema_is_a_valid_json_schema() -> None:
    import jsonschema

    from tracekit.sweep.checks import LABEL, matrix_schema
    from tracekit.sweep.matrix import ENGINE_FIELDS, POLICY_SETTINGS

    validator = matrix_schema(ENGINE_FIELDS, POLICY_SETTINGS)
    jsonschema.Draft202012Validator.check_schema(validator.schema)
    engine_keys = validator.schema["properties"]["engines"]["items"]["properties"]
    assert list(engine_keys) == ["label", *ENGINE_FIELDS]
    assert LABEL.match("small-cache.v2") and not LABEL.match("a/b")


def test_unreadable_and_missing_matrix_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the sweep matrix"):
        load_matrix(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_matrix(bad)


def test_matrix_to_dict_is_json_ready() -> None:
    import json

    payload = load_matrix(SMOKE).to_dict()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["policy_grid"] == {"utility_preempt_weight": [0.3, 1.0]}


def test_the_matrices_in_docs_sweep_md_parse(tmp_path: Path) -> None:
    import re

    docs = (SMOKE.parents[2] / "docs" / "sweep.md").read_text("utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", docs, re.S)
    assert len(blocks) == 2
    counts = []
    for block in blocks:
        # Paths in the docs are relative to examples/sweeps/, like the shipped matrices.
        text = block.replace("../../traces/", f"{SMOKE.parents[2]}/traces/")
        counts.append(len(plan_of(tmp_path, text).runs))
    # builtin 2 rates x 3 repeats + (pe, bidkv) x 2 x 3 x 4 policy points; the paper's 45.
    assert counts == [54, 45]


def test_the_smoke_matrix_has_enough_repeats_for_the_effectiveness_rule() -> None:
    """With fewer repeats than the rule's minimum every label is bound to be inconclusive."""
    from tracekit.qualify.endpoints import MIN_REPEATS

    assert load_matrix(SMOKE).repeats >= MIN_REPEATS
