"""The size of a model: the parameters of a decoder from its config's sizes (`parameter_count`), and of one whose
config.json leaves its sizes out (`defaulted_parameter_count`): transformers' own config class fills in the defaults
it would load with (a Llama config without sizes is a 6.7B Llama), and where the formula cannot read the filled config
either, the model is built on the meta device (no memory, no weights) and its parameters counted. The latter needs
torch and transformers, imported when it is asked for (core.models.memory asks only in the processes that load: the CLI,
the engine); importing this module imports neither."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 16 * 2**20  # a model's config.json is kilobytes; one larger is not read (a hostile /dev/zero)


def parameter_count(shape: dict[str, Any]) -> int | None:
    """Parameters of a decoder with this config's sizes (gated MLP, grouped KV heads, experts), or None when the
    config lacks the sizes. Checked against the real counts of the Llama, Qwen and Mistral shapes (tests/test_memory.py
    says how close)."""
    hidden = _whole(shape, "hidden_size", "n_embd", "d_model")
    layers = _whole(shape, "num_hidden_layers", "n_layer", "num_layers")
    heads = _whole(shape, "num_attention_heads", "n_head")
    vocab = _whole(shape, "vocab_size")
    if not (hidden and layers and heads and vocab):
        return None
    intermediate = _whole(shape, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    kv_heads = _whole(shape, "num_key_value_heads") or heads
    head_dim = _whole(shape, "head_dim") or hidden // heads
    experts = _whole(shape, "num_local_experts", "num_experts") or 1
    expert_size = _whole(shape, "moe_intermediate_size") or intermediate
    attention = hidden * head_dim * 2 * (heads + kv_heads)
    mlp = 3 * hidden * expert_size * experts
    embeddings = vocab * hidden * (1 if shape.get("tie_word_embeddings") else 2)
    return embeddings + layers * (attention + mlp + 2 * hidden) + hidden


def _whole(shape: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = shape.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def text_shape(config: dict[str, Any]) -> dict[str, Any]:
    """A config's sizes, a multimodal one's text model's under its own (its top level wins)."""
    text = config.get("text_config")
    return {**text, **config} if isinstance(text, dict) else config


def defaulted_parameter_count(config_file: Path) -> int | None:
    """Parameters of the causal LM that `config_file` describes, with its config class's defaults for what it leaves
    out; None when transformers cannot make a config (an unknown or missing model_type) or a model of it."""
    try:
        stat = config_file.stat()
    except OSError:
        return None
    return _counted(str(config_file), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _counted(path: str, mtime_ns: int, size: int) -> int | None:
    config = _filled_config(Path(path))
    if config is None:
        return None
    return parameter_count(text_shape(config.to_dict())) or _meta_parameter_count(config)


def _filled_config(path: Path) -> Any:
    """The config class's instance for this config.json (its defaults filled in), never running the model's code."""
    from transformers import AutoConfig

    from core.documents.files import read_bounded

    try:
        data = json.loads(read_bounded(path, MAX_CONFIG_BYTES, "a config.json"))
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)
    except Exception:  # not a dict, no or an unknown model_type, values its class refuses: the size stays unknown
        return None


def _meta_parameter_count(config: Any) -> int | None:
    """Parameters of the model built from `config` on the meta device, tied ones once."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # an architecture without a causal LM, say
        return None
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()) or None
