"""A batched loop that keeps each row's tokens on the device and reads a row's tokens once, when the row finishes
(its token budget): every step reads the new tokens (`.tolist()`), and a few steps read a finished row as well, a
site read in fewer than half the decode steps (the audit printed it as read only in "setup, first or last step", and
its sites did not add up to the reads per decode step: issue 67).

    python -m core.audit -- tests/audit_loops/finished_rows.py [cpu|cuda] [NEW_TOKENS]
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for core.models.loading

from transformers import DynamicCache

from core.models.loading import load_model

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 21
loaded = load_model("tiny-random", device=device)
model = loaded.model
prompts = [[101, 102, 103, 104], [201, 202, 203, 204], [301, 302, 303, 304], [401, 402, 403, 404]]
budgets = [new_tokens, new_tokens // 3, new_tokens // 2, 2 * new_tokens // 3]  # the first row runs every step
finished: dict[int, list[int]] = {}
cache = DynamicCache(config=model.config)
with torch.inference_mode():
    input_ids = torch.tensor(prompts, device=device)
    position_ids = torch.arange(len(prompts[0]), device=device).repeat(len(prompts), 1)
    generated = []
    for step in range(new_tokens):
        logits = model(input_ids=input_ids, position_ids=position_ids, cache=cache).logits[:, -1]
        next_ids = logits.argmax(dim=-1)
        generated.append(next_ids)
        newest = next_ids.tolist()  # every step: the new tokens
        for row, budget in enumerate(budgets):
            if row not in finished and step + 1 >= budget:
                finished[row] = torch.stack(generated)[:, row].tolist()  # once a row: its tokens
        position_ids = position_ids[:, -1:] + 1
        input_ids = next_ids[:, None]
print({row: len(tokens) for row, tokens in sorted(finished.items())})
