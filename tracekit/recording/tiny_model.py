"""The tiny models the vLLM and SGLang drivers run with, made locally (nothing is downloaded).

Standard library only at import: the drivers import it inside the engines' own environments.

- :func:`write_tiny_model`: a folder holding only the ``config.json`` of a tiny Llama, for the
  real-scheduler drivers (no weights, no tokenizer: only the schedulers run).
- :func:`write_live_model`: a 4-layer Llama with random weights and a word-level tokenizer, for
  the live engine (``tracekit record vllm --live``); it imports torch and transformers when called.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tracekit import safe_output

__all__ = [
    "LIVE_FIRST_TOKEN",
    "LLAMA_8B_CONFIG",
    "LIVE_MODEL_CONFIG",
    "TINY_MODEL_CONFIG",
    "live_model_key",
    "write_dummy_model",
    "write_live_model",
    "write_tiny_model",
]

#: The model the schedulers are configured for.
TINY_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    # Large enough for any max_model_len a workload asks for.
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_tiny_model(folder: Path) -> Path:
    """Write the config-only model folder (idempotent, atomic); return it."""
    config = folder / "config.json"
    text = json.dumps(TINY_MODEL_CONFIG, indent=1, sort_keys=True)
    if not config.is_file() or config.read_text("utf-8") != text:
        safe_output.write_files({config: text}, cleanup=True)
    return folder


#: The model the live engine (``tracekit record vllm --live``) runs: a 4-layer Llama with random
#: weights. Measured on 2 cores: 32 requests of 64 tokens take seconds, so CI can afford it, while
#: its steps still cost enough (attention, MLP, a 4096-token head) for step times to vary with the
#: batch. The vocabulary is small so that the head does not dominate every step.
LIVE_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "vocab_size": 4096,
    # Above the engine's default max_model_len (8192), which vLLM checks against it.
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    # Wider than transformers' 0.02 so that greedy outputs depend on the prompt (with 0.02 every
    # request repeats one token, and the output-equality gate would compare nothing).
    "initializer_range": 0.5,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

#: Token ids below this are left to the tokenizer's special tokens; prompts use the rest.
LIVE_FIRST_TOKEN = 16


def live_model_key(seed: int) -> str:
    """A short name for the live model of ``seed`` (its folder name under the cache)."""
    text = json.dumps([LIVE_MODEL_CONFIG, seed], sort_keys=True)
    return f"bidkv-live-llama-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def write_live_model(parent: Path, seed: int = 0) -> Path:
    """Create (once) the live model folder under ``parent`` and return it.

    The folder holds ``config.json``, random weights in ``model.safetensors`` drawn with
    ``torch.manual_seed(seed)``, and a word-level tokenizer whose tokens are ``t0``, ``t1``, ...
    (one per id), all made here: no hub, no download. It needs torch, transformers and
    tokenizers, so only the vLLM environment calls it (they are imported here, not at the top).
    The folder appears complete or not at all (written beside it, then renamed).
    """
    folder = parent / live_model_key(seed)
    if (folder / "model.safetensors").is_file():
        return folder
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    with safe_output.made_once(folder, done="model.safetensors") as tmp:
        torch.manual_seed(seed)
        settings = {k: v for k, v in LIVE_MODEL_CONFIG.items() if k not in ("architectures",)}
        model = LlamaForCausalLM(LlamaConfig(**settings))
        model.save_pretrained(tmp, safe_serialization=True)
        vocab = {f"t{i}": i for i in range(LIVE_MODEL_CONFIG["vocab_size"])}
        word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
        word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=word_level, unk_token="t0", bos_token="t1", eos_token="t2"
        )
        tokenizer.save_pretrained(tmp)
    return folder


#: Meta-Llama-3.1-8B's architecture (its published ``config.json``): for ``vllm serve
#: --load-format dummy`` on a GPU, which gives the real model's shapes and speed with random
#: weights and nothing downloaded (``benchmarks/serve_fidelity.py --model llama-3.1-8b-dummy``).
LLAMA_8B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_dummy_model(parent: Path, config: dict[str, Any], name: str) -> Path:
    """A model folder of ``config.json`` and a word-level tokenizer, without weights.

    For ``vllm serve FOLDER --load-format dummy`` (random weights of the architecture's shapes).
    The tokenizer maps the word ``t<i>`` to token ``i`` over the whole vocabulary, as the live
    model's does, so the benchmark clients' random prompts round-trip. Needs ``tokenizers`` and
    ``transformers`` (the vLLM environment); made once, appearing complete or not at all.
    """
    folder = parent / name
    if (folder / "tokenizer.json").is_file():
        return folder
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    with safe_output.made_once(folder, done="tokenizer.json") as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True), "utf-8")
        vocab = {f"t{i}": i for i in range(config["vocab_size"])}
        word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
        word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        PreTrainedTokenizerFast(
            tokenizer_object=word_level, unk_token="t0", bos_token="t1", eos_token="t2"
        ).save_pretrained(tmp)
    return folder
