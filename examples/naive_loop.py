"""The article's naive decode loop: after every step it asks the GPU whether generation is over, with `.item()` on the
stop check, so the host waits for the device every step and cannot queue the next step meanwhile.

    python -m core.audit -- examples/naive_loop.py              # on the CPU: what would block on a GPU
    python -m core.audit -- examples/naive_loop.py --shape 1b --compile --new-tokens 256   # on a GPU
"""

from __future__ import annotations

import time

import torch
from common import EOS, arguments, model_and_prompt
from transformers import StaticCache


@torch.inference_mode()
def generate(model, prompt: torch.Tensor, new_tokens: int, forward, cache: StaticCache) -> torch.Tensor:
    cache.reset()
    position = torch.arange(prompt.shape[1], device=prompt.device)
    logits = model(input_ids=prompt, cache=cache, position_ids=position[None]).logits[:, -1]
    tokens = []
    for _ in range(new_tokens):
        token = logits.argmax(dim=-1)
        tokens.append(token)
        if (token == EOS).all().item():  # the stop check: the host waits here until the device has the token
            break
        position = position[-1:] + 1
        logits = forward(input_ids=token[:, None], cache=cache, position_ids=position[None]).logits[:, -1]
    return torch.stack(tokens, dim=1)


def main() -> None:
    args = arguments(__doc__.split("\n\n")[0])
    model, prompt = model_and_prompt(args.shape, args.device)
    forward = torch.compile(model, mode="reduce-overhead") if args.compile else model
    cache = StaticCache(config=model.config, max_cache_len=prompt.shape[1] + args.new_tokens + 1)
    if args.compile:
        generate(model, prompt, args.new_tokens, forward, cache)  # warm-up: compile and capture
    started = time.perf_counter()
    tokens = generate(model, prompt, args.new_tokens, forward, cache)
    print(f"naive loop: {tokens.shape[1]} tokens at {tokens.shape[1] / (time.perf_counter() - started):.1f} tok/s")


if __name__ == "__main__":
    main()
