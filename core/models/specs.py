"""Model specs by name, with no torch import: the server process lists and checks them without loading torch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "smollm2-135m-instruct"
TINY_RANDOM = "tiny-random"
TINY_FAMILY_PREFIX = "tiny-random:"
SYNTHETIC_PREFIX = "synthetic:"

# Real architectures at real sizes; weights are random. Llama unless SYNTHETIC_CONFIG_CLASSES names another family.
SYNTHETIC_SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0,
        tie_word_embeddings=True,
    ),
    "llama-1b": dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        tie_word_embeddings=True,
    ),
    "llama-8b": dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        tie_word_embeddings=False,
    ),
    "llama-70b": dict(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        tie_word_embeddings=False,
    ),
    # Qwen2.5-7B-Instruct's config.json: biases on q/k/v, 4 KV heads of 128 for 28 query heads, a 152K vocabulary.
    "qwen2.5-7b": dict(
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
    # Mistral-7B-v0.1's config.json: every layer attends to a 4096-token sliding window.
    "mistral-7b": dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768, rope_theta=10000.0,
        sliding_window=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
    ),
}
# The transformers config class of each synthetic shape that is not a Llama.
SYNTHETIC_CONFIG_CLASSES: dict[str, str] = {"qwen2.5-7b": "Qwen2Config", "mistral-7b": "MistralConfig"}
TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=49152, max_position_embeddings=2048, tie_word_embeddings=True,
    initializer_range=0.3,  # wide enough that greedy decoding does not collapse onto one token
)

# Tiny random models of other architectures, built from transformers' config classes (nothing is downloaded), with
# the default model's tokenizer (hence its vocabulary size): 2 layers, hidden 64, 4 query heads of 16 sharing 2 KV
# heads where the family has grouped heads. The support matrix (tests/test_families.py, docs/SUPPORT.md) runs each
# of them in every mode. Untied embeddings: tied ones made the Gemma families repeat the last token forever.
TINY_WINDOW = 32  # the sliding window of the families that have one: a 40-token prompt crosses it
_TINY_DECODER = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, max_position_embeddings=2048, vocab_size=49152, initializer_range=0.3, tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2, pad_token_id=2,
)
_TINY_MHA = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=49152, initializer_range=0.3,
    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=2,
)
TINY_FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {  # name: (transformers config class, its arguments)
    "llama": ("LlamaConfig", _TINY_DECODER),
    "qwen2": ("Qwen2Config", _TINY_DECODER),
    "qwen3": ("Qwen3Config", _TINY_DECODER),
    "mistral": ("MistralConfig", {**_TINY_DECODER, "sliding_window": None}),
    "mistral-sliding": ("MistralConfig", {**_TINY_DECODER, "sliding_window": TINY_WINDOW}),
    "gemma": ("GemmaConfig", _TINY_DECODER),
    "gemma2": ("Gemma2Config", {**_TINY_DECODER, "sliding_window": TINY_WINDOW}),  # alternating, soft-capped
    "gemma3": ("Gemma3TextConfig", {**_TINY_DECODER, "sliding_window": TINY_WINDOW,
                                    "layer_types": ["sliding_attention", "full_attention"]}),
    "phi3": ("Phi3Config", _TINY_DECODER),
    "olmo2": ("Olmo2Config", _TINY_DECODER),
    "granite": ("GraniteConfig", {**_TINY_DECODER, "attention_multiplier": 0.2, "embedding_multiplier": 2.0,
                                  "residual_multiplier": 0.5, "logits_scaling": 2.0}),
    "mixtral": ("MixtralConfig", {**_TINY_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen3-moe": ("Qwen3MoeConfig", {**_TINY_DECODER, "num_experts": 4, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 64}),
    "gpt2": ("GPT2Config", {**_TINY_MHA, "n_positions": 2048}),
    "gpt-neox": ("GPTNeoXConfig", {**_TINY_MHA, "intermediate_size": 128, "max_position_embeddings": 2048}),
    "falcon": ("FalconConfig", {**_TINY_MHA, "max_position_embeddings": 2048, "multi_query": True,
                                "new_decoder_architecture": False}),
}
BUILTIN_SPECS = (DEFAULT_MODEL, *(SYNTHETIC_PREFIX + name for name in SYNTHETIC_SHAPES), TINY_RANDOM)
# Longer than any Hub id (96 characters) or sensible path; a 5,000-character one got "File name too long" raw.
MAX_SPEC_CHARS = 512
QUOTED_SPEC_CHARS = 80


def is_random_weights(spec: str) -> bool:
    """Whether the model `spec` names has random weights (a tiny family or a synthetic shape): it never says EOS."""
    return spec == TINY_RANDOM or spec.startswith((TINY_FAMILY_PREFIX, SYNTHETIC_PREFIX))


def quote_spec(spec: str) -> str:
    """`spec` quoted for a message: whole when short, else its first QUOTED_SPEC_CHARS characters and a count."""
    if len(spec) <= QUOTED_SPEC_CHARS:
        return repr(spec)
    return f"{spec[:QUOTED_SPEC_CHARS]!r}… ({len(spec):,} characters)"


def check_spec_length(spec: str) -> None:
    """ValueError for a spec too long to be a model's name or path."""
    if len(spec) > MAX_SPEC_CHARS:
        raise ValueError(f"model spec {quote_spec(spec)} is too long: a model's name or path has at most "
                         f"{MAX_SPEC_CHARS} characters")


def loading_note(spec: str) -> str:
    """What loading `spec` involves, in a few words, for progress messages."""
    if spec == DEFAULT_MODEL:
        return "the first load converts the bundled GGUF (~20 s); later loads take about a second"
    if spec == TINY_RANDOM or spec.startswith(TINY_FAMILY_PREFIX):
        return "a 2-layer random model: a second or two"
    if spec.startswith(SYNTHETIC_PREFIX):
        return "random weights of a real shape, drawn on the device"
    return "from a local directory or the Hugging Face cache (or the Hub, when this machine can reach it)"


def cache_dir() -> Path:
    """Where this project keeps what it makes once (the converted default model, the index of bundled reports);
    SYNCSCOPE_CACHE overrides the default under ~/.cache."""
    root = os.environ.get("SYNCSCOPE_CACHE") or Path.home() / ".cache" / "syncscope"
    return Path(root)
