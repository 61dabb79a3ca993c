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
venv="${BIDKV_VLLM_GPU_VENV:-$HOME/.cache/bidkv/vllm-gpu-venv}"
python="${PYTHON:-python3}"
reqs=("vllm==0.32.0")
stamp_text="bidkv-vllm-gpu 1
python $("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
${reqs[*]}"
stamp="$venv/.bidkv-vllm-gpu-stamp"
reuse() {
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -x "$venv/bin/vllm" ]; then
        echo "install-vllm-gpu: reusing $venv" >&2
        echo "$venv"
        exit 0
    fi
}
reuse
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
reuse
start=$(date +%s)
echo "install-vllm-gpu: installing ${reqs[*]} into $venv" >&2
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install -qq --disable-pip-version-check "${reqs[@]}" >&2
"$venv/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server, vllm.benchmarks.serve; print('vLLM', vllm.__version__)" >&2
"$venv/bin/python" -m pip freeze --disable-pip-version-check >"$venv/.bidkv-freeze.txt"
printf '%s' "$stamp_text" >"$stamp"
echo "install-vllm-gpu: done in $(( $(date +%s) - start )) s" >&2
echo "$venv"
