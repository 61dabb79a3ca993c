"""Load options on the commands: LoadSpec, the CLI flags and the rejection warning.

See docs/workloads.md, "Client models".
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.capacity.rejections import find_rejections
from tracekit.cli import cli
from tracekit.engine import EngineConfig
from tracekit.errors import ConfigError
from tracekit.trace import open_trace
from tracekit.workloads import load_workload
from tracekit.workloads.client import ClientModel
from tracekit.workloads.load_spec import LoadSpec, apply_load, client_model

# Five requests: prompts 30, 10, 50, 20, 40 arriving at 0, 1, 2, 3, 4 s; outputs 4, 3, 2, 5, 1.
ROWS = {
    "request_id": ["r0", "r1", "r2", "r3", "r4"],
    "arrival_s": [0.0, 1.0, 2.0, 3.0, 4.0],
    "prompt_tokens": [30, 10, 50, 20, 40],
    "output_tokens": [4, 3, 2, 5, 1],
    "max_tokens": [4, 3, 2, 5, 1],
    "priority": [0, 0, 0, 0, 0],
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    pl.DataFrame(ROWS).write_csv(path)
    return path


def test_order_then_constant_arrivals_then_cap(tiny: Path) -> None:
    spec = LoadSpec(arrivals="constant", rate=2.0, order="ascending", max_tokens=3)
    sent = apply_load(load_workload(tiny), spec)
    frame = sent.frame
    # Ascending prompts 10, 20, 30, 40, 50 = r1, r3, r0, r4, r2; constant rate 2: (i+1)/2.
    assert frame["request_id"].to_list() == ["r1", "r3", "r0", "r4", "r2"]
    assert frame["arrival_s"].to_list() == [0.5, 1.0, 1.5, 2.0, 2.5]
    # Outputs 3, 5, 4, 1, 2 capped at 3.
    assert frame["output_tokens"].to_list() == [3, 3, 3, 1, 2]
    assert frame["max_tokens"].to_list() == [3] * 5
    assert sent.options["arrivals"]["kind"] == "constant"
    assert client_model(sent) is None


def test_the_client_model_travels_in_the_options(tiny: Path) -> None:
    client = ClientModel(max_concurrency=2, ttft_timeout_s=4.0)
    sent = apply_load(load_workload(tiny), LoadSpec(client=client))
    assert client_model(sent) == client
    assert sent.describe()["options"]["client"]["max_concurrency"] == 2
    # The default spec changes nothing.
    workload = load_workload(tiny)
    assert apply_load(workload, LoadSpec()) is workload


def test_generated_arrivals_in_a_closed_loop_are_refused() -> None:
    with pytest.raises(ConfigError, match="--arrivals 'poisson': expected recorded"):
        LoadSpec(arrivals="poisson", rate=1.0, client=ClientModel(concurrency=2))


def test_with_rate_turns_recorded_into_poisson() -> None:
    assert LoadSpec().with_rate(3.0) == LoadSpec(arrivals="poisson", rate=3.0)
    gamma = LoadSpec(arrivals="gamma:0.5", rate=1.0).with_rate(4.0)
    assert (gamma.arrivals, gamma.rate) == ("gamma:0.5", 4.0)


def _record(tiny: Path, out: Path, *args: str):
    return CliRunner().invoke(
        cli,
        # Worked by hand for synchronous scheduling (async reports a finish one step later).
        ["record", "sim", "--workload", str(tiny), "--clock", "steps", "--step-s", "1",
         "--no-async-scheduling", "--out", str(out), *args],
    )  # fmt: skip


def test_record_sim_max_concurrency_one_serialises_requests(tiny: Path, tmp_path: Path) -> None:
    result = _record(tiny, tmp_path / "b", "--max-concurrency", "1")
    assert result.exit_code == 0, result.output
    requests = open_trace(tmp_path / "b").scan("requests").collect().sort("arrival_s")
    # Each prompt fits one step; outputs 4, 3, 2, 5, 1 one token a step: r0 0..4, r1 4..7,
    # r2 7..9, r3 9..14, r4 14..15 (all due earlier, so each is sent when the last finishes).
    assert requests["arrival_s"].to_list() == [0, 4, 7, 9, 14]
    assert requests["finish_s"].to_list() == [4, 7, 9, 14, 15]


def test_record_sim_closed_loop_and_ttft_timeout(tiny: Path, tmp_path: Path) -> None:
    result = _record(
        tiny, tmp_path / "b", "--concurrency", "2", "--think-time-s", "1", "--max-num-seqs", "1",
        "--ttft-timeout-s", "2.5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    requests = open_trace(tmp_path / "b").scan("requests").collect().sort("request_id")
    # One running slot: r0 runs 0..4; r1 (sent 0) has no token by 2.5: aborted at 2.5. Its
    # user sends r2 at 3.5 (visible at step 4), r0's user sends r3 at 5; r2 runs 4..6, r3
    # waits for it and gets its first token at 7 (sent 5, deadline 7.5), runs to 11; r2's user
    # sends r4 at 7, which waits behind r3 with no token by 9.5: aborted.
    got = dict(zip(requests["request_id"], requests["status"], strict=True))
    assert got == {
        "r0": "finished", "r1": "aborted", "r2": "finished", "r3": "finished", "r4": "aborted",
    }  # fmt: skip
    assert "aborted" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arrivals", "posson", "--rate", "1"], "did you mean 'poisson'"),
        (["--arrivals", "poisson"], "--rate None: expected a request rate"),
        (["--concurrency", "2", "--arrivals", "constant", "--rate", "1"], "expected recorded"),
        # A range the option's type checks: click's usage error, whose last line names it.
        (["--max-concurrency", "0"], "Invalid value for '--max-concurrency': 0 is not in"),
        (["--order", "sideways"], "--order 'sideways'"),
        (["--ttft-timeout-s", "-1"], "Invalid value for '--ttft-timeout-s': -1.0 is not in"),
    ],
)
def test_bad_load_options_exit_2_in_one_line(
    tiny: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    result = _record(tiny, tmp_path / "b", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert not (tmp_path / "b").exists()


def test_rejected_requests_are_reported_loudly(tiny: Path, tmp_path: Path) -> None:
    # max_model_len 32: prompts 50, 40 (>= 32) are refused; 30, 10, 20 are not.
    result = _record(tiny, tmp_path / "b", "--max-model-len", "32", "--num-blocks", "3")
    assert result.exit_code == 0, result.output
    warning = next(line for line in result.output.splitlines() if line.startswith("warning:"))
    assert "2 of 5 requests" in warning and "longest 50 tokens" in warning
    # 51 tokens need 4 blocks of 16, plus the null block.
    assert "--max-model-len 51 --num-blocks 5" in warning
    statuses = open_trace(tmp_path / "b").scan("requests").collect()["status"].to_list()
    assert statuses.count("rejected") == 2
    # And the run with no rejection prints no warning.
    clean = _record(tiny, tmp_path / "c")
    assert "warning:" not in clean.output


def test_find_rejections_by_hand(tiny: Path) -> None:
    config = EngineConfig(num_blocks=5, block_size=16, max_model_len=40)
    found = find_rejections(load_workload(tiny), config)
    assert (found.num_rejected, found.longest_prompt) == (2, 50)  # 50 and 40 >= 40
    assert find_rejections(load_workload(tiny), EngineConfig()).warning() is None


@pytest.mark.parametrize("name", ["tracekit.workloads.load_spec", "tracekit.capacity.rejections"])
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


def _matrix(tmp_path: Path, tiny: Path, client: str, rates: str = "") -> Path:
    text = f"""
