"""The fused all-reduce + residual add + RMSNorm kernel (core.kernels.tp_fusion) on two GPUs, against the same sums in
PyTorch.

Skipped without two GPUs; on the device: `python -m pytest -q -m cuda tests/test_cuda_tp_fusion.py`. Each case runs
both ranks (NCCL, symmetric memory), eagerly and replayed from a CUDA graph many times with new inputs: the push
kernel's slots must be empty again after every use and the flag kernel's signal pads back at zero, and no slot may be
overwritten while a peer reads it. Some replays' partials hold negative zeros, the push kernel's empty mark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from core.parallel.launch import free_port

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]

CASES = [  # (dtype, hidden, rows): Llama-8B and 70B widths at batch 1 and 8, widths that are not a power of 2 (the
    # last one's rows are not a 16-byte multiple: the push kernel leaves it to the flag kernel)
    ("bfloat16", 4096, 1), ("bfloat16", 8192, 1), ("bfloat16", 4096, 8), ("float32", 1000, 3), ("bfloat16", 1004, 2),
]
REPLAYS = 50


def _check_on_rank(rank: int, port: int, barrier: str, out_file: str) -> None:
    import torch.distributed as dist
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    from core.kernels.tp_fusion import FUSED_ROWS, Workspace, allocate_workspace

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            device_id=torch.device("cuda", rank))
    group = dist.group.WORLD
    enable_symm_mem_for_group(group.group_name)
    results = []
    try:
        for dtype_name, hidden, rows in CASES:
            dtype = getattr(torch, dtype_name)
            workspace = Workspace(group, 2, rank, hidden, slots=4, barrier=barrier)
            allocate_workspace(workspace, torch.empty(0, dtype=dtype, device="cuda"))
            assert rows <= FUSED_ROWS
            results.append({"case": [dtype_name, hidden, rows],
                            **_one_case(workspace, dtype, hidden, rows, rank)})
        if rank == 0:
            Path(out_file).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _one_case(workspace, dtype, hidden, rows, rank) -> dict:
    import torch.distributed as dist

    from core.kernels.tp_fusion import launch_fused_kernel

    generator = torch.Generator(device="cuda").manual_seed(1234)  # the same residual and weight on both ranks
    residual = torch.randn(rows, hidden, device="cuda", dtype=dtype, generator=generator)
    weight = torch.rand(hidden, device="cuda", dtype=dtype, generator=generator) + 0.5
    partial = torch.randn(rows, hidden, device="cuda", dtype=dtype) * (rank + 1)
    out = torch.empty(rows, 2 * hidden, device="cuda", dtype=dtype)
    eps = 1e-5

    def expected() -> torch.Tensor:
        both = [torch.empty_like(partial) for _ in range(2)]
        dist.all_gather(both, partial)
        reduced = (both[0].float() + both[1].float()).to(dtype)
        summed = (residual.float() + reduced.float()).to(dtype)
        x = summed.float()
        normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)
        return torch.cat([summed, (weight.float() * normed.float()).to(dtype)], dim=-1)

    def norm_error(want: torch.Tensor) -> float:
        """The normalised half's largest error relative to its size (1/sqrt against rsqrt: a rounding step)."""
        got, want = out[:, hidden:].float(), want[:, hidden:].float()
        return ((got - want).abs() / (want.abs() + 1e-2)).max().item()

    launch_fused_kernel(partial, residual, weight, out, eps, workspace, slot=1)
    torch.cuda.synchronize()
    eager_want = expected()
    eager_residual_equal = torch.equal(out[:, :hidden], eager_want[:, :hidden])
    eager_norm_error = norm_error(eager_want)

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # four calls a replay, over two slots, as consecutive layers would
        launch_fused_kernel(partial, residual, weight, out, eps, workspace, slot=2)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for slot in (2, 3, 2, 3):
                launch_fused_kernel(partial, residual, weight, out, eps, workspace, slot=slot)
    torch.cuda.current_stream().wait_stream(stream)
    mismatched_replays, worst_norm_error = 0, 0.0
    for replay in range(REPLAYS):
        partial.copy_(torch.randn(rows, hidden, device="cuda", dtype=dtype) * (rank + 1 + replay % 3))
        if replay % 4 == 0:  # exact negative zeros, on both ranks at once at some places
            partial[:, rank::3] = -0.0
        graph.replay()
        torch.cuda.synchronize()
        want = expected()
        mismatched_replays += int(not torch.equal(out[:, :hidden], want[:, :hidden]))
        worst_norm_error = max(worst_norm_error, norm_error(want))
    gathered = [torch.empty_like(out) for _ in range(2)]
    dist.all_gather(gathered, out)
    return {"eager_residual_equal": eager_residual_equal, "eager_norm_error": eager_norm_error,
            "mismatched_replays": mismatched_replays, "worst_norm_error": worst_norm_error,
            "ranks_agree": torch.equal(gathered[0], gathered[1])}


@pytest.mark.parametrize("barrier", ["push", "asm", pytest.param("atomic", marks=pytest.mark.cuda_long)])
def test_the_fused_kernel_sums_adds_and_normalises_like_pytorch_eagerly_and_in_graph_replays(tmp_path, barrier):
    out = tmp_path / "results.json"
    mp.spawn(_check_on_rank, args=(free_port(), barrier, str(out)), nprocs=2, join=True)
    for result in json.loads(out.read_text()):
        dtype = result["case"][0]
        # The normalised half is rounded twice, as transformers rounds it (the normalised value, then its product with
        # the weight); the kernel's 1/sqrt and PyTorch's rsqrt may differ in fp32's last bit, which can move the first
        # rounding by a bf16 step and the second by one more: two steps at most (a wrong sum is off by far more). One
        # step sufficed in the previous session's runs; a run of this session met 1.14 steps in 400 rows.
        tolerance = 1e-5 if dtype == "float32" else 2 ** -6
        assert result["eager_residual_equal"], result
        assert result["mismatched_replays"] == 0, result
        assert result["ranks_agree"], result
        assert result["eager_norm_error"] <= tolerance and result["worst_norm_error"] <= tolerance, result
