"""A decoder of its own with the cache's fill kept on the device (`cache_seqlens`, as FlashAttention's kvcache API
takes it), and a loop that calls the model's `.forward()` directly. Each attention layer asks for its position with
`.item()`, in a helper: one read per layer and step, at the helper's line, called from the attention's forward.

    python -m core.audit -- tests/audit_loops/direct_forward.py [cpu|cuda] [NEW_TOKENS]
"""
# What the audit must find (tests/test_audit_loops.py, tests/test_cuda_audit_loops.py):
# step: TinyDecoder

import sys

import torch
from torch import nn

LAYERS, WIDTH, HEADS, VOCAB, CACHE = 2, 64, 4, 256, 128


def get_pos(cache_seqlens: torch.Tensor) -> int:
    return cache_seqlens[0].item()  # read: item x2 (once per attention layer)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, HEADS, CACHE, WIDTH // HEADS))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, CACHE, WIDTH // HEADS))

    def forward(self, x: torch.Tensor, cache_seqlens: torch.Tensor) -> torch.Tensor:
        pos = get_pos(cache_seqlens)
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        self.k_cache[:, :, pos:pos + length] = k
        self.v_cache[:, :, pos:pos + length] = v
        keys, values = self.k_cache[:, :, :pos + length], self.v_cache[:, :, :pos + length]
        y = nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=length > 1)
        return self.out(y.transpose(1, 2).reshape(batch, length, WIDTH))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2 = nn.LayerNorm(WIDTH), Attention(), nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor, cache_seqlens: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cache_seqlens)
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, cache_seqlens: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cache_seqlens)
        return self.head(self.norm(x))


@torch.inference_mode()
def generate(model: TinyDecoder, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    cache_seqlens = torch.zeros(prompt.shape[0], dtype=torch.int32, device=prompt.device)
    ids, tokens = prompt, []
    for _ in range(new_tokens):
        logits = model.forward(ids, cache_seqlens)
        cache_seqlens += ids.shape[1]
        ids = logits[:, -1:].argmax(-1)
        tokens.append(ids)
    return torch.cat(tokens, dim=1)


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    torch.manual_seed(0)
    model = TinyDecoder().to(device).eval()
    prompt = torch.randint(VOCAB, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    print("tokens:", generate(model, prompt, new_tokens).shape[1])
