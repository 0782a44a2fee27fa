"""Measure core.kernels.triton_gemv's configurations on this GPU and write the table its products use.

For every batch-1 product of the given synthetic shapes (q/k/v, output projection, gate/up, down with its activation,
output layer) it times each configuration of a grid with Triton's `do_bench` (the L2 cache cleared before every run,
as a decode step finds it: each weight is read once a step), checks its result against the BLAS library's product,
times that product too, and keeps the fastest correct configuration. Writes the raw times as JSON and, with --table,
merges the best configurations into core/kernels/gemv_configs.json under this GPU's name.

`--parts` also sweeps the products of core.kernels.decode_layer's fused layer that read more than the row: "norm",
gate/up with the RMSNorm before it, and "qkv", the q/k/v kernel with the norm, the rotary embedding and the cache
write, each checked against the same steps in fp32; their best configurations go into the table as parts of their
own.

`--timing graph` times each configuration as a decode step runs it: launches back to back in one CUDA graph, over
copies of the weight that together overflow the L2 cache (so each launch reads its weight from memory), the graph's
time over its launches. `alone` (the default) is `do_bench`'s: one launch at a time, the L2 cleared before each. On
the H200 the two disagreed: gate/up with and without the norm were 5% apart alone and 17% apart in the step's graph
(docs/TUNING.md).

    python benchmarks/gemv_sweep.py --shapes llama-8b llama-1b --out sweep.json --table core/kernels/gemv_configs.json
    python benchmarks/gemv_sweep.py --parts norm qkv --out parts.json --table core/kernels/gemv_configs.json
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
GRAPH_BYTES = 512 * 2**20  # weight copies a graph cycles through: several times any GPU's L2 cache
GRAPH_LAUNCHES = 64  # at least, in one graph
BLOCK_K = (512, 1024, 2048)
NUM_WARPS = (4, 8)
NUM_STAGES = (1, 3)


def products(shape: str | dict[str, int]) -> list[tuple[str, int, int, bool]]:
    """(name, outputs, inputs, act_mul) of each distinct batch-1 product of a synthetic Llama shape (or its config)."""
    spec = _spec(shape)
    hidden, heads, kv_heads = spec["hidden_size"], spec["num_attention_heads"], spec["num_key_value_heads"]
    head_dim = hidden // heads
    intermediate = spec["intermediate_size"]
    return [("qkv", (heads + 2 * kv_heads) * head_dim, hidden, False), ("o", hidden, heads * head_dim, False),
            ("gate_up", 2 * intermediate, hidden, False), ("down", hidden, intermediate, True),
            ("lm_head", spec["vocab_size"], hidden, False)]


def _spec(shape: str | dict[str, int]) -> dict[str, int]:
    from core.models.specs import SYNTHETIC_SHAPES

    return SYNTHETIC_SHAPES[shape] if isinstance(shape, str) else shape


def part_products(shape: str | dict[str, int], part: str) -> list[tuple[str, int, int, bool]]:
    """The products of `shape` that core.kernels.decode_layer runs as `part` ("" every product alone)."""
    names = {"": None, "norm": ("gate_up",), "qkv": ("qkv",)}[part]
    return [p for p in products(shape) if names is None or p[0] in names]


def grid(part: str = "") -> list[Any]:
    """Configurations with 4 to 64 fp32 accumulators a thread (for "qkv", rows a program in pairs)."""
    from core.kernels.triton_gemv import GemvConfig

    return [GemvConfig(n, k, w, s) for n, k, w, s in itertools.product(BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES)
            if 4 <= n * k // (w * 32) <= 64 and (part != "qkv" or n >= 2)]


class Case:
    """One product as `part` on `device`: `run(config)` launches the kernel, `error(out)` is its largest difference
    from the same steps in fp32 (relative to the largest entry of each output), `library()` is the BLAS product of
    the same weight (the product alone, for scale)."""

    def __init__(self, shape: str | dict[str, int], n: int, k: int, act_mul: bool, part: str,
                 device: str = "cuda") -> None:
        import torch

        self.spec, self.act_mul, self.part = _spec(shape), act_mul, part
        generator = torch.Generator(device=device).manual_seed(0)
        self.weight = torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=generator) * k ** -0.5
        self.x = torch.randn(1, 1, 2 * k if act_mul else k, device=device, dtype=torch.bfloat16, generator=generator)
        self.norm = torch.rand(k, device=device, generator=generator).add(0.5).to(torch.bfloat16)
        product_input = self.x.float()
        if act_mul:
            gate, up = product_input.split(k, dim=-1)
            product_input = torch.nn.functional.silu(gate) * up
        self.library_input = product_input.to(torch.bfloat16)
        if part:
            product_input = product_input * torch.rsqrt(product_input.pow(2).mean(-1, keepdim=True) + EPS)
            product_input = product_input * self.norm.float()
        self.reference = torch.nn.functional.linear(product_input, self.weight.float()).reshape(-1)
        if part == "qkv":
            self._qkv_setup(device)

    def _qkv_setup(self, device: str) -> None:
        import torch

        heads, kv_heads = self.spec["num_attention_heads"], self.spec["num_key_value_heads"]
        head_dim = self.spec["hidden_size"] // heads
        self.heads, self.head_dim = heads, head_dim
        position = 37
        inverse = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
        angles = torch.cat([position * inverse] * 2)
        self.cos, self.sin = angles.cos().to(torch.bfloat16)[None, None], angles.sin().to(torch.bfloat16)[None, None]
        self.keys = torch.zeros(1, kv_heads, 64, head_dim, device=device, dtype=torch.bfloat16)
        self.values = torch.zeros_like(self.keys)
        self.slot = 5
        self.length = torch.tensor(self.slot, device=device)
        q, k, v = self.reference.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
        self.expected = [self._turned(q.view(heads, head_dim)), self._turned(k.view(kv_heads, head_dim)),
                         v.view(kv_heads, head_dim)]

    def _turned(self, t: Any) -> Any:
        import torch

        half = self.head_dim // 2
        rotated = torch.cat([-t[:, half:], t[:, :half]], dim=-1)
        return t * self.cos.float()[0] + rotated * self.sin.float()[0]

    def run(self, config: Any, weight: Any = None) -> Any:
        """One launch with `config`, of this case's weight or of `weight` (a copy of it)."""
        from core.kernels.triton_gemv import Around, launch_gemv

        weight = self.weight if weight is None else weight
        if self.part == "qkv":
            from core.kernels.decode_layer import launch_qkv

            return launch_qkv(self.x, self.norm, EPS, weight, None, self.cos, self.sin, self.keys, self.values,
                              self.length, self.heads, _direct, config)
        around = Around(norm=self.norm, eps=EPS) if self.part == "norm" else Around()
        return launch_gemv(self.x, weight, None, self.act_mul, _direct, config, around)

    def weight_copies(self, total_bytes: int = GRAPH_BYTES) -> list[Any]:
        """The weight and copies of it, enough that together they hold at least `total_bytes` (one if it does)."""
        size = self.weight.numel() * self.weight.element_size()
        return [self.weight, *(self.weight.clone() for _ in range(copies_for(size, total_bytes) - 1))]

    def library(self, weight: Any = None) -> Any:
        import torch

        return torch.nn.functional.linear(self.library_input, self.weight if weight is None else weight)

    def error(self, out: Any) -> float:
        if self.part != "qkv":
            return _relative(out.float().reshape(-1), self.reference)
        got = [out[0, :, 0].float(), self.keys[0, :, self.slot].float(), self.values[0, :, self.slot].float()]
        return max(_relative(a, b) for a, b in zip(got, self.expected, strict=True))



