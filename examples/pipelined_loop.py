"""The article's two-stream ping-pong loop: each step's stop flag is copied, on a second CUDA stream, into one of two
pinned host buffers, and read one step later, once that copy's event says it landed; so the host never waits for the
step it just queued. It computes one step past the end, and discards it.

    python -m core.audit --fail-on-sync 0 -- examples/pipelined_loop.py     # exits 0: no device read per step
"""

from __future__ import annotations

import time

import torch
from common import EOS, arguments, model_and_prompt
from transformers import StaticCache


@torch.inference_mode()
def generate(model, prompt: torch.Tensor, new_tokens: int, forward, cache: StaticCache) -> torch.Tensor:
    cuda = prompt.is_cuda
    cache.reset()
    copies = torch.cuda.Stream() if cuda else None
    flags = [torch.zeros((), dtype=torch.bool, pin_memory=cuda) for _ in range(2)]  # ping-pong host buffers
    landed = [torch.cuda.Event() if cuda else None for _ in range(2)]
    position = torch.arange(prompt.shape[1], device=prompt.device)
    logits = model(input_ids=prompt, cache=cache, position_ids=position[None]).logits[:, -1]
    tokens = []
    for step in range(new_tokens):
        token = logits.argmax(dim=-1)
        tokens.append(token)
        done = (token == EOS).all()
        if cuda:  # the copy waits for this step's compute on its own stream, and says when it landed
            copies.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(copies):
                done.record_stream(copies)  # the copy stream still reads it when the compute stream frees it
                flags[step % 2].copy_(done, non_blocking=True)
                landed[step % 2].record(copies)
        else:
            flags[step % 2].copy_(done, non_blocking=True)
        position = position[-1:] + 1
        logits = forward(input_ids=token[:, None], cache=cache, position_ids=position[None]).logits[:, -1]
        if step > 0:  # the flag of the step before, while the device works on this one
            if cuda:
                landed[(step - 1) % 2].synchronize()
            if flags[(step - 1) % 2]:
                return torch.stack(tokens[:-1], dim=1)
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
    print(f"pipelined loop: {tokens.shape[1]} tokens at {tokens.shape[1] / (time.perf_counter() - started):.1f} tok/s")


if __name__ == "__main__":
    main()
