"""A batched loop as people write one for several requests at once: each row stops on its own (its EOS or its token
budget), and every step the host reads which rows finished and what they produced (`.tolist()`), and builds the
next positions from a Python list (`torch.tensor(positions, device=...)`, a copy from host memory each step).

    python -m core.audit -- tests/audit_loops/batched_loop.py [cpu|cuda] [NEW_TOKENS]
"""
# What the audit must find (tests/test_audit_loops.py, tests/test_cuda_audit_loops.py):
# step: LlamaForCausalLM

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for core.models.loading

from transformers import DynamicCache

from core.models.loading import load_model

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 12
loaded = load_model("tiny-random", device=device)
model, eos = loaded.model, loaded.tokenizer.eos_token_id
prompts = [[101, 102, 103, 104], [201, 202, 203, 204], [301, 302, 303, 304]]  # one length: no padding mask
budgets = [new_tokens, new_tokens - 2, new_tokens - 3]  # the longest request runs every step
outputs: list[list[int]] = [[] for _ in prompts]
finished_rows = [False] * len(prompts)
positions = [len(p) for p in prompts]
cache = DynamicCache(config=model.config)
with torch.inference_mode():
    input_ids = torch.tensor(prompts, device=device)
    position_ids = torch.arange(len(prompts[0]), device=device).repeat(len(prompts), 1)
    pad = torch.full((len(prompts),), eos, device=device)
    for _ in range(new_tokens):
        logits = model(input_ids=input_ids, position_ids=position_ids, cache=cache).logits[:, -1]
        done = torch.tensor(finished_rows, device=device)  # read: h2d-copy
        next_ids = torch.where(done, pad, logits.argmax(dim=-1))
        stopped = (next_ids == eos) | done
        for row, token in enumerate(next_ids.tolist()):  # read: tolist
            if not finished_rows[row]:
                outputs[row].append(token)
        for row, stop in enumerate(stopped.tolist()):  # read: tolist
            finished_rows[row] = finished_rows[row] or stop or len(outputs[row]) >= budgets[row]
        positions = [p + 1 for p in positions]
        position_ids = torch.tensor([[p - 1] for p in positions], device=device)  # read: h2d-copy
        input_ids = next_ids[:, None]
        if all(finished_rows):
            break
print([len(tokens) for tokens in outputs])
