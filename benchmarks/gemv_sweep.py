"""Measure core.kernels.triton_gemv's configurations on this GPU and write the table its products use.

For every batch-1 product of the given synthetic shapes (q/k/v, output projection, gate/up, down with its activation,
output layer) it times each configuration of a grid with Triton's `do_bench` (the L2 cache cleared before every run,
as a decode step finds it: each weight is read once a step), checks its result against the BLAS library's product,
times that product too, and keeps the fastest correct configuration. Writes the raw times as JSON and, with --table,
merges the best configurations into core/kernels/gemv_configs.json under this GPU's name.

    python benchmarks/gemv_sweep.py --shapes llama-8b llama-1b --out sweep.json --table core/kernels/gemv_configs.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BLOCK_N = (1, 2, 4, 8, 16)
BLOCK_K = (512, 1024, 2048)
NUM_WARPS = (4, 8)
NUM_STAGES = (1, 3)


def products(shape: str) -> list[tuple[str, int, int, bool]]:
    """(name, outputs, inputs, act_mul) of each distinct batch-1 product of a synthetic Llama shape."""
    from core.specs import SYNTHETIC_SHAPES

    spec = SYNTHETIC_SHAPES[shape]
    hidden, heads, kv_heads = spec["hidden_size"], spec["num_attention_heads"], spec["num_key_value_heads"]
    head_dim = hidden // heads
    intermediate = spec["intermediate_size"]
    return [("qkv", (heads + 2 * kv_heads) * head_dim, hidden, False), ("o", hidden, heads * head_dim, False),
            ("gate_up", 2 * intermediate, hidden, False), ("down", hidden, intermediate, True),
            ("lm_head", spec["vocab_size"], hidden, False)]


def grid() -> list[Any]:
    """Configurations with 4 to 64 fp32 accumulators a thread."""
    from core.kernels.triton_gemv import GemvConfig

    return [GemvConfig(n, k, w, s) for n, k, w, s in itertools.product(BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES)
            if 4 <= n * k // (w * 32) <= 64]


def measure(n: int, k: int, act_mul: bool, configs: list[Any], deadline: float) -> dict[str, Any]:
    import torch
    import triton.testing

    from core.kernels.triton_gemv import launch_gemv

    generator = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=generator) * k ** -0.5
    x = torch.randn(1, 1, 2 * k if act_mul else k, device="cuda", dtype=torch.bfloat16, generator=generator)
    if act_mul:
        gate, up = x.float().split(k, dim=-1)
        product_input = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)
    else:
        product_input = x
    reference = torch.nn.functional.linear(product_input.float(), weight.float())
    library_us = _bench(lambda: torch.nn.functional.linear(product_input, weight), triton.testing) * 1e3
    rows = []
    for config in configs:
        if time.monotonic() > deadline:
            break
        try:
            out = launch_gemv(x, weight, None, act_mul, lambda kernel: kernel, config)
            error = float((out.float() - reference).abs().max() / reference.abs().max())
            us = _bench(lambda c=config: launch_gemv(x, weight, None, act_mul, lambda kernel: kernel, c),
                        triton.testing) * 1e3
        except Exception as exc:  # a configuration Triton cannot build here (too many registers): skipped, named
            rows.append({**config.as_dict(), "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        rows.append({**config.as_dict(), "us": round(us, 2), "relative_error": error})
    weight_bytes = n * k * 2
    good = [r for r in rows if "us" in r and r["relative_error"] < 2e-2]
    best = min(good, key=lambda r: r["us"]) if good else None
    return {"n": n, "k": k, "act_mul": act_mul, "weight_mb": round(weight_bytes / 1e6, 2),
            "library_us": round(library_us, 2), "library_tb_s": round(weight_bytes / library_us / 1e6, 3),
            "best": best, "best_tb_s": round(weight_bytes / best["us"] / 1e6, 3) if best else None,
            "configs": rows, "complete": len(rows) == len(configs)}


def _bench(fn: Any, testing: Any) -> float:
    """Median milliseconds of `fn` over repeated runs, the L2 cache cleared before each (Triton's do_bench)."""
    times = testing.do_bench(fn, warmup=10, rep=40, return_mode="all")
    return statistics.median(times)


def merge_table(path: Path, device: str, results: list[dict[str, Any]]) -> None:
    from core.kernels.triton_gemv import shape_key

    table = json.loads(path.read_text()) if path.exists() else {"devices": {}}
    entries = table["devices"].setdefault(device, {})
    for result in results:
        best = result["best"]
        if best and result["complete"]:
            entries[shape_key(result["n"], result["k"], result["act_mul"])] = {
                key: best[key] for key in ("block_n", "block_k", "num_warps", "num_stages")}
    table["devices"][device] = dict(sorted(entries.items()))
    path.write_text(json.dumps(table, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["llama-8b", "llama-1b"])
    parser.add_argument("--out", type=Path, required=True, help="the raw times, as JSON")
    parser.add_argument("--table", type=Path, help="merge the best configurations into this gemv_configs.json")
    parser.add_argument("--budget-s", type=float, default=400.0, help="stop timing new configurations after this")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gemv_sweep: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    deadline = time.monotonic() + args.budget_s
    configs = grid()
    seen, results = set(), []
    for shape in args.shapes:
        for name, n, k, act_mul in products(shape):
            if (n, k, act_mul) in seen:
                continue
            seen.add((n, k, act_mul))
            result = {"shape": shape, "product": name, **measure(n, k, act_mul, configs, deadline)}
            results.append(result)
            best = result["best"] or {}
            print(f"{shape:10} {name:8} {n:>6}x{k:<6} cuBLAS {result['library_us']:8.2f} us "
                  f"({result['library_tb_s']:.2f} TB/s)  best {best.get('us', float('nan')):8.2f} us "
                  f"({result['best_tb_s'] or 0:.2f} TB/s) {best}", flush=True)
    args.out.write_text(json.dumps({"device": device, "torch": torch.__version__, "results": results}, indent=1))
    if args.table:
        merge_table(args.table, device, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
