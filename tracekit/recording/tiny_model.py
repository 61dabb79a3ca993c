"""The config-only model folder the real-scheduler drivers configure vLLM and SGLang with.

Standard library only: the drivers import it inside the engines' own environments. The folder
holds a ``config.json`` of a tiny Llama and nothing else: no weights, no tokenizer, so nothing is
downloaded and only the schedulers run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["TINY_MODEL_CONFIG", "write_tiny_model"]

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
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.json"
    text = json.dumps(TINY_MODEL_CONFIG, indent=1, sort_keys=True)
    if not config.is_file() or config.read_text("utf-8") != text:
        tmp = folder / f".config.json.{os.getpid()}"
        tmp.write_text(text, "utf-8")
        os.replace(tmp, config)
    return folder
