"""Batch-1 matrix products as one Triton kernel each, with a configuration fixed per shape, for CUDA decode steps.

At batch 1 a product is a matrix-vector product bound by reading the weight once. In step-graph mode inductor's
coordinate-descent tuning rewrites each one as a Triton reduction and tunes its blocks by timing them while it
compiles; on the H200 two fresh compiles of the same code picked configurations up to 6x apart for one kernel, and
3-4% apart for the whole step (docs/TUNING.md). Here each product is this module's kernel with the configuration of a
table measured once per GPU (`gemv_configs.json`, written by `benchmarks/gemv_sweep.py`, vLLM's way with its MoE
kernels), or the rule of `heuristic_config` for a shape or GPU the table lacks: the same kernel every compile.

The kernel: each program owns BLOCK_N rows of the weight and streams them in BLOCK_K columns, accumulating products
in fp32 in a [BLOCK_N, BLOCK_K] tile that it sums once at the end (the order of every sum is fixed, so results repeat
bitwise), then adds the bias and rounds once. With `act_mul` its input is a gate/up product's output [gate, up] and
it computes silu(gate) * up on the fly, rounded to the input's type as the separate kernel would store it (so the
down projection needs no kernel of its own for the activation). Weights are loaded with evict-first, since each is
read once a step.

It is registered as the operator `syncscope::gemv` (a `torch.library.triton_op`, which inductor calls inside its
graph and so inside the step's CUDA graph). core.kernels.products chooses it (the `decode_products` switch,
core.tuning).
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from core.kernels import triton_ops_at_import
from core.kernels.reads import reads_first

CONFIG_FILE = Path(__file__).with_name("gemv_configs.json")


@dataclass(frozen=True)
class GemvConfig:
    """One launch of the kernel: rows and columns per program step, warps, software-pipelining stages."""

    block_n: int
    block_k: int
    num_warps: int
    num_stages: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


# The parts of a decoder layer a product can carry (core.kernels.decode_layer), each with configurations of its own:
# "" the product alone (or with the residual add after it, which costs a few loads a program), "norm" with the RMSNorm
# before it (each program reads the norm's weight beside the row), "qkv" the q/k/v kernel with the norm, the rotary
# embedding and the cache write (its programs take rows in pairs)
PARTS = ("", "norm", "qkv")


def shape_key(n: int, k: int, act_mul: bool, part: str = "") -> str:
    """The table's key of a product of `n` outputs over `k` inputs (`act_mul`: fused silu(gate) * up), as `part`."""
    return f"{n}x{k}{'-act' if act_mul else ''}{f'-{part}' if part else ''}"


def heuristic_config(n: int, k: int, act_mul: bool, part: str = "") -> GemvConfig:
    """A configuration for shapes or GPUs the table lacks, on the H200 within 15% of the fastest for every product of
    Llama-8B and -1B (docs/TUNING.md): 2 rows a program, or 8 with the activation (which each program computes for
    its columns), columns 1,024 at a time (512 with the activation), 8 warps. With the norm, columns 2,048 at a time
    (the norm's weight read beside the row); the q/k/v kernel, 4 rows (2 pairs), 4 warps, 3 stages."""
    if part == "qkv":
        return GemvConfig(block_n=4, block_k=min(_next_power_of_2(k), 1024), num_warps=4, num_stages=3)
    if part == "norm":
        return GemvConfig(block_n=2, block_k=min(_next_power_of_2(k), 2048), num_warps=8, num_stages=1)
    block_k = min(_next_power_of_2(k), 512 if act_mul else 1024)
    return GemvConfig(block_n=8 if act_mul else 2, block_k=block_k, num_warps=8, num_stages=1)


@functools.cache
def _table() -> dict[str, dict[str, dict[str, int]]]:
    if not CONFIG_FILE.exists():
        return {}
    return json.loads(CONFIG_FILE.read_text())["devices"]


