#!/usr/bin/env bash
# Install vLLM 0.32.0's CUDA build (PyPI's `vllm`, with its own CUDA torch and everything
# `vllm serve` and `vllm bench serve` need) into its own virtual environment, for the
# end-to-end check on a machine with an NVIDIA GPU (scripts/e2e-check.sh, docs/latency.md,
# "End to end").
#
#   scripts/install-vllm-gpu.sh
#
# Environment:
#   BIDKV_VLLM_GPU_VENV  where the environment goes (default: $HOME/.cache/bidkv/vllm-gpu-venv)
#   PYTHON               the interpreter to build the environment from (default: python3)
#
# Idempotent: an environment whose stamp names exactly the pinned version is reused; any other
# content at that path is replaced. pip resolves vLLM's pinned requirements (torch and its CUDA
# libraries among them); what was installed is written to <venv>/.bidkv-freeze.txt. Nothing
# here downloads model weights (the check serves dummy weights). Prints the environment's path
# on its last line.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib-venv.sh"
venv="${BIDKV_VLLM_GPU_VENV:-$HOME/.cache/bidkv/vllm-gpu-venv}"
python="${PYTHON:-python3}"
reqs=("vllm==0.32.0")
stamp_text="bidkv-vllm-gpu 1
python $(bidkv_python_version)
${reqs[*]}"
stamp="$venv/.bidkv-vllm-gpu-stamp"
bidkv_venv_begin install-vllm-gpu vllm "" "${reqs[*]}"
"$venv/bin/python" -m pip install -qq --disable-pip-version-check "${reqs[@]}" >&2
"$venv/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server, vllm.benchmarks.serve; print('vLLM', vllm.__version__)" >&2
"$venv/bin/python" -m pip freeze --disable-pip-version-check >"$venv/.bidkv-freeze.txt"
bidkv_venv_finish install-vllm-gpu
