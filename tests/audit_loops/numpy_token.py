"""A loop that hands each new token to NumPy: `token.cpu().numpy()` every step (one blocking copy to the host; the
NumPy view of the copy reads host memory, and so does the stop check on it).

    python -m core.audit -- tests/audit_loops/numpy_token.py [cpu|cuda] [NEW_TOKENS]
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
model = loaded.model
input_ids = loaded.tokenizer(["Hello there"], return_tensors="pt").input_ids.to(device)
positions = torch.arange(input_ids.shape[1], device=device)[None]
cache = DynamicCache(config=model.config)
generated = []
with torch.inference_mode():
    for _ in range(new_tokens):
        logits = model(input_ids=input_ids, position_ids=positions, cache=cache).logits
        token = logits[:, -1].argmax(-1)
        host = token.cpu().numpy()  # read: copy
        generated.append(int(host[0]))
        if host[0] == loaded.tokenizer.eos_token_id:
            break
        input_ids, positions = token[:, None], positions[:, -1:] + 1
print(loaded.tokenizer.decode(generated))
