"""Each batch-1 product's device time in a step-graph decode step, by its place in the layer (q/k/v, output, gate/up,
down, output layer), beside attention's kernels: where the step's matrix-product time goes, product by product.

The kernel measurement of a report sums kernels by name, and every product is the one kernel `gemv` (or `qkv_gemv`
in a fused layer). Here the pipelined loop runs once under CUPTI after a warm-up run (which compiles and captures),
each decode step's kernels are read in launch order, and each `gemv` is named by its place after the layer's
attention: output projection, gate/up, down, then the next layer's q/k/v (unfused); the step's last is the output
layer. Prints a table of µs a step and µs a call (medians over the steps) and writes it as JSON.

    python benchmarks/product_times.py --model synthetic:llama-8b --out times.json
    SYNCSCOPE_DECODE_LAYER=off python benchmarks/product_times.py --model synthetic:llama-8b --out unfused.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROLES_AFTER_ATTENTION = ("output", "gate/up", "down", "q/k/v")
ATTENTION_KERNELS = ("attend", "combine", "qkv_gemv")


def named_products(step: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """(role, µs) of one decode step's kernels (name, µs) in launch order: each `gemv` named by its place after the
    layer's attention kernel (before the first attention: q/k/v), the step's last `gemv` the output layer; attention's
    kernels by their names; the rest dropped."""
    named = []
    after_attention = None
    for name, us in step:
        if name == "attend":
            after_attention = 0
        if name in ATTENTION_KERNELS:
            named.append((name, us))
        elif name == "gemv":
            role = "q/k/v" if after_attention is None else ROLES_AFTER_ATTENTION[min(after_attention, 3)]
            named.append((role, us))
            if after_attention is not None:
                after_attention += 1
    last = max(i for i, (role, _) in enumerate(named) if role not in ATTENTION_KERNELS)
    named[last] = ("output layer", named[last][1])
    return named


def steps_of(kernels: list[tuple[str, float]]) -> list[list[tuple[str, float]]]:
    """The decode steps' kernels: each step ends with its output layer, the longest `gemv`; kernels before the first
    such product (the prefill) are dropped, and so is a last partial step."""
    products = [us for name, us in kernels if name == "gemv"]
    threshold = 0.6 * max(products)
    steps, current = [], []
    for name, us in kernels:
        current.append((name, us))
        if name == "gemv" and us >= threshold:
            steps.append(current)
            current = []
    return steps[1:]  # the first ends with the prefill's output layer


def table(steps: list[list[tuple[str, float]]]) -> dict[str, dict[str, float]]:
    """Per role: calls a step, median µs a step and a call."""
    per_step: dict[str, list[float]] = {}
    calls: dict[str, list[int]] = {}
    for step in steps:
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for role, us in named_products(step):
            sums[role] = sums.get(role, 0.0) + us
            counts[role] = counts.get(role, 0) + 1
        for role in sums:
            per_step.setdefault(role, []).append(sums[role])
            calls.setdefault(role, []).append(counts[role])
    return {role: {"calls": statistics.median(calls[role]), "us_per_step": round(statistics.median(values), 1),
                   "us_per_call": round(statistics.median(values) / statistics.median(calls[role]), 2)}
            for role, values in per_step.items()}


def profiled_kernels(model: str, tokens: int) -> list[tuple[str, float]]:
    """(name, µs) of every kernel of one pipelined step-graph run after a warm-up run, in launch order."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from core.loops.generation import generate
    from core.loops.prompt import synthetic_prompt
    from core.measure.kernel_measurement import device_kernels_ns
    from core.models.loading import load_model

    loaded = load_model(model, device="cuda", dtype="bf16")
    options = dict(loop="pipelined", cache="static", compile="step-graph", max_new_tokens=tokens, ignore_eos=True)
    prompt = synthetic_prompt(32)
    generate(loaded, prompt, **options)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        generate(loaded, prompt, **options)
        torch.cuda.synchronize()
    return [(name, (end - start) / 1e3) for start, end, name in sorted(device_kernels_ns(profiler))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="synthetic:llama-8b")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens of the profiled run")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    from core.tuning import Tuning

    if not torch.cuda.is_available():
        print("product_times: needs a CUDA GPU", file=sys.stderr)
        return 2
    steps = steps_of(profiled_kernels(args.model, args.tokens))
    result = {"model": args.model, "decode_layer": Tuning.from_environment().decode_layer,
              "steps": len(steps), "roles": table(steps)}
    for role, row in sorted(result["roles"].items(), key=lambda item: -item[1]["us_per_step"]):
        print(f"{role:14} {row['calls']:5g} calls  {row['us_per_step']:9.1f} us a step  "
              f"{row['us_per_call']:8.2f} us a call")
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
