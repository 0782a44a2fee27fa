"""nanoGPT's way: no KV cache (each step runs the whole sequence again), and at inference the head runs on the last
position only, `self.lm_head(x[:, [-1], :])`: indexing with a Python list, which copies the list to the device as an
index tensor, blocking, every step.

    python -m core.audit -- tests/audit_loops/no_kv_cache.py [cpu|cuda] [NEW_TOKENS]
"""
# What the audit must find (tests/test_audit_loops.py, tests/test_cuda_audit_loops.py):
# step: GPT

import sys

import torch
from torch import nn
from torch.nn import functional as F

LAYERS, WIDTH, HEADS, VOCAB, BLOCK = 2, 64, 4, 256, 64


class CausalSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.c_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.size()
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, HEADS, width // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(batch, length, width))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(WIDTH), CausalSelfAttention(), nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(BLOCK, WIDTH)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x[:, [-1], :])  # read: h2d-copy

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= BLOCK else idx[:, -BLOCK:]
            logits = self(idx_cond)
            idx_next = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    torch.manual_seed(0)
    model = GPT().to(device).eval()
    start = torch.zeros((1, 1), dtype=torch.long, device=device)
    print("tokens:", model.generate(start, new_tokens).shape[1])
