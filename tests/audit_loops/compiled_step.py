"""A decode step compiled whole, as transformers' static-cache recipe and gpt-fast do it:
`model.forward = torch.compile(model.forward, fullgraph=True)`, and the loop's stop check with `.item()` each step.
On the CPU the audit cannot see inside the compiled forward (its report says so in one line); on CUDA PyTorch's sync
debug mode can.

    python -m core.audit -- tests/audit_loops/compiled_step.py [cpu|cuda] [NEW_TOKENS]
"""
# What the audit must find (tests/test_audit_loops.py, tests/test_cuda_audit_loops.py):
# step: TinyRecurrent
# compiled: TinyRecurrent.forward

import sys

import torch
from torch import nn

WIDTH, VOCAB = 64, 256
EOS = VOCAB  # no such token: the loop runs all its steps, and checks each one


class TinyRecurrent(nn.Module):
    """A language model with a fixed-size state instead of a growing cache: each step's shapes are the same."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.cell = nn.GRUCell(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, token: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        state = self.cell(self.embed(token), state)
        return self.head(state).argmax(-1), state


@torch.inference_mode()
def generate(model: TinyRecurrent, device: str, new_tokens: int) -> list[torch.Tensor]:
    token = torch.zeros(1, dtype=torch.long, device=device)
    state = torch.zeros(1, WIDTH, device=device)
    tokens = []
    for _ in range(new_tokens):
        token, state = model(token, state)
        tokens.append(token)
        if token.item() == EOS:  # read: item
            break
    return tokens


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    torch.manual_seed(0)
    model = TinyRecurrent().to(device).eval()
    model.forward = torch.compile(model.forward, fullgraph=True)
    print("tokens:", len(generate(model, device, new_tokens)))
