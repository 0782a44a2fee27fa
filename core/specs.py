"""Model specs by name, with no torch import: the server process lists and checks them without loading torch."""

from __future__ import annotations

from typing import Any

DEFAULT_MODEL = "smollm2-135m-instruct"
TINY_RANDOM = "tiny-random"
SYNTHETIC_PREFIX = "synthetic:"

# Real architectures at real sizes (Llama-style decoders); weights are random.
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
}
TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=49152, max_position_embeddings=2048, tie_word_embeddings=True,
    initializer_range=0.3,  # wide enough that greedy decoding does not collapse onto one token
)
BUILTIN_SPECS = (DEFAULT_MODEL, *(SYNTHETIC_PREFIX + name for name in SYNTHETIC_SHAPES), TINY_RANDOM)


def loading_note(spec: str) -> str:
    """What loading `spec` involves, in a few words, for progress messages."""
    if spec == DEFAULT_MODEL:
        return "the first load converts the bundled GGUF (~20 s); later loads take about a second"
    if spec == TINY_RANDOM:
        return "a 2-layer random model: a second or two"
    if spec.startswith(SYNTHETIC_PREFIX):
        return "random weights of a real shape, drawn on the device"
    return "from a local directory or the Hugging Face cache (or the Hub, when this machine can reach it)"
