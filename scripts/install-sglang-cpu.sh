#!/usr/bin/env bash
# Install a pinned SGLang 0.5.23 with the CPU build of torch into its own virtual environment,
# outside the project, for the real-SGLang recorder (tracekit.sglang.record.record_sglang).
#
#   scripts/install-sglang-cpu.sh
#
# Environment:
#   BIDKV_SGLANG_VENV   where the environment goes (default: $HOME/.cache/bidkv/sglang-cpu-venv)
#   PYTHON              the interpreter to build the environment from (default: python3)
#
# Idempotent: an environment whose stamp file names exactly the pinned versions is reused as it
# is; any other content at that path is replaced. Nothing here downloads model weights: the
# driver writes a tiny config-only model folder and runs with HF_HUB_OFFLINE=1. Prints the
# environment's path on its last line.
#
# What SGLang's scheduling objects need on a CPU (found by importing
# sglang.srt.managers.{schedule_batch,schedule_policy}, sglang.srt.mem_cache.* and
# sglang.srt.server_args until nothing was missing): sglang itself with --no-deps, then the
# packages below. Do not add PyPI's torchvision: it is a CUDA build and breaks the CPU torch's
# imports ("operator torchvision::nms does not exist"); the driver stubs it instead.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib-venv.sh"

venv="${BIDKV_SGLANG_VENV:-$HOME/.cache/bidkv/sglang-cpu-venv}"
python="${PYTHON:-python3}"

torch_req="torch==2.13.0"
nodeps_reqs=("sglang==0.5.23")
deps=(
    "orjson==3.13.0" "ipython==9.18.1" "traitlets==5.16.1" "dill==0.4.1"
    "sentencepiece==0.2.3" "compressed-tensors==0.20.1" "loguru==0.7.3" "gguf==0.19.0"
    "transformers==5.24.0" "pybase64==1.5.1" "triton==3.9.0" "pillow==13.0.0"
    "starlette==1.10.0" "msgspec==0.23.0" "pyzmq==27.3.0" "aiohttp==3.14.5"
    "apache-tvm-ffi==0.1.15.post2" "openai==3.57.0" "partial-json-parser==0.2.1.1.post7"
)
stamp_text="bidkv-sglang-cpu 1
python $(bidkv_python_version)
$torch_req
${nodeps_reqs[*]}
${deps[*]}"
stamp="$venv/.bidkv-sglang-stamp"

bidkv_venv_begin install-sglang-cpu python " (SGLang 0.5.23)" "SGLang 0.5.23 (CPU torch)"
# -qq: only errors (the --no-deps install leaves SGLang's unused requirements unmet on purpose).
pip=("$venv/bin/python" -m pip install -qq --disable-pip-version-check --no-warn-conflicts)
# Standard output carries only the environment's path (callers capture it): pip talks on stderr.
"${pip[@]}" "$torch_req" >&2
"${pip[@]}" --no-deps "${nodeps_reqs[@]}" >&2
# torch pinned again so that no dependency's range pulls a CUDA build.
"${pip[@]}" "${deps[@]}" "$torch_req" >&2
# The check the recorder relies on: the driver's own import path works on this CPU-only machine.
HF_HUB_OFFLINE=1 PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)" "$venv/bin/python" \
    -m tracekit.sglang.driver --check >&2
bidkv_venv_finish install-sglang-cpu
