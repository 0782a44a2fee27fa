"""What the examples share: a Llama of a chosen shape with random weights, built on the device (no download), and a
fixed prompt of token ids. Nothing here comes from syncscope: the examples are programs of your own kind."""

from __future__ import annotations

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {  # transformers' LlamaConfig arguments: a 2-layer toy, and the Llama-3.2-1B and Llama-3.1-8B shapes
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=2048),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0),
}
EOS = 2


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--compile", action="store_true", help="torch.compile the forward (reduce-overhead)")
    return parser.parse_args()


def model_and_prompt(shape: str, device: str) -> tuple[LlamaForCausalLM, torch.Tensor]:
    """A random Llama of `shape` on `device` (bf16 on a GPU), and 32 fixed prompt token ids."""
    torch.manual_seed(0)
    config = LlamaConfig(**SHAPES[shape], bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16 if device.startswith("cuda") else torch.float32).eval()
    prompt = torch.randint(3, config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(1))
    return model, prompt.to(device)
