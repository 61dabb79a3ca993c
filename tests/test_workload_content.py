"""Token content of workloads: multi-turn conversation logs and a synthetic shared prefix.

Expected values are worked out by hand from the rules in docs/workloads.md ("Token content"):
turn k's prompt = the previous turn's prompt + its output + the new tokens; a prefix hit is the
full blocks (16 tokens here) of the shared tokens, capped below the prompt's length.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_series_equal, assert_series_not_equal
from trace_helpers import engine_config, record_engine_bundle

from tracekit.cli import cli
from tracekit.engine import engine_requests
from tracekit.errors import ConfigError, WorkloadError
from tracekit.recording.sim import load_run_workload
from tracekit.trace.bundle import open_trace
from tracekit.trace.validate import validate_trace
from tracekit.workloads import load_workload, read_sessions, with_shared_prefix

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workloads" / "conversations-synthetic.csv"
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
MOONCAKE = ROOT / "traces" / "mooncake-synthetic" / "synthetic_trace.jsonl"
# Room for everything: no preemption, so hits come from the content alone.
ROOMY = dict(num_blocks=200, block_size=16, max_model_len=2048, clock="steps")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


LOG = (
    "session_id,turn,arrival_s,new_prompt_tokens,output_tokens\n"
    "s1,1,0.0,100,50\n"
    "s2,1,0.5,600,5\n"
    "s1,2,3.0,30,10\n"
)


def test_turn_prompts_are_the_conversation_so_far(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path / "log.csv", LOG))
    assert workload.format == "sessions"
    rows = workload.frame.select("request_id", "arrival_s", "prompt_tokens", "output_tokens")
    # s1-2: 100 (turn 1 prompt) + 50 (its answer) + 30 new = 180.
    assert rows.rows() == [("s1-1", 0.0, 100, 50), ("s2-1", 0.5, 600, 5), ("s1-2", 3.0, 180, 10)]
    ids = dict(workload.frame.select("request_id", "prefix_hash_ids").rows())
    # Sessions numbered by first appearance (s1: 0, s2: 1); 512 tokens a content id.
    assert ids == {"s1-1": [0], "s2-1": [1 << 24, (1 << 24) + 1], "s1-2": [0]}
    assert workload.options["num_sessions"] == 2


def test_a_later_turn_hits_the_earlier_turns_prompt_blocks(tmp_path: Path) -> None:
    """s1-2 shares its first 100 tokens with s1-1: 6 full blocks (96 tokens) hit. Block 6 of
    s1-1 holds prompt tokens 96-99 and its own answer, so it differs. s2 shares nothing."""
    workload = load_workload(write(tmp_path / "log.csv", LOG))
    config = engine_config(**ROOMY, enable_prefix_caching=True)
    out = record_engine_bundle(tmp_path / "b", config, engine_requests(workload))
    requests = open_trace(out).scan("requests").sort("request_id").collect()
    assert dict(requests.select("request_id", "num_cached_tokens").rows()) == {
        "s1-1": 0,
        "s1-2": 96,
        "s2-1": 0,
    }
    assert validate_trace(out).exit_code == 0


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        ("session_id,turn,arrival_s,output_tokens\ns,1,0,5\n", None, "new_prompt_tokens"),
        (LOG + "s1,2,4.0,5,5\n", "line 5", "turn"),
        (LOG + "s1,3,1.0,5,5\n", "line 5", "arrival_s"),
        (LOG + "s3,1,1.0,0,5\n", "line 5", "new_prompt_tokens"),
    ],
)
def test_bad_logs_are_one_line_errors(
    tmp_path: Path, text: str, where: str | None, field: str
) -> None:
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(WorkloadError) as caught:
        read_sessions(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and field in message
    if where is not None:
        assert where in message
    result = CliRunner().invoke(
        cli, ["record", "sim", "--workload", str(path), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "out").exists()


def test_the_example_log_is_the_generators_output() -> None:
    script = ROOT / "scripts" / "gen_conversations_example.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    workload = load_workload(EXAMPLE)
    assert (workload.format, workload.num_requests, workload.options["num_sessions"]) == (
        "sessions",
        32,
        12,
    )


def test_one_shared_prefix_group(tmp_path: Path) -> None:
    """64 shared tokens, one group. r0 (100 tokens) caches 6 blocks, 4 of them all prefix; r1
    (30 tokens, all prefix) hits 1 block (its cap: (30 - 1) // 16 = 1); r2 (100) hits the 4
    prefix blocks (64 tokens): block 4 of r0 holds r0's own tokens 64-79."""
    table = write(
        tmp_path / "w.csv",
        "arrival_s,prompt_tokens,output_tokens\n0.0,100,3\n0.5,30,3\n1.0,100,3\n",
    )
    workload = with_shared_prefix(load_workload(table), 64, 1)
    assert workload.options["content_block_tokens"] == 64
    assert workload.frame.get_column("prefix_hash_ids").to_list() == [[0], [0], [0]]
    requests = engine_requests(workload)
    assert {r.content_block_tokens for r in requests} == {64}
    config = engine_config(**ROOMY, enable_prefix_caching=True)
    out = record_engine_bundle(tmp_path / "b", config, requests)
    cached = open_trace(out).scan("requests").sort("input_index").collect()
    assert cached.get_column("num_cached_tokens").to_list() == [0, 16, 64]


def test_prefix_groups_are_seeded_and_recorded() -> None:
    one = load_run_workload(SAMPLE, limit=60, shared_prefix_tokens=256, prefix_groups=4)
    two = load_run_workload(SAMPLE, limit=60, shared_prefix_tokens=256, prefix_groups=4)
    other = load_run_workload(
        SAMPLE, limit=60, shared_prefix_tokens=256, prefix_groups=4, prefix_seed=1
    )
    groups = one.frame.get_column("prefix_hash_ids").list.first()
    assert_series_equal(groups, two.frame.get_column("prefix_hash_ids").list.first())
    assert_series_not_equal(groups, other.frame.get_column("prefix_hash_ids").list.first())
    assert set(groups.to_list()) == {0, 1, 2, 3}
    assert {
        k: one.options[k] for k in ("shared_prefix_tokens", "prefix_groups", "prefix_seed")
    } == {
        "shared_prefix_tokens": 256,
        "prefix_groups": 4,
        "prefix_seed": 0,
    }
    # The first 10 draws only depend on (seed, position): a shorter limit keeps them.
    short = load_run_workload(SAMPLE, limit=10, shared_prefix_tokens=256, prefix_groups=4)
    assert_series_equal(short.frame.get_column("prefix_hash_ids").list.first(), groups.head(10))


def test_shared_prefix_bad_input() -> None:
    workload = load_workload(MOONCAKE, limit=5)
    with pytest.raises(ConfigError, match=r"^--shared-prefix-tokens 64: expected a workload"):
        with_shared_prefix(workload, 64, 2)
    with pytest.raises(ConfigError, match=r"^--prefix-groups 0: expected an integer >= 1"):
        with_shared_prefix(load_workload(SAMPLE, limit=5), 64, 0)
    with pytest.raises(ConfigError, match=r"^--prefix-groups 3: expected only with"):
        load_run_workload(SAMPLE, limit=5, prefix_groups=3)


def test_cli_records_the_prefix_options(tmp_path: Path) -> None:
    base = ["record", "sim", "--workload", str(SAMPLE), "--limit", "20"]
    result = CliRunner().invoke(
        cli,
        [
            *base,
            "--shared-prefix-tokens",
            "128",
            "--prefix-groups",
            "3",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert result.exit_code == 0, result.output
    options = json.loads((tmp_path / "b" / "manifest.json").read_text())["workload"]["options"]
    assert (options["shared_prefix_tokens"], options["prefix_groups"], options["prefix_seed"]) == (
        128,
        3,
        0,
    )
    bad = CliRunner().invoke(
        cli, [*base, "--shared-prefix-tokens", "0", "--out", str(tmp_path / "c")]
    )
    assert bad.exit_code == 2, bad.output
    # The option's range: a usage error whose last line names the option.
    assert "Invalid value for '--shared-prefix-tokens': 0 is not in" in bad.output
    assert not (tmp_path / "c").exists()


def test_a_sweep_matrix_workload_takes_a_shared_prefix(tmp_path: Path) -> None:
    from tracekit.sweep import load_matrix, plan_sweep

    text = (
        'strategies = ["builtin"]\n[[workloads]]\n'
        f'path = "{SAMPLE}"\nlimit = 30\nshared_prefix_tokens = 128\nprefix_groups = 2\n'
    )
    matrix = tmp_path / "m.toml"
    matrix.write_text(text)
    plan = plan_sweep(load_matrix(matrix))
    workload = plan.runs[0].run.workload
    direct = load_run_workload(SAMPLE, limit=30, shared_prefix_tokens=128, prefix_groups=2)
    assert_series_equal(
        workload.frame.get_column("prefix_hash_ids"), direct.frame.get_column("prefix_hash_ids")
    )
    assert workload.options["content_block_tokens"] == 128
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("shared_prefix_tokens = 128\n", ""))
    with pytest.raises(ConfigError, match="prefix_groups: expected only with shared_prefix_tokens"):
        plan_sweep(load_matrix(bad))