def config_for(n: int, k: int, act_mul: bool, device_name: str, part: str = "") -> GemvConfig:
    """The measured configuration of this shape as `part` on this GPU (its name, as CUDA gives it), else the
    heuristic for the part (a product alone's configuration can be much slower with the part's work, docs/TUNING.md)."""
    if part not in PARTS:
        raise ValueError(f"no product part {part!r}; parts: {', '.join(repr(p) for p in PARTS)}")
    measured = _table().get(device_name, {}).get(shape_key(n, k, act_mul, part))
    if measured:
        return GemvConfig(**measured)
    return heuristic_config(n, k, act_mul, part)


def takes(x: torch.Tensor, weight: torch.Tensor, act_mul: bool = False) -> bool:
    """Whether the kernel computes x @ weight.T here: one row of input, a weight with unit column stride, a float
    type both share, and an input width that matches (twice the weight's with `act_mul`)."""
    width = weight.shape[1] * (2 if act_mul else 1)
    return (
        x.shape[-1] == width
        and x.numel() == width
        and weight.dim() == 2
        and weight.stride(1) == 1
        and x.dtype == weight.dtype
        and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
    )


@dataclass(frozen=True)
class Around:
    """What a decoder layer does around one product that the kernel does in it: `norm` (the RMSNorm's weight) and
    `eps` normalise the input first; `residual` is added to the output (rounded as the Linear returns it); `length`,
    a static cache layer's 0-d length, is moved on by one after the product (what StaticLayer.update does)."""

    norm: torch.Tensor | None = None
    eps: float = 0.0
    residual: torch.Tensor | None = None
    length: torch.Tensor | None = None


def launch_gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    act_mul: bool,
    launch: Any,
    config: GemvConfig | None = None,
    around: Around = Around(),
) -> torch.Tensor:
    """x @ weight.T (+ bias) for one row `x` (of silu(gate) * up with `act_mul`, of RMSNorm(x) with `around.norm`,
    plus `around.residual`); `launch(kernel)` returns the kernel ready for `[grid]` (`wrap_triton` inside a compile,
    the kernel itself otherwise)."""
    if not takes(x, weight, act_mul):
        raise ValueError(
            f"the gemv kernel takes one row of input matching the weight's width (twice it with the "
            f"activation); got input {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} "
            f"{weight.dtype} with strides {weight.stride()}"
        )
    n, k = weight.shape
    if config is None:
        config = config_for(n, k, act_mul, _device_name(x.device), "norm" if around.norm is not None else "")
    out = torch.empty((*x.shape[:-1], n), device=x.device, dtype=x.dtype)
    x = x.contiguous()
    norm = around.norm.contiguous() if around.norm is not None else None
    residual = around.residual.contiguous() if around.residual is not None else None
    unused = weight  # a pointer the kernel is given but does not read
    launch(_kernel())[(-(-n // config.block_n),)](
        x,
        weight,
        bias if bias is not None else unused,
        out,
        norm if norm is not None else unused,
        residual if residual is not None else unused,
        around.length if around.length is not None else unused,
        n,
        weight.stride(0),
        float(around.eps),
        k,
        HAS_BIAS=bias is not None,
        ACT_MUL=act_mul,
        NORM=norm is not None,
        RESIDUAL=residual is not None,
        ADVANCE=around.length is not None,
        EVEN_N=n % config.block_n == 0,
        EVEN_K=k % config.block_k == 0,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        READS_FIRST=reads_first(),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def _kernel() -> Any:
    from core.kernels.triton_gemv_kernel import gemv

    return gemv


def register_gemv() -> None:
    """Register the kernel as the operator `syncscope::gemv` (once; when this module is imported where
    core.kernels.triton_ops_at_import says: compiled code cannot create an operator, since dynamo traces into whatever
    does)."""
    if hasattr(torch.ops.syncscope, "gemv"):
        return
    from torch.library import triton_op, wrap_triton

    @triton_op("syncscope::gemv", mutates_args=())
    def op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act_mul: bool) -> torch.Tensor:
        return launch_gemv(x, weight, bias, act_mul, wrap_triton)


if triton_ops_at_import():
    register_gemv()
