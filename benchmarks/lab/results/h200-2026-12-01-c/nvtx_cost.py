"""NVTX cost on this GPU: a push+pop pair, and the pipelined loop's decode step with and without ranges."""
import statistics
import time

import torch

from core.loops.generation import generate
from core.models import load_model

N = 100_000
push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
names = [f"pipelined step {i}" for i in range(256)]
for _ in range(3):
    t = time.perf_counter()
    for i in range(N):
        pop() if i else None
        push(names[i & 255])
    pop()
    print(f"pop+push pair: {(time.perf_counter() - t) / N * 1e6:.3f} us")
for spec, dtype in (("tiny-random", "fp32"), ("synthetic:llama-1b", "bf16")):
    loaded = load_model(spec, device="cuda", dtype=dtype)
    for mode in ("off", "reduce-overhead"):
        common = dict(loop="pipelined", cache="static", compile=mode, max_new_tokens=256, ignore_eos=True)
        generate(loaded, "Hello there", **common)
        rates = {False: [], True: []}
        for _ in range(6):
            for nvtx in (False, True):
                r = generate(loaded, "Hello there", nvtx=nvtx, **common)
                rates[nvtx].append(r.timings.decode_tokens_per_s)
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"{spec} {mode}: decode tok/s off {off:.1f} on {on:.1f} on/off {on / off:.4f} "
              f"(spread off {min(rates[False]):.0f}-{max(rates[False]):.0f}, on {min(rates[True]):.0f}-{max(rates[True]):.0f})")