def copies_for(weight_bytes: int, total_bytes: int = GRAPH_BYTES) -> int:
    """How many weights of `weight_bytes` a graph cycles through so that together they hold `total_bytes`."""
    return max(1, -(-total_bytes // weight_bytes))


def graph_launches(copies: int, least: int = GRAPH_LAUNCHES) -> int:
    """Launches in one graph: whole rounds over the copies, at least `least`."""
    return copies * max(1, -(-least // copies))


EPS = 1e-5


def _direct(kernel: Any) -> Any:
    return kernel


def _relative(got: Any, expected: Any) -> float:
    return float((got - expected).abs().max() / expected.abs().max())


def measure(case: Case, configs: list[Any], deadline: float, timing: str = "alone") -> dict[str, Any]:
    n, k = case.weight.shape
    bench = _bench_alone if timing == "alone" else _graph_bench(case.weight_copies())
    library_us = bench(case.library)
    rows = []
    for config in configs:
        if time.monotonic() > deadline:
            break
        try:
            error = case.error(case.run(config))
            us = bench(lambda weight=None, c=config: case.run(c, weight))
        except Exception as exc:  # a configuration Triton cannot build here (too many registers): skipped, named
            rows.append({**config.as_dict(), "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        rows.append({**config.as_dict(), "us": round(us, 2), "relative_error": error})
    weight_bytes = n * k * 2
    good = [r for r in rows if "us" in r and r["relative_error"] < 2e-2]
    best = min(good, key=lambda r: r["us"]) if good else None
    return {"n": n, "k": k, "act_mul": case.act_mul, "part": case.part, "timing": timing,
            "weight_mb": round(weight_bytes / 1e6, 2),
            "library_us": round(library_us, 2), "library_tb_s": round(weight_bytes / library_us / 1e6, 3),
            "best": best, "best_tb_s": round(weight_bytes / best["us"] / 1e6, 3) if best else None,
            "configs": rows, "complete": len(rows) == len(configs)}


def _bench_alone(fn: Any) -> float:
    """Median µs of `fn()` over repeated runs, the L2 cache cleared before each (Triton's do_bench)."""
    import triton.testing

    return statistics.median(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="all")) * 1e3


def _graph_bench(weights: list[Any]) -> Any:
    """A timer of `fn(weight)` as a decode step's graph runs it: `graph_launches` launches back to back in one CUDA
    graph, cycling through `weights`; median µs a launch over five replays after one."""
    import torch

    def bench(fn: Any) -> float:
        fn(weights[0])  # compiled and tuned before the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        launches = graph_launches(len(weights))
        with torch.cuda.graph(graph):
            for i in range(launches):
                fn(weights[i % len(weights)])
        times = []
        for _ in range(6):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / launches)
        del graph
        return statistics.median(times[1:])

    return bench


def merge_table(path: Path, device: str, results: list[dict[str, Any]]) -> None:
    from core.kernels.triton_gemv import shape_key

    table = json.loads(path.read_text()) if path.exists() else {"devices": {}}
    entries = table["devices"].setdefault(device, {})
    for result in results:
        best = result["best"]
        if best and result["complete"]:
            entries[shape_key(result["n"], result["k"], result["act_mul"], result.get("part", ""))] = {
                key: best[key] for key in ("block_n", "block_k", "num_warps", "num_stages")}
    table["devices"][device] = dict(sorted(entries.items()))
    path.write_text(json.dumps(table, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["llama-8b", "llama-1b"])
    parser.add_argument("--out", type=Path, required=True, help="the raw times, as JSON")
    parser.add_argument("--table", type=Path, help="merge the best configurations into this gemv_configs.json")
    parser.add_argument("--parts", nargs="+", default=["plain"], choices=["plain", "norm", "qkv"],
                        help="plain: every product alone; norm, qkv: the fused layer's products that read more")
    parser.add_argument("--budget-s", type=float, default=400.0, help="stop timing new configurations after this")
    parser.add_argument("--timing", choices=["alone", "graph"], default="alone",
                        help="alone: one launch at a time, L2 cleared (do_bench); graph: back to back in a CUDA graph")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gemv_sweep: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    deadline = time.monotonic() + args.budget_s
    seen, results = set(), []
    for part in ("" if p == "plain" else p for p in args.parts):
        configs = grid(part)
        for shape in args.shapes:
            for name, n, k, act_mul in part_products(shape, part):
                if (n, k, act_mul, part) in seen:
                    continue
                seen.add((n, k, act_mul, part))
                case = Case(shape, n, k, act_mul, part)
                result = {"shape": shape, "product": name, **measure(case, configs, deadline, args.timing)}
                results.append(result)
                best = result["best"] or {}
                print(f"{shape:10} {name + (f' ({part})' if part else ''):15} {n:>6}x{k:<6} cuBLAS "
                      f"{result['library_us']:8.2f} us ({result['library_tb_s']:.2f} TB/s)  best "
                      f"{best.get('us', float('nan')):8.2f} us ({result['best_tb_s'] or 0:.2f} TB/s) {best}",
                      flush=True)
    args.out.write_text(json.dumps({"device": device, "torch": torch.__version__, "results": results}, indent=1))
    if args.table:
        merge_table(args.table, device, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
