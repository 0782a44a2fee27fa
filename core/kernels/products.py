"""Which kernel computes each batch-1 matrix product of a compiled decode step (the `decode_products` and `o_proj`
switches, core.tuning).

The compile that traces the model says which, with `traced_with` (core.loops.step, from the model's tuning:
`decode_products` "auto" is "triton" in step-graph compiles, where the step also turns coordinate-descent tuning off,
and "inductor" in the others). "inductor" leaves the products to inductor (in step-graph mode it rewrites each as a
Triton reduction, fuses its neighbours into it and tunes it by timing while it compiles), except the attention's
output projection, which `o_proj` gives to the BLAS library or to inductor (core.kernels.fusion.output_projection).
"triton" gives every product with one row of input (q/k/v, the output projection, gate/up, down with its activation,
the output layer) to core.kernels.triton_gemv's kernel, whose configuration is fixed per shape, so that two compiles
run the same kernels. Either way a product with several rows (the prefill, a batch), one outside a compile, on the
CPU, or one whose Linear tensor parallelism or a hook changed runs as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from core.kernels.reads import FIRST, reading
from core.kernels.triton_gemv import takes
from core.tuning import SWITCH

# What the compile calling (so tracing) the model gives its batch-1 products: the kernel of them ("triton" or
# "inductor") and of the output projection where the gemv kernel does not take it ("library" or "inductor"). Dynamo
# reads them, and guards on them, while it traces; plain strings, so that a guard compares values.
_products = "inductor"
_o_proj = SWITCH["o_proj"].default


@contextmanager
def traced_with(products: str, o_proj: str, reads: str = FIRST) -> Iterator[None]:
    """Inside it, a compile traces with these products: "triton" or "inductor" (the `decode_products` switch resolved
    for the compile's mode), `o_proj`, the `o_proj` switch, and the kernels' `reads` (core.kernels.reads)."""
    global _products, _o_proj
    previous = _products, _o_proj
    _products, _o_proj = products, o_proj
    try:
        with reading(reads):
            yield
    finally:
        _products, _o_proj = previous


def traced_by_default(products: str, o_proj: str, reads: str = FIRST) -> bool:
    """Whether a compile traces with these choices without `traced_with` (the module's own: no wrapper needed)."""
    return (products, o_proj, reads) == ("inductor", SWITCH["o_proj"].default, FIRST)


def library_o_proj() -> bool:
    """Whether the compile being traced gives the output projection to the BLAS library."""
    return _o_proj == "library"


class DecodeLinear(nn.Linear):
    """A Linear whose product goes through `decode_product` (the output layer, which transformers calls itself)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return decode_product(self, x)


def silu(act_fn: nn.Module) -> bool:
    """Whether an MLP's activation is SiLU (PyTorch's module or transformers' own), which the kernel can fuse."""
    from transformers.activations import SiLUActivation

    return type(act_fn) in (nn.SiLU, SiLUActivation)


def route_output_layer(model: nn.Module) -> bool:
    """Make the model's output layer (`lm_head`) a DecodeLinear, in place, when it is a plain Linear."""
    head = getattr(model, "lm_head", None)
    if head is None or type(head) is not nn.Linear or not plain(head):
        return False
    head.__class__ = DecodeLinear
    return True


def decode_product(linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """linear(x), by the gemv kernel where the compile being traced gives it the product (see the module)."""
    if gemv_takes(linear, x, act_mul=False):
        return torch.ops.syncscope.gemv(x, linear.weight, linear.bias, False)
    return nn.functional.linear(x, linear.weight, linear.bias) if type(linear) is DecodeLinear else linear(x)


def gemv_takes(linear: nn.Module, x: torch.Tensor, act_mul: bool) -> bool:
    """Whether the gemv kernel computes this product (of silu(gate) * up of `x` with `act_mul`)."""
    if not (torch.compiler.is_compiling() and x.is_cuda and plain(linear) and hasattr(torch.ops.syncscope, "gemv")):
        return False
    if _products != "triton":
        return False
    return takes(x, linear.weight, act_mul) and (linear.bias is None or linear.bias.is_contiguous())


def plain(linear: nn.Module) -> bool:
    """A Linear computing only x @ W.T + b: its class's forward is nn.Linear's (or DecodeLinear's), nothing replaced it
    on the instance, no hooks, and a plain weight (not a DTensor or a quantized one)."""
    return (isinstance(linear, nn.Linear) and type(linear).forward in (nn.Linear.forward, DecodeLinear.forward)
            and "forward" not in vars(linear) and not linear._forward_hooks and not linear._forward_pre_hooks
            and type(linear.weight) is nn.Parameter)
