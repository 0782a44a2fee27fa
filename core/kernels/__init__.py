"""What makes a decode step fewer and fuller kernels: compiled decode attention (attention, and triton_attention with
its Triton kernels in triton_decode_kernels), fused projections (fusion), the batch-1 products by one kernel of fixed
configurations (products routes them to triton_gemv, its kernel in triton_gemv_kernel), a Llama layer's decode step in
six kernels with the norms, rotary and cache write inside the products (decode_layer), programmatic dependent launch
(pdl), and under tensor parallelism the all-reduce fused with the residual add and RMSNorm (tp_fusion, with its Triton
kernels in tp_kernels). Imports run one way: tp_fusion imports fusion, decode_layer imports fusion, attention,
triton_attention, products and triton_gemv, fusion imports attention and products, products imports triton_gemv, and
none imports back."""

from __future__ import annotations

import importlib.util
import os


def triton_ops_at_import() -> bool:
    """Whether triton_attention, triton_gemv and decode_layer register their kernels as operators when imported:
    where Triton is installed and can run them, under a GPU build of PyTorch or Triton's CPU interpreter
    (TRITON_INTERPRET=1). A CPU build with Triton beside it (CI installs it for the interpreter's tests, which run in
    processes of their own) registers them only when a test asks (each module's register_* function): registering
    imports torch._inductor (torch.library.triton_op reads the kernels' source with inductor's helpers), 2.2 of the
    4.4 s of CPU that importing core.bench took there, in every engine and bench process, for operators a CPU build
    cannot run."""
    if importlib.util.find_spec("triton") is None:  # PyTorch's CUDA builds bring it; its CPU builds do not
        return False
    import torch

    return torch.version.cuda is not None or torch.version.hip is not None or os.environ.get("TRITON_INTERPRET") == "1"