strategies = ["builtin"]
{rates}

[[workloads]]
path = "{tiny}"
client = {client}

[[engines]]
async_scheduling = false
label = "small"
clock = "steps"
step_s = 1.0
"""
    path = tmp_path / "matrix.toml"
    path.write_text(text, "utf-8")
    return path


def test_sweep_matrix_client_keys(tiny: Path, tmp_path: Path) -> None:
    from tracekit.sweep.matrix import load_matrix
    from tracekit.sweep.plan import plan_sweep

    # rate_rps 2 with constant arrivals: the five requests arrive at 0.5, 1.0, ... 2.5 s.
    matrix = _matrix(
        tmp_path, tiny, '{ arrivals = "constant", max_concurrency = 2 }', "rate_rps = [2.0]"
    )
    planned = plan_sweep(load_matrix(matrix)).workloads[0].workload
    assert planned.frame["arrival_s"].to_list() == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert client_model(planned) == ClientModel(max_concurrency=2)
    # The sweep's runs then apply the cap: max_concurrency 1 serialises them.
    matrix = _matrix(tmp_path, tiny, "{ max_concurrency = 1 }")
    out = tmp_path / "sweep"
    result = CliRunner().invoke(cli, ["sweep", str(matrix), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    (bundle,) = [p.parent for p in out.rglob("manifest.json")]
    requests = open_trace(bundle).scan("requests").collect().sort("arrival_s")
    assert requests["arrival_s"].to_list() == [0, 4, 7, 9, 14]


def test_sweep_matrix_bad_client_key_names_the_key(tiny: Path, tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, tiny, '{ arrivals = "posson" }')
    result = CliRunner().invoke(cli, ["sweep", str(matrix), "--out", str(tmp_path / "s")])
    assert result.exit_code == 2, result.output
    assert "workloads[0].client" in result.output and "did you mean 'poisson'" in result.output


def test_sweep_warns_about_rejected_requests(tiny: Path, tmp_path: Path) -> None:
    # Engine max_model_len 32: prompts 50 and 40 are refused; said once although two rates.
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        f"""
strategies = ["builtin"]
rate_scale = [1.0, 2.0]

[[workloads]]
path = "{tiny}"

[[engines]]
async_scheduling = false
label = "short"
num_blocks = 3
max_model_len = 32
""",
        "utf-8",
    )
    result = CliRunner().invoke(
        cli, ["sweep", str(matrix), "--out", str(tmp_path / "s"), "--jobs", "1"]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "2 of 5 requests" in warnings[0]
