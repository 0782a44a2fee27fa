"""`model.generate(streamer=TextStreamer(...))`: the tokens printed as they come. generate() hands each new token to
the streamer as `tokens.cpu()`, then asks the host whether every row is done: two reads a step, in transformers.

    python -m core.audit -- tests/audit_loops/text_streamer.py [cpu|cuda] [NEW_TOKENS]
"""
# What the audit must find (tests/test_audit_loops.py, tests/test_cuda_audit_loops.py), transformers 5.24:
# step: LlamaForCausalLM
# read at transformers/generation/utils.py:395: copy  (StopCheck: self.streamer.put(tokens.cpu()))
# read at transformers/generation/utils.py:396: bool  (StopCheck: bool(unfinished_sequences.max() == 0))

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for core.models.loading

from transformers import TextStreamer

from core.models.loading import load_model

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 12
loaded = load_model("tiny-random", device=device)
inputs = loaded.tokenizer(["Hello there"], return_tensors="pt").to(device)
loaded.model.generate(**inputs, streamer=TextStreamer(loaded.tokenizer, skip_prompt=True), max_new_tokens=new_tokens,
                      min_new_tokens=new_tokens, do_sample=False, pad_token_id=loaded.tokenizer.eos_token_id)
print()
