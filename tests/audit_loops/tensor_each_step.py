"""A loop that keeps its tokens as Python ints: it reads each new token with `.item()` and builds the next inputs
with `torch.tensor(list, device=...)`, a copy from host memory to the device each step (blocking, from pageable
memory).

    python -m core.audit -- tests/audit_loops/tensor_each_step.py [cpu|cuda] [NEW_TOKENS]
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
model, prompt = loaded.model, loaded.tokenizer("Hello there").input_ids
cache = DynamicCache(config=model.config)
generated: list[int] = []
with torch.inference_mode():
    input_ids = torch.tensor([prompt], device=device)
    positions = torch.arange(len(prompt), device=device)[None]
    for step in range(new_tokens):
        logits = model(input_ids=input_ids, position_ids=positions, cache=cache).logits
        next_id = logits[0, -1].argmax().item()  # read: item
        generated.append(next_id)
        input_ids = torch.tensor([[next_id]], device=device)  # read: h2d-copy
        positions = torch.tensor([[len(prompt) + step]], device=device)  # read: h2d-copy
print(loaded.tokenizer.decode(generated))
