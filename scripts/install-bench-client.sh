#!/usr/bin/env bash
# Install one of the field's benchmark clients, pinned, into its own virtual environment outside
# the project, for the measured-run workloads (docs/workloads.md, "Benchmark results") and the
# end-to-end latency check (benchmarks/serve_fidelity.py, docs/latency.md):
#
#   scripts/install-bench-client.sh guidellm     # GuideLLM 0.8.1  -> ~/.cache/bidkv/guidellm-venv
#   scripts/install-bench-client.sh aiperf       # AIPerf 0.13.0   -> ~/.cache/bidkv/aiperf-venv
#
# (`vllm bench serve` is vLLM's own client: it comes with `vllm serve`'s environment,
# `BIDKV_VLLM_SERVE=1 scripts/install-vllm-cpu.sh` on a CPU, scripts/install-vllm-gpu.sh on an
# NVIDIA GPU.)
#
# Environment:
#   BIDKV_CLIENT_VENV   where the environment goes (default: $HOME/.cache/bidkv/<client>-venv)
#   PYTHON              the interpreter to build the environment from (default: python3)
#
# Idempotent: an environment whose stamp file names exactly the pinned versions is reused as it
# is; any other content at that path is replaced. The client's own dependencies are resolved by
# pip from its pinned version; what was installed is written to <venv>/.bidkv-freeze.txt.
# Nothing here downloads a model or a data set: both clients are pointed at a local server and
# its tokenizer folder. Prints the environment's path on its last line.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib-venv.sh"

client="${1:-}"
case "$client" in
    guidellm) reqs=("guidellm==0.8.1"); check="import importlib.metadata as m, guidellm; print('guidellm', m.version('guidellm'))";
              exe="guidellm" ;;
    aiperf) reqs=("aiperf==0.13.0"); check="import importlib.metadata as m, aiperf; print('aiperf', m.version('aiperf'))"; exe="aiperf" ;;
    *) echo "install-bench-client: give the client to install: guidellm or aiperf, not '$client'" >&2
       exit 2 ;;
esac
venv="${BIDKV_CLIENT_VENV:-$HOME/.cache/bidkv/$client-venv}"
python="${PYTHON:-python3}"
stamp_text="bidkv-bench-client 1
python $(bidkv_python_version)
${reqs[*]}"
stamp="$venv/.bidkv-client-stamp"

bidkv_venv_begin install-bench-client "$exe" " ($client)" "${reqs[*]}"
"$venv/bin/python" -m pip install -qq --disable-pip-version-check "${reqs[@]}" >&2
"$venv/bin/python" -c "$check" >&2
"$venv/bin/$exe" --help >/dev/null
"$venv/bin/python" -m pip freeze --disable-pip-version-check >"$venv/.bidkv-freeze.txt"
bidkv_venv_finish install-bench-client
